"""Interval arithmetic on numpy arrays: unions, overlaps and labelled sweeps."""

from __future__ import annotations

import numpy as np


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends).

    Intervals that touch (start == previous end) are merged, as HTA does.
    """
    if ts.size == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(ts, kind="stable")
    starts = ts[order]
    running_end = end[order]
    del order  # a large trace's columns are big: hold as few copies as possible at once
    np.maximum.accumulate(running_end, out=running_end)
    new_group = np.empty(starts.size, dtype=bool)
    new_group[0] = True
    np.greater(starts[1:], running_end[:-1], out=new_group[1:])
    group_first = np.flatnonzero(new_group)
    del new_group
    group_last = np.append(group_first[1:] - 1, starts.size - 1)
    return starts[group_first], running_end[group_last]


def total(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of disjoint intervals."""
    return float(np.sum(ends - starts)) if starts.size else 0.0


def union_length(ts: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of (possibly overlapping) intervals."""
    return total(*merge(ts, end))


def sweep_by_mask(layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Time spent in each combination of layers.

    `layers[i]` is a disjoint interval set (from `merge`) with bit `1 << i`. Returns an array
    of length 2**len(layers): entry m is the time during which exactly the layers of mask m
    are active (entry 0, no layer active between the first and last edge, is included).
    """
    times, deltas = [], []
    for bit, (starts, ends) in enumerate(layers):
        times += [starts, ends]
        deltas += [np.full(starts.size, 1 << bit), np.full(ends.size, -(1 << bit))]
    size = 1 << len(layers)
    all_times = np.concatenate(times) if times else np.empty(0)
    if all_times.size < 2:
        return np.zeros(size)
    all_deltas = np.concatenate(deltas)
    order = np.argsort(all_times, kind="stable")
    all_times, all_deltas = all_times[order], all_deltas[order]
    running = np.cumsum(all_deltas)[:-1]
    return np.bincount(running, weights=np.diff(all_times), minlength=size)[:size]


def overlap_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Time during which two disjoint interval sets are both active."""
    return float(sweep_by_mask([a, b])[3])


def clip_total(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """Length of disjoint intervals clipped to [lo, hi]."""
    if starts.size == 0 or hi <= lo:
        return 0.0
    clipped = np.clip(ends, lo, hi) - np.clip(starts, lo, hi)
    return float(np.sum(clipped))
