"""Step segmentation (ProfilerStep#N) and each step's time breakdown.

Every instant of a step is given to the first category active then, in this order (the
PyTorch profiler's own step-time breakdown): GPU kernel, memcpy, memset, CUDA runtime,
DataLoader, CPU execution, other (nothing recorded).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from perfweb_recommender.analysis.intervals import merge
from perfweb_recommender.trace.model import (
    CPU_DATALOADER,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    RankTrace,
)

CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec")


def _sorted_clip_total(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Length of sorted disjoint intervals inside [lo, hi] (binary search, then a slice)."""
    if starts.size == 0 or hi <= lo:
        return 0.0
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    if first >= last:
        return 0.0
    inner = float(np.sum(ends[first:last] - starts[first:last]))
    inner -= max(0.0, lo - float(starts[first]))
    inner -= max(0.0, float(ends[last - 1]) - hi)
    return inner


def _parts(trace: RankTrace) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each category's intervals, one at a time (a large trace's columns are big)."""
    gpu, host, cpu = trace.gpu, trace.host, trace.cpu
    for kind in (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET):
        mask = gpu.kind == kind
        yield gpu.ts[mask], gpu.ts[mask] + gpu.dur[mask]
    yield host.ts, host.ts + host.dur
    dataloader = cpu.cpu_class == CPU_DATALOADER
    yield cpu.ts[dataloader], cpu.ts[dataloader] + cpu.dur[dataloader]
    dataloader = ~dataloader
    yield cpu.ts[dataloader], cpu.ts[dataloader] + cpu.dur[dataloader]


def _covered(trace: RankTrace) -> list[list[float]]:
    """Per step, the µs covered by each cumulative union (kernel, kernel+memcpy, ..., all
    recorded). One union is held at a time: a large trace's unions are big."""
    spans = [(step.ts, step.ts + step.dur) for step in trace.steps]
    covered: list[list[float]] = [[] for _ in spans]
    acc_ts, acc_end = np.empty(0), np.empty(0)
    for part in _parts(trace):
        ts, end = merge(*part)  # the same union as merging it into acc whole, in less memory
        del part
        acc_ts, acc_end = merge(np.concatenate([acc_ts, ts]), np.concatenate([acc_end, end]))
        for row, (lo, hi) in zip(covered, spans, strict=True):
            row.append(_sorted_clip_total(acc_ts, acc_end, lo, hi))
    return covered


def step_breakdown(trace: RankTrace) -> list[dict[str, float]]:
    """Per ProfilerStep: its duration and the µs of each category (they sum to the duration)."""
    if not trace.steps:
        return []
    rows = []
    for step, covered in zip(trace.steps, _covered(trace), strict=True):
        row: dict[str, float] = {"step": step.number, "duration_us": round(step.dur, 3)}
        previous = 0.0
        for name, cumulative in zip(CATEGORIES, covered, strict=True):
            row[f"{name}_us"] = round(max(0.0, cumulative - previous), 3)
            previous = max(previous, cumulative)
        row["other_us"] = round(max(0.0, step.dur - previous), 3)
        rows.append(row)
    return rows


def steady_steps(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """Steps without the first one when there are three or more (warm-up is not typical)."""
    return rows[1:] if len(rows) >= 3 else rows


def category_shares(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each category's share of total step time over the given steps (fractions)."""
    total_time = sum(r["duration_us"] for r in rows)
    if total_time <= 0:
        return {}
    return {
        name: sum(r[f"{name}_us"] for r in rows) / total_time for name in (*CATEGORIES, "other")
    }
