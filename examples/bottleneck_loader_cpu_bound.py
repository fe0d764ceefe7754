"""Planted bottleneck: a DataLoader whose workers already use every core
(`dataloader.cpu_bound`).

Each sample costs ~1.5 ms of pure-Python CPU work (like a decode and augmentation in
Python); two workers on a two-core host keep both cores busy and the loop still waits on
data. More workers cannot help: each sample must get cheaper.
"""

from __future__ import annotations

import torch
from _common import FEATURES, mlp, parse_steps, train
from torch.utils.data import DataLoader, Dataset


class DecodedDataset(Dataset):
    """Samples that cost CPU to produce, in Python."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        value = 0
        for i in range(20_000):  # the per-sample CPU work
            value = (value * 31 + i + index) % 1_000_003
        x = torch.full((FEATURES,), float(value % 7) - 3.0)
        return x, (x[0] > 0).long()


if __name__ == "__main__":
    steps = parse_steps(20)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(DecodedDataset(), batch_size=16, num_workers=2)  # the bottleneck
    print(f"loss {train(mlp(width=128), loader, steps, min_seconds=0):.4f}")
