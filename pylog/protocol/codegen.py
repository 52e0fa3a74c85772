"""Generate straight-line read/write functions for a compiled struct layout.

``StructCodec.read``/``write`` interpret a field list; the functions generated here do
the same work without the per-field loop, and unpack or pack each run of consecutive
fixed-size fields (int8..int64, uint32, float64, bool) with one ``struct.Struct`` call.
For a Fetch partition that is one unpack instead of six. Tests check the generated
functions against the interpreted ones.

``generate_inline`` goes one step further for the codec of a whole message: one
function with every nested struct, array of structs, string and records field written
out in place, which hands any input it does not handle to the per-struct functions
(see the section below).
"""

from __future__ import annotations

import copy
import struct
from typing import Any

from pylog.errors import InvalidRequestError
from pylog.protocol import primitives as p

FIXED_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint32": "I",
                 "float64": "d", "bool": "?"}


def _runs(entries) -> list[list]:
    """Group consecutive fixed-size entries; every other entry is a group of its own."""
    groups: list[list] = []
    for entry in entries:
        if entry.fmt and groups and groups[-1][0].fmt:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


def _default_expression(entry, namespace: dict, key: str) -> str:
    value = entry.default
    if value == [] and isinstance(value, list):
        return "[]"
    namespace[key] = value
    if isinstance(value, dict) and not any(isinstance(v, (list, dict))
                                           for v in value.values()):
        return f"dict({key})"  # a flat struct's default: a shallow copy is a fresh one
    if isinstance(value, (list, dict)):
        return f"_deepcopy({key})"
    return key


def generate(codec) -> tuple[Any, Any]:
    """(read, write) functions equivalent to ``codec.read`` and ``codec.write``."""
    namespace: dict[str, Any] = {
        "_struct_error": struct.error, "_deepcopy": copy.deepcopy, "_truncated": _truncated,
        "_read_tags": _read_tags, "_write_tags": _write_tags, "_packing_error": _packing_error,
        "_codec": codec}
    read_lines = ["def read(buf, offset):", "    start = offset", "    try:"]
    write_lines = ["def write(out, value):", "    get = value.get"]
    names: list[tuple[str, str]] = []
    for g, group in enumerate(_runs(codec.entries)):
        if group[0].fmt:
            st = struct.Struct(">" + "".join(e.fmt for e in group))
            namespace[f"_unpack{g}"] = st.unpack_from
            namespace[f"_pack{g}"] = st.pack
            targets = ", ".join(f"v{g}_{i}" for i in range(len(group)))
            read_lines.append(f"        ({targets},) = _unpack{g}(buf, offset)")
            read_lines.append(f"        offset += {st.size}")
            args = []
            for i, e in enumerate(group):
                namespace[f"_d{g}_{i}"] = e.default
                args.append(f"get({e.name!r}, _d{g}_{i})")
            write_lines += ["    try:", f"        out += _pack{g}({', '.join(args)})",
                            "    except _struct_error as exc:",
                            f"        raise _packing_error({[e.name for e in group]!r}, exc)"]
            names += [(e.name, f"v{g}_{i}") for i, e in enumerate(group)]
        else:
            e = group[0]
            namespace[f"_r{g}"] = e.read
            namespace[f"_w{g}"] = e.write
            namespace[f"_d{g}"] = e.default
            read_lines.append(f"        v{g}, offset = _r{g}(buf, offset)")
            write_lines.append(f"    _w{g}(out, get({e.name!r}, _d{g}))")
            names.append((e.name, f"v{g}"))
    if len(read_lines) == 3:
        read_lines.append("        pass")
    read_lines += ["    except _struct_error:", "        raise _truncated(start) from None"]
    items = [f"{name!r}: {var}" for name, var in names]
    for k, e in enumerate(codec.absent):
        items.append(f"{e.name!r}: {_default_expression(e, namespace, f'_a{k}')}")
    read_lines.append("    value = {" + ", ".join(items) + "}")
    if codec.flexible:
        read_lines.append("    offset = _read_tags(_codec, buf, offset, value)")
        write_lines.append("    _write_tags(_codec, out, value)")
    read_lines.append("    return value, offset")
    exec(compile("\n".join(read_lines) + "\n\n" + "\n".join(write_lines) + "\n",
                 "<pylog.protocol.codegen>", "exec"), namespace)
    return namespace["read"], namespace["write"]


def _truncated(offset: int) -> InvalidRequestError:
    return InvalidRequestError(f"truncated struct starting at byte {offset}")


def _packing_error(names: list[str], exc: Exception) -> ValueError:
    return ValueError(f"cannot encode fields {', '.join(names)}: {exc}")


def _read_tags(codec, buf, offset: int, value: dict) -> int:
    raw_tags, offset = p.read_tagged_fields(buf, offset)
    for tag, entry in codec.tagged.items():
        raw = raw_tags.get(tag)
        value[entry.name] = entry.fresh_default() if raw is None else entry.read(raw, 0)[0]
    return offset


