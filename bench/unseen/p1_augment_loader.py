"""Image-ish classifier; per-sample augmentation in Python/numpy, DataLoader num_workers=0."""

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class NoisyPatches(Dataset):
    def __init__(self, n=1800):
        self.n = n
        self.rng_seed = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 48, 48)).astype(np.float32)
        # "augmentation": random crop, flip, jitter, blur written the slow way
        for _ in range(6):
            img = 0.25 * (
                np.roll(img, 1, axis=1)
                + np.roll(img, -1, axis=1)
                + np.roll(img, 1, axis=2)
                + np.roll(img, -1, axis=2)
            )
        if rng.random() < 0.5:
            img = img[:, :, ::-1].copy()
        img = (img - img.mean()) / (img.std() + 1e-6)
        img = img[:, 4:44, 4:44].copy()
        return torch.from_numpy(img), int(i % 10)


torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(32, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(NoisyPatches(), batch_size=32, shuffle=True, num_workers=0)
loss_fn = nn.CrossEntropyLoss()

steps = 0
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        steps += 1
print(f"done steps={steps} loss={loss.item():.3f}")
