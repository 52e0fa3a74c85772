"""Property tests: random bodies for every API and version survive encode/decode, and
the generated codecs agree byte for byte with the interpreted reference."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog.protocol import MESSAGES
from pylog.protocol.schema import VersionRange

INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def primitive(type_name: str, nullable: bool):
    if type_name in INTS:
        bits = INTS[type_name]
        base = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    elif type_name == "uint32":
        base = st.integers(0, 2 ** 32 - 1)
    elif type_name == "float64":
        base = st.floats(allow_nan=False)
    elif type_name == "bool":
        base = st.booleans()
    elif type_name == "uuid":
        base = st.uuids()
    elif type_name == "string":
        base = st.text(max_size=12)
    elif type_name in ("bytes", "records"):
        base = st.binary(max_size=24)
    else:
        raise AssertionError(type_name)
    return st.one_of(st.none(), base) if nullable or type_name == "records" else base


def struct_of(fields, version: int):
    members = {}
    for f in fields:
        if version not in VersionRange.parse(f.versions):
            continue
        nullable = version in VersionRange.parse(f.nullable)
        if f.type == "{}":
            value = struct_of(f.fields, version)
        elif f.type == "[]":
            value = st.lists(struct_of(f.fields, version), max_size=3)
            value = st.one_of(st.none(), value) if nullable else value
        elif f.type.startswith("[]"):
            value = st.lists(primitive(f.type[2:], False), max_size=4)
            value = st.one_of(st.none(), value) if nullable else value
        else:
            value = primitive(f.type, nullable)
        members[f.name] = value
    return st.fixed_dictionaries(members)


def normalized(value):
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def subset_equal(sent, received) -> bool:
    if isinstance(sent, dict):
        return all(subset_equal(v, received[k]) for k, v in sent.items())
    if isinstance(sent, list):
        return len(sent) == len(received) and all(map(subset_equal, sent, received))
    return normalized(sent) == normalized(received)


CASES = [(m, v, side) for m in MESSAGES.values() for v in (m.min_version, m.max_version,
                                                            (m.min_version + m.max_version) // 2)
         for side in ("request", "response")]


@pytest.mark.parametrize("message, version, side", CASES,
                         ids=[f"{m.name}-v{v}-{s}" for m, v, s in CASES])
def test_random_bodies_round_trip(message, version, side):
    codec = getattr(message, f"{side}_codec")(version)
    fields = message.request if side == "request" else message.response

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(struct_of(fields, version))
    def check(body):
        fast, reference = bytearray(), bytearray()
        codec.write(fast, body)
        codec.interpreted_write(reference, body)
        assert fast == reference
        decoded, end = codec.read(bytes(fast), 0)
        assert end == len(fast)
        assert subset_equal(body, decoded)

    check()
