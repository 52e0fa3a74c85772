"""Plain-text tables for the terminal, shared by ``pylog tables``, ``query`` and ``status``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import pyarrow as pa
from tabulate import tabulate

from pylog.warehouse.values import TEXT, iso_epoch_ms, iso_timestamp, scalar_text


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], tablefmt: str = "simple",
               bytes_mode: str = TEXT) -> str:
    """Rows under headers, columns aligned; numbers right-aligned, None shown as ``-``.

    Strings are never parsed as numbers (an hour "07" stays "07"). ``tablefmt`` is any
    tabulate format, e.g. ``html``. Values are written as :mod:`pylog.warehouse.values`
    says (timestamps ISO-8601; bytes as ``bytes_mode``).
    """
    cells = [[_cell(value, bytes_mode) for value in row] for row in rows]
    textual = [i for i in range(len(headers))
               if not all(isinstance(row[i], int) or row[i] == "-" for row in cells)]
    return tabulate(cells, headers=list(headers), tablefmt=tablefmt,
                    disable_numparse=textual or False, stralign="left", numalign="right")


def arrow_table(table: pa.Table, max_rows: int | None = None, bytes_mode: str = TEXT) -> str:
    """An Arrow table (a query result) as text; the row count under it."""
    shown = table if max_rows is None else table.slice(0, max_rows)
    text = text_table(table.column_names, (row.values() for row in shown.to_pylist()),
                      bytes_mode=bytes_mode)
    more = f" (first {shown.num_rows} shown)" if shown.num_rows < table.num_rows else ""
    return f"{text}\n({table.num_rows} row{'s' if table.num_rows != 1 else ''}{more})"


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def utc(moment: datetime | None) -> str:
    """``2026-11-20T07:59:58.000Z`` (a naive time is taken as UTC), or ``-``."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return iso_timestamp(moment)


def utc_ms(epoch_ms: int | None) -> str:
    return "-" if epoch_ms is None else iso_epoch_ms(epoch_ms)


def _cell(value: Any, bytes_mode: str = TEXT) -> Any:
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # stays a number, so tabulate right-aligns it
    if isinstance(value, float):
        return f"{value:.6g}"
    return scalar_text(value, bytes_mode)
