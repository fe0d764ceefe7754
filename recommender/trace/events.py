"""Walk Kineto events once and keep the columns the analyses need (`EventSink`)."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

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
    CpuIntervals,
    GpuEvents,
    HostCalls,
    RankTrace,
    Step,
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


def _np(values: array, dtype: type) -> np.ndarray:
    """A numpy copy of an array.array (empty arrays included)."""
    return (
        np.array(values, dtype=dtype)
        if len(values) == 0
        else np.frombuffer(values, dtype=dtype).copy()
    )


class EventSink:
    """Accumulates the columns of one rank's trace while its events are walked."""

    def __init__(self, *, base_us: float, prefix_cut: bool) -> None:
        self.base_us = base_us
        self.prefix_cut = prefix_cut
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

    def _optimizer_steps(self, window_steps: int | None) -> list[tuple[int, float, float]]:
        """Without ProfilerStep markers, a step ends where each Optimizer.step ends.

        A loop that steps k optimizers an iteration (a GAN's D, then G) has k of them a step:
        where the agent's window says how many steps it spans and the trace holds k times as
        many, every k-th ends one (the agent's window opens and ends at its primary
        optimizer's step, so the last of each k is that one)."""
        ends = sorted(self.optimizer_step_ends)
        if not ends:
            return []
        if window_steps and len(ends) > window_steps and len(ends) % window_steps == 0:
            per_step = len(ends) // window_steps
            ends = ends[per_step - 1 :: per_step]
        first_cpu = float(np.min(_np(self.cpu_ts, np.float64))) if len(self.cpu_ts) else ends[0]
        starts = [first_cpu, *ends[:-1]]
        return [
            (i, start, end - start) for i, (start, end) in enumerate(zip(starts, ends, strict=True))
        ]

    def build(self, *, window_steps: int | None = None, **meta: Any) -> RankTrace:
        """The accumulated columns as a `RankTrace`, times relative to the earliest event
        (`window_steps`: the steps the agent's window spans, from its name, where known)."""
        origin = min(
            (float(np.min(a)) for a in (self.gpu_ts, self.host_ts, self.cpu_ts) if len(a)),
            default=0.0,
        )
        origin = min([origin] + [s[1] for s in self.steps]) if self.steps else origin

        def rel(values: array) -> np.ndarray:
            return _np(values, np.float64) - origin

        gpu = GpuEvents(
            ts=rel(self.gpu_ts),
            dur=_np(self.gpu_dur, np.float64),
            stream=_np(self.gpu_stream, np.int64),
            kind=_np(self.gpu_kind, np.int8),
            gpu_type=_np(self.gpu_type, np.int8),
            name_id=_np(self.gpu_name, np.int32),
            correlation=_np(self.gpu_corr, np.int64),
            nbytes=_np(self.gpu_bytes, np.int64),
        )
        host = HostCalls(
            ts=rel(self.host_ts),
            dur=_np(self.host_dur, np.float64),
            correlation=_np(self.host_corr, np.int64),
            name_id=_np(self.host_name, np.int32),
        )
        cpu = CpuIntervals(
            ts=rel(self.cpu_ts),
            dur=_np(self.cpu_dur, np.float64),
            cpu_class=_np(self.cpu_class, np.int8),
            name_id=_np(self.cpu_name, np.int32),
        )
        steps_from_profiler = bool(self.steps)
        raw_steps = self.steps if self.steps else self._optimizer_steps(window_steps)
        steps = sorted(
            (Step(number=n, ts=ts - origin, dur=dur) for n, ts, dur in raw_steps),
            key=lambda s: s.ts,
        )
        return RankTrace(
            base_us=self.base_us,
            origin_us=origin,
            gpu=gpu,
            host=host,
            cpu=cpu,
            steps=steps,
            gpu_names=list(self.gpu_names),
            runtime_names=list(self.runtime_names),
            cpu_names=list(self.cpu_names),
            cpu_op_counts=self.cpu_op_counts,
            fractional_timestamps=self.prefix_cut,
            steps_from_profiler=steps_from_profiler,
            compiled_regions=self.compiled_regions,
            backward_ops=self.backward_ops,
            gpu_steps=sorted((ts - origin, dur) for ts, dur in self.gpu_steps),
            **meta,
        )
