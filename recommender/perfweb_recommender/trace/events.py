"""Walk Kineto events once and keep the columns the analyses need (`EventSink`), within the
memory budget; trace/build.py makes the columns a `RankTrace`."""

from __future__ import annotations

from array import array
from collections import Counter
from itertools import compress, islice
from typing import Any

import numpy as np

from perfweb_recommender.trace.budget import column_limit_bytes
from perfweb_recommender.trace.classify import kernel_type
from perfweb_recommender.trace.model import (
    CPU_ANNOTATION,
    CPU_DATALOADER,
    CPU_OP,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_OTHER,
    KIND_SYNC,
)

_GPU_KINDS = {
    "kernel": KIND_KERNEL,
    "Kernel": KIND_KERNEL,
    "gpu_memcpy": KIND_MEMCPY,
    "Memcpy": KIND_MEMCPY,
    "gpu_memset": KIND_MEMSET,
    "Memset": KIND_MEMSET,
    "cuda_sync": KIND_SYNC,
}
_HOST_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
_CPU_CATS = {"cpu_op": CPU_OP, "Operator": CPU_OP, "user_annotation": CPU_ANNOTATION}
_COMPILED_MARKS = ("CompiledFxGraph", "Torch-Compiled Region", "CompiledFunction")
_ABSOLUTE_TS = 1e11  # after a prefix cut, larger timestamps (12+ digits) are ones it missed
# The columns, by table: start times first, durations second.
COLUMNS = (
    (
        "gpu_ts",
        "gpu_dur",
        "gpu_stream",
        "gpu_corr",
        "gpu_bytes",
        "gpu_kind",
        "gpu_type",
        "gpu_name",
    ),
    ("host_ts", "host_dur", "host_corr", "host_name"),
    ("cpu_ts", "cpu_dur", "cpu_class", "cpu_name"),
)
# What a CPU event's name says (`_cpu_name_flags`), bits.
_STEP, _OPTIMIZER, _DATALOADER, _COMPILED, _BACKWARD = 1, 2, 4, 8, 16


def _cpu_name_flags(name: str) -> int:
    if name.startswith("ProfilerStep"):
        return _STEP
    flags = _OPTIMIZER if name.startswith("Optimizer.step#") else 0
    if "DataLoader" in name:
        flags |= _DATALOADER
    if "ompile" in name and any(mark in name for mark in _COMPILED_MARKS):
        flags |= _COMPILED
    elif name.startswith("autograd::engine::evaluate_function"):
        flags |= _BACKWARD
    return flags


def _ids(table: dict[str, int], names: list[str]) -> list[int]:
    """Each name's id in `table`, a new name getting the next one."""
    add = table.setdefault
    return [add(name, len(table)) for name in names]


def _gpu_stream(event: Any) -> bool:
    args = event.args
    return args is not None and args.stream is not None and args.stream != -1


def _stream_of(value: Any) -> int:
    """HTA's reading of args.stream: an int, or -1 when absent or not a number."""
    if value is None:
        return -1
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _as_int(value: Any, default: int) -> int:
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


