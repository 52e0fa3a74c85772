"""Help texts read as plain text: the reStructuredText of the modules' docstrings (which
double as ``--help`` descriptions) is turned into what a terminal shows.

Double backquotes around a name are dropped, and a role such as :class:`Foo` becomes Foo.
"""

from __future__ import annotations

import argparse
import re

_ROLE = re.compile(r":(?:class|mod|func|meth|attr|data|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(text: str | None) -> str | None:
    """``text`` without reStructuredText markup (None stays None)."""
    if text is None:
        return None
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


def make_plain(parser: argparse.ArgumentParser) -> None:
    """Rewrite the descriptions and help texts of ``parser`` and its subcommands in place."""
    parser.description = plain_text(parser.description)
    parser.epilog = plain_text(parser.epilog)
    for action in parser._actions:
        if isinstance(action.help, str):
            action.help = plain_text(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain_text(choice.help)
            for subparser in set(action.choices.values()):
                make_plain(subparser)
