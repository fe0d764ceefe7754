"""Planted bottleneck: a tiny batch through many small layers (`launch.overhead`).

Batch size 1 through 48 layers of 16 units: each operator does almost no arithmetic, so the
framework's per-operator overhead (dispatch, autograd bookkeeping; kernel launches on a GPU)
sets the step time.
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, synthetic_batch, train
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    steps = parse_steps(200)
    torch.manual_seed(0)
    x, y = synthetic_batch(1024, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=1)  # the bottleneck: batch of 1
    print(f"loss {train(mlp(width=16, depth=48), loader, steps):.4f}")
