"""Tape benchmarks against PyTorch CPU, measured in the same run, printed as a table.

1. Per-node overhead: a chain of 1000 small elementwise ops on 16 float64 elements (forward +
   backward): muls/add/neg/relu/muls, and the same with every fifth op a refmath ``tanh``.
2. One MLP autoencoder training step: 784-128-32-128-784, batch 64, float64, Adam.

Each row runs at 1 thread each (``torch.set_num_threads``, ``core.native.set_threads``) and at
``--threads`` each (the reference matmul splits whole output rows between threads; the bits do
not change). The two sides are interleaved (ours, peer, ours, peer, ...) so a busy neighbour
slows both alike; a row reports the medians and the median of the per-pair ratios.

Run: python benchmarks/bench_tape.py [--repeat N] [--threads 2]. PyTorch is optional
(pip install torch==2.13.0); without it only our numbers print.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from machine import machine_line

from tapescope.core import Tape, ops, optim

# One thread: process CPU time (on a shared, oversubscribed machine a run's wall time includes
# the time the scheduler gave other jobs; its CPU time does not). More threads: wall time (CPU
# time would add the threads up).
CLOCK = {1: time.process_time}


def _once(fn, clock) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def paired(ours, peer, repeat: int, threads: int = 1):
    """Interleaved runs: (median ours, median peer, median of per-pair ratios) in seconds.

    Above one thread each "run" is the median of a burst of BURST runs, with a pause before every
    burst: PyTorch's OpenMP workers spin for a while after each product, and interleaving single
    runs made our threads compete with them for the cores (our 2-thread step measured 7 ms
    interleaved, 3.1-3.6 ms on its own). The pause lets each engine's threads go idle first.
    """
    clock = CLOCK.get(threads, time.perf_counter)
    ours()  # warm up (and compile / load native kernels)
    if peer:
        peer()

    def one(fn) -> float:
        if threads == 1:
            return _once(fn, clock)
        time.sleep(PAUSE_S)
        return statistics.median(_once(fn, clock) for _ in range(BURST))

    a, b = [], []
    for _ in range(repeat):
        a.append(one(ours))
        if peer:
            b.append(one(peer))
    BEST.append((min(a), min(b) if peer else None))
    if not peer:
        return statistics.median(a), None, None
    return (statistics.median(a), statistics.median(b),
            statistics.median(x / y for x, y in zip(a, b, strict=True)))


# (best ours, best peer) of every paired() call, in order: on a loaded machine the least CPU
# time of N runs is the steadiest number of each side (a neighbour only ever adds time)
BEST: list = []


BURST = 5
PAUSE_S = 0.25


def _step_tape(i, h, x, transcendental):
    k = i % 5
    if k == 0:
        return ops.tanh(h) if transcendental else h * 0.5
    return h + x if k == 1 else (-h if k == 2 else (ops.relu(h) if k == 3 else h * 0.75))


def _step_torch(torch, i, h, x, transcendental):
    k = i % 5
    if k == 0:
        return torch.tanh(h) if transcendental else h * 0.5
    return h + x if k == 1 else (-h if k == 2 else (torch.relu(h) if k == 3 else h * 0.75))


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
    from tapescope.core.workloads import MLP

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


def _set_threads(torch, n: int) -> None:
    from tapescope.core import native

    native.set_threads(n)
    if torch:
        torch.set_num_threads(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2, help="the second thread count measured")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    print(machine_line())
    rows = []
    for threads in dict.fromkeys((1, args.threads)):  # --threads 1: the 1-thread rows only
        _set_threads(torch, threads)
        for label, tr in (("1000-op chain muls/add/neg/relu, per node", False),
                          ("1000-op chain, every 5th op tanh, per node", True)):
            ours, peer, ratio = paired(chain_tape(transcendental=tr),
                                       chain_torch(torch, transcendental=tr) if torch else None,
                                       args.repeat, threads)
            rows.append((label, threads, ours / 1000, peer and peer / 1000, ratio))
        ours, peer, ratio = paired(mlp_tape(), mlp_torch(torch) if torch else None, args.repeat,
                                   threads)
        rows.append(("MLP AE 784-128-32-128-784 b64 f64 Adam step", threads, ours, peer, ratio))
    print(f"| {'benchmark':<46} | threads | {'tapescope':>10} | {'pytorch':>10} | ratio | best |")
    print(f"|{'-' * 48}|--------:|{'-' * 11}:|{'-' * 11}:|------:|-----:|")
    for (name, th, a, b, r), (ba, bb) in zip(rows, BEST, strict=True):
        bs = f"{b * 1e6:8.1f}us" if b else "       n/a"
        rs = f"{r:5.2f}" if r else "  n/a"
        best = f"{ba / bb:4.2f}" if bb else " n/a"
        print(f"| {name:<46} | {th:>7} | {a * 1e6:8.1f}us | {bs} | {rs} | {best} |")
    if torch:
        print(f"(pytorch {torch.__version__}; {args.repeat} interleaved pairs per row (above 1 "
              f"thread each side of a pair is the median of a burst of {BURST} runs after a "
              f"{PAUSE_S} s pause); times are medians (1 thread: CPU time, more: wall time), "
              "ratio = median of per-pair tapescope / pytorch, best = least ours / least pytorch, "
              "lower is better)")


if __name__ == "__main__":
    main()
