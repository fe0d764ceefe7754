"""A fixed-shape conv net served eagerly in NCHW (planted: inference.channels_last on a CPU,
cudnn.benchmark on a CUDA GPU).

Batches of 8 images of 3x32x32 (always the same shape) go through a small CNN in eval()
under inference_mode, in PyTorch's default NCHW memory format, with cuDNN's autotuner left
off on a GPU. `channels_last=true` is the fix to measure on a CPU:
    perf-agent ab --knob channels_last=true -- python examples/serving_conv_eager.py
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def model() -> nn.Module:
    """Four 3x3 convolutions, pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )


def request(index: int, device: str) -> torch.Tensor:
    """The same 8 images for request `index` in every run (one generator seed each)."""
    images = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(index))
    return images.to(device)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0, help="serve at least this long")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    torch.set_num_threads(1)
    server = model().eval().to(device)
    requests, images, deadline = 0, 0, time.monotonic() + args.seconds
    with torch.inference_mode():
        while time.monotonic() < deadline or requests < 40:
            images += int(server(request(requests, device)).argmax(-1).numel())
            requests += 1
    print(f"served {images} images in {requests} requests on {device}")