class EventSink:
    """Accumulates the columns of one rank's trace while its events are walked."""

    def __init__(self, *, base_us: float, prefix_cut: bool, budget_mb: float | None = None) -> None:
        self.base_us = base_us
        self.prefix_cut = prefix_cut
        self.budget_mb = budget_mb
        self.column_limit = column_limit_bytes(budget_mb)
        self.reset()

    def reset(self) -> None:
        """Forget everything added so far (a parser fallback starts again)."""
        self.gpu_ts, self.gpu_dur = array("d"), array("d")
        self.gpu_stream, self.gpu_corr, self.gpu_bytes = array("q"), array("q"), array("q")
        self.gpu_kind, self.gpu_type, self.gpu_name = array("b"), array("b"), array("i")
        self.host_ts, self.host_dur = array("d"), array("d")
        self.host_corr, self.host_name = array("q"), array("i")
        self.cpu_ts, self.cpu_dur, self.cpu_class = array("d"), array("d"), array("b")
        self.cpu_name = array("i")
        self.cpu_names: dict[str, int] = {}
        self.gpu_names: dict[str, int] = {}
        self.gpu_name_types: list[int] = []
        self.runtime_names: dict[str, int] = {}
        self.cpu_op_counts: dict[str, int] = {}
        self.steps: list[tuple[int, float, float]] = []
        self.optimizer_step_ends: list[float] = []
        self.compiled_regions = 0
        self.backward_ops = 0
        self.gpu_steps: list[tuple[float, float]] = []  # GPU-side ProfilerStep (ts, dur)
        self._cpu_flags: dict[str, int] = {}  # name -> _cpu_name_flags(name)
        # Over the memory budget: events later than `cutoff` (µs, absolute) are dropped.
        self.cutoff: float | None = None
        self.skipped = 0
        self.skipped_steps = 0
        self.skipped_end = -np.inf

    def _ts(self, value: Any) -> float:
        ts = float(value)
        if self.prefix_cut and ts >= _ABSOLUTE_TS:
            ts -= self.base_us
        return ts

    def add(self, event: dict[str, Any]) -> None:
        """Keep what is needed of one trace event given as a dict (generic parser)."""
        args = event.get("args")
        if not isinstance(args, dict):
            args = {}
        self.add_fields(
            event.get("ph"),
            event.get("cat"),
            event.get("name"),
            event.get("ts"),
            event.get("dur"),
            args.get("stream"),
            args.get("correlation"),
            args.get("bytes"),
        )

    def add_fields(
        self,
        ph: Any,
        cat: Any,
        name: Any,
        ts: Any,
        dur: Any,
        stream_arg: Any,
        correlation: Any,
        nbytes: Any,
    ) -> None:
        """Keep what is needed of one trace event, given its fields."""
        if ph != "X":
            return
        if not isinstance(dur, (int, float)) or not isinstance(ts, (int, float)):
            return
        if not isinstance(name, str):
            name = str(name)
        if self.cutoff is not None and not self._kept(ts, dur, cat, name):
            return
        if cat in _HOST_CATS:
            self._add_host(self._ts(ts), float(dur), name, _as_int(correlation, -1))
            return
        stream = _stream_of(stream_arg)
        if stream != -1:
            self._add_gpu(
                self._ts(ts),
                float(dur),
                name,
                cat,
                stream,
                _as_int(correlation, -1),
                _as_int(nbytes, 0),
            )
        elif cat in _CPU_CATS:
            self._add_cpu(self._ts(ts), float(dur), name, _CPU_CATS[cat])
        elif cat == "gpu_user_annotation" and name.startswith("ProfilerStep"):
            self.gpu_steps.append((self._ts(ts), float(dur)))

    def add_typed(self, events: list[Any]) -> None:
        """Keep what is needed of a batch of `schema.TypedEvent`s, a column at a time: the
        same rows, in the same order, as `add_fields` on each event would keep."""
        xs = [e for e in events if e.ph == "X" and e.ts is not None and e.dur is not None]
        if self.cutoff is not None:
            xs = [e for e in xs if self._kept(e.ts, e.dur, e.cat, e.name)]
        host = [e for e in xs if e.cat in _HOST_CATS]
        rest = [e for e in xs if e.cat not in _HOST_CATS]
        on_stream = [_gpu_stream(e) for e in rest]
        others = [e for e, gpu in zip(rest, on_stream, strict=True) if not gpu]
        if host:
            self._host_batch(host)
        if any(on_stream):
            self._gpu_batch(list(compress(rest, on_stream)))
        cpu = [e for e in others if e.cat in _CPU_CATS]
        if cpu:
            self._cpu_batch(cpu)
        for e in others:
            if e.cat == "gpu_user_annotation" and e.name.startswith("ProfilerStep"):
                self.gpu_steps.append((self._ts(e.ts), e.dur))

    def _times(self, events: list[Any]) -> tuple[list[float], list[float]]:
        ts = [e.ts for e in events]
        if self.prefix_cut:
            base = self.base_us
            ts = [t - base if t >= _ABSOLUTE_TS else t for t in ts]
        return ts, [e.dur for e in events]

    def _host_batch(self, events: list[Any]) -> None:
        ts, dur = self._times(events)
        self.host_ts.fromlist(ts)
        self.host_dur.fromlist(dur)
        self.host_corr.fromlist(
            [
                -1 if e.args is None or e.args.correlation is None else e.args.correlation
                for e in events
            ]
        )
        self.host_name.fromlist(_ids(self.runtime_names, [e.name for e in events]))

    def _gpu_batch(self, events: list[Any]) -> None:
        ts, dur = self._times(events)
        known = len(self.gpu_names)
        ids = _ids(self.gpu_names, [e.name for e in events])
        self.gpu_name_types += [kernel_type(n) for n in islice(self.gpu_names, known, None)]
        types = self.gpu_name_types
        self.gpu_ts.fromlist(ts)
        self.gpu_dur.fromlist(dur)
        args = [e.args for e in events]
        self.gpu_stream.fromlist([a.stream for a in args])
        self.gpu_corr.fromlist([-1 if a.correlation is None else a.correlation for a in args])
        self.gpu_bytes.fromlist([0 if a.bytes is None else a.bytes for a in args])
        self.gpu_kind.fromlist([_GPU_KINDS.get(e.cat, KIND_OTHER) for e in events])
        self.gpu_type.fromlist([types[i] for i in ids])
        self.gpu_name.fromlist(ids)

    def _cpu_batch(self, events: list[Any]) -> None:
        known = self._cpu_flags
        names = [e.name for e in events]
        for name in set(names).difference(known):
            known[name] = _cpu_name_flags(name)
        flags = [known[n] for n in names]
        if any(flags):
            for e, f in zip(events, flags, strict=True):
                if f & (_STEP | _OPTIMIZER):
                    self._add_marker(e.name, self._ts(e.ts), e.dur)
            kept = [not f & _STEP for f in flags]
            events = list(compress(events, kept))
            names = list(compress(names, kept))
            flags = list(compress(flags, kept))
            self.compiled_regions += sum(1 for f in flags if f & _COMPILED)
            self.backward_ops += sum(1 for f in flags if f & _BACKWARD)
        classes = [
            CPU_DATALOADER if f & _DATALOADER else _CPU_CATS[e.cat]
            for e, f in zip(events, flags, strict=True)
        ]
        counts = self.cpu_op_counts
        for name, n in Counter(compress(names, [c == CPU_OP for c in classes])).items():
            counts[name] = counts.get(name, 0) + n
        ts, dur = self._times(events)
        self.cpu_ts.fromlist(ts)
        self.cpu_dur.fromlist(dur)
        self.cpu_class.fromlist(classes)
        self.cpu_name.fromlist(_ids(self.cpu_names, names))

    def _add_marker(self, name: str, ts: float, dur: float) -> None:
        """A ProfilerStep (a step) or an Optimizer.step (where a step may end)."""
        if name.startswith("ProfilerStep"):
            number = name.rpartition("#")[2]
            self.steps.append((int(number) if number.isdigit() else len(self.steps), ts, dur))
        else:
            self.optimizer_step_ends.append(ts + dur)

    def _add_gpu(
        self, ts: float, dur: float, name: str, cat: Any, stream: int, corr: int, nbytes: int
    ) -> None:
        name_id = self.gpu_names.get(name)
        if name_id is None:
            name_id = self.gpu_names[name] = len(self.gpu_names)
            self.gpu_name_types.append(kernel_type(name))
        self.gpu_ts.append(ts)
        self.gpu_dur.append(dur)
        self.gpu_stream.append(stream)
        self.gpu_corr.append(corr)
        self.gpu_bytes.append(nbytes)
        self.gpu_kind.append(
            _GPU_KINDS.get(cat, KIND_OTHER) if isinstance(cat, str) else KIND_OTHER
        )
        self.gpu_type.append(self.gpu_name_types[name_id])
        self.gpu_name.append(name_id)

    def _add_host(self, ts: float, dur: float, name: str, corr: int) -> None:
        name_id = self.runtime_names.get(name)
        if name_id is None:
            name_id = self.runtime_names[name] = len(self.runtime_names)
        self.host_ts.append(ts)
        self.host_dur.append(dur)
        self.host_corr.append(corr)
        self.host_name.append(name_id)

    def _add_cpu(self, ts: float, dur: float, name: str, cpu_class: int) -> None:
        if name.startswith("ProfilerStep"):
            number = name.rpartition("#")[2]
            self.steps.append((int(number) if number.isdigit() else len(self.steps), ts, dur))
            return
        if name.startswith("Optimizer.step#"):
            self.optimizer_step_ends.append(ts + dur)
        if "DataLoader" in name:
            cpu_class = CPU_DATALOADER
        if "ompile" in name and any(mark in name for mark in _COMPILED_MARKS):
            self.compiled_regions += 1
        elif name.startswith("autograd::engine::evaluate_function"):
            self.backward_ops += 1
        if cpu_class == CPU_OP:
            self.cpu_op_counts[name] = self.cpu_op_counts.get(name, 0) + 1
        name_id = self.cpu_names.get(name)
        if name_id is None:
            name_id = self.cpu_names[name] = len(self.cpu_names)
        self.cpu_ts.append(ts)
        self.cpu_dur.append(dur)
        self.cpu_class.append(cpu_class)
        self.cpu_name.append(name_id)

    def _kept(self, ts: Any, dur: Any, cat: Any, name: str) -> bool:
        """Whether an event starts by the cut-off; one that does not is counted as skipped."""
        start = self._ts(ts)
        if start <= self.cutoff:  # type: ignore[operator]
            return True
        self.skipped += 1
        self.skipped_end = max(self.skipped_end, start + float(dur))
        if cat in _CPU_CATS and name.startswith("ProfilerStep"):
            self.skipped_steps += 1
        return False

    def column_bytes(self) -> int:
        """Memory held by the columns so far."""
        return sum(
            len(column) * column.itemsize
            for names in COLUMNS
            for column in (getattr(self, name) for name in names)
        )

    def enforce_budget(self) -> None:
        """Over the budget, move the cut-off earlier (to the median kept start) and drop
        the kept events after it, until the columns fit."""
        if self.column_limit is None:
            return
        while self.column_bytes() > self.column_limit:
            starts = [np.frombuffer(getattr(self, names[0])) for names in COLUMNS]
            cutoff = float(np.median(np.concatenate(starts)))
            if self.cutoff is not None and cutoff >= self.cutoff:
                return  # every kept event starts at one instant: nothing earlier to cut
            self.cutoff = cutoff
            for names in COLUMNS:
                self._drop_after(names, cutoff)

    def _drop_after(self, names: tuple[str, ...], cutoff: float) -> None:
        ts = np.frombuffer(getattr(self, names[0]))
        late = ts > cutoff
        if not late.any():
            return
        dur = np.frombuffer(getattr(self, names[1]))
        self.skipped += int(late.sum())
        self.skipped_end = max(self.skipped_end, float(np.max(ts[late] + dur[late])))
        keep = ~late
        del ts, dur, late
        for name in names:
            column = getattr(self, name)
            kept = array(column.typecode)
            kept.frombytes(np.frombuffer(column, column.typecode)[keep].tobytes())
            setattr(self, name, kept)
