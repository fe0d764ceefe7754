"""A 'mixture of tiny experts' MLP with hundreds of small parameter tensors; Adam with foreach=False."""

import torch
from torch import nn


class TinyExperts(nn.Module):
    def __init__(self, n_experts=96, dim=32):
        super().__init__()
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.Linear(dim, dim))
            for _ in range(n_experts)
        )
        self.gate = nn.Linear(dim, n_experts)
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        w = torch.softmax(self.gate(x), dim=-1)
        out = 0
        for i in range(0, len(self.experts), 8):  # only a few experts are evaluated per step
            out = out + w[:, i : i + 1] * self.experts[i](x)
        return self.head(out)


torch.manual_seed(0)
model = TinyExperts()
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
x = torch.randn(64, 32)
y = torch.randn(64, 1)
for step in range(3000):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print(f"{step + 1} steps, params={sum(1 for _ in model.parameters())} final loss={loss.item():.4f}")
