"""Profiler windows: torch's Kineto profiler over a few steps, on a schedule and on demand.

The first window opens after `profile_warmup_steps` steps, then one every `profile_every_s`
seconds, and one whenever the server's reply asks (`{"type": "capture_trace", "steps": N}`).
Off with PERF_AGENT_PROFILE=0.

A window is a guest in the training thread, which must start and stop it (torch's profiler
callbacks are thread-local), and every call into Kineto holds the GIL whichever thread
makes it, so each is kept short:

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
  perfweb_agent.runtime.trace_merge). On CUDA each stop synchronizes the device, as torch's own
  profiler
  does at the end of a window;
- Kineto runs in `trace_only` mode where torch has it (2.10+): no per-event Python-side
  objects are built at the stop, which we never read (a third less CPU and memory);
- a window also ends early once the process grew `WINDOW_RSS_BUDGET_BYTES` since it opened
  (fact `profiler.window_cut`), so the segments held until it ends stay bounded;
- exporting each segment (Kineto's `save`), merging them into one gzip trace, size-checking
  and shipping it are the agent thread's (`poll`), once the window has ended: an export while
  a segment records would hold the GIL inside the steps being profiled. No window opens
  until the last one is shipped.

The time each part took is in the facts (`profiler.open_ms`, `profiler.close_ms` (the
longest stop of a segment), `profiler.segments`, `profiler.export_ms`), for
bench/agent_overhead.py and for anyone who wonders.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from perfweb_agent.delivery import traces
from perfweb_agent.runtime import torch_state
from perfweb_agent.runtime.logger import say_once
from perfweb_agent.runtime.record_scopes import OpenScopes
from perfweb_agent.runtime.trace_merge import Segment, TraceTooLarge, merge_in_helper
from perfweb_contract import protocol

MAX_WINDOW_STEPS = 50
# Stopping Kineto turns its records into events: time and RSS grow with their count
# (torch 2.13 CPU, trace_only: ~1.4 µs and ~0.7 KB per event held; ~255 bytes each in the
# JSON). A window whose JSON passed this budget makes the scheduled windows after it shorter
# in proportion, down to one step.
TRACE_JSON_BUDGET_BYTES = 2 * 1024 * 1024
# CPU time one segment's stop may take, as its predecessor's cost per step predicts it; a
# segment is never shorter than one step.
SEGMENT_CLOSE_BUDGET_S = 0.005
# RSS the process may grow while a window records (its finished segments are held until
# it ends); past it the window ends at the next segment boundary.
WINDOW_RSS_BUDGET_BYTES = 16 * 1024 * 1024
# Between two segments' exports the agent thread waits this many times the last export's
# time (at least the minimum), so that no step of the script waits on several in a row.
EXPORT_PAUSE_RATIO = 3.0
EXPORT_PAUSE_MIN_S = 0.02


@dataclass(slots=True)
class _Window:
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


@dataclass(slots=True)
class _Ready:
    """A window that ended, waiting for the agent thread to export and ship it."""

    name: str
    segments: list[tuple[Any, float]]
    steps: int


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


class ProfilerWindows:
    """Drives torch's profiler from step boundaries; bounded in steps, bytes and count."""

    def __init__(self, agent: Any, *, clock: Any = time.monotonic, rss: Any = rss_bytes) -> None:
        self.agent = agent
        self.settings = agent.settings
        self._clock = clock
        self._rss = rss
        self._lock = threading.Lock()
        self._requested: int | None = None
        self._profile: Any = None  # the segment recording now
        self._window: _Window | None = None
        self._next_time: float | None = None  # None: waiting for warm-up
        self._ready: list[_Ready] = []
        self._trace_only: bool | None = None  # Kineto's trace_only mode: None until tried
        self._scopes: OpenScopes | None = None
        self.steps_per_window = self.settings.profile_steps  # shrinks after a heavy window
        self.windows = 0
        self._unshipped = 0  # windows closed but not yet exported and shipped
        self.scheduled = True  # False: only on-demand windows (e.g. the server has no traces)
        agent.timer.listeners.append(self.on_step)

    # ------------------------------------------------------------------ requests
    def request(self, steps: int | None = None) -> None:
        """Open a window at the next step boundary (a `capture_trace` command)."""
        with self._lock:
            self._requested = max(1, min(steps or self.settings.profile_steps, MAX_WINDOW_STEPS))

    # ------------------------------------------------------------------ training thread
    def on_step(self, step: int) -> None:
        """Called after each step boundary (in the training thread)."""
        window = self._window
        if window is not None:
            if self._profile is None:  # between segments: a scope of the last one is open
                self._cut(window, "a record_function scope that began inside the window "
                          "stayed open across a step")
                self._end_window(window, step, stopped=True)
                return
            window.steps += 1
            window.segment_steps += 1
            if window.steps >= window.length:
                self._end_window(window, step)
            elif window.segment_steps >= window.segment_length:
                self._next_segment(window, step)
            return
        if self._unshipped:
            return  # one window's events in memory at a time: the last is still being shipped
        steps = self._due(step)
        if steps:
            self._open_window(step, steps)

    def _due(self, step: int) -> int:
        requested = None
        if self._requested is not None:  # read without the lock first: this runs every step
            with self._lock:
                requested, self._requested = self._requested, None
        if requested:
            return requested
        if not self.scheduled:
            return 0
        now = self._clock()
        if self._next_time is None:
            if step >= self.settings.profile_warmup_steps:
                return self.steps_per_window
            return 0
        return self.steps_per_window if now >= self._next_time else 0

    def _open_window(self, step: int, steps: int) -> None:
        torch = torch_state.imported_torch()
        if torch is None or torch.autograd.profiler._is_profiler_enabled:
            self._schedule_next()  # the script profiles itself: stay out of its way
            return
        started = time.perf_counter()
        try:
            self._profile = self._start_profile(torch)
        except Exception as exc:  # noqa: BLE001 - e.g. another profiler on this thread
            say_once("profile-open", "profiler window could not open: %s", exc)
            self._schedule_next()
            return
        _add_distributed_info(torch)
        self._window = _Window(
            started_at_step=step, length=steps, rss_at_open=self._rss(), segments=[]
        )
        self._watch_scopes(torch)
        self._set_fact("profiler.open_ms", started)

    def _watch_scopes(self, torch: Any) -> None:
        """Count the record_function scopes of each segment
        (perfweb_agent.runtime.record_scopes)."""
        if self._scopes is None:
            self._scopes = OpenScopes(torch.autograd.profiler.record_function, self._resume)
        try:
            self._scopes.install(threading.get_ident())
        except Exception as exc:  # noqa: BLE001 - no segments then: one stop at the end
            say_once("profile-scopes", "profiler window in one piece: %s", exc)
            self._scopes = None
            return
        self._scopes.segment_started()

    def _start_profile(self, torch: Any) -> Any:
        """A started Kineto profile (trace_only where this torch has it)."""
        profiler = torch.autograd.profiler
        kwargs: dict[str, Any] = {
            "use_cpu": True,
            "use_device": "cuda" if torch_state.cuda_initialized(torch) else None,
            "use_kineto": True,
        }
        if self._trace_only is not False:
            try:
                config = torch._C._profiler._ExperimentalConfig(trace_only=True)
                profile = profiler.profile(experimental_config=config, **kwargs)
                self._trace_only = True
            except (AttributeError, TypeError):  # an older torch
                self._trace_only = False
        if not self._trace_only:
            profile = profiler.profile(**kwargs)
        profile.__enter__()
        return profile

    def _stop_segment(self, window: _Window) -> bool:
        """Stop the segment recording now and keep it; False if Kineto failed."""
        profile, self._profile = self._profile, None
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

    def _next_segment(self, window: _Window, step: int) -> None:
        """A segment boundary inside the window: stop, keep, start the next one as soon
        as no record_function scope of this one is open (at once, or when the last closes)."""
        scopes = self._scopes
        if scopes is None:  # cannot tell which scopes are open: never restart
            window.segment_length = window.length
            return
        window.stopped_at = time.perf_counter()
        window.last_step = step
        if not self._stop_segment(window):
            self._drop_window()
            return
        rss = self._rss()
        if window.rss_at_open is not None and rss is not None and (
            rss - window.rss_at_open > WINDOW_RSS_BUDGET_BYTES
        ):
            self._cut(window, f"the process grew {(rss - window.rss_at_open) / 2**20:.0f} MB "
                      "while it recorded")
            self._end_window(window, step, stopped=True)
            return
        if scopes.segment_stopped():
            self._resume()

    def _resume(self) -> None:
        """Start the window's next segment (no scope of the stopped one is open now)."""
        window, scopes = self._window, self._scopes
        if window is None or scopes is None or self._profile is not None:
            return
        if scopes.deferred_end:  # a scope ends when a future completes: not safe to restart
            self._cut(window, "a record_function scope ends on a future")
            self._end_window(window, window.last_step, stopped=True)
            return
        try:
            self._profile = self._start_profile(torch_state.imported_torch())
        except Exception as exc:  # noqa: BLE001 - e.g. the script started its own profiler
            say_once("profile-restart", "profiler window ended early: %s", exc)
            self._end_window(window, window.last_step, stopped=True)
            return
        scopes.segment_started()
        window.shift_s += time.perf_counter() - window.stopped_at
        window.segment_shift_s = window.shift_s

    def _cut(self, window: _Window, why: str) -> None:
        self.agent.sender.facts.set(
            "profiler.window_cut", f"after {window.steps} of {window.length} steps: {why}"
        )

    def _end_window(self, window: _Window, step: int, *, stopped: bool = False) -> None:
        self._schedule_next()
        self._unwatch_scopes()
        if not stopped and not self._stop_segment(window):
            self._drop_window()
            return
        self._window = None
        assert window.segments is not None
        self.agent.sender.facts.set("profiler.close_ms", round(window.close_ms, 2))
        self.agent.sender.facts.set("profiler.segments", len(window.segments))
        name = str(protocol.WindowName(self.agent.rank or 0, window.started_at_step, step))
        with self._lock:
            self._ready.append(_Ready(name, window.segments, window.steps))
            self._unshipped += 1
        self.windows += 1

    def _drop_window(self) -> None:
        self._window = None
        self._unwatch_scopes()
        self._schedule_next()

    def _unwatch_scopes(self) -> None:
        if self._scopes is not None:
            with contextlib.suppress(Exception):
                self._scopes.uninstall()

    def _set_fact(self, key: str, started: float) -> None:
        elapsed_ms = round((time.perf_counter() - started) * 1000.0, 2)
        self.agent.sender.facts.set(key, elapsed_ms)

    def _schedule_next(self) -> None:
        self._next_time = self._clock() + self.settings.profile_every_s

    # ------------------------------------------------------------------ agent thread
    def poll(self) -> None:
        """Export, merge, compress and ship finished windows (called on each agent tick)."""
        with self._lock:
            ready, self._ready = self._ready, []
        for window in ready:
            try:
                self._ship(window)
            except Exception as exc:  # noqa: BLE001
                say_once("profile-ship", "a profiler trace could not be shipped: %s", exc)
            finally:
                window.segments.clear()
                with self._lock:
                    self._unshipped -= 1

    def _ship(self, window: _Ready) -> None:
        facts = self.agent.sender.facts
        exported: list[Segment] = []
        gz_path = _temporary(".json.gz")
        try:
            exporting = last = 0.0
            for index, (profile, shift_s) in enumerate(window.segments):
                if index:  # each export holds the GIL: let the script run between two
                    time.sleep(max(EXPORT_PAUSE_MIN_S, EXPORT_PAUSE_RATIO * last))
                path = _temporary(".json")
                exported.append(Segment(path, shift_s * 1e6))
                began = time.perf_counter()
                profile.export_chrome_trace(path)
                last = time.perf_counter() - began
                exporting += last
                profile.kineto_results = None  # Kineto's copy of the events goes now
                profile._function_events = None
            window.segments.clear()
            facts.set("profiler.export_ms", round(exporting * 1000.0, 2))
            try:
                json_bytes = merge_in_helper(
                    exported, gz_path, name=window.name,
                    max_json_bytes=self.settings.profile_max_bytes * 20,  # ~10-20x in gzip
                )
            except TraceTooLarge:
                facts.set("profiler.skipped_too_large", window.name)
                return
            self._fit_window(json_bytes, window.steps)
            if os.path.getsize(gz_path) > self.settings.profile_max_bytes:
                say_once("trace-cap", "a trace over the %d-byte cap was skipped",
                         self.settings.profile_max_bytes)
                facts.set("profiler.skipped_too_large", window.name)
                return
            with open(gz_path, "rb") as handle:
                data = handle.read()
        finally:
            for path in [s.path for s in exported] + [gz_path]:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        where = traces.deliver(self.agent, window.name, data)
        facts.set("profiler.windows", self.windows)
        facts.set("profiler.last_trace", f"{window.name} ({where})")

    def _fit_window(self, json_bytes: int, steps: int) -> None:
        """Shorten later scheduled windows when this one's events passed the budget."""
        if json_bytes <= TRACE_JSON_BUDGET_BYTES:
            return
        fitted = max(1, int(steps * TRACE_JSON_BUDGET_BYTES / json_bytes))
        if fitted < self.steps_per_window:
            self.steps_per_window = fitted
            self.agent.sender.facts.set("profiler.window_steps", fitted)

    def reset_after_fork(self) -> None:
        """A forked child (a DataLoader worker) records and ships nothing of ours."""
        self._window = self._profile = None
        self._ready = []
        self._lock = threading.Lock()
        self.scheduled = False
        if self._scopes is not None:
            self._scopes.forget()

    def close(self) -> None:
        """At exit: end an open window (its trace is dropped), ship what is ready and wait
        (a bounded time) for the one being shipped."""
        profile, self._profile = self._profile, None
        self._window = None
        self._unwatch_scopes()
        if profile is not None:
            with contextlib.suppress(Exception):
                profile.__exit__(None, None, None)
        self.poll()
        # a window the agent thread is shipping right now: its facts should make the last
        # batch, so wait for it (half the exit deadline at most; the rest is the sender's)
        deadline = time.monotonic() + self.settings.exit_deadline / 2
        while self._unshipped and time.monotonic() < deadline:
            time.sleep(0.02)


def _temporary(suffix: str) -> str:
    fd, path = tempfile.mkstemp(prefix="perf-agent-trace-", suffix=suffix)
    os.close(fd)
    return path


def _add_distributed_info(torch: Any) -> None:
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
