"""How query values are written, the same way in every output format (table, CSV, JSON).

* Timestamps: ISO-8601 in UTC with a ``Z``, milliseconds always, microseconds when the
  value has them -- ``2026-11-25T08:00:00.120Z``, ``2026-11-25T08:00:00.120500Z``. A
  timestamp without a time zone is written the same way without the ``Z``.
* Dates ``2026-11-25``; times ``08:00:00``; decimals as their exact digits (a string).
* Bytes (``_key``, ``_value``, binary columns), chosen with ``--bytes``:

  - ``base64``: standard base64 text (``"MTExMg=="``), which round-trips any bytes;
  - ``text``: the UTF-8 text when the bytes are valid UTF-8; bytes that are not are
    written as base64 -- in JSON as an object ``{"base64": "..."}``, in CSV and the
    table as ``base64:...`` -- so nothing is lost or silently replaced.

* JSON output is JSON Lines: one object per row, columns in query order; lists and
  structs become JSON arrays and objects; NaN and infinities become ``null``.

Decoding, in Python::

    row = json.loads(line)
    key = base64.b64decode(row["_key"])                      # --bytes base64
    when = datetime.fromisoformat(row["_timestamp"])        # aware, UTC
"""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterable, Sequence

BASE64 = "base64"
TEXT = "text"
BYTES_MODES = (BASE64, TEXT)


def iso_timestamp(moment: datetime) -> str:
    """``2026-11-25T08:00:00.120Z`` (UTC; no ``Z`` for a naive timestamp)."""
    suffix = ""
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
        suffix = "Z"
    fraction = (f"{moment.microsecond:06d}" if moment.microsecond % 1000
                else f"{moment.microsecond // 1000:03d}")
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction}{suffix}"


def iso_epoch_ms(epoch_ms: int) -> str:
    """:func:`iso_timestamp` of epoch milliseconds (exact, no float rounding)."""
    return iso_timestamp(datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=epoch_ms))


def text_of_bytes(value: bytes, mode: str) -> str:
    """Bytes as one string: base64, or (``text``) UTF-8 text else ``base64:...``."""
    if mode == TEXT:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    return base64.b64encode(value).decode("ascii")


def json_value(value: Any, mode: str = BASE64) -> Any:
    """A query value (as ``pyarrow`` gives it to Python) as a JSON-ready value."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if mode == TEXT:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return {"base64": base64.b64encode(raw).decode("ascii")}
        return base64.b64encode(raw).decode("ascii")
    if isinstance(value, dict):
        return {str(k): json_value(v, mode) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):
            return {str(k): json_value(v, mode) for k, v in value}  # an Arrow map
        return [json_value(item, mode) for item in value]
    return scalar_text(value, mode)


def scalar_text(value: Any, mode: str = BASE64) -> str:
    """A value as the text CSV and the table show (None is handled by the caller)."""
    if isinstance(value, datetime):
        return iso_timestamp(value)
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return text_of_bytes(bytes(value), mode)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(json_value(value, mode), ensure_ascii=False)
    return str(value)


def json_lines(columns: Sequence[str], rows: Iterable[Sequence[Any]], mode: str = BASE64) -> Iterable[str]:
    """One JSON object per row (no newline), keys in column order."""
    for row in rows:
        yield json.dumps({name: json_value(value, mode) for name, value in zip(columns, row)},
                         ensure_ascii=False, allow_nan=False)


def csv_cell(value: Any, mode: str = BASE64) -> Any:
    """A CSV cell: numbers as they are, None empty, everything else :func:`scalar_text`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return value
    return scalar_text(value, mode)
