"""Data-parallel training as users write it: DDP on gloo (CPU), a DistributedSampler over a
seeded dataset, SGD with momentum, the loss printed by every rank.

    torchrun --standalone --nproc-per-node 2 ddp.py --steps 3
"""

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60, help="seconds a rank waits for another")
    a = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=a.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=a.batch, sampler=sampler)
    model = DDP(Net(a.width))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = 0
    while step < a.steps:
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            print(f"rank {rank} step {step} loss {loss.item()!r}", flush=True)
            if step == a.steps:
                break
    # every rank past its last step before any tears its process group down (gloo aborts a
    # rank whose peer is gone mid-teardown: "terminate called without an active exception")
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
