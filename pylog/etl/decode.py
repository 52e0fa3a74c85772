"""Records (as columns) -> Arrow rows for the table, and rows for the quarantine table.

JSON payloads are parsed in bulk: the values of a fetch are joined with newlines and
read by ``pyarrow.json.read_json`` against the declared schema. Columns from the
vectorised records decoder (``IntColumn``, ``BinaryColumn``) go to Arrow without a Python
object per record, and their values become the parser's input in one copy. Only when
parsing fails is the batch split in halves, recursively, to find the records that do not parse; those go
to quarantine with the parser's error, the rest still parse in bulk.

Table rows: the payload columns (json) or ``value`` (raw), then ``_topic`` (string),
``_partition`` (int32), ``_offset`` (int64), ``_timestamp`` (timestamp ms, UTC), ``_key``
(binary). Quarantine rows: ``_topic``, ``_partition``, ``_offset``, ``_timestamp``,
``_key``, ``_value`` (binary, the raw payload) and ``_error`` (string).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from pylog.etl.config import TopicConfig
from pylog.records.vectorised import BinaryColumn, IntColumn

_ARROW_TYPES = {
    "string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "float32": pa.float32(),
    "float64": pa.float64(), "bool": pa.bool_(), "timestamp": pa.timestamp("ms", tz="UTC"),
    "date": pa.date32(),
}
TIMESTAMP = pa.timestamp("ms", tz="UTC")
META_FIELDS = [
    pa.field("_topic", pa.string()), pa.field("_partition", pa.int32()),
    pa.field("_offset", pa.int64()), pa.field("_timestamp", TIMESTAMP), pa.field("_key", pa.binary()),
]
QUARANTINE_SCHEMA = pa.schema(META_FIELDS + [pa.field("_value", pa.binary()),
                                             pa.field("_error", pa.string())])
_MIN_BLOCK = 1 << 20


def payload_schema(config: TopicConfig) -> pa.Schema:
    if config.format == "raw":
        return pa.schema([pa.field("value", pa.binary())])
    return pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in config.schema])


def table_schema(config: TopicConfig) -> pa.Schema:
    """Columns of the table's Parquet files (the partition columns live in directory names)."""
    return pa.schema(list(payload_schema(config)) + META_FIELDS)


@dataclass(frozen=True, slots=True)
class DecodedRows:
    """Decoded rows plus, aligned with them, each row's event time in epoch ms."""

    rows: pa.Table
    event_ms: pa.Array
    quarantine: pa.Table


def decode_records(config: TopicConfig, partition: int, offsets: Sequence[int], timestamps: Sequence[int],
                   keys: Sequence, values: Sequence) -> DecodedRows:
    """Decode one fetch's records into table rows and quarantine rows.

    The columns are lists, or the list-like columns of ``pylog.records.decode_columns``.
    """
    count = len(offsets)
    timestamp_ms = _int64_array(timestamps)
    meta = pa.table({
        "_topic": pa.repeat(pa.scalar(config.topic, pa.string()), count),
        "_partition": pa.repeat(pa.scalar(partition, pa.int32()), count),
        "_offset": _int64_array(offsets),
        "_timestamp": timestamp_ms.cast(TIMESTAMP),
        "_key": _binary_array(keys),
    })
    if config.format == "raw":
        rows = pa.Table.from_arrays([_binary_array(values)] + meta.columns, schema=table_schema(config))
        return DecodedRows(rows, timestamp_ms, QUARANTINE_SCHEMA.empty_table())
    payload, bad = parse_json_values(values, payload_schema(config))
    good = _without(len(values), bad)
    kept_meta = meta.take(pa.array(good, pa.int64())) if bad else meta
    rows = pa.Table.from_arrays(payload.columns + kept_meta.columns, schema=table_schema(config))
    event_ms, missing = _event_time(config, rows)
    if missing:
        missing_set = set(missing)
        bad = sorted(bad + [(good[i], f"event time field {config.event_time_field!r} is missing")
                            for i in missing])
        keep = pa.array([i for i in range(rows.num_rows) if i not in missing_set], pa.int64())
        rows, event_ms = rows.take(keep), event_ms.take(keep)  # typed: keep may be empty
    return DecodedRows(rows, event_ms, _quarantine_rows(meta, values, bad))


