"""Step anatomy: every step split into data wait, copies, forward, backward, optimizer,
collectives and what remains ("other"), from the hooks the agent already has.

The training thread only appends transitions to a deque: (host clock, mark, phase now
current), where the phase now current is the innermost open one (a copy inside the forward
counts as copy). The step timer hands over each step it emits as (index, end wall time,
start, end) on the same host clock. Off the training thread (the agent's tick) the reader
integrates the transitions over each step, so the phases of a step sum to its duration.

On a CPU a mark is nothing: the host clock is the time line. Once the script has
initialised CUDA, each transition and each step boundary also records a CUDA event on the
current stream (`CudaMarks`; events are pooled), and the reader integrates over the events'
positions on the GPU's time line instead, reading them with `query()` once they completed
(never a synchronisation on the training thread; at exit, a bounded wait). A step whose
marks mix both kinds (the step that initialised CUDA) is skipped.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from perfweb_agent.runtime.torch_state import imported_torch
from perfweb_contract import protocol

PHASES = protocol.STEP_PHASES
DATA, COPY, FORWARD, BACKWARD, OPTIMIZER, COLLECTIVE, OUTPUT_COPY, OTHER = range(len(PHASES))
SERIES = tuple(protocol.step_phase_series(phase) for phase in PHASES)
MAX_DEPTH = 32  # open phases; beyond, a hook that never closed is assumed (enters ignored)
MAX_TRANSITIONS = 1 << 18  # held between two reads (a bound: beyond, new ones are dropped)
MAX_STEPS = 1 << 16
POOL = 4096  # CUDA events kept for reuse
EXIT_WAIT_S = 2.0  # at exit, how long the reader waits on the GPU for the last events

Transition = tuple[float, Any, int]  # host clock, mark (None on a CPU), phase current after
PhaseSample = tuple[float, str, float]  # end wall time of the step, series name, seconds
_time_of = itemgetter(0)


class CudaMarks:
    """CUDA events recorded on the current stream, and their positions on the GPU's clock."""

    def __init__(self, torch: Any, *, pool: int = POOL) -> None:
        self._cuda = torch.cuda
        self._capturing = torch.cuda.is_current_stream_capturing
        self._free: list[Any] = []
        self._pool = pool
        self._origin: Any = None

    def mark(self) -> Any:
        """Record an event now (training thread); None while a CUDA graph is being captured."""
        if self._capturing():
            return None
        free = self._free
        event = free.pop() if free else self._cuda.Event(enable_timing=True)
        event.record()
        if self._origin is None:
            self._origin = event
        return event

    def position(self, event: Any, *, wait: bool) -> float | None:
        """Seconds from the first event to `event` on the GPU, None until it completed."""
        if not event.query():
            if not wait:
                return None
            event.synchronize()
        return float(self._origin.elapsed_time(event)) / 1000.0

    def release(self, event: Any) -> None:
        """`event` is read: reuse it (the first event stays, as everyone's origin)."""
        if event is not self._origin and len(self._free) < self._pool:
            self._free.append(event)


