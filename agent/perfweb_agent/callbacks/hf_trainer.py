"""`PerfwebCallback` for the Hugging Face `Trainer` (imports transformers)."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from perfweb_agent.callbacks.bridge import AgentBridge, is_loss

__all__ = ["PerfwebCallback"]

LEARNING_RATE_KEYS = ("learning_rate", "grad_norm")  # sent beside every key holding "loss"
SUMMARY_KEY = "train_runtime"  # the trainer's end-of-training summary: not a point in time


class PerfwebCallback(TrainerCallback):
    """Names the run after `args.run_name` (unless the agent was given a name), marks the
    train and eval phases, and sends what the trainer logs as loss (`loss`, `eval_loss`),
    learning rate and gradient norm as scalars. It never marks steps: the agent times the
    optimizer's steps, with or without this callback."""

    def __init__(self) -> None:
        self.bridge = AgentBridge("transformers")

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.bridge.name_run(getattr(args, "run_name", None), source="args.run_name")
        self.bridge.enter("train")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.bridge.leave("train")

    # Evaluation begins right after the step (or epoch) whose end asked for it; a
    # trainer.evaluate() of its own begins at its first prediction step.
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if getattr(control, "should_evaluate", False):
            self.bridge.enter("eval")

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if getattr(control, "should_evaluate", False):
            self.bridge.enter("eval")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.bridge.in_phase("eval"):
            self.bridge.enter("eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.bridge.leave("eval")

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any, **kwargs: Any) -> None:
        self.bridge.leave("eval")

    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or SUMMARY_KEY in logs:
            return
        self.bridge.scalars(
            (k, v) for k, v in logs.items() if is_loss(k) or k in LEARNING_RATE_KEYS
        )