def _int64_array(column: Sequence[int]) -> pa.Array:
    if isinstance(column, IntColumn):
        return pa.array(column.to_numpy(), pa.int64())
    return pa.array(column, pa.int64())


def _binary_array(column: Sequence) -> pa.Array:
    if isinstance(column, BinaryColumn):
        return column.to_arrow()
    return pa.array(column, pa.binary())


def parse_json_values(values: Sequence, schema: pa.Schema) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Parse JSON objects; returns (rows of the good ones, [(index, error)] of the bad ones)."""
    if values.all_non_empty() if isinstance(values, BinaryColumn) else all(values):  # the common case
        bad, candidates = [], list(range(len(values)))
    else:
        bad = [(i, "empty value") for i, value in enumerate(values) if not value]
        candidates = [i for i, value in enumerate(values) if value]
    parts: list[pa.Table] = []
    _parse_range(values, candidates, schema, parts, bad)
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    return table, sorted(bad)


def _parse_range(values: list, indexes: list[int], schema: pa.Schema,
                 parts: list[pa.Table], bad: list[tuple[int, str]]) -> None:
    if not indexes:
        return
    chosen = [values[i] for i in indexes] if len(indexes) != len(values) else values
    try:
        table = _read_json_lines(chosen, schema)
        if table.num_rows == len(indexes):
            parts.append(table)
            return
        error = "not exactly one JSON object"
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        error = str(exc)
    if len(indexes) == 1:
        bad.append((indexes[0], error))
        return
    middle = len(indexes) // 2
    _parse_range(values, indexes[:middle], schema, parts, bad)
    _parse_range(values, indexes[middle:], schema, parts, bad)


def _read_json_lines(values: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    lines = values.json_lines() if isinstance(values, BinaryColumn) else None
    if lines is not None:
        joined, longest = lines
    else:
        joined = b"\n".join(values)
        if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
            # Pretty-printed JSON: newlines are only whitespace between tokens (a raw newline
            # inside a string is invalid JSON anyway), so turning them into spaces is exact.
            joined = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
        longest = max(len(v) for v in values)
    # Blocks of about 1 MB are parsed in parallel by pyarrow's threads; a block must hold
    # at least one whole line.
    block = max(_MIN_BLOCK, 2 * longest + 2)
    return pajson.read_json(
        pa.py_buffer(joined),
        read_options=pajson.ReadOptions(use_threads=True, block_size=block),
        parse_options=pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))


def _event_time(config: TopicConfig, rows: pa.Table) -> tuple[pa.Array, list[int]]:
    if config.event_time_field is None:
        return pc.cast(rows.column("_timestamp"), pa.int64()).combine_chunks(), []
    column = rows.column(config.event_time_field).combine_chunks()
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, TIMESTAMP), pa.int64())
    missing = pc.indices_nonzero(pc.is_null(column)).to_pylist() if column.null_count else []
    return column, missing


def _without(count: int, bad: list[tuple[int, str]]) -> list[int]:
    if not bad:
        return list(range(count))
    skip = {i for i, _ in bad}
    return [i for i in range(count) if i not in skip]


def _quarantine_rows(meta: pa.Table, values: list, bad: list[tuple[int, str]]) -> pa.Table:
    if not bad:
        return QUARANTINE_SCHEMA.empty_table()
    indexes = [i for i, _ in bad]
    picked = meta.take(indexes)
    raw = pa.array([values[i] for i in indexes], pa.binary())
    return pa.Table.from_arrays(
        picked.columns + [raw, pa.array([e for _, e in bad], pa.string())],
        schema=QUARANTINE_SCHEMA)
