"""Healthy control: batched serving under inference_mode."""

import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 16)
).eval()
batches = [torch.randn(64, 256) for _ in range(40)]
served = 0
t0 = time.perf_counter()
with torch.inference_mode():
    for rnd in range(100):
        for b in batches:
            out = model(b).argmax(-1)
            served += b.shape[0]
print(f"served {served} samples in {time.perf_counter() - t0:.1f}s")
