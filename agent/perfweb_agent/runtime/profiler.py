"""Profiler windows: torch's Kineto profiler over a few steps, on a schedule and on demand.

The first window opens after `profile_warmup_steps` steps, then one every `profile_every_s`
seconds, and one whenever the server's reply asks (`{"type": "capture_trace", "steps": N}`).
Off with PERF_AGENT_PROFILE=0.

A window is a guest in the training thread, which must start and stop it (torch's profiler
callbacks are thread-local), and every call into Kineto holds the GIL whichever thread
makes it, so each is kept short:

- opening is under a millisecond and stopping is cut into segments whose stops each fit a
  CPU budget, in `trace_only` mode where torch has it (perfweb_agent.runtime.kineto says
  how and why);
- a window also ends early once the process grew `WINDOW_RSS_BUDGET_BYTES` since it opened
  (fact `profiler.window_cut`), so the segments held until it ends stay bounded;
- Kineto is never started nor stopped inside a backward pass (a boundary from an optimizer
  stepped in a gradient hook, or from `perfweb_agent.step()` in one): the autograd engine
  puts the thread's profiler state back as it was when the node began once it returns
  (torch_state.inside_backward), so a segment started there is lost and the stopped one
  comes back, to be stopped twice. A window due there opens at the first boundary outside
  (fact `profiler.skipped` says why none opened, if none did); a segment or window end due
  there waits for it too (fact `profiler.one_piece`);
- once the agent closes (at exit) no window opens: one opened by the boundaries a step
  source confirms only at exit (steps.py) would still be recording when the interpreter is
  torn down, and torch's thread-local profiler state, destroyed after Python's, crashes the
  process (SIGSEGV, after `Requested callback is not found`);
- exporting each segment, merging them into one gzip trace and size-checking it
  (perfweb_agent.runtime.trace_export) and shipping it are the agent thread's (`poll`), once
  the window has ended: an export while a segment records would hold the GIL inside the
  steps being profiled. No window opens until the last one is shipped.

The time each part took is in the facts (`profiler.open_ms`, `profiler.close_ms` (the
longest stop of a segment), `profiler.segments`, `profiler.export_ms`), for
bench/agent_overhead.py and for anyone who wonders.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime import kineto, torch_state
from perfweb_agent.runtime.kineto import Window, rss_bytes
from perfweb_agent.runtime.record_scopes import OpenScopes
from perfweb_agent.runtime.steps import CONFIRM_AFTER_S, CONFIRM_EVENTS
from perfweb_agent.runtime.trace_export import export_window
from perfweb_contract import protocol

MAX_WINDOW_STEPS = 50
# Stopping Kineto turns its records into events: time and RSS grow with their count
# (torch 2.13 CPU, trace_only: ~1.4 µs and ~0.7 KB per event held; ~255 bytes each in the
# JSON). A window whose JSON passed this budget makes the scheduled windows after it shorter
# in proportion, down to one step.
TRACE_JSON_BUDGET_BYTES = 2 * 1024 * 1024
# RSS the process may grow while a window records (its finished segments are held until
# it ends); past it the window ends at the next segment boundary.
WINDOW_RSS_BUDGET_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class _Ready:
    """A window that ended, waiting for the agent thread to export and ship it."""

    name: str
    segments: list[tuple[Any, float]]
    steps: int


class ProfilerWindows:
    """Drives torch's profiler from step boundaries; bounded in steps, bytes and count."""

    def __init__(
        self,
        agent: Any,
        *,
        ship: Callable[[str, bytes], Any],
        clock: Any = time.monotonic,
        rss: Any = rss_bytes,
    ) -> None:
        self.agent = agent
        self.settings = agent.settings
        self.facts = agent.facts
        self._ship_trace = ship  # TraceShipper.deliver: (name, gzip bytes) -> Shipped
        self._clock = clock
        self._rss = rss
        self._lock = threading.Lock()
        self._requested: int | None = None
        self._profile: Any = None  # the segment recording now
        self._window: Window | None = None
        self._next_time: float | None = None  # None: waiting for warm-up
        self._ready: list[_Ready] = []
        self._trace_only: bool | None = None  # Kineto's trace_only mode: None until tried
        self._scopes: OpenScopes | None = None
        self._closed = False  # at exit: no window opens any more
        self._noted: set[str] = set()  # facts that say why a window was not as asked
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
        if self._closed:
            self._boundary_at_exit(step)
            return
        window = self._window
        if window is not None:
            if self._profile is None:  # between segments: a scope of the last one is open
                self._cut(
                    window,
                    "a record_function scope that began inside the window "
                    "stayed open across a step",
                )
                self._end_window(window, step, stopped=True)
                return
            window.steps += 1
            window.segment_steps += 1
            due = window.steps >= window.length or window.segment_steps >= window.segment_length
            if due and self._inside_backward():  # Kineto must not stop here: at the next one
                self._note(
                    "profiler.one_piece",
                    "segments and windows end only at step "
                    "boundaries outside backward passes (an optimizer stepped or "
                    "perfweb_agent.step() called in a gradient hook), where torch's "
                    "profiler cannot stop",
                )
                return
            if window.steps >= window.length:
                self._end_window(window, step)
            elif window.segment_steps >= window.segment_length:
                self._next_segment(window, step)
            return
        if self._unshipped:
            return  # one window's events in memory at a time: the last is still being shipped
        if self._counting_flops():
            return  # the step being counted (runtime/flops.py): the window waits for the next
        steps = self._due(step)
        if steps:
            if self._inside_backward():
                self._put_off(step, steps)
                return
            self._open_window(step, steps)

    def _counting_flops(self) -> bool:
        """Whether this step runs under the FLOPs count, whose FlopCounterMode (and its first
        import, tens of MB of RSS) must stay out of a window: it is one step, the third."""
        flops = getattr(self.agent, "flops", None)
        return bool(flops is not None and flops.counting)

    def _inside_backward(self) -> bool:
        torch = torch_state.imported_torch()
        return torch is not None and torch_state.inside_backward(torch)

    def _put_off(self, step: int, steps: int) -> None:
        """A window due at a boundary inside a backward pass opens at the next one outside."""
        with self._lock:
            if self._requested is None:
                self._requested = steps
        if not self.windows:
            self._note(
                "profiler.skipped",
                f"the window due at step {step} was put off: its "
                "step boundaries fall inside backward passes (an optimizer stepped or "
                "perfweb_agent.step() called in a gradient hook), where torch's profiler "
                "cannot start",
            )

    def _boundary_at_exit(self, step: int) -> None:
        """A boundary after close(): steps a source confirmed only at exit. No window opens
        now; say why none did, if none did."""
        if self.windows or self._unshipped or not self.scheduled:
            return
        if step < self.settings.profile_warmup_steps:
            return
        source = getattr(self.agent.timer, "source", None)
        wait = ""
        if source in CONFIRM_EVENTS:
            wait = (
                f" ({source} boundaries count as steps once {CONFIRM_EVENTS[source]} were "
                f"seen, or after {CONFIRM_AFTER_S[source]:.0f} s, in case a better source "
                "shows up)"
            )
        self._note(
            "profiler.skipped",
            f"this run's {step} steps were only confirmed as steps when it ended{wait}",
        )

    def _note(self, key: str, text: str) -> None:
        """Say once (the first reason) why a window was skipped or not segmented."""
        if key not in self._noted:
            self._noted.add(key)
            self.facts.set(key, text)

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
        kineto.add_distributed_info(torch)
        self._window = Window(
            started_at_step=step, length=steps, rss_at_open=self._rss(), segments=[]
        )
        self._watch_scopes(torch)
        self.facts.set("profiler.open_ms", round((time.perf_counter() - started) * 1000.0, 2))

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
        shapes = bool(self.settings.profile_shapes)
        profile, self._trace_only = kineto.start(torch, shapes=shapes, trace_only=self._trace_only)
        return profile

    def _stop_segment(self, window: Window) -> bool:
        """Stop the segment recording now and keep it; False if Kineto failed."""
        profile, self._profile = self._profile, None
        return kineto.stop_segment(profile, window)

    def _next_segment(self, window: Window, step: int) -> None:
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
        if (
            window.rss_at_open is not None
            and rss is not None
            and (rss - window.rss_at_open > WINDOW_RSS_BUDGET_BYTES)
        ):
            self._cut(
                window,
                f"the process grew {(rss - window.rss_at_open) / 2**20:.0f} MB while it recorded",
            )
            self._end_window(window, step, stopped=True)
            return
        if scopes.segment_stopped():
            self._resume()

    def _resume(self) -> None:
        """Start the window's next segment (no scope of the stopped one is open now)."""
        window, scopes = self._window, self._scopes
        if window is None or scopes is None or self._profile is not None:
            return
        if self._inside_backward():  # the scope closed in a backward pass: cannot start here
            self._cut(window, "a record_function scope of the window closed inside a backward pass")
            self._end_window(window, window.last_step, stopped=True)
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

    def _cut(self, window: Window, why: str) -> None:
        self.facts.set(
            "profiler.window_cut", f"after {window.steps} of {window.length} steps: {why}"
        )

    def _end_window(self, window: Window, step: int, *, stopped: bool = False) -> None:
        self._schedule_next()
        self._unwatch_scopes()
        if not stopped and not self._stop_segment(window):
            self._drop_window()
            return
        self._window = None
        assert window.segments is not None
        self.facts.set("profiler.close_ms", round(window.close_ms, 2))
        self.facts.set("profiler.segments", len(window.segments))
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
        exported = export_window(
            window.segments,
            name=window.name,
            max_bytes=self.settings.profile_max_bytes,
            facts=self.facts,
        )
        if exported.json_bytes is not None:
            self._fit_window(exported.json_bytes, window.steps)
        if exported.data is None:
            return
        shipped = self._ship_trace(window.name, exported.data)
        if shipped.no_endpoint:
            self.scheduled = False  # no trace endpoint: keep this one, schedule no more
        self.facts.set("profiler.windows", self.windows)
        self.facts.set("profiler.last_trace", f"{window.name} ({shipped.where})")

    def _fit_window(self, json_bytes: int, steps: int) -> None:
        """Shorten later scheduled windows when this one's events passed the budget."""
        if json_bytes <= TRACE_JSON_BUDGET_BYTES:
            return
        fitted = max(1, int(steps * TRACE_JSON_BUDGET_BYTES / json_bytes))
        if fitted < self.steps_per_window:
            self.steps_per_window = fitted
            self.facts.set("profiler.window_steps", fitted)

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
        (a bounded time) for the one being shipped. No window opens after this."""
        self._closed = True
        profile, self._profile = self._profile, None
        window, self._window = self._window, None
        if window is not None and not self.windows:
            self._note(
                "profiler.skipped",
                f"the window open at exit (from step {window.started_at_step}) was dropped",
            )
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
