"""Planted bottleneck: the model is wrapped in `nn.DataParallel` (`distributed.dataparallel`).

On a GPU machine DataParallel scatters, replicates and gathers from one Python thread every
step; DistributedDataParallel with one process per GPU avoids that. (On the CPU it simply
calls the module, but the wrapper is there and the agent reports it.)
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, synthetic_batch, train
from torch import nn

if __name__ == "__main__":
    steps = parse_steps(60)
    torch.manual_seed(0)
    model = nn.DataParallel(mlp(width=256))  # the bottleneck
    batches = [synthetic_batch(128, seed) for seed in range(16)]
    print(f"loss {train(model, batches, steps):.4f}")
