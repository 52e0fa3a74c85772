"""Message schemas declared as data, and the generic codec derived from them.

A ``Message`` declares one API's request and response once, with per-field version
ranges, in the style of Kafka's JSON spec files::

    F("transactional_id", "string", "3+", nullable="3+", default=None)
    F("topic_data", "[]", fields=(F("name", "string"), ...))   # array of structs
    F("current_leader", "{}", "10+", tag=0, tagged="10+", fields=(...))  # a struct
    F("replica_nodes", "[]int32")                                # array of a primitive

From a declaration, ``Message.request_codec(version)`` / ``response_codec(version)``
compile (and cache) a ``StructCodec`` for exactly that version: fields outside their
range are skipped on the wire and filled with defaults when decoding; flexible versions
use compact strings, bytes and arrays and carry tagged fields after every struct.

Values are plain dicts with snake_case keys. On encode a missing key takes the field's
default. A ``records`` value may be bytes-like or a file region (any object with a
``length``) when encoding into a ``ChunkedOutput``: the region is spliced in by the
caller (``os.sendfile``) instead of being copied.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pylog.protocol import primitives as p
from pylog.protocol.codegen import FIXED_FORMATS, generate, generate_inline
from pylog.protocol.primitives import Reader, Writer

_UNSET = object()


@dataclass(frozen=True, slots=True)
class VersionRange:
    """Versions written "0+", "3-5", "7" or "none"."""

    low: int
    high: int  # inclusive; a large number for "N+"

    @classmethod
    @lru_cache(maxsize=None)
    def parse(cls, text: str) -> "VersionRange":
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), 1 << 15)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@dataclass(frozen=True)
class F:
    """One field of a message or struct (see the module docstring)."""

    name: str
    type: str
    versions: str = "0+"
    nullable: str = "none"
    default: Any = _UNSET
    tag: int | None = None
    tagged: str = "none"
    flexible: str | None = None  # only the request header's client_id overrides this
    fields: tuple["F", ...] = ()


class ChunkedOutput(bytearray):
    """A bytearray that also records file regions to splice in at given positions."""

    def __init__(self) -> None:
        super().__init__()
        self.regions: list[tuple[int, Any]] = []

    def chunks(self) -> list:
        """The output as [bytes, region, bytes, ...] in wire order."""
        parts: list = []
        start = 0
        for position, region in self.regions:
            parts.append(bytes(self[start:position]))
            parts.append(region)
            start = position
        parts.append(bytes(self[start:]))
        return [part for part in parts if not isinstance(part, bytes) or part]


def _is_bytes(value) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview))


def _records_writer(compact: bool) -> Writer:
    write_inline = p.write_compact_nullable_bytes if compact else p.write_nullable_bytes

    def write(out: bytearray, value) -> None:
        if value is None or _is_bytes(value):
            write_inline(out, value)
            return
        # A file region: length prefix now, the bytes themselves at send time.
        if compact:
            p.write_unsigned_varint(out, value.length + 1)
        else:
            out += p.INT32.pack(value.length)
        out.regions.append((len(out), value))

    return write


# (reader, writer, default) per primitive type, for classic and compact (flexible) forms.
_FIXED = {
    "int8": (p.read_int8, p.write_int8, 0),
    "int16": (p.read_int16, p.write_int16, 0),
    "int32": (p.read_int32, p.write_int32, 0),
    "int64": (p.read_int64, p.write_int64, 0),
    "uint32": (p.read_uint32, p.write_uint32, 0),
    "float64": (p.read_float64, p.write_float64, 0.0),
    "bool": (p.read_bool, p.write_bool, False),
    "uuid": (p.read_uuid, p.write_uuid, p.ZERO_UUID),
}
_VARIABLE = {
    # type: {(compact, nullable): (reader, writer)}
    "string": {
        (False, False): (p.read_string, p.write_string),
        (False, True): (p.read_nullable_string, p.write_nullable_string),
        (True, False): (p.read_compact_string, p.write_compact_string),
        (True, True): (p.read_compact_nullable_string, p.write_compact_nullable_string),
    },
    "bytes": {
        (False, False): (p.read_bytes, p.write_bytes),
        (False, True): (p.read_nullable_bytes, p.write_nullable_bytes),
        (True, False): (p.read_compact_bytes, p.write_compact_bytes),
        (True, True): (p.read_compact_nullable_bytes, p.write_compact_nullable_bytes),
    },
}
_VARIABLE_DEFAULTS = {"string": "", "bytes": b"", "records": None}


def _primitive(type_name: str, compact: bool, nullable: bool) -> tuple[Reader, Writer, Any]:
    if type_name in _FIXED:
        return _FIXED[type_name]
    if type_name == "records":
        reader = p.read_compact_nullable_bytes if compact else p.read_nullable_bytes
        return reader, _records_writer(compact), None
    try:
        reader, writer = _VARIABLE[type_name][(compact, nullable)]
    except KeyError:
        raise ValueError(f"unknown protocol type {type_name!r}") from None
    return reader, writer, _VARIABLE_DEFAULTS[type_name]


def _array(read_element: Reader, write_element: Writer, compact: bool,
           nullable: bool) -> tuple[Reader, Writer]:
    def read(buf, offset):
        return p.read_array(buf, offset, read_element, compact, nullable)

    def write(out, items):
        p.write_array(out, items, write_element, compact)

    return read, write


@dataclass
class _Entry:
    name: str
    read: Reader
    write: Writer
    default: Any  # a value; copied before use when mutable
    fmt: str | None = None  # struct format character of a fixed-size type
    # What the inlining code generator needs: "string", "records", "struct" ({}) or
    # "structs" ([] of structs); other types keep calling ``read``/``write``.
    kind: str = ""
    compact: bool = False
    nullable: bool = False
    inner: "StructCodec | None" = None

    def fresh_default(self):
        value = self.default
        return copy.deepcopy(value) if isinstance(value, (list, dict)) else value


@dataclass
class StructCodec:
    """The compiled layout of one struct at one version."""

    entries: list[_Entry]
    tagged: dict[int, _Entry]
    absent: list[_Entry]
    flexible: bool
    names: tuple[str, ...] = field(default=())

    def interpreted_read(self, buf, offset: int) -> tuple[dict, int]:
        """The reference decoder; ``read`` is the generated equivalent (see codegen)."""
        value: dict = {}
        for entry in self.entries:
            value[entry.name], offset = entry.read(buf, offset)
        if self.flexible:
            raw_tags, offset = p.read_tagged_fields(buf, offset)
            for tag, entry in self.tagged.items():
                raw = raw_tags.get(tag)
                value[entry.name] = entry.fresh_default() if raw is None else entry.read(raw, 0)[0]
        for entry in self.absent:
            value[entry.name] = entry.fresh_default()
        return value, offset

    def interpreted_write(self, out: bytearray, value: dict) -> None:
        """The reference encoder; ``write`` is the generated equivalent (see codegen)."""
        get = value.get
        for entry in self.entries:
            item = get(entry.name, _UNSET)
            entry.write(out, entry.fresh_default() if item is _UNSET else item)
        if self.flexible:
            tags: dict[int, bytes] = {}
            for tag, entry in self.tagged.items():
                item = get(entry.name, _UNSET)
                if item is not _UNSET and item != entry.default:
                    raw = bytearray()
                    entry.write(raw, item)
                    tags[tag] = bytes(raw)
            p.write_tagged_fields(out, tags)

    def default_value(self) -> dict:
        value = {e.name: e.fresh_default() for e in self.entries}
        value.update({e.name: e.fresh_default() for e in self.tagged.values()})
        value.update({e.name: e.fresh_default() for e in self.absent})
        return value


def compile_struct(fields: tuple[F, ...], version: int, flexible: bool) -> StructCodec:
    codec = StructCodec([], {}, [], flexible)
    for f in fields:
        entry = _compile_field(f, version, flexible)
        if version not in VersionRange.parse(f.versions):
            codec.absent.append(entry)
        elif f.tag is not None and flexible and version in VersionRange.parse(f.tagged):
            codec.tagged[f.tag] = entry
        else:
            codec.entries.append(entry)
    codec.names = tuple(f.name for f in fields)
    # One function per struct (careful: precise errors), then one per message with the
    # nested structs inlined, which hands any input it does not handle to the former.
    codec.careful_read, codec.careful_write = generate(codec)
    codec.read, codec.write = generate_inline(codec, codec.careful_read, codec.careful_write)
    return codec


def _nullable_struct(read_struct: Reader, write_struct: Writer) -> tuple[Reader, Writer]:
    """A nullable struct field: an int8 -1 for null, else 1 and the struct (both in flexible
    and in older versions)."""

    def read(buf, offset: int):
        present, offset = p.read_int8(buf, offset)
        if present < 0:
            return None, offset
        return read_struct(buf, offset)

    def write(out: bytearray, value) -> None:
        if value is None:
            p.write_int8(out, -1)
        else:
            p.write_int8(out, 1)
            write_struct(out, value)
    return read, write


def _compile_field(f: F, version: int, flexible: bool) -> _Entry:
    compact = flexible if f.flexible is None else version in VersionRange.parse(f.flexible)
    nullable = version in VersionRange.parse(f.nullable)
    if f.type in ("[]", "{}"):
        inner = compile_struct(f.fields, version, flexible)
        if f.type == "{}":
            if nullable:
                read, write = _nullable_struct(inner.read, inner.write)
                return _Entry(f.name, read, write, None if f.default is _UNSET else f.default)
            default = inner.default_value() if f.default is _UNSET else f.default
            return _Entry(f.name, inner.read, inner.write, default, kind="struct",
                          inner=inner)
        read, write = _array(inner.read, inner.write, compact, nullable)
        return _Entry(f.name, read, write, [] if f.default is _UNSET else f.default,
                      kind="structs", compact=compact, nullable=nullable, inner=inner)
    elif f.type.startswith("[]"):
        element_read, element_write, _ = _primitive(f.type[2:], compact, False)
        read, write = _array(element_read, element_write, compact, nullable)
    else:
        read, write, default = _primitive(f.type, compact, nullable)
        kind = f.type if f.type in ("string", "records") else ""
        return _Entry(f.name, read, write, default if f.default is _UNSET else f.default,
                      FIXED_FORMATS.get(f.type), kind, compact, nullable)
    return _Entry(f.name, read, write, [] if f.default is _UNSET else f.default)


@dataclass(frozen=True)
class Message:
    """One API: its key, version range, flexible versions, request and response fields."""

    key: int
    name: str
    versions: str
    flexible: str
    request: tuple[F, ...]
    response: tuple[F, ...]

    @property
    def min_version(self) -> int:
        return VersionRange.parse(self.versions).low

    @property
    def max_version(self) -> int:
        return VersionRange.parse(self.versions).high

    def is_flexible(self, version: int) -> bool:
        return version in VersionRange.parse(self.flexible)

    def request_codec(self, version: int) -> StructCodec:
        return _compiled(self, version, "request")

    def response_codec(self, version: int) -> StructCodec:
        return _compiled(self, version, "response")


_CODECS: dict[tuple[int, int, str], StructCodec] = {}


def _compiled(message: Message, version: int, side: str) -> StructCodec:
    key = (message.key, version, side)
    codec = _CODECS.get(key)
    if codec is None:
        if version not in VersionRange.parse(message.versions):
            raise ValueError(f"{message.name} has no version {version}")
        fields = message.request if side == "request" else message.response
        codec = _CODECS[key] = compile_struct(fields, version, message.is_flexible(version))
    return codec
