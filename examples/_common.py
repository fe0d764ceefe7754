"""Shared pieces of the planted-bottleneck examples: a small model, data, a training loop.

Each example is a plain CPU training script; attach the agent to see its diagnosis:
    perf-agent attach --offline /tmp/perf -- python examples/bottleneck_dataloader.py
    python -m perfweb_recommender analyze /tmp/perf
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable

import torch
from torch import nn

FEATURES = 64
# Train at least this long: the agent samples facts every few seconds, so a run shorter than
# that would end before its per-step counts (empty_cache calls, ...) are reported.
MIN_SECONDS = 7.0


def parse_steps(default: int = 120) -> int:
    """The `--steps N` option every example takes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=default)
    return parser.parse_args().steps


def mlp(width: int = 256, depth: int = 3) -> nn.Module:
    """A small classifier: `depth` hidden layers of `width` units."""
    layers: list[nn.Module] = []
    size = FEATURES
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    layers.append(nn.Linear(size, 2))
    return nn.Sequential(*layers)


def synthetic_batch(batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch of features and binary labels."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, FEATURES, generator=g)
    return x, (x[:, 0] > 0).long()


def train(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    *,
    after_step: object = None,
    min_seconds: float = MIN_SECONDS,
) -> float:
    """SGD over `batches` (cycled) for at least `steps` steps and `min_seconds`; the last
    loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    step, loss = 0, torch.tensor(0.0)
    deadline = time.monotonic() + min_seconds

    def done() -> bool:
        return step >= steps and time.monotonic() >= deadline

    while not done():
        for x, y in batches:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if callable(after_step):
                after_step()
            step += 1
            if done():
                break
    return float(loss.detach())
