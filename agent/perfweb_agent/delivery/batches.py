"""What the agent has to say, cut into envelopes: its start, its batches, its finish.

`Batches` owns the data between the training thread and the sender: the sample, step and
fact buffers, the devices to describe, the sanitiser that cleans every text before it goes
out (perfweb_agent.core.sanitize) and the batches' sequence number. The agent builds it and
hands `cut` to the Sender (perfweb_agent.delivery.sender), which calls it when a request is
due and knows nothing of what is inside. Writers (the training thread, the collectors) only
append to the buffers, under their own small locks; `cut` is called by one thread at a time
(the sender's sampler, and at exit the closing thread, for the finish, under the sender's
lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfweb_agent.core import sanitize
from perfweb_agent.core.buffer import FactBuffer, SampleBuffer, StepBuffer
from perfweb_agent.core.config import Settings
from perfweb_agent.delivery import transport
from perfweb_contract import layout, protocol
from perfweb_contract.layout import Envelope

FACT_REJECTED = "agent.rejected_requests"
FACT_REJECTED_LAST = "agent.rejected_last"

Body = Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the sender knows that a batch reports: how the server reads arrays, what the
    outbox dropped and what the server refused for good."""

    packed: bool = False  # the server said it reads packed arrays (its answer to start)
    dropped: int = 0  # samples dropped by the outbox (spill full)
    rejected: int = 0  # requests the server refused for good (4xx)
    last_rejection: str = ""


class Batches:
    """The buffers, facts, devices and sequence number of one agent, cut into envelopes."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        rank: int | None = None,
        start_body: Body | None = None,
        finish_body: Body | None = None,
        run_name: Callable[[], str | None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.samples = SampleBuffer(settings.max_buffered_samples)
        self.steps = StepBuffer()
        self.facts = FactBuffer()
        self.sanitizer = sanitize.Sanitizer()
        self._rank = rank
        self._start_body = start_body
        self._finish_body = finish_body  # None: the run's finish is not ours to send
        self._run_name = run_name  # a renaming, taken once
        self._wall = wall
        self._devices: list[dict[str, Any]] = []
        self._reported: dict[str, Any] = {}  # counter facts as last sent
        self._seq = 0
        self._started = False
        self._finished = False

    def __len__(self) -> int:
        """Samples and steps waiting for the next batch."""
        return len(self.samples) + len(self.steps)

    @property
    def devices(self) -> list[dict[str, Any]]:
        """The devices the next batch describes (a copy)."""
        return list(self._devices)

    def describe_devices(self, devices: list[dict[str, Any]]) -> None:
        """Describe these devices in the next batch (NVML's, once it has looked)."""
        self._devices = list(devices)

    @property
    def dropped(self) -> int:
        """Samples and steps the full buffers dropped since start."""
        return self.samples.dropped + self.steps.dropped

    def cut(
        self, delivery: Delivery = Delivery(), *, due: bool = True, final: bool = False
    ) -> Envelope | None:
        """The next envelope to send, or None when there is nothing to send now.

        The first call gives the start. Then a batch when `due` or once the buffers hold
        `max_batch_samples` (None if there is nothing in them); with `final` the finish,
        once (None without a finish body)."""
        if not self._started:
            self._started = True
            if self._start_body is not None:
                return Envelope(layout.KIND_START, transport.encode(self._start()))
        if final:
            return self._finish(delivery)
        if not due and len(self) < self.settings.max_batch_samples:
            return None
        return self._batch(delivery)

    def become(self, agent_id: str, *, rank: int | None) -> None:
        """A forked child that trains reports as an agent of its own (runtime/forked.py):
        this id and rank, its own start next, batches numbered from 0; the buffers stay,
        the hooks installed before the fork keep filling them."""
        self.agent_id, self._rank = agent_id, rank
        self._seq, self._started, self._finished = 0, False, False
        self._reported = {}

    def reset_after_fork(self) -> None:
        """In a forked child: fresh locks and nothing to send."""
        self.samples.reset_after_fork()
        self.steps.reset_after_fork()
        self.facts.reset_after_fork()

    def _start(self) -> dict[str, Any]:
        """The start body with its text cleaned and, if any was, the counts as facts."""
        assert self._start_body is not None
        body = self._start_body()
        clean = self.sanitizer.body(body, limits=sanitize.START_LENGTHS)
        devices = body.get("devices")
        if isinstance(devices, list):
            clean["devices"] = [self.sanitizer.device(d) for d in devices if isinstance(d, dict)]
        if self.sanitizer.count:
            clean["facts"] = {**(clean.get("facts") or {}), **self.sanitizer.facts()}
        return clean

    def _batch(self, delivery: Delivery) -> Envelope | None:
        metrics, count = self.samples.drain()
        steps = self.steps.drain(self._rank)
        facts = self.sanitizer.body(self.facts.drain(), field="facts")
        devices, self._devices = self._devices, []
        devices = [self.sanitizer.device(d) for d in devices]
        for series in metrics:
            series["device"], series["name"] = self.sanitizer.series_key(
                series["device"], series["name"]
            )
        facts.update(self._changed_counter_facts(delivery))
        run_name = self._run_name() if self._run_name is not None else None
        if not (metrics or steps or facts or devices or run_name):
            return None
        body: dict[str, Any] = {
            "run_id": self.settings.run_id,
            "agent_id": self.agent_id,
            "seq": self._seq,
            "sent_at": self._wall(),
            "metrics": metrics,
            "facts": facts,
            "devices": devices,
            "dropped": self.dropped + delivery.dropped,
        }
        if steps:
            body["steps"] = steps
            count += len(steps["index"])
        if run_name:
            body["run_name"] = self.sanitizer.text(
                run_name, field="run_name", max_length=protocol.RUN_NAME_MAX
            )
        if delivery.packed:  # read several times faster by the server, no larger gzipped
            protocol.pack_batch_arrays(body)
        envelope = Envelope(layout.KIND_BATCH, transport.encode(body), self._seq, count)
        self._seq += 1
        return envelope

    def _finish(self, delivery: Delivery) -> Envelope | None:
        if self._finished or self._finish_body is None:
            return None
        self._finished = True
        body = self._finish_body()
        body["produced"] = {
            "samples": self.samples.accepted,
            "steps": self.steps.accepted,
            "dropped": self.dropped + delivery.dropped,
            "rejected": delivery.rejected,  # requests the server refused for good
            "sanitized": self.sanitizer.count,  # values cleaned before sending
        }
        return Envelope(layout.KIND_FINISH, transport.encode(self.sanitizer.body(body)))

    def _changed_counter_facts(self, delivery: Delivery) -> dict[str, Any]:
        counters = self.sanitizer.facts()
        if delivery.rejected:
            counters[FACT_REJECTED] = delivery.rejected
            counters[FACT_REJECTED_LAST] = delivery.last_rejection
        changed = {k: v for k, v in counters.items() if self._reported.get(k) != v}
        self._reported.update(changed)
        return changed