def _write_tags(codec, out: bytearray, value: dict) -> None:
    tags: dict[int, bytes] = {}
    for tag, entry in codec.tagged.items():
        item = value.get(entry.name, entry.default)
        if item != entry.default:
            raw = bytearray()
            entry.write(raw, item)
            tags[tag] = bytes(raw)
    p.write_tagged_fields(out, tags)


# -- whole-message inlining -----------------------------------------------------------------
#
# ``generate`` makes one function per struct, so a request is still one call per array
# element and per string. ``generate_inline`` writes one function per top-level codec with
# every nested struct, array of structs, string and records field written out in place:
# a Produce request with one partition is decoded by a single function with no calls
# but ``struct`` unpacks. It handles well-formed input only: on anything unusual (a
# truncated frame, a bad length, invalid UTF-8, a value out of range) it gives the same
# input to the per-struct functions, which raise the precise error, so both paths
# behave identically on every input.

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Refused(Exception):
    """Raised by inlined code on input it does not handle itself."""


def _cut(out: bytearray, start: int) -> None:
    """Drop what a failed write appended (bytes and file regions) after ``start``."""
    del out[start:]
    regions = getattr(out, "regions", None)
    if regions:
        regions[:] = [r for r in regions if r[0] <= start]


class _Emitter:
    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace
        self.lines: list[str] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def constant(self, value, prefix: str = "_k") -> str:
        key = self.name(prefix + "_")  # "_p_16", never a fixed name such as "_p16"
        self.namespace[key] = value
        return key

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _read_length(em: _Emitter, ind: int, compact: bool, var: str) -> None:
    """``var`` = a classic int32/int16-free length or a compact length minus one."""
    if compact:
        em.emit(ind, f"{var} = buf[off]")
        em.emit(ind, f"if {var} < 128:")
        em.emit(ind + 1, "off += 1")
        em.emit(ind, "else:")
        em.emit(ind + 1, f"{var}, off = _ruv(buf, off)")
        em.emit(ind, f"{var} -= 1")
    else:
        em.emit(ind, f"({var},) = _i32(buf, off)")
        em.emit(ind, "off += 4")


def _emit_read_struct(em: _Emitter, ind: int, codec, target: str) -> None:
    names: list[tuple[str, str]] = []
    for group in _runs(codec.entries):
        if group[0].fmt:
            st = struct.Struct(">" + "".join(e.fmt for e in group))
            unpack = em.constant(st.unpack_from, "_u")
            targets = [em.name("v") for _ in group]
            em.emit(ind, f"({', '.join(targets)},) = {unpack}(buf, off)")
            em.emit(ind, f"off += {st.size}")
            names += [(e.name, t) for e, t in zip(group, targets)]
            continue
        e = group[0]
        var = em.name("v")
        names.append((e.name, var))
        if e.kind in ("string", "records"):
            length = em.name("n")
            if e.kind == "string" and not e.compact:
                em.emit(ind, f"({length},) = _i16(buf, off)")
                em.emit(ind, "off += 2")
            else:
                _read_length(em, ind, e.compact, length)
            em.emit(ind, f"if {length} < 0:")
            em.emit(ind + 1, f"if {length} != -1{'' if e.nullable else ' or True'}:")
            em.emit(ind + 2, "raise _Refused")
            em.emit(ind + 1, f"{var} = None")
            em.emit(ind, "else:")
            em.emit(ind + 1, f"end = off + {length}")
            em.emit(ind + 1, "if end > len(buf):")
            em.emit(ind + 2, "raise _Refused")
            if e.kind == "string":
                em.emit(ind + 1, f"{var} = str(buf[off:end], 'utf-8')")
            else:
                em.emit(ind + 1, f"{var} = buf[off:end]")
            em.emit(ind + 1, "off = end")
        elif e.kind == "structs":
            count = em.name("n")
            _read_length(em, ind, e.compact, count)
            em.emit(ind, f"if {count} < 0:")
            em.emit(ind + 1, f"if {count} != -1{'' if e.nullable else ' or True'}:")
            em.emit(ind + 2, "raise _Refused")
            em.emit(ind + 1, f"{var} = None")
            em.emit(ind, "else:")
            em.emit(ind + 1, f"if {count} > len(buf) - off:")
            em.emit(ind + 2, "raise _Refused")
            em.emit(ind + 1, f"{var} = []")
            em.emit(ind + 1, f"for _ in range({count}):")
            item = em.name("item")
            _emit_read_struct(em, ind + 2, e.inner, item)
            em.emit(ind + 2, f"{var}.append({item})")
        elif e.kind == "struct":
            _emit_read_struct(em, ind, e.inner, var)
        else:
            reader = em.constant(e.read, "_r")
            em.emit(ind, f"{var}, off = {reader}(buf, off)")
    items = [f"{name!r}: {var}" for name, var in names]
    for e in codec.absent:
        items.append(f"{e.name!r}: {_default_expression(e, em.namespace, em.name('_a'))}")
    em.emit(ind, f"{target} = {{{', '.join(items)}}}")
    if codec.flexible:
        # Mostly no tagged fields at all: one zero byte.
        em.emit(ind, "if buf[off] == 0:")
        em.emit(ind + 1, "off += 1")
        for e in codec.tagged.values():
            default = _default_expression(e, em.namespace, em.name("_a"))
            em.emit(ind + 1, f"{target}[{e.name!r}] = {default}")
        em.emit(ind, "else:")
        em.emit(ind + 1, f"off = _read_tags({em.constant(codec, '_c')}, buf, off, {target})")


