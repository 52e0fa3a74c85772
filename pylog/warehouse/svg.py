"""Small inline SVG charts for the status page: no script, no file loaded from anywhere.

:func:`bar_chart` draws one bar per value, :func:`line_chart` one polyline through the
values; both scale the largest value to the plot's height, label the first and last
points under the axis and the maximum beside it, and give every bar or point a
``<title>`` (the browser's tooltip) with its label and value.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

WIDTH, HEIGHT = 360, 140
MAX_BAR_WIDTH = 36
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 8, 20, 22


def _frame(title: str, peak: float, labels: Sequence[str], body: str, kind: str) -> str:
    plot_bottom = HEIGHT - _BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {kind}" width="{WIDTH}" '
             f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{_LEFT}" y="13" class="chart-title">{escape(title)}</text>',
             f'<line x1="{_LEFT}" y1="{plot_bottom}" x2="{WIDTH - _RIGHT}" y2="{plot_bottom}" class="axis"/>',
             f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{plot_bottom}" class="axis"/>',
             f'<text x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end" class="tick">{_short(peak)}</text>',
             f'<text x="{_LEFT - 4}" y="{plot_bottom}" text-anchor="end" class="tick">0</text>']
    if labels:
        parts.append(f'<text x="{_LEFT}" y="{HEIGHT - 6}" class="tick">{escape(labels[0])}</text>')
        if len(labels) > 1:
            parts.append(f'<text x="{WIDTH - _RIGHT}" y="{HEIGHT - 6}" text-anchor="end" '
                         f'class="tick">{escape(labels[-1])}</text>')
    parts.append(body)
    parts.append("</svg>")
    return "".join(parts)


def _scale(values: Sequence[float]) -> tuple[float, float]:
    peak = max([0.0, *values])
    return peak, (HEIGHT - _BOTTOM - _TOP) / peak if peak > 0 else 0.0


def bar_chart(title: str, values: Sequence[float], labels: Sequence[str]) -> str:
    """One ``<rect class="bar">`` per value, left to right."""
    peak, per_unit = _scale(values)
    plot_width = WIDTH - _LEFT - _RIGHT
    slot = plot_width / max(1, len(values))
    bars = []
    for i, (value, label) in enumerate(zip(values, labels)):
        height = max(0.0, value) * per_unit
        width = min(slot * 0.7, MAX_BAR_WIDTH)
        x = _LEFT + i * slot + (slot - width) / 2
        y = HEIGHT - _BOTTOM - height
        bars.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                    f'height="{height:.1f}"><title>{escape(label)}: {_short(value)}</title></rect>')
    return _frame(title, peak, labels, "".join(bars), "bars")


def line_chart(title: str, values: Sequence[float], labels: Sequence[str]) -> str:
    """A ``<polyline class="line">`` through the values and a ``<circle>`` at each."""
    peak, per_unit = _scale(values)
    plot_width = WIDTH - _LEFT - _RIGHT
    step = plot_width / max(1, len(values) - 1)
    points = [(_LEFT + i * step if len(values) > 1 else _LEFT + plot_width / 2,
               HEIGHT - _BOTTOM - max(0.0, value) * per_unit) for i, value in enumerate(values)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    dots = "".join(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{escape(label)}: '
                   f'{_short(value)}</title></circle>'
                   for (x, y), value, label in zip(points, values, labels))
    body = (f'<polyline class="line" fill="none" points="{line}"/>' if len(points) > 1 else "") + dots
    return _frame(title, peak, labels, body, "line")


def _short(value: float) -> str:
    """1234567 -> ``1.2M``; small numbers as they are."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:g}" if value != int(value) else str(int(value))
