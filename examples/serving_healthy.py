"""A healthy CPU inference server: nothing left to fix worth 10%.

Requests arrive batched (64 rows each), the model runs in eval() under inference_mode, and
its nn.Linear layers are already int8 (dynamic quantisation, large enough calls for int8 to
pay). Attached and analysed, it gets no finding with an estimated gain of 10% or more, and
its report says the requests were observed (not a "healthy" verdict for an unseen run).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES, ROWS = 256, 512, 10, 64

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0, help="serve at least this long")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    fp32 = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    ).eval()
    with warnings.catch_warnings():  # torch.ao's notice that torchao is its successor
        warnings.simplefilter("ignore")
        server = torch.ao.quantization.quantize_dynamic(fp32, {nn.Linear}, dtype=torch.qint8)
    served, deadline = 0, time.monotonic() + args.seconds
    with torch.inference_mode():
        while time.monotonic() < deadline or served < 40:
            batch = torch.randn(ROWS, FEATURES, generator=torch.Generator().manual_seed(served))
            served += 1
            server(batch).argmax(-1)
    print(f"served {served} batches of {ROWS}")
