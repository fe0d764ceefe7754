"""The loss probe of an A/B round: records the script's loss so both arms can be compared.

Installed only when `PERF_AGENT_AB_LOSS_FILE` is set (the A/B engine sets it for each round).
The loss is the scalar tensor on which the script calls `.backward()`; its value is kept in
order and written as a JSON list at exit by the process that installed the probe (rank 0
only; forked DataLoader workers never write).
"""

from __future__ import annotations

import atexit
import functools
import json
import math
import os
from typing import Any

ENV_LOSS_FILE = "PERF_AGENT_AB_LOSS_FILE"
MAX_LOSSES = 100_000

_losses: list[float] = []


def install_from_env() -> bool:
    """Install the probe if `PERF_AGENT_AB_LOSS_FILE` is set; True when installed."""
    path = os.environ.get(ENV_LOSS_FILE, "")
    if not path or os.environ.get("RANK", "0") != "0":
        return False
    owner = os.getpid()
    atexit.register(_write, path, owner)
    from perfweb_agent.ab.knobs_torch import after_torch_import

    after_torch_import(_patch_backward)
    return True


def _patch_backward(torch: Any) -> None:
    original = torch.Tensor.backward

    @functools.wraps(original)
    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if self.numel() == 1 and len(_losses) < MAX_LOSSES:
                _losses.append(float(self.detach()))
        except Exception:
            pass  # a probe must never change the script's behaviour
        return original(self, *args, **kwargs)

    torch.Tensor.backward = backward


def _write(path: str, owner: int) -> None:
    if os.getpid() != owner:
        return
    finite = [x if math.isfinite(x) else None for x in _losses]
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(finite, handle)
    except OSError:
        pass


def read_losses(path: str) -> list[float]:
    """The losses a round recorded (empty when the probe saw none or wrote nothing)."""
    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except (OSError, ValueError):
        return []
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, int | float)]
