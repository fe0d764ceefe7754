"""A request-at-a-time inference server (planted: inference.dynamic_batching).

A backlog of single-sample requests waits in a queue; the server takes them one by one and
calls the model on a batch of one each time, back to back. Each call pays the model's fixed
cost (Python, operator dispatch, reading the weights) for one sample: gathering the waiting
requests into batches of 8 serves several times the samples per second, at the cost of each
request waiting for its batch. Served with no `perfweb_agent.step()`: each call of the model is one
request to the agent.
    perf-agent attach --offline /tmp/perf -- python examples/serving_batch_of_one.py
    python -m perfweb_recommender analyze /tmp/perf
"""

from __future__ import annotations

import argparse
import collections
import time

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES = 64, 256, 10


def model() -> nn.Module:
    """A small MLP classifier."""
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0, help="serve at least this long")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    server = model().eval()
    pending = collections.deque(torch.randn(4096, FEATURES).unbind(0))  # the request queue
    served, deadline = 0, time.monotonic() + args.seconds
    with torch.inference_mode():
        while pending and (time.monotonic() < deadline or served < 200):
            sample = pending.popleft()
            served += int(server(sample.unsqueeze(0)).argmax(-1).numel())  # a batch of one
    print(f"served {served} requests")
