"""An inference loop that seeds nothing: random weights and random requests on every run.

Only the A/B engine's seed (PERF_AGENT_AB_SEED) makes two runs of it see the same model and
the same requests; without it their outputs could not be compared.
"""

from __future__ import annotations

import torch
from torch import nn

if __name__ == "__main__":
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5)).eval()
    for _ in range(200):
        model(torch.randn(8, 32))  # eval() without no_grad: autograd records every call
