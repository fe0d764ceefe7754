"""Profiler windows: torch's Kineto profiler over a few steps, on a schedule and on demand.

The first window opens after `profile_warmup_steps` steps, then one every `profile_every_s`
seconds, and one whenever the server's reply asks (`{"type": "capture_trace", "steps": N}`).
Off with PERF_AGENT_PROFILE=0.

A window is a guest in the training thread, which must start and stop it (torch's profiler
callbacks are thread-local), so only that is done there:

- opening is `torch.autograd.profiler.profile(use_kineto=True).__enter__()`, about a
  millisecond. Not `torch.profiler.profile`: its `prepare_trace` asks
  `hasattr(torch, "_inductor")`, which imports torch._inductor (3.8 s and +72 MB RSS on
  the first window, measured on a CPU box);
- closing is the profiler's `__exit__` (Kineto hands over its events);
- exporting the Kineto JSON, compressing it (streamed, 1 MiB at a time, so the JSON is never
  held in memory), size-checking and shipping it are the agent thread's (`poll`); no window
  opens until the last one is shipped, so at most one window's events are held.

The time each part took is in the facts (`profiler.open_ms`, `profiler.close_ms`,
`profiler.export_ms`), for bench/agent_overhead.py and for anyone who wonders.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import threading
import time
from typing import Any

from agent import torch_state, traces
from agent.log import say_once

MAX_WINDOW_STEPS = 50
COPY_CHUNK_BYTES = 1024 * 1024
# Closing a window, Kineto turns its records into events: RSS and time grow with their count
# (measured on torch 2.13 CPU: 100k events, +118 MB at __exit__, +0.4 MB while recording;
# ~255 bytes each in the JSON; an input-bound window of 4.1 MB of JSON peaked 30 MB above
# the run without one). A window whose JSON passed this budget makes the scheduled windows
# after it shorter in proportion, down to one step.
TRACE_JSON_BUDGET_BYTES = 2 * 1024 * 1024


class ProfilerWindows:
    """Drives torch.profiler from step boundaries; bounded in steps, bytes and count."""

    def __init__(self, agent: Any, *, clock: Any = time.monotonic) -> None:
        self.agent = agent
        self.settings = agent.settings
        self._clock = clock
        self._lock = threading.Lock()
        self._requested: int | None = None
        self._profile: Any = None
        self._window_started_at_step = 0
        self._window_steps = 0
        self._next_time: float | None = None  # None: waiting for warm-up
        self._ready: list[tuple[str, Any, int]] = []  # (name, stopped profile, steps)
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
        if self._profile is not None:
            self._window_steps += 1
            if self._window_steps >= self._window_length:
                self._close_window(step)
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
        cuda = torch_state.cuda_initialized(torch)
        profile = torch.autograd.profiler.profile(
            use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True
        )
        profile.__enter__()
        _add_distributed_info(torch)
        self._profile = profile
        self._window_length = steps
        self._window_steps = 0
        self._window_started_at_step = step
        self._set_fact("profiler.open_ms", started)

    def _close_window(self, step: int) -> None:
        profile, self._profile = self._profile, None
        self._schedule_next()
        started = time.perf_counter()
        try:
            profile.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            say_once("profile-export", "profiler window failed: %s", exc)
            return
        self._set_fact("profiler.close_ms", started)
        name = f"rank{self.agent.rank or 0}-step{self._window_started_at_step}-{step}"
        with self._lock:
            self._ready.append((name, profile, self._window_length))
            self._unshipped += 1
        self.windows += 1

    def _set_fact(self, key: str, started: float) -> None:
        elapsed_ms = round((time.perf_counter() - started) * 1000.0, 2)
        self.agent.sender.facts.set(key, elapsed_ms)

    def _schedule_next(self) -> None:
        self._next_time = self._clock() + self.settings.profile_every_s

    # ------------------------------------------------------------------ agent thread
    def poll(self) -> None:
        """Export, compress and ship finished windows (called on each agent tick)."""
        with self._lock:
            ready, self._ready = self._ready, []
        for name, profile, steps in ready:
            try:
                self._ship(name, profile, steps)
            except Exception as exc:  # noqa: BLE001
                say_once("profile-ship", "a profiler trace could not be shipped: %s", exc)
            finally:
                with self._lock:
                    self._unshipped -= 1

    def _ship(self, name: str, profile: Any, steps: int) -> None:
        facts = self.agent.sender.facts
        started = time.perf_counter()
        json_path = _temporary(".json")
        gz_path = _temporary(".json.gz")
        try:
            profile.export_chrome_trace(json_path)
            profile.kineto_results = None  # Kineto's copy of the events goes now
            profile._function_events = None
            self._set_fact("profiler.export_ms", started)
            self._fit_window(os.path.getsize(json_path), steps)
            if os.path.getsize(json_path) > self.settings.profile_max_bytes * 20:
                facts.set("profiler.skipped_too_large", name)  # JSON compresses ~10-20x
                return
            _compress(json_path, gz_path)
            with contextlib.suppress(OSError):
                os.unlink(json_path)
            if os.path.getsize(gz_path) > self.settings.profile_max_bytes:
                say_once("trace-cap", "a trace over the %d-byte cap was skipped",
                         self.settings.profile_max_bytes)
                facts.set("profiler.skipped_too_large", name)
                return
            with open(gz_path, "rb") as handle:
                data = handle.read()
        finally:
            for path in (json_path, gz_path):
                with contextlib.suppress(OSError):
                    os.unlink(path)
        where = traces.deliver(self.agent, name, data)
        facts.set("profiler.windows", self.windows)
        facts.set("profiler.last_trace", f"{name} ({where})")

    def _fit_window(self, json_bytes: int, steps: int) -> None:
        """Shorten later scheduled windows when this one's events passed the budget."""
        if json_bytes <= TRACE_JSON_BUDGET_BYTES:
            return
        fitted = max(1, int(steps * TRACE_JSON_BUDGET_BYTES / json_bytes))
        if fitted < self.steps_per_window:
            self.steps_per_window = fitted
            self.agent.sender.facts.set("profiler.window_steps", fitted)

    def close(self) -> None:
        """At exit: end an open window (its trace is dropped) and ship what is ready."""
        profile, self._profile = self._profile, None
        if profile is not None:
            with contextlib.suppress(Exception):
                profile.__exit__(None, None, None)
        self.poll()


def _temporary(suffix: str) -> str:
    fd, path = tempfile.mkstemp(prefix="perf-agent-trace-", suffix=suffix)
    os.close(fd)
    return path


def _compress(source: str, target: str) -> None:
    """gzip `source` into `target` a chunk at a time (memory stays at one chunk)."""
    with open(source, "rb") as raw, gzip.open(target, "wb", compresslevel=6) as packed:
        shutil.copyfileobj(raw, packed, COPY_CHUNK_BYTES)


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
