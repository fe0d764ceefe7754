"""An `EventSink`'s columns, once every event is walked, as a `RankTrace`: times relative to the
earliest event, steps from the ProfilerStep markers (or, without them, from where each
Optimizer.step ends), and the sentence saying what a memory-budget cut skipped."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from perfweb_recommender.trace.budget import Degraded
from perfweb_recommender.trace.events import COLUMNS, EventSink
from perfweb_recommender.trace.model import CpuIntervals, GpuEvents, HostCalls, RankTrace, Step


def _np(values: array, dtype: type) -> np.ndarray:
    """An array.array as numpy, sharing its memory (the sink is done with it once built)."""
    return np.array(values, dtype=dtype) if len(values) == 0 else np.frombuffer(values, dtype)


def _optimizer_steps(sink: EventSink, window_steps: int | None) -> list[tuple[int, float, float]]:
    """Without ProfilerStep markers, a step ends where each Optimizer.step ends.

    A loop that steps k optimizers an iteration (a GAN's D, then G) has k of them a step:
    where the agent's window says how many steps it spans and the trace holds k times as
    many, every k-th ends one (the agent's window opens and ends at its primary
    optimizer's step, so the last of each k is that one)."""
    ends = sorted(sink.optimizer_step_ends)
    if not ends:
        return []
    if window_steps and len(ends) > window_steps and len(ends) % window_steps == 0:
        per_step = len(ends) // window_steps
        ends = ends[per_step - 1 :: per_step]
    first_cpu = float(np.min(_np(sink.cpu_ts, np.float64))) if len(sink.cpu_ts) else ends[0]
    starts = [first_cpu, *ends[:-1]]
    return [
        (i, start, end - start) for i, (start, end) in enumerate(zip(starts, ends, strict=True))
    ]


def _degraded(sink: EventSink, origin: float) -> tuple[str | None, list[tuple[int, float, float]]]:
    """(the sentence saying what was skipped, the steps that end by the cut-off)."""
    if sink.cutoff is None:
        return None, sink.steps
    cutoff = sink.cutoff
    steps = [s for s in sink.steps if s[1] + s[2] <= cutoff]
    ends = [
        float(np.max(np.frombuffer(getattr(sink, t)) + np.frombuffer(getattr(sink, d))))
        for t, d, *_ in COLUMNS
        if len(getattr(sink, t))
    ]
    kept_events = sum(len(getattr(sink, names[0])) for names in COLUMNS)
    degraded = Degraded(
        budget_mb=sink.budget_mb or 0.0,
        kept_until_us=cutoff - origin,
        span_us=max([sink.skipped_end, *ends]) - origin,
        skipped_events=sink.skipped,
        kept_events=kept_events,
        steps_kept=len(steps),
        steps_total=len(sink.steps) + sink.skipped_steps,
    )
    sink.optimizer_step_ends = [t for t in sink.optimizer_step_ends if t <= cutoff]
    sink.gpu_steps = [(ts, dur) for ts, dur in sink.gpu_steps if ts + dur <= cutoff]
    return degraded.sentence(), steps


def build_rank_trace(sink: EventSink, *, window_steps: int | None = None, **meta: Any) -> RankTrace:
    """The accumulated columns as a `RankTrace`, times relative to the earliest event
    (`window_steps`: the steps the agent's window spans, from its name, where known)."""
    origin = min(
        (float(np.min(a)) for a in (sink.gpu_ts, sink.host_ts, sink.cpu_ts) if len(a)),
        default=0.0,
    )
    origin = min([origin] + [s[1] for s in sink.steps]) if sink.steps else origin
    degraded, sink.steps = _degraded(sink, origin)
    steps_from_profiler = bool(sink.steps)
    # before the columns are shifted in place below: the inferred steps read them
    raw_steps = sink.steps if sink.steps else _optimizer_steps(sink, window_steps)

    def rel(values: array) -> np.ndarray:
        times = _np(values, np.float64)
        times -= origin  # in place: no second copy of a large column
        return times

    gpu = GpuEvents(
        ts=rel(sink.gpu_ts),
        dur=_np(sink.gpu_dur, np.float64),
        stream=_np(sink.gpu_stream, np.int64),
        kind=_np(sink.gpu_kind, np.int8),
        gpu_type=_np(sink.gpu_type, np.int8),
        name_id=_np(sink.gpu_name, np.int32),
        correlation=_np(sink.gpu_corr, np.int64),
        nbytes=_np(sink.gpu_bytes, np.int64),
    )
    host = HostCalls(
        ts=rel(sink.host_ts),
        dur=_np(sink.host_dur, np.float64),
        correlation=_np(sink.host_corr, np.int64),
        name_id=_np(sink.host_name, np.int32),
    )
    cpu = CpuIntervals(
        ts=rel(sink.cpu_ts),
        dur=_np(sink.cpu_dur, np.float64),
        cpu_class=_np(sink.cpu_class, np.int8),
        name_id=_np(sink.cpu_name, np.int32),
    )
    steps = sorted(
        (Step(number=n, ts=ts - origin, dur=dur) for n, ts, dur in raw_steps),
        key=lambda s: s.ts,
    )
    return RankTrace(
        base_us=sink.base_us,
        origin_us=origin,
        gpu=gpu,
        host=host,
        cpu=cpu,
        steps=steps,
        gpu_names=list(sink.gpu_names),
        runtime_names=list(sink.runtime_names),
        cpu_names=list(sink.cpu_names),
        cpu_op_counts=sink.cpu_op_counts,
        fractional_timestamps=sink.prefix_cut,
        steps_from_profiler=steps_from_profiler,
        compiled_regions=sink.compiled_regions,
        backward_ops=sink.backward_ops,
        gpu_steps=sorted((ts - origin, dur) for ts, dur in sink.gpu_steps),
        degraded=degraded,
        **meta,
    )
