"""Tape benchmarks against PyTorch CPU, measured in the same run, printed as a table.

1. Per-node overhead: a chain of 1000 small elementwise ops (forward + backward).
2. One MLP autoencoder training step: 784-128-32-128-784, batch 64, float64, Adam.

Run: python benchmarks/bench_tape.py [--repeat N]. PyTorch is optional (pip install torch==2.13.0);
without it only our numbers print.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from core import Tape, ops, optim


def best_of(fn, repeat: int) -> float:
    fn()  # warm up (and compile / load native kernels)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _step_tape(i, h, x, transcendental):
    k = i % 4
    if k == 0:
        return ops.tanh(h) if transcendental else h * 0.5
    return h + x if k == 1 else (-h if k == 2 else ops.relu(h))


def _step_torch(torch, i, h, x, transcendental):
    k = i % 4
    if k == 0:
        return torch.tanh(h) if transcendental else h * 0.5
    return h + x if k == 1 else (-h if k == 2 else torch.relu(h))


def chain_tape(n_ops: int = 1000, transcendental: bool = False):
    x0 = np.linspace(-1, 1, 16)

    def run():
        t = Tape()
        x = t.param(x0)
        h = x
        for i in range(n_ops):
            h = _step_tape(i, h, x, transcendental)
        t.backward(ops.sum(h))
    return run


def chain_torch(torch, n_ops: int = 1000, transcendental: bool = False):
    x0 = torch.linspace(-1, 1, 16, dtype=torch.float64)

    def run():
        x = x0.clone().requires_grad_(True)
        h = x
        for i in range(n_ops):
            h = _step_torch(torch, i, h, x, transcendental)
        h.sum().backward()
    return run


DIMS = (784, 128, 32, 128, 784)


def mlp_tape():
    from core.workloads import MLP

    wl = MLP(dims=DIMS, batch_size=64, rank=16)
    opt = optim.Adam(wl.tape, lr=1e-3)
    opt.add_all()
    batch = wl.batch(0)  # one fixed batch, as the PyTorch side uses

    def run():
        loss = wl.record(0, batch=batch)
        wl.tape.backward(loss)
        opt.step()
    return run


def mlp_torch(torch):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(DIMS[:-1], DIMS[1:], strict=False):
        layers += [torch.nn.Linear(a, b, dtype=torch.float64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, DIMS[0], dtype=torch.float64)

    def run():
        opt.zero_grad()
        loss = ((model(x) - x) ** 2).mean()
        loss.backward()
        opt.step()
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    try:
        import torch
        torch.set_num_threads(2)
    except ImportError:
        torch = None
    rows = []
    for label, tr in (("1000-op chain muls/add/neg/relu, fwd+bwd, per node", False),
                      ("1000-op chain with tanh (refmath), per node", True)):
        ours = best_of(chain_tape(transcendental=tr), args.repeat)
        peer = best_of(chain_torch(torch, transcendental=tr), args.repeat) if torch else None
        rows.append((label, ours / 1000, peer and peer / 1000))
    ours = best_of(mlp_tape(), args.repeat)
    peer = best_of(mlp_torch(torch), args.repeat) if torch else None
    rows.append(("MLP AE 784-128-32-128-784 b64 f64 Adam step", ours, peer))
    print(f"{'benchmark':<52} {'tapescope':>12} {'pytorch':>12} {'ratio':>7}")
    for name, a, b in rows:
        ratio = f"{a / b:7.2f}" if b else "    n/a"
        bs = f"{b * 1e6:10.1f}us" if b else "         n/a"
        print(f"{name:<52} {a * 1e6:10.1f}us {bs} {ratio}")
    if torch:
        print(f"(pytorch {torch.__version__}, {torch.get_num_threads()} threads; median of "
              f"{args.repeat}; ratio = tapescope / pytorch, lower is better)")


if __name__ == "__main__":
    main()
