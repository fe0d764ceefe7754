"""Framework callbacks: name the run after the trainer's, mark train/eval phases, and send
the loss and learning rate the trainer logs as scalars (series `scalar.<name>`).

    from perfweb_agent.callbacks import PerfwebCallback  # Hugging Face Trainer
    trainer = Trainer(..., callbacks=[PerfwebCallback()])

    from perfweb_agent.callbacks import PerfwebLightningCallback  # Lightning
    trainer = L.Trainer(..., callbacks=[PerfwebLightningCallback()])

They ride on the agent already running in the process (`perf-agent attach`, or
`perfweb_agent.attach()` before training) and never mark steps themselves: the agent times steps
from the optimizer as it does without them, so nothing is counted twice. Importing this
package needs neither framework; each callback imports its own when first named, and says
which package to install when it is missing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PerfwebCallback", "PerfwebLightningCallback"]

_WHERE = {
    "PerfwebCallback": ("perfweb_agent.callbacks.hf_trainer", "transformers", "transformers"),
    "PerfwebLightningCallback": (
        "perfweb_agent.callbacks.lightning_trainer",
        "lightning or pytorch_lightning",
        "lightning",
    ),
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'perfweb_agent.callbacks' has no attribute {name!r}")
    module_name, needs, package = where
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(
            f"perfweb_agent.callbacks.{name} needs {needs}, which this environment cannot import "
            f"({error}); install it (pip install {package}) or attach without the callback"
        ) from error
    return getattr(module, name)
