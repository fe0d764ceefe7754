"""Planted bottleneck: more DataLoader workers than cores (`dataloader.too_many_workers`).

Four workers plus the training process on a two-core host: the loop does not wait on data
(each batch is cheap), and the workers' processes only compete with the training thread
for the two cores.
"""

from __future__ import annotations

import torch
from _common import FEATURES, mlp, parse_steps, train
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    steps = parse_steps(30)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(20_000, FEATURES)
    data = TensorDataset(x, (x[:, 0] > 0).long())
    loader = DataLoader(data, batch_size=64, num_workers=4, shuffle=True)  # the bottleneck
    model = mlp(width=1024, depth=4)  # ~10 ms a step: the workers keep up easily
    print(f"loss {train(model, loader, steps, min_seconds=0):.4f}")
