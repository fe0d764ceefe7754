"""Healthy control: in-memory tensors, defaults, plain training loop."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(6000, 256)
y = (X[:, 0] > 0).long()
loader = DataLoader(TensorDataset(X, y), batch_size=128, shuffle=True)
model = nn.Sequential(
    nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 2)
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
steps = 0
for epoch in range(8):
    for xb, yb in loader:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        steps += 1
print(f"{steps} steps, final loss {loss.item():.4f}")
