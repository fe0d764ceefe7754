"""Step timing from the training thread: step boundaries and time blocked on data.

A step ends when the script's primary optimizer steps (the first optimizer ever seen to
step; a GAN's second optimizer does not split the iteration in two), or when the script
calls `agent.step()` (which then becomes the only source of boundaries). The time spent
inside DataLoader iterators' `__next__` between two boundaries is the step's data wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.buffer import StepBuffer


class StepTimer:
    """Turns boundary and data-wait events into step records; cheap and lock-light."""

    def __init__(
        self,
        buffer: StepBuffer,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.buffer = buffer
        self.index = 0
        self.active = True
        self.manual = False
        self._clock = clock
        self._wall = wall
        self._origin = clock()
        self._last: float | None = None
        self._first_fetch: float | None = None
        self._wait = 0.0
        self._primary: int | None = None
        self.listeners: list[Callable[[int], None]] = []

    def data_wait(self, started: float, seconds: float) -> None:
        """The loop was blocked `seconds` in a DataLoader iterator, from `started`."""
        if not self.active:
            return
        if self._last is None and self._first_fetch is None:
            self._first_fetch = started
        self._wait += seconds

    def optimizer_stepped(self, optimizer: object) -> None:
        """Optimizer step post-hook: a boundary if it is the primary optimizer's step."""
        if not self.active or self.manual:
            return
        key = id(optimizer)
        if self._primary is None:
            self._primary = key
        elif key != self._primary:
            return
        self.boundary()

    def manual_step(self) -> None:
        """`agent.step()`: from now on only explicit calls mark step boundaries."""
        if not self.active:
            return
        if not self.manual:
            self.manual = True
        self.boundary()

    def boundary(self) -> None:
        """Close the current step and open the next."""
        now = self._clock()
        if self._last is not None:
            start = self._last
        elif self._first_fetch is not None:
            start = self._first_fetch
        else:
            start = self._origin
        duration = max(0.0, now - start)
        self.buffer.add(self.index, self._wall(), duration, self._wait)
        self.index += 1
        self._last = now
        self._wait = 0.0
        for listener in self.listeners:
            try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                listener(self.index)
            except Exception:  # noqa: BLE001 - never raise into the training loop
                pass

    def reset_after_fork(self) -> None:
        """A forked child (a DataLoader worker) records nothing."""
        self.active = False
