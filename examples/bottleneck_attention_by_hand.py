"""Planted bottleneck: attention written by hand (`attention.fused`).

A small self-attention model computes softmax(q k^T / sqrt(d)) v with two matmuls and a
softmax; `torch.nn.functional.scaled_dot_product_attention` computes the same in one fused
operator (1.35-2.2x faster on a 2-core CPU for these shapes).
"""

from __future__ import annotations

import math

import torch
from _common import parse_steps
from torch import nn

SEQUENCE, WIDTH, HEADS = 256, 64, 4


class HandAttention(nn.Module):
    """One self-attention layer, by hand, and a classifier on its mean."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        q, k, v = self.qkv(x).view(batch, SEQUENCE, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # the bottleneck
        mixed = torch.softmax(scores, dim=-1) @ v
        return self.out(mixed.transpose(1, 2).reshape(batch, SEQUENCE, WIDTH).mean(dim=1))


if __name__ == "__main__":
    steps = parse_steps(20)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = HandAttention()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, SEQUENCE, WIDTH)
    y = (x[:, 0, 0] > 0).long()
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"loss {float(loss.detach()):.4f}")
