"""Requests after training: a script that trains, then serves (a training loop, then a loop
of inference requests on the same model) is timed in both parts.

Once the training steps count (optimizer steps or backwards), a call of the primary module
in eval() or without grad is no step boundary (agent/perfweb_agent/runtime/steps.py): it is held
here, its end time, its time in the model and its batch size. Each training step forgets what was
held since the previous one (an evaluation pass between steps); what is left when the script
ends followed the last optimizer step: the requests it served after training (or a final
evaluation pass), sent at exit as the series `request.duration` and `request.batch_size`
of the rank's device (perfweb_contract.protocol), and counted in the fact
`serving.after_training`. Eval-mode calls of another instance of the model's class after
the last training step (a copy that serves) are not timed; their count is the fact
`serving.untimed_after_training`, which the report lists among what it could not see.
"""

from __future__ import annotations

from collections import deque

from perfweb_agent.core.buffer import FactBuffer, Sample
from perfweb_contract import protocol

MAX_HELD = 10_000  # calls held after the last optimizer step; beyond, the oldest go (counted)


class AfterTraining:
    """Calls of the primary module since the last training step (training thread only)."""

    def __init__(self, max_held: int = MAX_HELD) -> None:
        self.calls: deque[tuple[float, float, int | None]] = deque(maxlen=max_held)
        self.count = 0  # since the last training step, the dropped ones included
        # eval calls of another instance of the model's class since then (not timed): a
        # copy the script serves after training is a part the report says it could not see
        self.untimed = 0

    def called(self, wall_end: float, seconds: float, batch: int | None) -> None:
        """One call of the model ended at `wall_end`, after `seconds` in it."""
        self.calls.append((wall_end, seconds, batch))
        self.count += 1

    def training_step(self) -> None:
        """A training step: what was held was an evaluation between steps."""
        if self.count or self.untimed:
            self.calls.clear()
            self.count = self.untimed = 0

    def take(self, facts: FactBuffer, device: str) -> list[Sample]:
        """At close: the calls held, as `request.*` samples on `device`, and their counts as
        facts (the untimed ones' too)."""
        if self.untimed:
            facts.set(protocol.FACT_SERVED_UNTIMED, self.untimed)
        if not self.count:
            return []
        facts.set(protocol.FACT_SERVED, self.count)
        taken: list[Sample] = []
        while self.calls:
            wall_time, seconds, batch = self.calls.popleft()
            taken.append((device, protocol.REQUEST_DURATION, wall_time, seconds))
            if batch is not None:
                taken.append((device, protocol.REQUEST_BATCH_SIZE, wall_time, float(batch)))
        return taken
