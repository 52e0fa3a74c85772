"""The inlined codecs (one function per message) against the per-struct ones they fall
back to: the same value or the same error for valid, truncated and corrupted input."""

import random

import pytest

from pylog.errors import PylogError
from pylog.protocol import MESSAGES
from tests.protocol.test_kafka_python_crosscheck import CASES as SAMPLES

SAMPLE_BODIES = {key: (request, response) for key, _, _, request, response, _ in SAMPLES}


def outcome(read, buf):
    try:
        return read(buf, 0)
    except PylogError as error:
        return type(error), str(error)


def codecs():
    for message in MESSAGES.values():
        for version in range(message.min_version, message.max_version + 1):
            for side in ("request", "response"):
                yield message, version, side, getattr(message, f"{side}_codec")(version)


@pytest.mark.parametrize("message, version, side, codec",
                         [pytest.param(*c, id=f"{c[0].name}-v{c[1]}-{c[2]}") for c in codecs()])
def test_inlined_codec_agrees_with_the_careful_one_on_damaged_input(message, version, side,
                                                                     codec):
    rng = random.Random(f"{message.key}-{version}-{side}")
    bodies = [codec.default_value()]
    if message.key in SAMPLE_BODIES:
        bodies.append(SAMPLE_BODIES[message.key][side == "response"])
    for body in bodies:
        fast, careful = bytearray(), bytearray()
        codec.write(fast, body)
        codec.careful_write(careful, body)
        assert fast == careful
        inputs = [bytes(fast)] + [bytes(fast[:cut]) for cut in range(len(fast))]
        for _ in range(30):
            damaged = bytearray(fast)
            if damaged:
                damaged[rng.randrange(len(damaged))] = rng.choice((0, 0x7F, 0x80, 0xFF,
                                                                    rng.randrange(256)))
            inputs.append(bytes(damaged))
        for buf in inputs:
            for view in (buf, memoryview(buf)):
                fast_result = outcome(codec.read, view)
                careful_result = outcome(codec.careful_read, view)
                assert _plain(fast_result) == _plain(careful_result), (buf.hex(),)


def test_values_out_of_range_name_their_field_and_leave_nothing_behind():
    codec = MESSAGES[0].request_codec(9)
    out = bytearray(b"kept")
    with pytest.raises(ValueError, match="acks"):
        codec.write(out, {"acks": 70000, "timeout_ms": 1, "topic_data": []})
    assert out == b"kept"


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value
