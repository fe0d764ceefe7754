"""Gradient accumulation over 4 micro-batches, with zero_grad() inside the micro-step loop (a bug)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
ACCUM = 4
data = [(torch.randn(32, 128), torch.randint(0, 10, (32,))) for _ in range(64)]

updates = 0
for epoch in range(150):
    for i, (x, y) in enumerate(data):
        opt.zero_grad()  # BUG: should be once per optimizer step
        loss = loss_fn(model(x), y) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            opt.step()
            updates += 1
print(f"updates={updates} last loss={loss.item() * ACCUM:.4f}")
