"""Facts only the training thread can tell, read in the first optimizer steps' post-hook.

- `cuda.training_device`: CUDA's current device is per thread; the agent's own thread always
  sees device 0, so the rank's real device is read where the script runs its steps.
- `ddp.unused_parameters` / `ddp.unused_parameter_names`: for a DDP model built with
  `find_unused_parameters=True`, the parameters that got no gradient in every checked step
  (grad still None after backward). Zero means the search is pure overhead; more than zero
  means the flag is needed (turning it off would make DDP fail).
- `distributed.reduce_per_step`, `distributed.broadcast_per_step`,
  `distributed.reduce_then_broadcast_per_step`: collective calls per step, and how often a
  tensor just `dist.reduce`d is then broadcast (one `all_reduce` does both).

Everything runs inside the script's own calls, does a bounded amount of work in the first
CHECK_STEPS steps only, and never lets an error reach the script.
"""

from __future__ import annotations

import functools
import importlib
import weakref
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once

CHECK_STEPS = 3  # optimizer steps inspected; a parameter unused in all of them is unused
MAX_NAMES = 5  # unused parameter names reported (the count is always complete)
MARK = "__perf_agent_training_facts__"


class TrainingThreadFacts:
    """Installs the optimizer post-hook and the collective counters; records the facts."""

    def __init__(self, facts: FactBuffer) -> None:
        self.facts = facts
        self.steps = 0
        self.reduces = 0
        self.broadcasts = 0
        self.reduce_then_broadcast = 0
        self._last_reduced: weakref.ref[Any] | None = None
        self._ddp: list[weakref.ref[Any]] = []
        self._unused: dict[int, set[str]] = {}  # id(ddp module) -> names unused in all steps
        self._handle: Any = None
        self._torch: Any = None

    def install(self, torch: Any) -> None:
        """Register the post-hook and wrap dist.reduce / dist.broadcast (once)."""
        self._torch = torch
        module = importlib.import_module("torch.optim.optimizer")
        self._handle = module.register_optimizer_step_post_hook(self._after_step)
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available():
            _wrap(dist, "reduce", self._count_reduce)
            _wrap(dist, "broadcast", self._count_broadcast)

    def watch_ddp(self, module: Any) -> None:
        """Check this DDP module's gradients in the next steps (find_unused_parameters=True)."""
        if getattr(module, "find_unused_parameters", False):
            self._ddp.append(weakref.ref(module))

    def _count_reduce(self, tensor: Any) -> None:
        self.reduces += 1
        self._last_reduced = weakref.ref(tensor)

    def _count_broadcast(self, tensor: Any) -> None:
        self.broadcasts += 1
        if self._last_reduced is not None and self._last_reduced() is tensor:
            self.reduce_then_broadcast += 1

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self.steps += 1
            self._record_device()
            self._check_unused()
            if self.steps >= CHECK_STEPS:
                self._record_counts()
                self._finish()
        except Exception as exc:  # noqa: BLE001 - the script's step must never see it
            say_once("training-facts", "agent training-thread facts failed: %s", exc)
            self._finish()

    def _record_device(self) -> None:
        cuda = self._torch.cuda
        if cuda.is_initialized():  # never the agent's call that creates a context
            self.facts.set("cuda.training_device", int(cuda.current_device()))

    def _check_unused(self) -> None:
        for ref in self._ddp:
            module = ref()
            if module is None:
                continue
            names = {n for n, p in module.named_parameters() if p.requires_grad and p.grad is None}
            key = id(module)
            self._unused[key] = names if key not in self._unused else self._unused[key] & names
        if self._unused:
            unused = sorted(set().union(*self._unused.values()))
            self.facts.set("ddp.unused_parameters", len(unused))
            self.facts.set("ddp.unused_parameter_names", ", ".join(unused[:MAX_NAMES]))
            self.facts.set("ddp.unused_checked_steps", self.steps)

    def _record_counts(self) -> None:
        if not (self.reduces or self.broadcasts):
            return
        self.facts.update(
            {
                "distributed.reduce_per_step": round(self.reduces / self.steps, 3),
                "distributed.broadcast_per_step": round(self.broadcasts / self.steps, 3),
                "distributed.reduce_then_broadcast_per_step": round(
                    self.reduce_then_broadcast / self.steps, 3
                ),
            }
        )

    def _finish(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._ddp.clear()


def _wrap(owner: Any, name: str, count: Callable[[Any], None]) -> None:
    original = getattr(owner, name, None)
    if original is None or getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        try:  # noqa: SIM105 - a plain try is cheaper on a per-call path
            count(tensor)
        except Exception:  # noqa: BLE001
            pass
        return original(tensor, *args, **kwargs)

    setattr(wrapper, MARK, True)
    setattr(owner, name, wrapper)
