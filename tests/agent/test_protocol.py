"""The packed form of a batch's arrays (docs/protocol.md): exact, and refused when malformed."""

from __future__ import annotations

import base64
import math
import struct

import pytest

from perfweb_contract import protocol


@pytest.mark.parametrize(
    "values",
    [[], [0.0], [-0.0, 1.5, 1e-310, 1.7976931348623157e308, 2.0**53], [1764496800.123456789]],
)
def test_packed_arrays_hold_every_float_exactly(values: list[float]) -> None:
    text = protocol.pack_floats(values)
    unpacked = protocol.unpack_floats(text)
    assert unpacked == values
    assert [math.copysign(1, v) for v in unpacked] == [math.copysign(1, v) for v in values]
    assert base64.b64decode(text) == struct.pack(f"<{len(values)}d", *values)


def test_integers_pack_as_their_float_values() -> None:
    assert protocol.unpack_floats(protocol.pack_floats([0, 7, 2**40])) == [0.0, 7.0, 2.0**40]


@pytest.mark.parametrize("text", ["not base64!", "AAAA", "AAAAAAAAAAA", "AAAAAAAAAA=="])
def test_a_string_that_is_no_packed_array_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        protocol.unpack_floats(text)
