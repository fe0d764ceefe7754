"""Planted bottleneck: an input-bound loop (`dataloader.num_workers`).

Every sample takes ~2 ms to "decode" and the DataLoader has num_workers=0, so the training
loop spends most of each step waiting for the next batch.
"""

from __future__ import annotations

import time

import torch
from _common import FEATURES, mlp, parse_steps, train
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Samples that are slow to produce, like JPEG decoding plus augmentation."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.002)
        x = torch.randn(FEATURES, generator=torch.Generator().manual_seed(index))
        return x, (x[0] > 0).long()


if __name__ == "__main__":
    steps = parse_steps(60)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(SlowDataset(), batch_size=16, num_workers=0)  # the bottleneck
    print(f"loss {train(mlp(), loader, steps):.4f}")
