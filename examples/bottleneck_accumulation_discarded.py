"""Planted bug: gradient accumulation that zeroes the gradients every micro-step
(`training.accumulation_discarded`).

The loop means to accumulate 4 micro-batches per optimizer step, but `zero_grad()` sits
inside the micro-step loop: each backward's gradients are thrown away by the next
micro-step, and every step trains on its last micro-batch only.
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, synthetic_batch
from torch import nn

ACCUMULATE = 4  # micro-batches per optimizer step

if __name__ == "__main__":
    steps = parse_steps(20)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = mlp(width=128)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    batches = [synthetic_batch(64, seed) for seed in range(16)]
    loss = torch.tensor(0.0)
    for step in range(steps):
        for micro in range(ACCUMULATE):
            x, y = batches[(step * ACCUMULATE + micro) % len(batches)]
            optimizer.zero_grad()  # the bug: inside the micro-step loop
            loss = loss_fn(model(x), y) / ACCUMULATE
            loss.backward()
        optimizer.step()
    print(f"loss {float(loss.detach()):.4f}")
