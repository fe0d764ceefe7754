"""The framework-neutral half of the callbacks: what they tell the running agent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import perfweb_agent as agent
from perfweb_agent.core.logger import say_once
from perfweb_contract import protocol


class AgentBridge:
    """Phases, scalars and the run's name, passed to the agent running in this process (if
    any; without one every call does nothing, and one warning says how to attach)."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self._outer: list[str] = []  # the phases entered before the current one

    def agent(self) -> Any:
        """The running agent, or None."""
        running = agent.current()
        if running is None:
            say_once(
                "callback-without-agent",
                "%s callback: no agent is running in this process, so it sends nothing; run "
                "the script under `perf-agent attach` or call perfweb_agent.attach() first",
                self.framework,
            )
        return running

    def name_run(self, name: object, *, source: str) -> None:
        """The run takes `name` unless the agent was given one."""
        running = self.agent()
        if running is not None and isinstance(name, str) and name.strip():
            running.name_from_framework(name, source=f"{self.framework} {source}")
            running.facts.set("callbacks.framework", self.framework)

    def enter(self, phase: str) -> None:
        """The trainer enters `phase`; `leave(phase)` returns to the phase it was in."""
        running = self.agent()
        if running is None or running.signals.current_phase == phase:
            return
        self._outer.append(running.signals.current_phase)
        running.phase(phase)

    def leave(self, phase: str) -> None:
        """The trainer leaves `phase` (nothing if it is not in it)."""
        running = self.agent()
        if running is None or running.signals.current_phase != phase:
            return
        running.phase(self._outer.pop() if self._outer else "none")

    def in_phase(self, phase: str) -> bool:
        """Whether the agent's current phase is `phase`."""
        running = agent.current()
        return running is not None and running.signals.current_phase == phase

    def scalars(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Send the framework's metrics under scalar names (`eval/loss` -> `eval.loss`)."""
        running = self.agent()
        if running is None:
            return
        items = values.items() if isinstance(values, Mapping) else values
        named = {}
        for raw, value in items:
            name = protocol.scalar_name(str(raw))
            if name is not None:
                named[name] = value
        if named:
            running.log(named)


def is_loss(name: str) -> bool:
    """A metric a trainer logs as a loss (`loss`, `eval_loss`, `val/loss`, `train_loss_step`)."""
    return "loss" in name.lower()
