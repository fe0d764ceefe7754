"""A small transformer encoder trained on a toy copy task; attention written by hand."""

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.dk)
        att = att.softmax(dim=-1)
        y = att @ v
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyEncoder(nn.Module):
    def __init__(self, vocab=64, d=64, heads=4, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.blocks(self.emb(idx)))


torch.manual_seed(0)
model = TinyEncoder()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(120):
    idx = torch.randint(0, 64, (8, 512))
    logits = model(idx)
    loss = nn.functional.cross_entropy(logits.view(-1, 64), idx.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"step {step + 1} loss {loss.item():.3f}")
