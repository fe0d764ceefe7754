"""Torch's Kineto profiler one segment at a time, for perfweb_agent.runtime.profiler.

Every call into Kineto holds the GIL whichever thread makes it, so each is kept short:

- opening is `torch.autograd.profiler.profile(use_kineto=True).__enter__()`, under a
  millisecond. Not `torch.profiler.profile`: its `prepare_trace` asks
  `hasattr(torch, "_inductor")`, which imports torch._inductor (3.8 s and +72 MB RSS on
  the first window, measured on a CPU box);
- stopping is where Kineto turns its records into events, about 1.1-1.8 µs of CPU per
  event (an input-bound step of ~3,300 events: 5-8 ms; a five-step window of them 30-47
  ms, and +29 MB of RSS). So a window is recorded in segments: the first is one step; each
  next one as many steps as its predecessor says fit in `SEGMENT_CLOSE_BUDGET_S` of
  stopping. At a segment boundary the profiler is stopped and started again at once (the
  time between is taken out of the trace's timeline when the segments are merged,
  perfweb_agent.runtime.trace_merge). On CUDA each stop synchronizes the device, as torch's
  own profiler does at the end of a window;
- Kineto runs in `trace_only` mode where torch has it (2.10+): no per-event Python-side
  objects are built at the stop, which we never read (a third less CPU and memory).

`start` opens a segment, `stop_segment` stops one, keeps it in its window and sizes the next
segment from what this stop cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime import torch_state

# CPU time one segment's stop may take, as its predecessor's cost per step predicts it; a
# segment is never shorter than one step.
SEGMENT_CLOSE_BUDGET_S = 0.005


@dataclass(slots=True)
class Window:
    """The window being recorded: its segments so far and where it stands."""

    started_at_step: int
    length: int  # steps asked for
    rss_at_open: int | None
    steps: int = 0
    segment_steps: int = 0
    segment_length: int = 1  # the first segment is one step: it measures the cost
    shift_s: float = 0.0  # profiler time between segments so far
    segment_shift_s: float = 0.0  # ... up to the start of the current segment
    close_ms: float = 0.0  # the longest stop
    segments: list[tuple[Any, float]] | None = None  # (stopped profile, shift in s)
    stopped_at: float = 0.0  # perf_counter when the last segment began to stop
    last_step: int = 0


def segment_length(close_cpu_s: float, steps: int, remaining: int) -> int:
    """Steps of the next segment: as many as fit in SEGMENT_CLOSE_BUDGET_S of stopping,
    given that the last segment of `steps` steps took `close_cpu_s` to stop."""
    if remaining <= 1:
        return 1
    per_step = close_cpu_s / max(1, steps)
    if per_step <= 0:
        return remaining
    return max(1, min(remaining, int(SEGMENT_CLOSE_BUDGET_S / per_step)))


def rss_bytes() -> int | None:
    """This process's resident set size (None where /proc is not there)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def start(torch: Any, *, shapes: bool, trace_only: bool | None) -> tuple[Any, bool]:
    """A started Kineto profile, and whether this torch has `trace_only` (None: not tried
    yet); `shapes`: record the operators' input shapes."""
    profiler = torch.autograd.profiler
    kwargs: dict[str, Any] = {
        "use_cpu": True,
        "use_device": "cuda" if torch_state.cuda_initialized(torch) else None,
        "use_kineto": True,
        # the operators' input shapes, for the recommender's replay of the run's own
        # Linear, convolution and attention shapes (perfweb_recommender.replay)
        "record_shapes": shapes,
    }
    if trace_only is not False:
        try:
            config = torch._C._profiler._ExperimentalConfig(trace_only=True)
            profile = profiler.profile(experimental_config=config, **kwargs)
            trace_only = True
        except (AttributeError, TypeError):  # an older torch
            trace_only = False
    if not trace_only:
        profile = profiler.profile(**kwargs)
    profile.__enter__()
    return profile, trace_only


def stop_segment(profile: Any, window: Window) -> bool:
    """Stop the segment `profile` records and keep it in `window`; False if Kineto failed."""
    started, cpu = time.perf_counter(), time.thread_time()
    try:
        profile.__exit__(None, None, None)
    except Exception as exc:  # noqa: BLE001
        say_once("profile-export", "profiler window failed: %s", exc)
        return False
    close_cpu = time.thread_time() - cpu
    window.close_ms = max(window.close_ms, (time.perf_counter() - started) * 1000.0)
    assert window.segments is not None
    window.segments.append((profile, window.segment_shift_s))
    remaining = window.length - window.steps
    window.segment_length = segment_length(close_cpu, window.segment_steps, remaining)
    window.segment_steps = 0
    return True


def add_distributed_info(torch: Any) -> None:
    """The trace's `distributedInfo` (rank, world size, backend), as torch.profiler adds it."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    info = {
        "backend": str(dist.get_backend()),
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
    }
    with contextlib.suppress(Exception):
        torch.autograd._add_metadata_json("distributedInfo", json.dumps(info))
