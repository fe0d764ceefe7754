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
names and threads): the tables need nesting per thread, the analyses do not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from perfweb_recommender.errors import InputError
from perfweb_recommender.trace.classify import is_tensor_core_kernel
from perfweb_recommender.trace.loader import read_bytes

TOP_ROWS = 200  # operators / kernels kept per table (by time); the diff reads these too
_OP_CATS = frozenset({"cpu_op", "Operator"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
_KERNEL_CATS = frozenset({"kernel", "Kernel"})
_DEVICE_CATS = _KERNEL_CATS | {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


class _Args(msgspec.Struct):
    correlation: Any = None


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: _Args | None = None


class _Document(msgspec.Struct):
    traceEvents: list[msgspec.Raw]  # noqa: N815 - the format's key


_DOCUMENT = msgspec.json.Decoder(_Document)
_EVENT = msgspec.json.Decoder(_Event)


@dataclass
class _Op:
    name: str
    ts: float
    end: float
    parent: int  # index of the enclosing op, -1 at the top
    child_us: float = 0.0


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _events(path: Path) -> list[_Event]:
    data = read_bytes(path)
    try:
        raw = _DOCUMENT.decode(data).traceEvents
        events = []
        for item in raw:
            event = _EVENT.decode(item)
            if event.ph == "X" and _number(event.ts) is not None and _number(event.dur) is not None:
                events.append(event)
    except msgspec.DecodeError as error:
        raise InputError(f"{path}: not a Kineto trace ({error})") from None
    return events


def _correlation(event: _Event) -> int | None:
    value = event.args.correlation if event.args is not None else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _nest(events: list[_Event]) -> tuple[list[_Op], dict[int, int]]:
    """Operators with their parents and child time, and launch correlation -> innermost op."""
    by_thread: dict[tuple[Any, Any], list[tuple[float, float, int, _Event]]] = defaultdict(list)
    for event in events:
        cat = event.cat
        if cat in _OP_CATS or (cat in _LAUNCH_CATS and _correlation(event) is not None):
            ts, dur = float(event.ts), max(0.0, float(event.dur))
            leaf = 1 if cat in _LAUNCH_CATS else 0  # at equal start, the op encloses the call
            by_thread[(event.pid, event.tid)].append((ts, -dur, leaf, event))
    ops: list[_Op] = []
    launched_by: dict[int, int] = {}
    for rows in by_thread.values():
        rows.sort(key=lambda row: (row[0], row[1], row[2]))
        stack: list[int] = []
        for ts, negative_dur, leaf, event in rows:
            while stack and ops[stack[-1]].end <= ts:
                stack.pop()
            parent = stack[-1] if stack else -1
            if leaf:
                if parent >= 0:
                    launched_by[_correlation(event)] = parent  # type: ignore[index]
                continue
            ops.append(_Op(name=str(event.name), ts=ts, end=ts - negative_dur, parent=parent))
            if parent >= 0:
                ops[parent].child_us += -negative_dur
            stack.append(len(ops) - 1)
    return ops, launched_by


def _device_times(
    events: list[_Event], ops: list[_Op], launched_by: dict[int, int]
) -> tuple[dict[int, float], dict[int, float]]:
    """GPU µs per op: launched by the op itself (self) and by it or an op inside it (total)."""
    self_us: dict[int, float] = defaultdict(float)
    total_us: dict[int, float] = defaultdict(float)
    for event in events:
        if event.cat not in _DEVICE_CATS:
            continue
        op = launched_by.get(_correlation(event) or -1)
        if op is None:
            continue
        dur = max(0.0, float(event.dur))
        self_us[op] += dur
        seen: set[str] = set()
        while op >= 0:  # an op name nested in itself (recursion) counts once per launch
            if ops[op].name not in seen:
                seen.add(ops[op].name)
                total_us[op] += dur
            op = ops[op].parent
    return self_us, total_us


def operator_table(events: list[_Event]) -> list[dict[str, Any]]:
    """One row per operator name, longest host self time first."""
    ops, launched_by = _nest(events)
    device_self, device_total = _device_times(events, ops, launched_by)
    rows: dict[str, dict[str, Any]] = {}
    for index, op in enumerate(ops):
        row = rows.setdefault(
            op.name,
            {"name": op.name, "calls": 0, "host_total_us": 0.0, "host_self_us": 0.0,
             "device_total_us": 0.0, "device_self_us": 0.0},
        )  # fmt: skip
        duration = op.end - op.ts
        row["calls"] += 1
        row["host_self_us"] += max(0.0, duration - op.child_us)
        row["device_self_us"] += device_self.get(index, 0.0)
        row["device_total_us"] += device_total.get(index, 0.0)
        if not _nested_in_same_name(ops, index):  # recursion: count the outermost call's time
            row["host_total_us"] += duration
    ordered = sorted(rows.values(), key=lambda r: (-r["host_self_us"], r["name"]))
    return [_rounded(row) for row in ordered]


def _nested_in_same_name(ops: list[_Op], index: int) -> bool:
    name, parent = ops[index].name, ops[index].parent
    while parent >= 0:
        if ops[parent].name == name:
            return True
        parent = ops[parent].parent
    return False


def kernel_table(events: list[_Event]) -> list[dict[str, Any]]:
    """One row per kernel name, longest total first."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in events:
        if event.cat in _KERNEL_CATS:
            entry = totals[str(event.name)]
            entry[0] += 1
            entry[1] += max(0.0, float(event.dur))
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


def _step_count(events: list[_Event]) -> int:
    """ProfilerStep#N annotations; without them (the agent's own windows on some versions),
    one step per Optimizer.step annotation, as the trace loader segments them."""
    names = {str(e.name) for e in events if str(e.name).startswith("ProfilerStep#")}
    if names:
        return len(names)
    return sum(1 for e in events if str(e.name).startswith("Optimizer.step#"))


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def trace_tables(path: str | Path, *, top: int = TOP_ROWS) -> dict[str, Any]:
    """The operator and kernel tables of one trace file (JSON-ready).

    `{"steps": N, "operators": [...], "kernels": [...], "operators_total": n, "kernels_total": n,
    "kernel_us": total kernel µs, "tensor_core_share": share of kernel time on tensor cores}`;
    the tables keep the `top` longest rows (operators by host self time, kernels by total).
    """
    events = _events(Path(path))
    operators = operator_table(events)
    kernels = kernel_table(events)
    kernel_us = sum(row["total_us"] for row in kernels)
    tensor_us = sum(row["total_us"] for row in kernels if row["tensor_cores"])
    by_device = sorted(operators, key=lambda r: (-r["device_self_us"], r["name"]))[:top]
    kept = {row["name"]: row for row in [*operators[:top], *by_device]}
    return {
        "steps": _step_count(events),
        "operators": sorted(kept.values(), key=lambda r: (-r["host_self_us"], r["name"])),
        "kernels": kernels[:top],
        "operators_total": len(operators),
        "kernels_total": len(kernels),
        "kernel_us": round(kernel_us, 3),
        "tensor_core_share": round(tensor_us / kernel_us, 6) if kernel_us else None,
    }
