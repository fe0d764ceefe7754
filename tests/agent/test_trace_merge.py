"""Merging a window's segments: one trace, timestamps moved, metadata once, bounded."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfweb_agent.runtime.trace_merge import (
    Segment,
    TraceTooLarge,
    merge_in_helper,
    merge_segments,
    trace_events,
)

BASE = 1790857026000000000


def _segment(tmp_path: Path, name: str, events: list[dict[str, Any]], base: int = BASE) -> str:
    meta = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "ts": events[0]["ts"]},
    ]
    end = [{"ph": "i", "s": "g", "name": "Record Window End", "ts": events[-1]["ts"] + 1}]
    # Kineto's own layout: header keys before the events, traceName after, odd whitespace
    text = (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n\n    "trace_id": "X",\n'
        f'  "baseTimeNanoseconds": {base},\n  "traceEvents": [\n\n  '
        + ",\n  ".join(json.dumps(e, indent=2) for e in meta + events + end)
        + f'\n  ],"traceName": "{name}" }}'
    )
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    return str(path)


def _op(name: str, ts: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 7,
        "tid": 7,
        "ts": ts,
        "dur": 2.0,
        "args": {"External id": 1},
    }


def _read(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return document


def test_it_reads_events_one_at_a_time_and_the_header_around_them(tmp_path: Path) -> None:
    text = Path(_segment(tmp_path, "a", [_op("aten::add", 10.5)])).read_text()
    header: dict[str, Any] = {}
    events = trace_events(text, header)
    first = next(events)
    assert first["name"] == "process_name" and header["baseTimeNanoseconds"] == BASE
    assert "traceName" not in header
    assert [e["name"] for e in events] == [
        "Iteration Start: PyTorch Profiler",
        "aten::add",
        "Record Window End",
    ]
    assert header["traceName"] == "a"


def test_it_merges_segments_moving_later_ones_earlier(tmp_path: Path) -> None:
    first = _segment(tmp_path, "a", [_op("aten::add", 100.0), _op("aten::mul", 110.0)])
    second = _segment(tmp_path, "b", [_op("aten::sub", 5120.25)])
    third = _segment(tmp_path, "c", [_op("aten::div", 9000.0)], base=BASE + 1_000_000)
    target = tmp_path / "out.json.gz"
    written = merge_segments(
        [Segment(first, 0.0), Segment(second, 5000.0), Segment(third, 8000.0)],
        str(target),
        max_json_bytes=10**6,
        name="rank0-step3-8",
    )
    trace = _read(target)
    assert written == len(gzip.decompress(target.read_bytes()))
    assert trace["traceName"] == "rank0-step3-8" and trace["schemaVersion"] == 1
    assert trace["baseTimeNanoseconds"] == BASE
    assert trace["perfweb"]["segments"] == 3
    assert trace["perfweb"]["moved_earlier_us"] == [0.0, 5000.0, 8000.0]
    ops = {e["name"]: e["ts"] for e in trace["traceEvents"] if e["ph"] == "X"}
    # the third segment's base is 1 ms later: its timestamps are 1,000 µs later on ours
    assert ops == {"aten::add": 100.0, "aten::mul": 110.0, "aten::sub": 120.25, "aten::div": 2000.0}
    names = [e["name"] for e in trace["traceEvents"] if e["ph"] in ("M", "i")]
    assert names == ["process_name", "Iteration Start: PyTorch Profiler", "Record Window End"]


def test_a_merge_past_its_size_raises_and_says_so(tmp_path: Path) -> None:
    events = [_op("aten::add", float(i)) for i in range(2000)]
    big = _segment(tmp_path, "a", events)
    with pytest.raises(TraceTooLarge):
        merge_segments(
            [Segment(big, 0.0)], str(tmp_path / "out.json.gz"), max_json_bytes=50_000, name="x"
        )


def test_the_helper_process_merges_without_starting_an_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERF_AGENT_LAUNCHED", "1")  # as under `perf-agent attach`
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (tmp_path / "sitecustomize.py").write_text("raise SystemExit('site ran')\n")
    first = _segment(tmp_path, "a", [_op("aten::add", 100.0)])
    second = _segment(tmp_path, "b", [_op("aten::sub", 700.0)])
    target = tmp_path / "out.json.gz"
    written = merge_in_helper(
        [Segment(first, 0.0), Segment(second, 500.0)],
        str(target),
        max_json_bytes=10**6,
        name="w",
    )
    trace = _read(target)
    assert written > 0 and trace["traceName"] == "w"
    assert [e["ts"] for e in trace["traceEvents"] if e["ph"] == "X"] == [100.0, 200.0]
    with pytest.raises(TraceTooLarge):
        merge_in_helper([Segment(first, 0.0)], str(target), max_json_bytes=10, name="w")


def test_the_helper_reports_a_segment_that_is_not_a_trace(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("[1, 2")
    with pytest.raises(RuntimeError, match="trace merge failed"):
        merge_in_helper(
            [Segment(str(broken), 0.0)], str(tmp_path / "o.json.gz"), max_json_bytes=10**6, name="w"
        )


def test_the_helper_runs_behind_the_job_s_own_threads(tmp_path: Path) -> None:
    from perfweb_agent.runtime import trace_merge

    segment = _segment(tmp_path, "a", [_op("aten::add", 100.0)])
    command = [sys.executable, "-I", "-S", trace_merge.__file__, "--out", str(tmp_path / "o.gz")]
    command += ["--max-json-bytes", "1000000", "--name", "w", "--segment", f"0.0:{segment}"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    expected = min(os.nice(0) + trace_merge.HELPER_NICENESS, 19)
    assert json.loads(done.stdout)["niceness"] == expected
