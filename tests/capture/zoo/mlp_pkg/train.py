"""A tiny MLP run as a module (``python -m mlp_pkg.train``): ReLU first, so a kernel planted
in relu is the first op that can differ; Adam; the loss printed."""

import argparse

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.scale = 0.5
        self.fc1 = nn.Linear(6, 5)
        self.out = nn.Linear(5, 1)

    def forward(self, x):
        h = self.act(x) * self.scale
        return self.out(torch.tanh(self.fc1(h)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(1)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(4, 6), torch.randn(4, 1)
    for _ in range(a.steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        print(f"loss {loss.item()!r}")


if __name__ == "__main__":
    main()
