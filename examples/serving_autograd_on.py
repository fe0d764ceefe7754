"""An inference server that forgot no_grad (planted: inference.autograd_enabled).

Small requests (4 rows) through an MLP in eval(), with autograd recording every forward.
`inference_mode=true` is the fix to measure:
    perf-agent ab --knob inference_mode=true -- python examples/serving_autograd_on.py
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import perfweb_agent

FEATURES = 64

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(FEATURES, FEATURES), nn.LayerNorm(FEATURES), nn.GELU()]
    server = nn.Sequential(*layers, nn.Linear(FEATURES, 2)).eval()
    served = 0
    for index in range(args.requests):
        batch = torch.randn(4, FEATURES, generator=torch.Generator().manual_seed(index))
        served += int(server(batch).argmax(-1).numel())  # autograd records this forward
        perfweb_agent.step()
    print(f"served {served} rows")
