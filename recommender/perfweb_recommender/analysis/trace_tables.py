"""The tables people read in the TensorBoard profiler plugin, from one Kineto trace.

- Operators: every `cpu_op` by name — calls, host total and self time (self = the op's time
  minus that of the ops nested directly in it on the same thread), and device total and self
  time: the GPU time (kernels, memcpy, memset) of what the op launched itself (self) or
  through any op nested in it (total), joined through the launch's `correlation` id.
- Kernels: every GPU kernel by name — count, total, mean, and whether its name says tensor
  cores (`perfweb_recommender.trace.classify`).
- Per profiler step: the window's step count, so two windows of different length compare per
  step (`trace_diff.py`).

Times are µs. The file is read on its own (not through `RankTrace`, which drops operator
names and threads): the tables need nesting per thread, the analyses do not. It is streamed
(`trace_columns`): what stays in memory is ~25 bytes per operator or launch and 16 per GPU
event, not the file (a 1 GB trace: 212 MiB peak for the whole process, of which 30 MiB is
the interpreter and numpy), and the nesting is one walk over sorted columns.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfweb_recommender.analysis.trace_columns import LAUNCH, Columns, read_columns
from perfweb_recommender.trace.budget import BASE_MB
from perfweb_recommender.trace.classify import is_tensor_core_kernel
from perfweb_recommender.trace.stream import uncompressed_size

TOP_ROWS = 200  # operators / kernels kept per table (by time); the diff reads these too
TABLES_BYTES_PER_BYTE = 0.2  # peak memory of `trace_tables` per byte of JSON (0.19 measured)
_WALK_PIECE = 1 << 16  # spans turned into Python values at a time by the nesting walk


@dataclass
class _Nesting:
    """Operators (in start order per thread) with their enclosing operator, depth and
    whether an operator of the same name encloses them; launches with their innermost op."""

    name: np.ndarray
    dur: np.ndarray
    parent: np.ndarray  # -1 at the top
    depth: np.ndarray
    outermost: np.ndarray  # bool: no operator of the same name encloses it (recursion)
    launch_corr: np.ndarray
    launch_op: np.ndarray


def _nest(columns: Columns) -> _Nesting:
    """Each thread's spans sorted by start, longest first, an op before a launch at the
    same start (the op encloses the call), walked once with a stack of open operators."""
    thread = np.frombuffer(columns.thread, dtype=np.int32)
    ts = np.frombuffer(columns.ts, dtype=np.float64)
    dur = np.frombuffer(columns.dur, dtype=np.float64)
    kind = np.frombuffer(columns.kind, dtype=np.int8)
    name_or_launch = np.frombuffer(columns.name, dtype=np.int32)
    order = np.lexsort((kind, -dur, ts, thread))
    names, durs, parents, depths, outer = array("i"), array("d"), array("i"), array("i"), array("b")
    launched, launch_op = array("q"), array("i")  # a launch inside an op: its place, the op
    stack: list[int] = []
    ends: list[float] = []
    open_names: list[int] = []
    open_count: dict[int, int] = defaultdict(int)
    current = -1
    for piece in range(0, len(order), _WALK_PIECE):
        rows = order[piece : piece + _WALK_PIECE]
        for th, start, length, k, name in zip(
            thread[rows].tolist(),
            ts[rows].tolist(),
            dur[rows].tolist(),
            kind[rows].tolist(),
            name_or_launch[rows].tolist(),
            strict=True,
        ):
            if th != current:  # a new thread: nothing is open on it
                current = th
                stack, ends, open_names, open_count = [], [], [], defaultdict(int)
            while ends and ends[-1] <= start:
                ends.pop()
                stack.pop()
                open_count[open_names.pop()] -= 1
            parent = stack[-1] if stack else -1
            if k == LAUNCH:
                if parent >= 0:
                    launched.append(name)
                    launch_op.append(parent)
                continue
            outer.append(open_count[name] == 0)
            stack.append(len(names))
            names.append(name)
            durs.append(length)
            parents.append(parent)
            depths.append(len(ends))
            ends.append(start + length)
            open_names.append(name)
            open_count[name] += 1
    return _Nesting(
        name=np.frombuffer(names, dtype=np.int32),
        dur=np.frombuffer(durs, dtype=np.float64),
        parent=np.frombuffer(parents, dtype=np.int32),
        depth=np.frombuffer(depths, dtype=np.int32),
        outermost=np.frombuffer(outer, dtype=np.int8).astype(bool),
        launch_corr=np.frombuffer(columns.launch_corr, dtype=np.int64)[
            np.frombuffer(launched, dtype=np.int64)
        ],
        launch_op=np.frombuffer(launch_op, dtype=np.int32),
    )


def _device_self(columns: Columns, nesting: _Nesting) -> np.ndarray:
    """GPU µs each operator launched itself, joined through the correlation id (a launch
    seen twice keeps its last launcher)."""
    count = len(nesting.name)
    if not len(nesting.launch_corr) or not len(columns.device_corr):
        return np.zeros(count)
    reverse = nesting.launch_corr[::-1]
    keys, first = np.unique(reverse, return_index=True)
    ops = nesting.launch_op[::-1][first]
    corr = np.frombuffer(columns.device_corr, dtype=np.int64)
    spent = np.frombuffer(columns.device_dur, dtype=np.float64)
    where = np.minimum(np.searchsorted(keys, corr), len(keys) - 1)
    hit = keys[where] == corr
    return np.bincount(ops[where[hit]], weights=spent[hit], minlength=count)


def _subtree_sums(values: np.ndarray, nesting: _Nesting) -> np.ndarray:
    """values summed over each operator and every operator nested in it, deepest first."""
    total = values.astype(np.float64, copy=True)
    for depth in range(int(nesting.depth.max(initial=0)), 0, -1):
        level = nesting.depth == depth
        total += np.bincount(nesting.parent[level], weights=total[level], minlength=len(total))
    return total


def operator_table(columns: Columns) -> list[dict[str, Any]]:
    """One row per operator name, longest host self time first. Host self time is an op's
    time minus that of the ops directly in it; a name nested in itself (recursion) counts
    the outermost call's total, host and device, once."""
    nesting = _nest(columns)
    count, kinds = len(nesting.name), len(columns.names)
    nested = nesting.parent >= 0
    child = np.bincount(nesting.parent[nested], weights=nesting.dur[nested], minlength=count)
    host_self = np.maximum(0.0, nesting.dur - child)
    device_self = _device_self(columns, nesting)
    device_total = _subtree_sums(device_self, nesting)
    name, outer = nesting.name, nesting.outermost

    def by_name(weights: np.ndarray, keep: np.ndarray | None = None) -> list[float]:
        if keep is None:
            return np.bincount(name, weights=weights, minlength=kinds).tolist()
        return np.bincount(name[keep], weights=weights[keep], minlength=kinds).tolist()

    calls = np.bincount(name, minlength=kinds).tolist()
    host_self_by, host_total_by = by_name(host_self), by_name(nesting.dur, outer)
    device_self_by, device_total_by = by_name(device_self), by_name(device_total, outer)
    rows = [
        {
            "name": op,
            "calls": calls[i],
            "host_total_us": round(host_total_by[i], 3),
            "host_self_us": round(host_self_by[i], 3),
            "device_total_us": round(device_total_by[i], 3),
            "device_self_us": round(device_self_by[i], 3),
        }
        for op, i in columns.names.items()
    ]
    return sorted(rows, key=lambda r: (-r["host_self_us"], r["name"]))


