"""A tiny request-serving loop: requests arrive on a queue, model in eval() but no no_grad/inference_mode."""

import queue
import threading
import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 16)
)
model.eval()

requests = queue.Queue(maxsize=64)
N_REQ = 35000


def client():
    for i in range(N_REQ):
        requests.put((i, torch.randn(8, 256)))
    requests.put(None)


def handle(batch):
    logits = model(batch)  # autograd still records the graph here
    return logits.softmax(-1).argmax(-1)


threading.Thread(target=client, daemon=True).start()
served = 0
t0 = time.perf_counter()
while True:
    item = requests.get()
    if item is None:
        break
    rid, x = item
    pred = handle(x)
    served += 1
print(f"served {served} requests in {time.perf_counter() - t0:.1f}s")
