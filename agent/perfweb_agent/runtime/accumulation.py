"""How the backward passes of one optimizer step add up: gradient accumulation, read from the
script's own calls in its first CHECK_STEPS optimizer steps.

- `training.backward_per_step`: backward passes per optimizer step (> 1: the script
  accumulates gradients over micro-batches).
- `training.zero_grad_discards_per_step`: the share of those steps in which the stepping
  optimizer's gradients were zeroed *between* two of its backward passes — everything
  accumulated before the `zero_grad()` is thrown away, and the step trains on the last
  micro-batch(es) only.
- `ddp.synced_backward_per_step`: forwards of a DistributedDataParallel module per optimizer
  step that will all-reduce their gradients in the backward (grad enabled, outside
  `no_sync()`): above 1, every micro-step of an accumulation pays a full all-reduce.
- `training.accumulation_checked_steps`: how many optimizer steps these facts describe.

A `zero_grad()` counts against a step only when it clears that optimizer's own gradients:
the same optimizer, or a module that holds one of its parameters (a GAN's second optimizer
zeroing its own model between the two backwards is fine). Each hook is a plain counter on
the script's own call, inert after the check, and never lets an error reach the script.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime.wrapping import wrap_once

CHECK_STEPS = 4  # optimizer steps inspected (each may hold many micro-step backwards)
MAX_ZEROERS = 8  # zero_grad callers remembered per step (bounded memory)
MARK = "__perf_agent_accumulation__"


class AccumulationWatch:
    """Counts backwards, zero_grads and synced DDP forwards between optimizer steps."""

    def __init__(self, facts: FactBuffer) -> None:
        self.facts = facts
        self.active = True
        self.steps = 0
        self.backwards = 0
        self.discarding_steps = 0
        self.synced_forwards = 0
        self._backwards_since_step = 0
        self._zeroed: list[Any] = []  # zero_grad callers since the last backward of this step
        self._discarding: list[Any] = []  # callers that zeroed between two backwards
        self._grad_enabled: Callable[[], bool] = lambda: True

    def install(self, torch: Any) -> None:
        """Wrap backward, Optimizer/Module.zero_grad and DDP.forward; add a step post-hook."""
        self._grad_enabled = torch.is_grad_enabled
        _wrap(torch.autograd, "backward", self._after_call(self.backward_done))
        _wrap(torch.optim.Optimizer, "zero_grad", self._before_call(self.zero_grad))
        _wrap(torch.nn.Module, "zero_grad", self._before_call(self.zero_grad))
        ddp = getattr(getattr(torch.nn, "parallel", None), "DistributedDataParallel", None)
        if ddp is not None:
            _wrap(ddp, "forward", self._before_call(self.ddp_forward))
        module = importlib.import_module("torch.optim.optimizer")
        module.register_optimizer_step_post_hook(self._after_step)

    # ------------------------------------------------------------------ events
    def backward_done(self, *_: Any) -> None:
        """A backward pass ended: a zero_grad since the previous one discarded its gradients."""
        if self._backwards_since_step and self._zeroed:
            self._discarding += self._zeroed[: MAX_ZEROERS - len(self._discarding)]
        self._zeroed.clear()
        self._backwards_since_step += 1
        self.backwards += 1

    def zero_grad(self, owner: Any, *_: Any) -> None:
        """`owner` (an optimizer or a module) zeroes its gradients."""
        if self._backwards_since_step and len(self._zeroed) < MAX_ZEROERS:
            self._zeroed.append(owner)

    def ddp_forward(self, module: Any, *_: Any) -> None:
        """A DDP forward: it all-reduces in its backward unless inside `no_sync()`."""
        if getattr(module, "require_backward_grad_sync", True) and self._grad_enabled():
            self.synced_forwards += 1

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        try:
            self.steps += 1
            if any(_clears(owner, optimizer) for owner in self._discarding):
                self.discarding_steps += 1
            self._backwards_since_step = 0
            self._zeroed.clear()
            self._discarding.clear()
            if self.steps >= CHECK_STEPS:
                self._record()
                self._finish()
        except Exception as exc:  # noqa: BLE001 - the script's step must never see it
            say_once("accumulation", "agent accumulation facts failed: %s", exc)
            self._finish()

    def _record(self) -> None:
        facts = {
            "training.backward_per_step": round(self.backwards / self.steps, 3),
            "training.zero_grad_discards_per_step": round(self.discarding_steps / self.steps, 3),
            "training.accumulation_checked_steps": self.steps,
        }
        if self.synced_forwards:
            facts["ddp.synced_backward_per_step"] = round(self.synced_forwards / self.steps, 3)
        self.facts.update(facts)

    def _finish(self) -> None:
        # The post-hook stays registered (inert): removing a hook while torch iterates over
        # the step's post-hooks would break that iteration for the hooks after it.
        self.active = False
        self._zeroed.clear()
        self._discarding.clear()

    # ------------------------------------------------------------------ wrappers
    def _before_call(self, record: Callable[..., None]) -> Callable[[Any], Any]:
        return self._make(record, before=True)

    def _after_call(self, record: Callable[..., None]) -> Callable[[Any], Any]:
        return self._make(record, before=False)

    def _make(self, record: Callable[..., None], *, before: bool) -> Callable[[Any], Any]:
        watch = self

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if not watch.active:
                    return original(*args, **kwargs)
                if before:
                    _quietly(record, args)
                result = original(*args, **kwargs)
                if not before:
                    _quietly(record, args)
                return result

            return wrapper

        return make


def _clears(owner: Any, optimizer: Any) -> bool:
    """Whether `owner`'s zero_grad cleared gradients that `optimizer` steps with."""
    if owner is optimizer:
        return True
    parameters = getattr(owner, "parameters", None)
    if not callable(parameters) or getattr(owner, "param_groups", None) is not None:
        return False  # another optimizer: its own parameters
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return any(id(p) in stepped for p in parameters())


def _quietly(record: Callable[..., None], args: tuple[Any, ...]) -> None:
    try:
        record(*args)
    except Exception as exc:  # noqa: BLE001 - never raise into the script
        say_once(f"accumulation-{record.__name__}", "agent hook failed: %s", exc)


def _wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    wrap_once(owner, name, make, mark=MARK)
