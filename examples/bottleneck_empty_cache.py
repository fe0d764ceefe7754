"""Planted bottleneck: `torch.cuda.empty_cache()` every step (`memory.empty_cache_in_loop`).

On a GPU this hands the allocator's cached blocks back to the driver each step, and the next
step must cudaMalloc them again. On the CPU the call does nothing, but the agent counts it.
"""

from __future__ import annotations

import torch
from _common import mlp, parse_steps, synthetic_batch, train

if __name__ == "__main__":
    steps = parse_steps(60)
    torch.manual_seed(0)
    batches = [synthetic_batch(128, seed) for seed in range(16)]
    loss = train(
        mlp(width=256), batches, steps, after_step=torch.cuda.empty_cache
    )  # the bottleneck
    print(f"loss {loss:.4f}")
