"""Class-based trainer; the dataset fetches each sample from a 'remote store' (simulated latency)."""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RemoteFeatureStore(Dataset):
    """Each record is fetched over the network; here the round trip is a sleep."""

    def __init__(self, n=1200, dim=64, latency_s=0.012):
        self.n, self.dim, self.latency_s = n, dim, latency_s

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        time.sleep(self.latency_s)  # network round trip
        g = torch.Generator().manual_seed(idx)
        x = torch.randn(self.dim, generator=g)
        return x, (x.sum() > 0).long()


class Trainer:
    def __init__(self, model, loader, lr=1e-3, epochs=1):
        self.model, self.loader, self.epochs = model, loader, epochs
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr)
        self.loss_fn = nn.CrossEntropyLoss()
        self.global_step = 0

    def train_step(self, batch):
        x, y = batch
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def fit(self):
        self.model.train()
        for _ in range(self.epochs):
            for batch in self.loader:
                self.last_loss = self.train_step(batch)
                self.global_step += 1
        return self


if __name__ == "__main__":
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 2)
    )
    loader = DataLoader(RemoteFeatureStore(), batch_size=16, shuffle=True, num_workers=0)
    t = Trainer(net, loader, epochs=2).fit()
    print(f"trainer finished: {t.global_step} steps, loss {t.last_loss.item():.4f}")
