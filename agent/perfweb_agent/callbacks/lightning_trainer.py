"""`PerfwebLightningCallback` for Lightning's `Trainer` (imports lightning, else
pytorch_lightning)."""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package
    from pytorch_lightning import Callback  # type: ignore[assignment]

from perfweb_agent.callbacks.bridge import AgentBridge, is_loss

__all__ = ["PerfwebLightningCallback"]


class PerfwebLightningCallback(Callback):
    """Names the run after the trainer's first logger (`logger.name`, unless the agent was
    given a name), marks the train / eval (validation, sanity check included) / test /
    predict phases, and sends as scalars, every `log_every_n_steps` optimizer steps as
    Lightning logs: `loss` (what training_step returned) and `learning_rate` (the first
    optimizer's first parameter group); after each validation, the logged metrics whose
    name holds "loss" (`val_loss`). It never marks steps: the agent times the optimizer's."""

    def __init__(self) -> None:
        self.bridge = AgentBridge("lightning")
        self._last_logged_step = -1
        self._before_validation: dict[str, Any] = {}  # the values themselves, not ids

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        loggers = getattr(trainer, "loggers", None) or []
        if loggers:
            self.bridge.name_run(getattr(loggers[0], "name", None), source="logger.name")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.bridge.enter("train")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.bridge.leave("train")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        metrics = getattr(trainer, "callback_metrics", None) or {}
        self._before_validation = dict(metrics)
        self.bridge.enter("eval")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(trainer, "sanity_checking", False):
            # callback_metrics holds the training's metrics too: only what validation logged
            before, metrics = self._before_validation, getattr(trainer, "callback_metrics", {})
            self.bridge.scalars(
                (k, v) for k, v in (metrics or {}).items() if is_loss(k) and before.get(k) is not v
            )
        self.bridge.leave("eval")

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self.bridge.enter("test")

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self.bridge.leave("test")

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self.bridge.enter("predict")

    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self.bridge.leave("predict")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = getattr(trainer, "log_every_n_steps", 0) or 0
        step = getattr(trainer, "global_step", 0)
        if not every or step % every or step == self._last_logged_step:
            return  # not a logging step: reading the loss would wait for the GPU every step
        self._last_logged_step = step
        values: dict[str, Any] = {}
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            values["loss"] = loss.detach() if hasattr(loss, "detach") else loss
        optimizers = getattr(trainer, "optimizers", None) or []
        if optimizers and optimizers[0].param_groups:
            values["learning_rate"] = optimizers[0].param_groups[0].get("lr")
        self.bridge.scalars(values)
