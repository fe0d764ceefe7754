"""A small real CPU training run for the demo: synthetic data, a DataLoader, a few layers.

    perf-agent attach --server http://127.0.0.1:8000 --token T -- python examples/demo_train.py

Runs for `--minutes` (default 10) or `--steps`, whichever ends first, or until SIGTERM or
SIGINT, which end it after the current step, cleanly, the way a training script that can be
preempted stops; the script knows nothing about the agent.
"""

from __future__ import annotations

import argparse
import signal
import time
from types import FrameType

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticDataset(Dataset):
    """Random features with a learnable target; `delay` seconds of fake decoding per item."""

    def __init__(self, size: int, features: int, delay: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, features, generator=generator)
        weights = torch.randn(features, 1, generator=generator)
        self.y = (self.x @ weights).tanh()
        self.delay = delay

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        return self.x[index], self.y[index]


def build_model(features: int, hidden: int) -> nn.Module:
    """A few fully connected layers."""
    return nn.Sequential(
        nn.Linear(features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )


class StopRequest:
    """Set by SIGTERM or SIGINT; the loop ends after the step it is in."""

    def __init__(self) -> None:
        self.signal_name = ""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name

    def __bool__(self) -> bool:
        return bool(self.signal_name)


def main() -> int:
    """Train until the time or step budget is spent; print the final loss."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=0, help="0: no step limit")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--item-delay", type=float, default=0.0005, help="seconds per item")
    args = parser.parse_args()

    torch.manual_seed(0)
    dataset = SyntheticDataset(4096, 64, args.item_delay)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    model = build_model(64, args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    deadline = time.monotonic() + args.minutes * 60
    stop = StopRequest()
    step, loss = 0, torch.tensor(0.0)

    def done() -> bool:
        return bool(stop) or time.monotonic() >= deadline or bool(args.steps and step >= args.steps)

    while not done():
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 200 == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            if done():
                break
    stopped = f" (stopped by {stop.signal_name})" if stop else ""
    print(f"done: {step} steps{stopped}, final loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