class StepAnatomy:
    """The phase stack of the training thread and the reader of its steps."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._stack: list[int] = []
        self._transitions: deque[Transition] = deque()
        self._steps: deque[tuple[int, float, float, float]] = deque()
        self.marks: Any = None  # CudaMarks once the script initialised CUDA
        self.cuda_check: Callable[[], bool] | None = None  # torch.cuda.is_initialized
        self.owner: int | None = None  # the training thread: marks from others are ignored
        self.dropped = 0
        # the reader's own (agent thread)
        self._held: list[Transition] = []
        self._seen = [False] * len(PHASES)
        self._seen[OTHER] = True

    # ------------------------------------------------------------------ training thread
    def current(self) -> int:
        """The innermost open phase (`other` when none)."""
        return self._stack[-1] if self._stack else OTHER

    def enter(self, phase: int, now: float | None = None) -> None:
        """A phase begins (at `now` on the host clock, default: now)."""
        if self.owner != threading.get_ident():
            if self.owner is not None:
                return
            self.owner = threading.get_ident()
        stack = self._stack
        if len(stack) >= MAX_DEPTH:
            return
        stack.append(phase)
        self._add(self._clock() if now is None else now, phase)

    def leave(self, phase: int) -> None:
        """`phase` ends: it and anything opened inside it and never closed are closed."""
        stack = self._stack
        if phase not in stack or self.owner != threading.get_ident():
            return
        while stack.pop() != phase:
            pass
        self._add(self._clock(), stack[-1] if stack else OTHER)

    def span(self, phase: int, started: float, ended: float) -> None:
        """A phase that ran from `started` to `ended` with nothing inside it (a copy seen once
        it returned; on CUDA its start mark is taken at `started` by the caller)."""
        if self.owner != threading.get_ident():
            return
        current = self._stack[-1] if self._stack else OTHER
        self._add(started, phase)
        self._add(ended, current)

    def boundary(self, now: float) -> None:
        """A step boundary at `now`: on CUDA it needs an event of its own."""
        if self.marks is None:
            check = self.cuda_check
            if check is None or not check():
                return
            self._start_cuda()
            if self.marks is None:
                return
        self._add(now, self._stack[-1] if self._stack else OTHER)

    def step(self, index: int, wall: float, start: float, end: float) -> None:
        """The step timer emitted step `index` over [start, end] (host clock)."""
        if len(self._steps) < MAX_STEPS:
            self._steps.append((index, wall, start, end))
        else:
            self.dropped += 1

    def reset_after_fork(self) -> None:
        """A forked child records nothing."""
        self.owner = -1
        self._transitions = deque()
        self._steps = deque()

    def resume_after_fork(self) -> None:
        """The forked child turned out to be a rank of its own: record its phases (from
        the thread that trains in it)."""
        self._stack = []
        self.owner = None

    def _add(self, now: float, phase: int) -> None:
        transitions = self._transitions
        if len(transitions) >= MAX_TRANSITIONS:
            self.dropped += 1
            return
        marks = self.marks
        transitions.append((now, marks.mark() if marks is not None else None, phase))

    def _start_cuda(self) -> None:
        try:
            torch = imported_torch()
            self.marks = CudaMarks(torch) if torch is not None else None
        except Exception:  # noqa: BLE001 - no CUDA events: the host clock goes on
            self.marks = None
        self.cuda_check = None

    # ------------------------------------------------------------------ reader
    def read(self, *, final: bool = False) -> list[PhaseSample]:
        """The phases of every step whose marks are readable: (end wall time, series,
        seconds), each phase the run has used so far (and always `other`). Agent thread."""
        steps = self._steps
        ready = len(steps)  # before the transitions: each of these steps has all of its own
        held, transitions = self._held, self._transitions
        while transitions:
            held.append(transitions.popleft())
        out: list[PhaseSample] = []
        deadline = self._clock() + EXIT_WAIT_S if final else None
        lo = 0  # held[lo - 1] is the last transition at or before the next step's start
        seen = self._seen
        for _ in range(ready):
            _, wall, start, end = steps[0]
            wait = deadline is not None and self._clock() < deadline
            first = bisect_right(held, start, lo=lo, key=_time_of)
            last = bisect_right(held, end, lo=first, key=_time_of)
            phases = self._integrate(
                held[first - 1] if first else None, held[first:last], start, end, wait=wait
            )
            if phases is None and not final:
                break  # its CUDA events have not completed yet: next time
            for phase, seconds in enumerate(phases or ()):
                if seconds > 0.0:
                    seen[phase] = True
                if seen[phase]:
                    out.append((wall, SERIES[phase], seconds))
            steps.popleft()
            lo = max(lo, last)
        self._forget(max(0, lo - 1))
        return out

    def _integrate(
        self,
        before: Transition | None,
        inside: list[Transition],
        start: float,
        end: float,
        *,
        wait: bool,
    ) -> list[float] | None:
        """The step's seconds per phase; None: not readable yet; []: not measurable.
        `before`: the last transition at or before `start`; `inside`: those in (start, end]."""
        phases = [0.0] * len(PHASES)
        if before is not None and before[1] is not None:  # a GPU time line
            return self._integrate_gpu(before, inside, phases, wait=wait)
        if any(mark is not None for _, mark, _ in inside):
            return []  # the step that switched to CUDA events: half on each clock
        current = before[2] if before is not None else OTHER
        at = start
        for now, _, phase in inside:
            phases[current] += now - at
            at, current = now, phase
        phases[current] += end - at
        return phases

    def _integrate_gpu(
        self, before: Transition, inside: list[Transition], phases: list[float], *, wait: bool
    ) -> list[float] | None:
        marks = self.marks
        if marks is None or not inside or any(mark is None for _, mark, _ in inside):
            return []  # a CUDA graph capture inside the step: no events to read
        try:
            at = marks.position(before[1], wait=wait)
            positions = [marks.position(mark, wait=wait) for _, mark, _ in inside]
        except Exception:  # noqa: BLE001 - an event of another device: this step is lost
            return []
        if at is None or any(p is None for p in positions):
            return None
        current = before[2]
        for (_, _, phase), position in zip(inside, positions, strict=True):
            phases[current] += max(0.0, position - at)  # type: ignore[operator]
            at, current = position, phase  # type: ignore[assignment]
        return phases

    def _forget(self, count: int) -> None:
        """Drop the first `count` transitions, read and needed by no later step."""
        if count <= 0:
            return
        held, marks = self._held, self.marks
        if marks is not None:
            for _, mark, _ in held[:count]:
                if mark is not None:
                    marks.release(mark)
        del held[:count]
