"""A tiny CPU training loop that is input-bound: each sample takes a while to "load".

With the DataLoader's num_workers=0 the loop waits on every batch; with workers the loading
overlaps. `--healthy` makes loading free (then num_workers cannot help much, and a knob
like cudnn_benchmark does nothing on the CPU). Seeded, so both arms see the same data.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, size: int, delay_s: float) -> None:
        self.size = size
        self.delay_s = delay_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)  # decoding / augmentation on the CPU
        g = torch.Generator().manual_seed(index)
        return torch.randn(16, generator=g), torch.tensor(index % 2, dtype=torch.long)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--healthy", action="store_true")
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    delay = 0.0 if args.healthy else 0.004
    loader = DataLoader(SlowDataset(4096, delay), batch_size=8, shuffle=False, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    step = 0
    while step < args.steps:
        for features, labels in loader:
            loss = loss_fn(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.healthy:
                time.sleep(0.01)  # the "GPU" work of a healthy loop, steady
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
