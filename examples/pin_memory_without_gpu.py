"""A CUDA-only setting on a CPU run: `pin_memory=True` with no GPU (`dataloader.pin_memory`,
informational: nothing to gain here).

Pinned (page-locked) memory only speeds up copies to a GPU; on a CPU-only host torch skips
it. The loop itself is healthy: it must get no finding worth 10%.
"""

from __future__ import annotations

import torch
from _common import FEATURES, mlp, parse_steps, train
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    steps = parse_steps(25)
    torch.manual_seed(0)
    x = torch.randn(8_192, FEATURES)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    loader = DataLoader(data, batch_size=128, pin_memory=True)  # CUDA-only
    print(f"loss {train(mlp(width=1024), loader, steps, min_seconds=0):.4f}")
