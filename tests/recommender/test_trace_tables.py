"""The operator and kernel tables and the trace diff, against numbers counted independently
(plain json, one pass, no nesting logic) on HTA's real trace_diff control/test pair."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from perfweb_recommender.analysis.trace_diff import trace_diff
from perfweb_recommender.analysis.trace_tables import trace_tables
from perfweb_recommender.trace import stream
from tests.recommender.conftest import peer_traces_dir

PEER = peer_traces_dir()
pytestmark = pytest.mark.skipif(PEER is None, reason="../shared/peer-traces is not here")


def _path(name: str) -> Path:
    assert PEER is not None
    return PEER / "hta" / "trace_diff" / name / f"{name}.json.gz"


@cache
def _tables(name: str) -> dict[str, Any]:
    return trace_tables(_path(name), top=10_000)


@cache
def _events(name: str) -> list[dict[str, Any]]:
    return [e for e in json.load(gzip.open(_path(name)))["traceEvents"] if e.get("ph") == "X"]


def _top_level_us(events: list[dict[str, Any]]) -> float:
    """Sum of the durations of operators no other operator on their thread encloses."""
    by_thread: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], -e["dur"]))
    total = 0.0
    for spans in by_thread.values():
        reach = float("-inf")
        for ts, negative in sorted(spans):
            if ts >= reach:
                total += -negative
                reach = ts - negative
            else:
                reach = max(reach, ts - negative)
    return total


@pytest.mark.parametrize("name", ["control", "test"])
def test_it_counts_every_kernel_as_the_trace_holds_it(name: str) -> None:
    counts: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for e in _events(name):
        if e.get("cat") == "kernel":
            counts[e["name"]] += 1
            totals[e["name"]] += e["dur"]
    rows = {row["name"]: row for row in _tables(name)["kernels"]}
    assert len(rows) == len(counts) == _tables(name)["kernels_total"]
    for kernel, count in counts.items():
        assert rows[kernel]["count"] == count
        assert rows[kernel]["total_us"] == pytest.approx(totals[kernel])
        assert rows[kernel]["mean_us"] == pytest.approx(totals[kernel] / count, abs=1e-3)
    assert _tables(name)["kernel_us"] == pytest.approx(sum(totals.values()))


@pytest.mark.parametrize("name", ["control", "test"])
def test_it_splits_operator_time_into_self_time_that_adds_up(name: str) -> None:
    ops = _tables(name)["operators"]
    total_by_name: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for e in _events(name):
        if e.get("cat") == "cpu_op":
            total_by_name[e["name"]] += e["dur"]
            calls[e["name"]] += 1
    rows = {row["name"]: row for row in ops}
    assert {n: r["calls"] for n, r in rows.items()} == dict(calls)
    # Self times of all operators add up to the time of the outermost ones, exactly.
    assert sum(r["host_self_us"] for r in ops) == pytest.approx(_top_level_us(_events(name)))
    for op_name in ("aten::mm", "aten::_local_scalar_dense", "aten::copy_"):  # never nested
        assert rows[op_name]["host_total_us"] == pytest.approx(total_by_name[op_name])
    assert all(r["host_self_us"] <= r["host_total_us"] + 1e-6 for r in ops)


@pytest.mark.parametrize("name", ["control", "test"])
def test_it_gives_operators_the_gpu_time_of_what_they_launched(name: str) -> None:
    events = _events(name)
    device = {"kernel", "gpu_memcpy", "gpu_memset"}
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    launched = {e["args"]["correlation"] for e in runtime if "correlation" in e.get("args", {})}
    on_gpu = [e for e in events if e.get("cat") in device]
    gpu_us = sum(e["dur"] for e in on_gpu if e.get("args", {}).get("correlation") in launched)
    self_us = sum(r["device_self_us"] for r in _tables(name)["operators"])
    # Every launch made inside an operator gives its GPU time to exactly one operator; the
    # few made outside any (profiler or NCCL bookkeeping) to none.
    assert 0.9 * gpu_us <= self_us <= gpu_us + 1e-3


def test_it_names_what_changed_between_control_and_test() -> None:
    diff = trace_diff(_tables("control"), _tables("test"), top=10_000)
    ops = {row["name"]: row for row in diff["operators"]}
    # The test run is compiled (torch.compile): its CompiledFunction ops are new ...
    assert ops["CompiledFunction"]["change"] == "added"
    assert ops["CompiledFunctionBackward"]["change"] == "added"
    # ... and it syncs on .item() much longer per step (36.9 ms over 6 steps vs 207.4 ms).
    item = ops["aten::_local_scalar_dense"]
    assert item["change"] == "slower"
    assert item["a_us"] == pytest.approx(36934 / 6, abs=0.01)
    assert item["b_us"] == pytest.approx(207408 / 6, abs=0.01)
    largest = diff["operators"][0]
    assert largest["name"] == "aten::_local_scalar_dense"
    assert diff["counts"]["operators"]["added"] == 3
    assert all(r["share"] <= 1 for r in diff["operators"])


def _ns_trace() -> Path:
    assert PEER is not None
    return next((PEER / "hta" / "ns_resolution_trace").glob("*.json.gz"))


def test_nanosecond_timestamps_nest_exactly() -> None:
    # Timestamps of ~3.7e12 µs with fractional nanoseconds: read as whole floats they
    # round, and ops that end as the next begins looked nested in it (aten::empty, a leaf,
    # lost 1.8 µs of its 12,265 µs). Streamed, the shared leading digits are cut first.
    with gzip.open(_ns_trace()) as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    rows = {row["name"]: row for row in trace_tables(_ns_trace(), top=10_000)["operators"]}
    for leaf in ("aten::empty", "aten::as_strided"):
        spent = [e["dur"] for e in ops if e["name"] == leaf]
        assert rows[leaf]["calls"] == len(spent)
        assert rows[leaf]["host_self_us"] == pytest.approx(sum(spent), abs=1e-3)
        assert rows[leaf]["host_total_us"] == pytest.approx(sum(spent), abs=1e-3)


def test_the_tables_do_not_depend_on_where_the_stream_cuts_its_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole = trace_tables(_path("control"), top=10_000)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 8192)  # hundreds of batches, cut mid-step
    assert trace_tables(_path("control"), top=10_000) == whole


def test_malformed_events_are_skipped_and_the_rest_still_count(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "ts": 2, "dur": 3, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "odd", "ts": "soon", "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "cat": ["not", "a", "category"], "name": "x", "ts": 1, "dur": 1},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "launch",
            "ts": 3,
            "dur": 1,
            "pid": 1,
            "tid": 1,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "ts": 20,
            "dur": 4,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 7},
        },
        {"ph": "X", "cat": "cpu_op", "name": 42, "ts": 30, "dur": 2, "pid": "p", "tid": [1]},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tables = trace_tables(path)
    rows = {row["name"]: row for row in tables["operators"]}
    assert set(rows) == {"outer", "inner", "42"}
    assert rows["outer"]["host_self_us"] == 7 and rows["outer"]["host_total_us"] == 10
    assert rows["inner"]["device_self_us"] == 4 and rows["outer"]["device_total_us"] == 4
    assert rows["outer"]["device_self_us"] == 0
    assert tables["kernels"][0]["name"] == "k" and tables["kernel_us"] == 4
