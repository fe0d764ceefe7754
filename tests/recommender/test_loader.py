"""Loading Kineto traces: formats, fallbacks and nanosecond timestamps."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from perfweb_recommender.errors import InputError
from perfweb_recommender.trace.loader import load_trace, load_trace_in_memory, load_traces
from perfweb_recommender.trace.model import KIND_KERNEL, KIND_MEMCPY

EVENTS = [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 100, "dur": 50},
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "ts": 101,
        "dur": 4,
        "args": {"correlation": 11},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "volta_sgemm_128x64_nn",
        "ts": 110,
        "dur": 20,
        "args": {"stream": 7, "correlation": 11},
    },
    {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD (Pageable -> Device)",
        "ts": 131,
        "dur": 3,
        "args": {"stream": 7, "correlation": 12, "bytes": 4096},
    },
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "ts": 110, "id": 11},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 102, "dur": 2},
]


def _write(tmp_path: Path, document: object, name: str = "t.json", gz: bool = False) -> Path:
    data = json.dumps(document).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _check(trace) -> None:  # noqa: ANN001
    assert [s.number for s in trace.steps] == [7]
    assert list(trace.gpu.kind) == [KIND_KERNEL, KIND_MEMCPY]
    assert list(trace.gpu.correlation) == [11, 12] and list(trace.gpu.nbytes) == [0, 4096]
    assert trace.runtime_names == ["cudaLaunchKernel"]
    assert trace.cpu_op_counts == {"aten::mm": 1}


def test_it_loads_a_plain_and_a_gzipped_trace(tmp_path: Path) -> None:
    _check(load_trace(_write(tmp_path, {"traceEvents": EVENTS})))
    _check(load_trace(_write(tmp_path, {"traceEvents": EVENTS}, "t.json.gz", gz=True)))


def test_it_loads_a_bare_event_list_and_odd_args_through_the_generic_parser(tmp_path: Path) -> None:
    _check(load_trace(_write(tmp_path, EVENTS)))
    odd = [*EVENTS, {"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, "args": [1]}]
    trace = load_trace(_write(tmp_path, {"traceEvents": odd}))
    assert trace.cpu_op_counts == {"aten::mm": 1, "x": 1}


def test_it_reads_a_multi_member_gzip(tmp_path: Path) -> None:
    data = json.dumps({"traceEvents": EVENTS}).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data[:100]) + gzip.compress(data[100:]))
    _check(load_trace(path))


def test_it_keeps_nanosecond_digits_of_large_timestamps(tmp_path: Path) -> None:
    # At 1.7e15 µs a float64 is only 0.25 µs fine; the loader must still see 1 ns steps.
    text = json.dumps({"traceEvents": EVENTS[:3]})
    text = text.replace('"ts": 110,', '"ts": 1712195495519689.047,')
    text = text.replace('"ts": 101,', '"ts": 1712195495519680.001,')
    text = text.replace('"ts": 100,', '"ts": 1712195495519679.999,')
    path = tmp_path / "ns.json"
    path.write_text(text)
    trace = load_trace(path)
    assert trace.fractional_timestamps
    step = trace.steps[0].ts
    assert trace.gpu.ts[0] - step == pytest.approx(9.048, abs=1e-5)  # 1 ns = 1e-3 µs
    assert trace.host.ts[0] - step == pytest.approx(0.002, abs=1e-5)


@pytest.mark.parametrize(
    ("first", "exact_to"),
    [
        ("5190772014102.334", 1e-5),  # the digits kept after the cut start with 0
        ("5191062234668.770", 1e-5),
        ("1712190000000000.001", 1e-5),  # and with nothing but 0s
        # The later events cross to the next prefix: not cut, they keep float64's precision
        # at 5e12 µs, 1 ns, which is HTA's.
        ("5189999999999.999", 1e-3),
    ],
)
def test_it_reads_timestamps_whatever_digits_follow_the_cut(
    tmp_path: Path, first: str, exact_to: float
) -> None:
    start = Decimal(first)
    text = json.dumps({"traceEvents": EVENTS[:4]})
    for relative, offset in (("100", "0.000"), ("101", "1.002"), ("110", "10.5"), ("131", "31.25")):
        text = text.replace(f'"ts": {relative},', f'"ts": {start + Decimal(offset)},')
    path = tmp_path / "cut.json"
    path.write_text(text)
    trace = load_trace(path)
    assert trace.fractional_timestamps
    step = trace.steps[0].ts
    assert trace.base_us + trace.origin_us + step == pytest.approx(float(start), abs=1e-3)
    assert trace.host.ts[0] - step == pytest.approx(1.002, abs=exact_to)
    assert list(trace.gpu.ts - step) == pytest.approx([10.5, 31.25], abs=exact_to)


def test_it_refuses_an_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_traces(tmp_path)


def test_the_in_place_timestamp_cut_equals_a_plain_replace(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfweb_recommender.trace import loader

    events = [
        {"ph": "X", "ts": 1712195495519689.047 + i, "dur": 1.5, "name": "k" * (i % 7)}
        for i in range(300)
    ]
    text = json.dumps({"traceEvents": events}).encode()
    pairs = [(b'"ts": 171219', b'"ts": 1'), (b'"ts":171219', b'"ts":1')]
    expected = text
    for old, new in pairs:
        expected = expected.replace(old, new)
    for window in (37, 64, 1000, 10**6):
        monkeypatch.setattr(loader, "_REPLACE_WINDOW", window)
        data = bytearray(text)
        loader._replace_in_place(data, pairs)
        assert bytes(data) == expected


@pytest.mark.parametrize("reader", [load_trace, load_trace_in_memory])
def test_steps_from_optimizer_steps_start_at_the_first_cpu_event(
    tmp_path: Path, reader: object
) -> None:
    # An agent window has no ProfilerStep markers: a step ends at each Optimizer.step, the
    # first begins at the window's first CPU event. The columns' shift to the origin, done in
    # place, once ran first, and the first step began 11,078 s before the trace.
    t0 = 5_311_078_399_481.627
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "ts": t0 + at,
            "dur": 100,
            "pid": 1,
            "tid": 1,
        }
        for at in (0, 30_000, 60_000)
    ] + [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "Optimizer.step#SGD.step",
            "ts": t0 + at,
            "dur": 900,
            "pid": 1,
            "tid": 1,
        }
        for at in (20_000, 50_000)
    ]
    trace = reader(_write(tmp_path, {"traceEvents": events}))  # type: ignore[operator]
    assert not trace.steps_from_profiler
    assert [s.ts for s in trace.steps] == pytest.approx([0.0, 20_900.0])
    assert [s.dur for s in trace.steps] == pytest.approx([20_900.0, 30_000.0])
