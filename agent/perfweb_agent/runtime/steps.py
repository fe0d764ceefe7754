"""Step timing from the training thread: step boundaries and time blocked on data.

A step (or, for inference, a request/batch) ends at the first of these sources that the
script exercises, in this order of preference:

1. `perfweb_agent.step()` (`manual`): once called, the only source of boundaries;
2. the primary optimizer's `step()` (`optimizer`): the first optimizer ever seen to step (a
   GAN's second optimizer does not split the iteration in two);
3. the end of a backward pass (`backward`): loops that update weights by hand;
4. the end of a call of the primary outermost `nn.Module` in `eval()` or without grad
   (`module`): one request or batch of inference;
5. the start of the next DataLoader `__next__` (`dataloader`).

The first two emit at once. A lower source is only a candidate: its boundaries wait (at
most `CONFIRM_EVENTS` of them, or `CONFIRM_AFTER_S`) in case a better source fires, which
drops them (the backward of a loop that steps an optimizer must not count twice); then they
are confirmed and emitted together. A better source seen later still takes over. The time
spent inside DataLoader iterators' `__next__` between two boundaries is the step's data wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfweb_agent.core.buffer import StepBuffer
from perfweb_agent.runtime.anatomy import StepAnatomy
from perfweb_agent.runtime.served import AfterTraining

MANUAL, OPTIMIZER, BACKWARD, MODULE, DATALOADER = (
    "manual",
    "optimizer",
    "backward",
    "module",
    "dataloader",
)
SOURCES = (MANUAL, OPTIMIZER, BACKWARD, MODULE, DATALOADER)  # best first
PREFERENCE = {name: rank for rank, name in enumerate(SOURCES)}
# A candidate waits for this many boundaries (or seconds) before it counts; a backward
# waits longer, since gradient accumulation runs several backwards per optimizer step.
CONFIRM_EVENTS = {BACKWARD: 64, MODULE: 4, DATALOADER: 4}
CONFIRM_AFTER_S = {BACKWARD: 120.0, MODULE: 5.0, DATALOADER: 5.0}

BatchSink = Callable[[tuple[float, float]], None]  # gets (end wall time, batch size)


@dataclass(slots=True)
class _Chain:
    """Where the current step of one source started, and what it waited for data."""

    last: float | None = None
    first_fetch: float | None = None
    wait: float = 0.0
    batch: int | None = None
    # (end wall time, duration, data wait, batch size, start, end) of held boundaries
    pending: list[tuple[float, float, float, int | None, float, float]] = field(
        default_factory=list
    )
    since: float = 0.0  # clock of the first pending boundary

    def copy(self) -> _Chain:
        return _Chain(self.last, self.first_fetch, self.wait, self.batch)


class StepTimer:
    """Turns boundary and data-wait events into step records; cheap and lock-light."""

    def __init__(
        self,
        buffer: StepBuffer,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        batch_sink: BatchSink | None = None,
        anatomy: StepAnatomy | None = None,
    ) -> None:
        self.buffer = buffer
        # the phases of each step (agent/perfweb_agent/runtime/anatomy.py), on the same clock
        self.anatomy = anatomy if anatomy is not None else StepAnatomy(clock=clock)
        self.index = 0
        self.active = True
        self.source: str | None = None  # the source whose boundaries are counted
        self.training_seen = False  # an optimizer step or a backward happened
        # The index of the first training step when module calls (an evaluation pass, a
        # warm-up forward) were counted before the first optimizer step or backward: the
        # steps below it were not training steps (fact `steps.training_from`).
        self.training_from: int | None = None
        self.batch_sink = batch_sink
        self._clock = clock
        self._wall = wall
        self._origin = clock()
        self._chain = _Chain()
        self._candidate: _Chain | None = None
        self._candidate_source: str | None = None
        self._primary: int | None = None
        self.fetching = False  # inside a DataLoader `__next__` (its modules are not requests)
        self._fetch_open = False  # a DataLoader batch was handed out and its step is open
        self._module_batches = False  # a module call gave batch sizes: the loader's are moot
        # False once DataLoader batches matter neither as steps nor for their size: the
        # loader wrapper then skips fetch_started/fetch_done altogether
        self.wants_loader = True
        self.listeners: list[Callable[[int], None]] = []
        # In a forked child (silenced): asked at its first training step whether the child is
        # a rank of its own to report on (agent/perfweb_agent/runtime/forked.py); True resumes the
        # timing.
        self.wake_on_training: Callable[[], bool] | None = None
        # eval-mode calls of the model since the last training step (runtime/served.py)
        self.after_training = AfterTraining()
        # inside a framework's evaluation loop (runtime/eval_loops.py): its calls are no
        # requests served after training
        self.evaluating = 0
        self._forked_at: float | None = None

    @property
    def manual(self) -> bool:
        """True once `perfweb_agent.step()` was called."""
        return self.source == MANUAL

    # ------------------------------------------------------------------ events
    def data_wait(self, started: float, seconds: float) -> None:
        """The loop was blocked `seconds` in a DataLoader iterator, from `started`."""
        if not self.active:
            return
        chain = self._chain
        if chain.first_fetch is None:
            chain.first_fetch = started
        chain.wait += seconds
        chain = self._candidate  # type: ignore[assignment]
        if chain is not None:
            if chain.first_fetch is None:
                chain.first_fetch = started
            chain.wait += seconds

    def batch_size(self, size: int | None, *, from_module: bool) -> None:
        """The batch size of the current step (a module's input wins over a loader's)."""
        if size is None:
            return
        if from_module and not self._module_batches:
            self._module_batches = True
            self._update_wants_loader()
        chain = self._chain
        if from_module or chain.batch is None:
            chain.batch = size
        candidate = self._candidate
        if candidate is not None and (from_module or candidate.batch is None):
            candidate.batch = size

    def optimizer_stepped(self, optimizer: object) -> None:
        """Optimizer step post-hook: a boundary if it is the primary optimizer's step."""
        if not self.active and not self._woken():
            return
        self.training_seen = True
        key = id(optimizer)
        if self._primary is None:
            self._primary = key
        elif key != self._primary:
            return
        self.event(OPTIMIZER)

    def backward_done(self) -> None:
        """A backward pass ended."""
        if self.active or self._woken():
            self.training_seen = True
            self.event(BACKWARD)

    def module_called(self, started: float) -> None:
        """A call of the primary outermost module (in eval or without grad) ended."""
        if self.active:
            self.event(MODULE, started=started)

    def evaluation_started(self) -> None:
        """A framework's evaluation loop begins (they may nest: a test inside a fit)."""
        self.evaluating += 1

    def evaluation_ended(self) -> None:
        """The evaluation loop that began last ended."""
        self.evaluating = max(0, self.evaluating - 1)

    def fetch_started(self) -> None:
        """A DataLoader `__next__` begins: it ends the step of the previous batch."""
        if self._fetch_open and self.active:
            self._fetch_open = False
            self.event(DATALOADER)

    def fetch_done(self, size: int | None) -> None:
        """A DataLoader `__next__` handed out a batch of `size` samples (None: unknown)."""
        self._fetch_open = True
        self.batch_size(size, from_module=False)

    def _update_wants_loader(self) -> None:
        as_steps = self.source in (None, DATALOADER)
        self.wants_loader = as_steps or not self._module_batches

    def manual_step(self) -> None:
        """`perfweb_agent.step()`: from now on only explicit calls mark step boundaries."""
        if self.active:
            self.event(MANUAL)

    # ------------------------------------------------------------------ boundaries
    def event(self, source: str, *, started: float | None = None) -> None:
        """One boundary of `source`: counted, held as a candidate, or ignored."""
        if source == self.source:  # the usual case, first
            self.boundary(started=started)
            return
        rank = PREFERENCE[source]
        current = self.source
        if current is not None and rank > PREFERENCE[current]:
            if (
                source == MODULE
                and started is not None
                and current in (OPTIMIZER, BACKWARD)
                and not self.evaluating
            ):
                self._called_after_training(started)
            return
        if current is not None or source in (MANUAL, OPTIMIZER):
            if source != current:
                if current in (MODULE, DATALOADER) and source in (OPTIMIZER, BACKWARD):
                    self.training_from = self.index
                self.source = source
                self._drop_candidate()
                self._update_wants_loader()
                if source == BACKWARD and current in (MODULE, DATALOADER):
                    # The first backward after module-counted calls: its step ends at the
                    # optimizer step that follows (or the next backward), not twice.
                    return
            self.boundary(started=started)
            return
        self._hold(source, started)

    def _called_after_training(self, started: float) -> None:
        now = self._clock()
        self.after_training.called(self._wall(), now - started, self._chain.batch)

    def boundary(self, *, started: float | None = None) -> None:
        """Close the current step and open the next (a counted boundary)."""
        if self.source in (OPTIMIZER, BACKWARD):
            self.after_training.training_step()
        now = self._clock()
        chain = self._chain
        index, wall, duration, wait, start = self._step_of(chain, now, started)
        self.buffer.add(index, wall, duration, wait)
        anatomy = self.anatomy
        anatomy.boundary(now)
        anatomy.step(index, wall, start, now)
        batch = chain.batch
        if batch is not None and self.batch_sink is not None:
            self.batch_sink((wall, float(batch)))
        self._restart(chain, now)
        if self.listeners:
            self._notify()

    def finish(self) -> None:
        """At exit: a candidate still waiting counts (nothing better came), then stop."""
        if self.active and self._candidate is not None:
            self._confirm()
        self.active = False

    def facts(self) -> dict[str, Any]:
        """`steps.source` (the boundary used) and `workload.kind`, once anything was seen."""
        facts: dict[str, Any] = {}
        if self.source is not None:
            facts["steps.source"] = self.source
        if self.training_from is not None:  # module calls counted before the first training step
            facts["steps.training_from"] = self.training_from
        if self.training_seen:
            facts["workload.kind"] = "training"
        elif self.source is not None:
            facts["workload.kind"] = "inference"
        return facts

    def reset_after_fork(self) -> None:
        """A forked child (a DataLoader worker) records nothing, unless it trains and
        `wake_on_training` says it is a rank of its own."""
        self.active = False
        self.wake_on_training = None
        self._forked_at = self._clock()
        self.anatomy.reset_after_fork()

    def _woken(self) -> bool:
        """Silenced after a fork and a training step came: resume when the child reports, its
        first step timed from the fork (as a script's first step is from the agent's start)."""
        wake = self.wake_on_training
        if wake is None:
            return False
        self.wake_on_training = None  # asked once
        try:
            if not wake():
                return False
        except Exception:  # noqa: BLE001 - never raise into the training loop
            return False
        chain = self._chain
        chain.last = self._forked_at if self._forked_at is not None else self._clock()
        chain.first_fetch, chain.wait = None, 0.0
        self.anatomy.resume_after_fork()
        self.active = True
        return True

    # ------------------------------------------------------------------ internals
    def _hold(self, source: str, started: float | None) -> None:
        candidate = self._candidate
        if candidate is None or PREFERENCE[source] < PREFERENCE[self._candidate_source or ""]:
            candidate = self._candidate = self._chain.copy()
            self._candidate_source = source
        elif source != self._candidate_source:
            return
        now = self._clock()
        if not candidate.pending:
            candidate.since = now
        step = self._step_of(candidate, now, started)
        self.anatomy.boundary(now)
        candidate.pending.append((step[1], step[2], step[3], candidate.batch, step[4], now))
        self._restart(candidate, now)
        if (
            len(candidate.pending) >= CONFIRM_EVENTS[source]
            or now - candidate.since >= CONFIRM_AFTER_S[source]
        ):
            self._confirm()

    def _confirm(self) -> None:
        candidate, self._candidate = self._candidate, None
        if candidate is None:
            return
        self.source = self._candidate_source
        self._update_wants_loader()
        for wall, duration, wait, batch, start, end in candidate.pending:
            self.buffer.add(self.index, wall, duration, wait)
            self.anatomy.step(self.index, wall, start, end)
            if batch is not None and self.batch_sink is not None:
                self.batch_sink((wall, float(batch)))
            self.index += 1
        candidate.pending = []
        self._chain = candidate
        self._notify()

    def _drop_candidate(self) -> None:
        self._candidate = None
        self._candidate_source = None

    def _step_of(
        self, chain: _Chain, now: float, started: float | None
    ) -> tuple[int, float, float, float, float]:
        """(index, end wall time, duration, data wait, start) of the step `chain` ends now.

        A module call's step starts at the call (or at the data fetch that fed it), so that
        idle time between requests does not count as latency.
        """
        if chain.last is not None:
            start = chain.last
        elif chain.first_fetch is not None:
            start = chain.first_fetch
        else:
            start = self._origin
        if started is not None:
            fed = chain.first_fetch if chain.first_fetch is not None else started
            start = max(start, min(started, fed))
        return self.index, self._wall(), max(0.0, now - start), chain.wait, min(start, now)

    def _restart(self, chain: _Chain, now: float) -> None:
        if chain is self._chain:
            self.index += 1
        chain.last = now
        chain.first_fetch = None
        chain.wait = 0.0
        chain.batch = None

    def _notify(self) -> None:
        # over a copy: a listener may remove itself (the FLOPs count, once done), which
        # would skip the next one in the list (the profiler's window at that boundary)
        for listener in tuple(self.listeners):
            try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                listener(self.index)
            except Exception:  # noqa: BLE001 - never raise into the training loop
                pass
