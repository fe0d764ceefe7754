"""Two ranks on one host, DDP over gloo, spawned with torch.multiprocessing."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    model = DDP(
        nn.Sequential(
            nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        x = torch.randn(64, 128)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"rank0 done 1000 steps loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
