"""Tabular regression MLP; someone pinned torch to one thread 'for reproducibility'."""

import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(0)
X = torch.randn(8192, 512)
Y = X[:, :8].sum(dim=1, keepdim=True)
model = nn.Sequential(
    nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
for epoch in range(8):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 256):
        b = perm[i : i + 256]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(X[b]), Y[b])
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f} ({(epoch + 1) * 32} steps)")
