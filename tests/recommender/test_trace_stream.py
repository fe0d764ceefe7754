"""The streaming trace reader: the same `RankTrace` as reading the whole file at once."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfweb_recommender.analysis.summary import summarize
from perfweb_recommender.api import analyze_path
from perfweb_recommender.errors import InputError
from perfweb_recommender.trace import budget, stream
from perfweb_recommender.trace.loader import load_trace, load_trace_in_memory
from perfweb_recommender.trace.model import RankTrace
from tests.recommender.conftest import PEER, needs_peer_traces

PEER_FILES = (
    sorted(
        str(p.relative_to(PEER))
        for d in ("hta", "tracelens")
        for p in (PEER / d).rglob("*.json.gz")
    )
    if PEER is not None
    else []
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")  # type: ignore[union-attr]
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def _differences(streamed: RankTrace, whole: RankTrace) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(RankTrace)
        if not _same(getattr(streamed, f.name), getattr(whole, f.name))
    ]


@needs_peer_traces
@pytest.mark.parametrize("trace", PEER_FILES)
def test_it_reads_every_peer_trace_exactly_as_the_whole_file_reader(
    trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert PEER is not None
    monkeypatch.setattr(stream, "CHUNK_BYTES", 256 * 1024)  # many batches, many cuts
    assert _differences(load_trace(PEER / trace), load_trace_in_memory(PEER / trace)) == []


def _tricky_document() -> dict:
    """Events whose text holds what a batch cut looks for: `}, {` and `]` inside names,
    nested args; the rank after the array, and a key after it holding brackets."""
    events = []
    for i in range(200):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k<{lambda()#1}, {x}>] [" + "z" * (i % 13),
                "ts": 1000 + 10 * i,
                "dur": 5,
                "args": {
                    "stream": 7,
                    "correlation": i,
                    "nested": {"a": [{"b": 1}, {"c": [2, {"d": "}, {"}]}]},
                },
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": 999 + 10 * i,
                "dur": 1,
                "args": {"correlation": i},
            }
        )
        events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "ts": 1000 + 10 * i, "id": i})
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "distributedInfo": {"rank": 3, "world_size": 8},
        "traceName": "[a], {b}",
        "extra": [[1, 2], {"x": "]"}],
    }


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 20])
def test_it_cuts_batches_only_between_whole_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    path = tmp_path / "rank.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_tricky_document(), indent=1).encode()))
    whole = load_trace_in_memory(path)
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    streamed = load_trace(path)
    assert _differences(streamed, whole) == []
    assert (streamed.rank, streamed.world_size, len(streamed.gpu)) == (3, 8, 200)


def test_it_refuses_a_trace_cut_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(_tricky_document()).encode()
    path = tmp_path / "short.json"
    path.write_bytes(text[: len(text) // 2])
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    with pytest.raises(InputError, match="not JSON"):
        load_trace(path)


def _steps_trace(steps: int) -> dict:
    """A trace of `steps` ProfilerSteps, each a CPU op launching a kernel, 1 ms apart."""
    events: list[dict] = []
    for n in range(steps):
        t = 1000 * n
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t, "dur": 900}
        )
        for i in range(20):
            c = n * 100 + i
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t + 40 * i, "dur": 30},
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": t + 40 * i + 5,
                    "dur": 10,
                    "args": {"correlation": c},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "volta_sgemm_128x64_nn",
                    "ts": t + 40 * i + 20,
                    "dur": 25,
                    "args": {"stream": 7, "correlation": c},
                },
            ]
    # Kineto writes the GPU's events after the CPU's: a cut must not keep only the CPU side
    events.sort(key=lambda e: e["cat"] == "kernel")
    return {"traceEvents": events}


def test_it_analyses_a_trace_over_the_memory_budget_in_part_and_says_what_it_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_steps_trace(40)))
    whole = summarize(load_trace(path))
    columns = sum(
        a.nbytes
        for t in [load_trace(path)]
        for part in (t.gpu, t.host, t.cpu)
        for a in vars(part).values()
    )
    monkeypatch.setattr(budget, "BASE_MB", 0.0)
    monkeypatch.setattr(budget, "MIN_COLUMNS_MB", 0.0)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setenv(budget.ENV_VAR, str(columns / 3 / 2**20 * budget.ANALYSIS_FACTOR))
    report = analyze_path(path)
    part = report.traces[0]
    assert part.degraded is not None and report.notes == [f"rank 0: {part.degraded}"]
    assert "trace over the memory budget" in part.degraded and "steps: " in part.degraded
    kept = len(part.steps)
    assert 0 < kept < 20 and f"steps: {kept} of 40" in part.degraded
    assert part.steps == whole.steps[:kept]  # the steps it kept, analysed in full
    assert whole.degraded is None


def test_it_reads_the_budget_from_the_environment_or_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(budget.ENV_VAR, raising=False)
    assert budget.memory_budget_mb() is None
    monkeypatch.setenv(budget.ENV_VAR, "512")
    assert budget.memory_budget_mb() == 512.0 and budget.memory_budget_mb(2048) == 2048.0
    monkeypatch.setenv(budget.ENV_VAR, "lots")
    assert budget.memory_budget_mb() is None
