"""A tiny CNN as users write it: argparse, BatchNorm in train mode, Dropout, SGD with momentum,
nesterov and weight decay, a seeded DataLoader, the loss printed (tests/capture)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8 * 2 * 2, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the model and its data cast to this type (no autocast)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    x = torch.randn(24, 1, 8, 8).to(getattr(torch, a.dtype))
    y = torch.randint(0, 3, (24,))
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True,
                        generator=torch.Generator().manual_seed(a.seed))
    model = Net().to(getattr(torch, a.dtype))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    model.train()
    for _ in range(a.epochs):
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            print(f"loss {loss.item()!r}")


if __name__ == "__main__":
    main()
