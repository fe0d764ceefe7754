"""Planted bottleneck: gradient accumulation under DDP without `no_sync()`
(`distributed.no_sync`).

Two CPU ranks (gloo) accumulate 4 micro-batches per optimizer step, but every micro-step's
backward all-reduces the whole gradient: 4 all-reduces per step where 1 would do.
`--no-sync` runs the same loop the right way (the control).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _common import mlp, synthetic_batch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

ACCUMULATE = 4  # micro-batches per optimizer step
WORLD = 2


def run(rank: int, store: str, steps: int, no_sync: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = DistributedDataParallel(mlp(width=512, depth=4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    batches = [synthetic_batch(16, rank * 100 + seed) for seed in range(8)]
    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(ACCUMULATE):
            x, y = batches[(step * ACCUMULATE + micro) % len(batches)]
            if no_sync and micro < ACCUMULATE - 1:
                with model.no_sync():  # the fix: all-reduce only on the last micro-step
                    (loss_fn(model(x), y) / ACCUMULATE).backward()
            else:
                (loss_fn(model(x), y) / ACCUMULATE).backward()  # the bottleneck
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--no-sync", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        mp.spawn(run, args=(store, args.steps, args.no_sync), nprocs=WORLD)
    print("done", file=sys.stdout)
