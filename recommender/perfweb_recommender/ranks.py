"""A directory of rank traces, analysed one rank at a time, in parallel where it fits.

Each rank is loaded, summarised and dropped before the next (a `TraceSummary` is small), so
memory is one rank's analysis, not the directory's. Large ranks are analysed by a few worker
processes at once when the cores and the memory allow: as many as the cores, and only as
many as fit in the memory budget together (each one's peak estimated from its file's size,
`budget.analysis_peak_mb`), each then under its share of the budget. Without a budget, half
the memory the system says is available is the limit for running ranks side by side.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from perfweb_recommender.analysis.summary import TraceSummary, summarize
from perfweb_recommender.trace.budget import analysis_peak_mb, memory_budget_mb

__all__ = ["analysis_peak_mb", "parallel_ranks", "summarize_files"]
from perfweb_recommender.trace.loader import load_trace
from perfweb_recommender.trace.stream import uncompressed_size

PARALLEL_MIN_BYTES = 64 * 2**20  # smaller ranks: starting a process costs more than it saves


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _available_mb() -> float:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def parallel_ranks(files: list[Path], budget_mb: float | None, *, cores: int) -> int:
    """How many ranks to analyse at once: 1 unless several are large, cores allow, and
    that many of the largest fit in the budget together."""
    sizes = sorted((uncompressed_size(f) for f in files), reverse=True)
    if len(sizes) < 2 or sizes[1] < PARALLEL_MIN_BYTES or cores < 2:
        return 1
    limit = budget_mb if budget_mb is not None else _available_mb() / 2
    workers = min(cores, len(files))
    while workers > 1 and sum(analysis_peak_mb(s) for s in sizes[:workers]) > limit:
        workers -= 1
    return workers


def _summarize_one(path: Path, fallback_rank: int, budget_mb: float | None) -> TraceSummary:
    return summarize(load_trace(path, fallback_rank=fallback_rank, memory_budget_mb=budget_mb))


def summarize_files(files: list[Path], *, budget_mb: float | None = None) -> list[TraceSummary]:
    """Each file's summary (rank from its content, else its position), in the files' order."""
    budget = memory_budget_mb(budget_mb)
    workers = parallel_ranks(files, budget, cores=_cores())
    if workers == 1:
        return [_summarize_one(f, i, budget) for i, f in enumerate(files)]
    share = budget / workers if budget is not None else None
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(_summarize_one, files, range(len(files)), [share] * len(files)))
