"""How many examples the hypothesis tests draw.

The counts in the tests are what ``make test`` affords on a CI machine;
``PYLOG_HYPOTHESIS_SCALE`` multiplies every count for a longer search, e.g.
``PYLOG_HYPOTHESIS_SCALE=10 pytest tests/records tests/log``.
"""

from __future__ import annotations

import os

SCALE = float(os.environ.get("PYLOG_HYPOTHESIS_SCALE") or 1)


def examples(count: int) -> int:
    """``count`` scaled by PYLOG_HYPOTHESIS_SCALE (at least one)."""
    return max(1, round(count * SCALE))
