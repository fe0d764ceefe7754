"""Planted bottleneck: a DataLoader whose workers wait on storage (`dataloader.io_wait`).

Each sample takes ~3 ms of waiting (a sleep, like a read from slow storage or the network)
and almost no CPU; one worker feeds a fast model, so the loop waits on data while the
worker's CPU idles. More workers than cores pay here: they wait in parallel.
"""

from __future__ import annotations

import time

import torch
from _common import FEATURES, mlp, parse_steps, train
from torch.utils.data import DataLoader, Dataset


class StorageDataset(Dataset):
    """Samples read from slow storage: the time is spent waiting, not computing."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.003)
        x = torch.full((FEATURES,), float(index % 7) - 3.0)
        return x, (x[0] > 0).long()


if __name__ == "__main__":
    steps = parse_steps(60)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = DataLoader(StorageDataset(), batch_size=16, num_workers=1)  # the bottleneck
    print(f"loss {train(mlp(width=128), loader, steps, min_seconds=0):.4f}")
