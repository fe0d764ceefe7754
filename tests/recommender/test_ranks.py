"""Rank directories: one rank at a time, side by side only where cores and memory allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfweb_recommender import ranks
from perfweb_recommender.analysis.summary import summarize
from perfweb_recommender.trace.loader import load_trace, trace_files
from tests.recommender.conftest import PEER, needs_peer_traces


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:  # no disk used: a hole of that size
        handle.truncate(size)
    return path


def test_it_runs_ranks_side_by_side_only_as_far_as_the_budget_and_cores_allow(
    tmp_path: Path,
) -> None:
    files = [_sparse(tmp_path / f"rank{i}.json", 500 * 2**20) for i in range(4)]
    one = ranks.analysis_peak_mb(500 * 2**20)
    assert ranks.parallel_ranks(files, one * 4, cores=8) == 4
    assert ranks.parallel_ranks(files, one * 2.5, cores=8) == 2
    assert ranks.parallel_ranks(files, one * 1.5, cores=8) == 1
    assert ranks.parallel_ranks(files, one * 4, cores=3) == 3
    assert ranks.parallel_ranks(files, one * 4, cores=1) == 1
    small = [_sparse(tmp_path / f"small{i}.json", 2**20) for i in range(4)]
    assert ranks.parallel_ranks(small, one * 4, cores=8) == 1  # not worth a process


@needs_peer_traces
def test_ranks_analysed_side_by_side_read_as_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PEER is not None
    files = trace_files(PEER / "hta" / "trace_filter")
    monkeypatch.setattr(ranks, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(ranks, "_cores", lambda: 2)
    assert ranks.parallel_ranks(files, None, cores=2) == 2
    side_by_side = ranks.summarize_files(files)
    one_by_one = [summarize(load_trace(f, fallback_rank=i)) for i, f in enumerate(files)]
    assert [s.as_json() for s in side_by_side] == [s.as_json() for s in one_by_one]
