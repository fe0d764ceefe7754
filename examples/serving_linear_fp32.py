"""An inference server in eager fp32 with a Linear-dominated model (planted: model.quantization).

Requests of 16 rows go through a 4-layer MLP in eval() under inference_mode: autograd is off,
but every GEMM runs in fp32. `quantize=dynamic` (int8 nn.Linear) is the fix to measure:
    perf-agent ab --knob quantize=dynamic -- python examples/serving_linear_fp32.py
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import perfweb_agent

FEATURES, HIDDEN, CLASSES = 512, 2048, 10


def model() -> nn.Module:
    """An MLP classifier whose parameters are all in nn.Linear."""
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, FEATURES),
        nn.ReLU(),
        nn.Linear(FEATURES, CLASSES),
    )


def request(index: int, rows: int) -> torch.Tensor:
    """The same inputs for request `index` in every run (one generator seed per request)."""
    return torch.randn(rows, FEATURES, generator=torch.Generator().manual_seed(index))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    server = model().eval()
    served = 0
    with torch.inference_mode():
        for index in range(args.requests):
            served += int(server(request(index, args.rows)).argmax(-1).numel())
            # one request per step (perfweb_agent.step() is a no-op when not attached)
            perfweb_agent.step()
    print(f"served {served} rows")
