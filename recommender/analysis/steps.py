"""Step segmentation (ProfilerStep#N) and each step's time breakdown.

Every instant of a step is given to the first category active then, in this order (the
PyTorch profiler's own step-time breakdown): GPU kernel, memcpy, memset, CUDA runtime,
DataLoader, CPU execution, other (nothing recorded).
"""

from __future__ import annotations

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


def _layers(trace: RankTrace) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cumulative unions: kernel, kernel+memcpy, ... , everything recorded."""
    gpu, host, cpu = trace.gpu, trace.host, trace.cpu
    dataloader = cpu.cpu_class == CPU_DATALOADER
    parts = [
        (gpu.ts[gpu.kind == KIND_KERNEL], gpu.end[gpu.kind == KIND_KERNEL]),
        (gpu.ts[gpu.kind == KIND_MEMCPY], gpu.end[gpu.kind == KIND_MEMCPY]),
        (gpu.ts[gpu.kind == KIND_MEMSET], gpu.end[gpu.kind == KIND_MEMSET]),
        (host.ts, host.ts + host.dur),
        (cpu.ts[dataloader], (cpu.ts + cpu.dur)[dataloader]),
        (cpu.ts[~dataloader], (cpu.ts + cpu.dur)[~dataloader]),
    ]
    layers = []
    acc_ts, acc_end = np.empty(0), np.empty(0)
    for ts, end in parts:
        acc_ts, acc_end = np.concatenate([acc_ts, ts]), np.concatenate([acc_end, end])
        layers.append(merge(acc_ts, acc_end))
        acc_ts, acc_end = layers[-1]
    return layers


def step_breakdown(trace: RankTrace) -> list[dict[str, float]]:
    """Per ProfilerStep: its duration and the µs of each category (they sum to the duration)."""
    if not trace.steps:
        return []
    layers = _layers(trace)
    rows = []
    for step in trace.steps:
        lo, hi = step.ts, step.ts + step.dur
        covered = [_sorted_clip_total(s, e, lo, hi) for s, e in layers]
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
