"""The batch endpoint's two parsers: parse_batch_json (typed decoding, the fast path) must give
exactly what parse_batch gives, or hand the body over to it (None) so that the answer names
the bad field. It must never accept a body that parse_batch rejects."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from perfweb.runs.fields import Invalid
from perfweb.runs.schemas import BatchRequest, parse_batch, parse_batch_json
from perfweb_contract.protocol import pack_floats

from .agent_client import batch_body
from .test_ingest import DELETE, REJECTIONS, bad


def as_plain(request: BatchRequest) -> dict[str, Any]:
    """Everything the request holds, arrays as lists, for exact comparison."""
    return {
        **{k: v for k, v in vars(request).items() if k not in ("metrics", "steps")},
        "series": [
            (s.device, s.name, s.t.tolist(), s.v.tolist(), s.t.dtype.str, s.v.dtype.str)
            for s in request.metrics + request.steps
        ],
    }


def slow(raw: bytes) -> BatchRequest:
    return parse_batch(orjson.loads(raw))


def test_it_reads_a_well_formed_batch_exactly_as_the_generic_parser() -> None:
    body = batch_body(devices=[{"key": "gpu:1", "kind": "gpu", "index": 1, "power_limit": 700}])
    body["metrics"].append(
        {"device": "gpu:1", "name": "gpu.power", "t": [1764496800, 1764496801.25], "v": [0, 1e300]}
    )
    raw = orjson.dumps(body)
    fast = parse_batch_json(raw)
    assert fast is not None
    assert as_plain(fast) == as_plain(slow(raw))
    assert fast.sample_count == 22 and fast.step_count == 2


def test_packed_arrays_read_exactly_as_plain_ones_in_both_parsers() -> None:
    plain = batch_body(n=7)
    plain["metrics"][0]["v"][3] = -0.0
    body = orjson.loads(orjson.dumps(plain))
    for series in body["metrics"]:
        series.update(t=pack_floats(series["t"]), v=pack_floats(series["v"]))
    body["steps"].update({k: pack_floats(v) for k, v in body["steps"].items() if k != "rank"})
    raw, expected = orjson.dumps(body), as_plain(slow(orjson.dumps(plain)))
    fast = parse_batch_json(raw)
    assert fast is not None
    assert as_plain(fast) == as_plain(slow(raw)) == expected
    assert np.signbit(next(iter(fast.metrics)).v[3])


def test_a_batch_may_mix_packed_and_plain_arrays() -> None:
    plain = batch_body(n=4)
    body = orjson.loads(orjson.dumps(plain))
    body["metrics"][0]["v"] = pack_floats(body["metrics"][0]["v"])
    body["metrics"][1]["t"] = pack_floats(body["metrics"][1]["t"])
    fast = parse_batch_json(orjson.dumps(body))
    assert fast is not None and as_plain(fast) == as_plain(slow(orjson.dumps(plain)))


def test_its_series_are_independent_arrays_of_the_right_slices() -> None:
    body = batch_body(n=3)
    raw = orjson.dumps(body)
    fast = parse_batch_json(raw)
    assert fast is not None
    gpu, process = fast.metrics
    assert gpu.v.tolist() == [50.0, 51.0, 52.0]
    assert process.v.tolist() == [1.2e9, 1.2e9 + 1, 1.2e9 + 2]
    assert np.shares_memory(gpu.v, process.v) is False


@pytest.mark.parametrize(("mutate", "message"), REJECTIONS)
def test_it_never_accepts_what_the_generic_parser_rejects(mutate: Any, message: str) -> None:
    body = batch_body(devices=[{"key": "gpu:1"}])
    mutate(body)
    raw = orjson.dumps(body)
    with pytest.raises(Invalid) as generic:
        slow(raw)
    assert str(generic.value).startswith(message)
    try:
        fast = parse_batch_json(raw)
    except Invalid as error:  # a small field: read by the very same readers
        assert str(error) == str(generic.value)
    else:
        assert fast is None


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"[1, 2]",
        b'{"metrics": [{"device": "gpu:0", "name": "gpu.power", "t": [1e400], "v": [1]}]}',
        b'{"metrics": [{"device": "gpu:0", "name": "gpu.power", "t": [1764496800], "v": [1e400]}]}',
        b'{"metrics": [{"device": "gpu:0", "name": "gpu.power", "t": [1764496800], "v": [NaN]}]}',
    ],
)
def test_it_hands_over_bodies_it_cannot_type(raw: bytes) -> None:
    assert parse_batch_json(raw) is None


def test_an_integer_beyond_64_bits_is_read_as_the_float_it_is() -> None:
    # orjson's generic parse refuses such integers (the body would be "not valid JSON");
    # JSON allows them, and a metric value is a float anyway.
    raw = orjson.dumps(batch_body()).replace(b"[50.0,", b"[123456789012345678901234567890,", 1)
    fast = parse_batch_json(raw)
    assert fast is not None and next(iter(fast.metrics)).v[0] == 1.2345678901234568e29


def test_a_name_with_a_trailing_newline_does_not_match() -> None:
    # `$` in a pattern also matches before a final newline; names are matched whole.
    body = batch_body()
    bad("metrics.0.device", "gpu:0\n")(body)
    raw = orjson.dumps(body)
    assert parse_batch_json(raw) is None
    with pytest.raises(Invalid, match=r"metrics\[0\]\.device does not match"):
        slow(raw)


def test_missing_metrics_and_steps_are_an_empty_batch_in_both() -> None:
    body = batch_body()
    bad("metrics", DELETE)(body)
    bad("steps", DELETE)(body)
    raw = orjson.dumps(body)
    fast = parse_batch_json(raw)
    assert fast is not None and len(fast.metrics) == 0 and len(fast.steps) == 0
    assert as_plain(fast) == as_plain(slow(raw))
