"""Frameworks' evaluation loops: the model's calls inside them evaluate, they serve nothing.

A trainer that evaluates after its last optimizer step (the Hugging Face `Trainer` at its
last `eval_steps`, Lightning's validation at the end of its last epoch) calls the model in
eval() and without grad, as a script that serves requests does; such calls after training
are held as requests served (agent/perfweb_agent/runtime/served.py). Once the framework's
module is imported (by the script, never by the agent), its evaluation entry point is
wrapped: while it runs, the step timer holds no call as a request (`StepTimer.evaluating`).
A prediction loop (`Trainer.predict`, Lightning's predict) is not wrapped: its calls are the
batches a script serves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from perfweb_agent.core.importhook import when_imported
from perfweb_agent.runtime.steps import StepTimer
from perfweb_agent.runtime.wrapping import wrap_once

MARK = "__perf_agent_evaluation__"
# (module, class, method): each framework's evaluation entry point
ENTRY_POINTS = (
    ("transformers.trainer", "Trainer", "evaluate"),  # also what train() calls at eval_steps
    ("lightning.pytorch.loops.evaluation_loop", "_EvaluationLoop", "run"),  # validate, test
    ("pytorch_lightning.loops.evaluation_loop", "_EvaluationLoop", "run"),
)


class EvaluationLoops:
    """Wraps the evaluation entry points of the frameworks the script imports."""

    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer

    def install(self) -> None:
        """Wrap each entry point once its module is imported (now, if it already is)."""
        for module, cls, method in ENTRY_POINTS:
            when_imported(module, self._wrapper(cls, method))

    def _wrapper(self, cls: str, method: str) -> Callable[[ModuleType], None]:
        timer = self._timer

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def evaluating(*args: Any, **kwargs: Any) -> Any:
                with contextlib.suppress(Exception):
                    timer.evaluation_started()
                try:
                    return original(*args, **kwargs)
                finally:
                    with contextlib.suppress(Exception):
                        timer.evaluation_ended()

            return evaluating

        def hook(module: ModuleType) -> None:
            owner = getattr(module, cls, None)
            if owner is not None:
                wrap_once(owner, method, make, mark=MARK)

        return hook
