"""A tiny UNet as users write it: argparse, ConvTranspose2d, F.interpolate, GroupNorm, SiLU,
AdamW, a seeded batch, the loss printed (tests/capture)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(2, cout)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1 = Down(1, 4)
        self.d2 = Down(4, 8)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.d3 = Down(8, 4)
        self.out = nn.Conv2d(4, 1, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        u = self.up(b)
        u = u + F.interpolate(b[:, :4], scale_factor=2, mode="nearest")
        return self.out(self.d3(torch.cat([a, u], dim=1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = UNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(2, 1, 8, 8)
    target = torch.randn(2, 1, 8, 8)
    for step in range(a.steps):
        loss = F.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item()!r}")


if __name__ == "__main__":
    main()