def kernel_table(columns: Columns) -> list[dict[str, Any]]:
    """One row per kernel name, longest total first."""
    totals = columns.kernels
    all_us = sum(total for _, total in totals.values())
    rows = [
        {
            "name": name,
            "count": int(count),
            "total_us": round(total, 3),
            "mean_us": round(total / count, 3),
            "share": round(total / all_us, 6) if all_us else 0.0,
            "tensor_cores": is_tensor_core_kernel(name),
        }
        for name, (count, total) in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r["total_us"], r["name"]))


def _step_count(columns: Columns) -> int:
    """ProfilerStep#N annotations; without them (the agent's own windows on some versions),
    one step per Optimizer.step annotation, as the trace loader segments them."""
    return len(columns.step_names) or columns.optimizer_steps


def tables_fit(path: str | Path, budget_mb: float | None) -> bool:
    """Whether building the tables of this trace stays inside a memory budget (MB; None:
    no limit): their columns and the nesting's arrays take about TABLES_BYTES_PER_BYTE
    times the uncompressed JSON."""
    if budget_mb is None:
        return True
    size = uncompressed_size(Path(path))
    return size * TABLES_BYTES_PER_BYTE <= (budget_mb - BASE_MB) * 2**20


def trace_tables(path: str | Path, *, top: int = TOP_ROWS) -> dict[str, Any]:
    """The operator and kernel tables of one trace file (JSON-ready).

    `{"steps": N, "operators": [...], "kernels": [...], "operators_total": n, "kernels_total": n,
    "kernel_us": total kernel µs, "tensor_core_share": share of kernel time on tensor cores}`;
    the tables keep the `top` longest rows (operators by host self time, kernels by total).
    """
    columns = read_columns(Path(path))
    operators = operator_table(columns)
    kernels = kernel_table(columns)
    kernel_us = sum(row["total_us"] for row in kernels)
    tensor_us = sum(row["total_us"] for row in kernels if row["tensor_cores"])
    by_device = sorted(operators, key=lambda r: (-r["device_self_us"], r["name"]))[:top]
    kept = {row["name"]: row for row in [*operators[:top], *by_device]}
    return {
        "steps": _step_count(columns),
        "operators": sorted(kept.values(), key=lambda r: (-r["host_self_us"], r["name"])),
        "kernels": kernels[:top],
        "operators_total": len(operators),
        "kernels_total": len(kernels),
        "kernel_us": round(kernel_us, 3),
        "tensor_core_share": round(tensor_us / kernel_us, 6) if kernel_us else None,
    }