def _write_length(em: _Emitter, ind: int, compact: bool, size: str) -> None:
    if compact:
        em.emit(ind, f"n = {size} + 1")
        em.emit(ind, "if n < 128:")
        em.emit(ind + 1, "out.append(n)")
        em.emit(ind, "else:")
        em.emit(ind + 1, "_wuv(out, n)")
    else:
        em.emit(ind, f"out += _p32({size})")


def _emit_write_struct(em: _Emitter, ind: int, codec, value: str) -> None:
    get = em.name("get")
    em.emit(ind, f"{get} = {value}.get")
    for group in _runs(codec.entries):
        if group[0].fmt:
            st = struct.Struct(">" + "".join(e.fmt for e in group))
            pack = em.constant(st.pack, "_p")
            args = ", ".join(f"{get}({e.name!r}, {em.constant(e.default, '_d')})"
                             for e in group)
            em.emit(ind, f"out += {pack}({args})")
            continue
        e = group[0]
        var = em.name("v")
        em.emit(ind, f"{var} = {get}({e.name!r}, {em.constant(e.default, '_d')})")
        if e.kind == "string":
            em.emit(ind, f"if {var} is None:")
            em.emit(ind + 1, "out.append(0)" if e.compact else "out += b'\\xff\\xff'")
            em.emit(ind, "else:")
            raw = em.name("raw")
            em.emit(ind + 1, f"{raw} = {var}.encode()")
            if e.compact:
                _write_length(em, ind + 1, True, f"len({raw})")
            else:
                em.emit(ind + 1, f"out += _p16(len({raw}))")
            em.emit(ind + 1, f"out += {raw}")
        elif e.kind == "structs":
            em.emit(ind, f"if {var} is None:")
            em.emit(ind + 1, "out.append(0)" if e.compact else "out += b'\\xff\\xff\\xff\\xff'")
            em.emit(ind, "else:")
            _write_length(em, ind + 1, e.compact, f"len({var})")
            item = em.name("item")
            em.emit(ind + 1, f"for {item} in {var}:")
            _emit_write_struct(em, ind + 2, e.inner, item)
        elif e.kind == "struct":
            _emit_write_struct(em, ind, e.inner, var)
        else:
            em.emit(ind, f"{em.constant(e.write, '_w')}(out, {var})")
    if codec.flexible:
        if codec.tagged:
            em.emit(ind, f"_write_tags({em.constant(codec, '_c')}, out, {value})")
        else:
            em.emit(ind, "out.append(0)")


def generate_inline(codec, careful_read, careful_write) -> tuple[Any, Any]:
    """(read, write) with nested structs inlined, falling back to ``careful_read`` and
    ``careful_write`` (the per-struct functions) on any input they do not handle."""
    namespace: dict[str, Any] = {
        "_Refused": _Refused, "_careful_read": careful_read, "_deepcopy": copy.deepcopy,
        "_careful_write": careful_write, "_cut": _cut, "_read_tags": _read_tags, "_write_tags": _write_tags,
        "_ruv": p.read_unsigned_varint, "_wuv": p.write_unsigned_varint,
        "_i16": _I16.unpack_from, "_i32": _I32.unpack_from, "_p16": _I16.pack,
        "_p32": _I32.pack}
    em = _Emitter(namespace)
    em.emit(0, "def read(buf, offset):")
    em.emit(1, "off = offset")
    em.emit(1, "try:")
    _emit_read_struct(em, 2, codec, "value")
    em.emit(1, "except Exception:")
    em.emit(2, "return _careful_read(buf, offset)")
    em.emit(1, "return value, off")
    em.emit(0, "")
    em.emit(0, "def write(out, value):")
    em.emit(1, "start = len(out)")
    em.emit(1, "try:")
    _emit_write_struct(em, 2, codec, "value")
    em.emit(1, "except Exception:")
    em.emit(2, "_cut(out, start)")
    em.emit(2, "try:")
    em.emit(3, "_careful_write(out, value)")
    em.emit(2, "except BaseException:")
    em.emit(3, "_cut(out, start)  # a refused value leaves no partial bytes behind")
    em.emit(3, "raise")
    exec(compile("\n".join(em.lines) + "\n", "<pylog.protocol.codegen.inline>", "exec"),
         namespace)
    return namespace["read"], namespace["write"]
