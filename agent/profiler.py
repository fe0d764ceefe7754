"""Profiler windows: torch.profiler over a few steps, on a schedule and on demand.

The first window opens after `profile_warmup_steps` steps, then one every `profile_every_s`
seconds, and one whenever the server's reply asks (`{"type": "capture_trace", "steps": N}`).
Windows open and close at step boundaries in the training thread (that is where torch's
profiler must be driven); the trace is exported to a temporary file there, and compressed,
size-checked and shipped by the agent thread (`poll`). Off with PERF_AGENT_PROFILE=0.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import threading
import time
from typing import Any

from agent import torch_state, traces
from agent.log import say_once

MAX_WINDOW_STEPS = 50


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
        self._ready: list[tuple[str, str]] = []  # (name, exported file) for the agent thread
        self.windows = 0
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
        steps = self._due(step)
        if steps:
            self._open_window(step, steps)

    def _due(self, step: int) -> int:
        with self._lock:
            requested, self._requested = self._requested, None
        if requested:
            return requested
        if not self.scheduled:
            return 0
        now = self._clock()
        if self._next_time is None:
            if step >= self.settings.profile_warmup_steps:
                return self.settings.profile_steps
            return 0
        return self.settings.profile_steps if now >= self._next_time else 0

    def _open_window(self, step: int, steps: int) -> None:
        torch = torch_state.imported_torch()
        if torch is None or torch.autograd.profiler._is_profiler_enabled:
            self._schedule_next()  # the script profiles itself: stay out of its way
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch_state.cuda_initialized(torch):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profile = torch.profiler.profile(activities=activities)
        profile.__enter__()
        self._profile = profile
        self._window_length = steps
        self._window_steps = 0
        self._window_started_at_step = step

    def _close_window(self, step: int) -> None:
        profile, self._profile = self._profile, None
        self._schedule_next()
        try:
            profile.__exit__(None, None, None)
            fd, path = tempfile.mkstemp(prefix="perf-agent-trace-", suffix=".json")
            os.close(fd)
            profile.export_chrome_trace(path)
        except Exception as exc:  # noqa: BLE001
            say_once("profile-export", "profiler window failed: %s", exc)
            return
        name = f"rank{self.agent.rank or 0}-step{self._window_started_at_step}-{step}"
        with self._lock:
            self._ready.append((name, path))
        self.windows += 1

    def _schedule_next(self) -> None:
        self._next_time = self._clock() + self.settings.profile_every_s

    # ------------------------------------------------------------------ agent thread
    def poll(self) -> None:
        """Compress and ship finished traces (called on each agent tick)."""
        with self._lock:
            ready, self._ready = self._ready, []
        for name, path in ready:
            try:
                self._ship(name, path)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def _ship(self, name: str, path: str) -> None:
        facts = self.agent.sender.facts
        size = os.path.getsize(path)
        if size > self.settings.profile_max_bytes * 20:  # JSON compresses ~10-20x
            facts.set("profiler.skipped_too_large", name)
            return
        with open(path, "rb") as handle:
            data = gzip.compress(handle.read(), compresslevel=6)
        if len(data) > self.settings.profile_max_bytes:
            say_once("trace-cap", "a trace of %d bytes exceeds the cap; skipped", len(data))
            facts.set("profiler.skipped_too_large", name)
            return
        where = traces.deliver(self.agent, name, data)
        facts.set("profiler.windows", self.windows)
        facts.set("profiler.last_trace", f"{name} ({where})")

    def close(self) -> None:
        """At exit: end an open window (its trace is dropped) and ship what is ready."""
        profile, self._profile = self._profile, None
        if profile is not None:
            with contextlib.suppress(Exception):
                profile.__exit__(None, None, None)
        self.poll()
