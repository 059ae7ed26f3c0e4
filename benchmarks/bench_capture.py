"""What capturing and judging cost, as ratios against the script's own uncaptured step, measured
in the same process (issue 42's targets: capture with values <= 3x the step, hashes only
<= 1.5x, ``parity --capture`` <= 5x).

For each model of the capture zoo (tests/capture/zoo: the tiny GPT and the CNN) and a wider GPT
(``gpt-wide``: d=128, 4 layers, 64 tokens: less Python per flop), one training step is timed
plain (median of ``--repeat`` steps after a warm-up), then 2 steps under ``app.capture.capture``
(values; then ``hashes_only``), including the file's write, then the capture loaded and judged
(``core.capture.judge``). Ratios are per step.

Run: ``python benchmarks/bench_capture.py [--repeat 5] [--models gpt cnn] [--micro]``
(``--micro``: the per-op cost alone, plain / an empty dispatch mode / the recorder).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ZOO = ROOT / "tests" / "capture" / "zoo"


def _zoo(name: str):
    spec = importlib.util.spec_from_file_location(f"zoo_{name}", ZOO / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpt_step(d: int = 16, layers: int = 2, ctx: int = 8, batch: int = 4):
    import torch

    z = _zoo("gpt")
    torch.manual_seed(0)
    model = z.GPT(vocab=32, d=d, heads=2, layers=layers, ctx=ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(s / 10)))
    g = torch.Generator().manual_seed(0)

    def step() -> float:
        idx = torch.randint(0, 32, (batch, ctx), generator=g)
        loss = model(idx, torch.roll(idx, -1, dims=1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.item()
    return step


def cnn_step():
    import torch
    import torch.nn.functional as F

    z = _zoo("cnn")
    torch.manual_seed(0)
    model = z.Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 3, (8,))

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


MODELS = {"gpt": gpt_step, "cnn": cnn_step,
          "gpt-wide": lambda: gpt_step(d=128, layers=4, ctx=64, batch=8)}


def measure(name: str, repeat: int, tmp: str) -> dict:
    from app.capture import capture
    from core.capture.file import load
    from core.capture.judge import judge

    step = MODELS[name]()
    step()  # warm-up (first-call allocations, lazy inits)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    plain = statistics.median(times)
    with capture(os.path.join(tmp, "warm.capture"), steps=1):  # one-time imports, not per step
        step()
    row = {"model": name, "step_ms": plain * 1e3}
    for label, kw in (("values", {}), ("hashes", {"hashes_only": True})):
        f = os.path.join(tmp, f"{name}-{label}.capture")
        t = time.perf_counter()
        with capture(f, steps=2, **kw) as rec:
            step()
            step()
        row[f"capture_{label}"] = (time.perf_counter() - t) / 2 / plain
        if label == "values":
            row["ops"] = rec.steps_done() and rec.step_start[2] // 2
            row["mib"] = rec.stored_bytes / (1 << 20)
            vf = f
    t = time.perf_counter()
    rep = judge(load(vf))
    row["parity"] = (time.perf_counter() - t) / 2 / plain
    row["us_per_op"] = (row["capture_values"] - 1) * plain / row["ops"] * 1e6
    c = rep["counts"]
    row["no_ref"] = c["no-reference"] / max(1, sum(c.values()))
    return row


def micro(rounds: int = 3, n: int = 3000) -> None:
    """The per-op cost alone: a loop of small ops (16x16 mul and add) plain, under an empty
    TorchDispatchMode, and under the recorder (steady state: the last of ``rounds``)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from app.capture.recorder import Recorder

    class Empty(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            return func(*args, **(kwargs or {}))

    x = torch.randn(16, 16)

    def work() -> float:
        y, t = x, time.perf_counter()
        for _ in range(n):
            y = y * 1.0001 + 0.5
        return (time.perf_counter() - t) / (2 * n) * 1e6

    for _ in range(rounds):
        plain = work()
        with Empty():
            empty = work()
        rec = Recorder(steps=10**9).start()
        try:
            recorded = work()
        finally:
            rec.stop()
    print(f"per op (16x16 mul/add): plain {plain:.1f} us, empty dispatch mode {empty:.1f} us, "
          f"recorder {recorded:.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--micro", action="store_true", help="also the per-op cost alone")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared machine OpenMP's spinning "
                         "threads make the plain step itself swing 100x)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ratios are per step "
          "against the same process's uncaptured step")
    print(f"{'model':<9} {'ops/step':>8} {'step ms':>8} {'MiB':>6} {'capture':>8} "
          f"{'hashes':>7} {'parity':>7} {'no-ref':>7} {'us/op':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            r = measure(name, a.repeat, tmp)
            print(f"{r['model']:<9} {r['ops']:>8} {r['step_ms']:>8.2f} {r['mib']:>6.2f} "
                  f"{r['capture_values']:>7.1f}x {r['capture_hashes']:>6.1f}x "
                  f"{r['parity']:>6.1f}x {r['no_ref']:>6.1%} {r['us_per_op']:>6.0f}", flush=True)
    if a.micro:
        micro()


if __name__ == "__main__":
    main()
