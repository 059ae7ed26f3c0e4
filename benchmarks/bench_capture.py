"""What capturing and judging cost, as ratios against the script's own uncaptured step, measured
in the same process (issue 42's targets: capture with values <= 3x the step, hashes only
<= 1.5x, ``parity --capture`` <= 5x).

Two kinds of rows. The capture zoo's tiny models (tests/capture/zoo: ``gpt``, d=16 and 8
tokens; ``cnn``, 8x8 images) are a few milliseconds of kernels a step, so the per-op cost of a
Python dispatch mode dominates them. The realistic rows are sizes people train: ``gpt-256``
(the zoo GPT at d=256, 4 heads, 4 layers, 128 tokens, batch 8, vocabulary 512) and
``cnn-64`` (three conv-BatchNorm-ReLU-pool stages, 32-64-128 channels, on 16 64x64 RGB
images, Dropout, SGD nesterov), where the per-op cost is amortised and the per-byte costs
(a copy and a digest of every value, the reference's arithmetic and the comparison) remain;
``gpt-wide`` (d=128, 64 tokens) lies between.

For each model one training step is timed plain (median of ``--repeat`` steps after a
warm-up), then 2 steps under ``app.capture.capture`` (values; then ``hashes_only``), including
the file's write, then the capture loaded and judged (``core.capture.judge``, what ``parity
--capture`` runs). One-time imports are paid before the clock (a 1-step capture, judged).
``load``: the CPU time of reading and checking the file alone, a part of ``parity``'s.
Ratios are per step (the median of ``--rounds`` captures and judgements), wall clock and CPU
time (``process_time``: on a loaded machine the wall clock of a few-millisecond step swings
2x between runs; CPU time barely moves). The values' digests are XXH3-128 (``--digest
sha256``: the slower digest of captures before it, for a comparison); with SHA-256 the recorder
hashes large values on a thread of its own (``hashlib`` releases the GIL), so ``main``, the CPU
time of the script's own thread, is what the step's wall clock is when a core is free for the
hashing thread; ``cpu`` counts both (with XXH3, hashed inline, they are the same).
The step runs ``--threads`` torch threads and the judge the same number of native threads
(``core.native.set_threads``): one thread budget for both.

Run: ``python benchmarks/bench_capture.py [--repeat 5] [--rounds 3] [--models gpt cnn]
[--digest xxh3_128|sha256] [--micro]``
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
sys.path.insert(0, str(ROOT / "benchmarks"))
ZOO = ROOT / "tests" / "capture" / "zoo"
DEFAULT_MAX_BYTES = 256 << 20  # app.capture's (imported late: torch)


def _zoo(name: str):
    spec = importlib.util.spec_from_file_location(f"zoo_{name}", ZOO / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpt_step(d: int = 16, layers: int = 2, ctx: int = 8, batch: int = 4, heads: int = 2,
             vocab: int = 32):
    import torch

    z = _zoo("gpt")
    torch.manual_seed(0)
    model = z.GPT(vocab=vocab, d=d, heads=heads, layers=layers, ctx=ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(s / 10)))
    g = torch.Generator().manual_seed(0)

    def step() -> float:
        idx = torch.randint(0, vocab, (batch, ctx), generator=g)
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


def cnn64_step(batch: int = 16, size: int = 64):
    """A CNN at a size people train: three conv-BatchNorm-ReLU-maxpool stages (32, 64, 128
    channels) on RGB images, global average pooling, Dropout, a Linear head; SGD nesterov."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def stage(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))

    torch.manual_seed(0)
    model = nn.Sequential(stage(3, 32), stage(32, 64), stage(64, 128),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                          nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    g = torch.Generator().manual_seed(0)

    def step() -> float:
        x = torch.randn(batch, 3, size, size, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


SIZES = {  # what each row measures (the ratios are at these sizes only)
    "gpt": "the zoo GPT: d=16, 2 heads, 2 layers, 8 tokens, batch 4, vocabulary 32; AdamW",
    "cnn": "the zoo CNN: 8 1x8x8 images, 3 classes; SGD nesterov",
    "gpt-wide": "GPT d=128, 2 heads, 4 layers, 64 tokens, batch 8, vocabulary 32; AdamW",
    "gpt-256": "GPT d=256, 4 heads, 4 layers, 128 tokens, batch 8, vocabulary 512; AdamW",
    "cnn-64": "3 conv3x3-BN-ReLU-maxpool stages (32-64-128 ch) on 16 3x64x64 images, "
              "Dropout, Linear; SGD nesterov"}
MODELS = {"gpt": gpt_step, "cnn": cnn_step,
          "gpt-wide": lambda: gpt_step(d=128, layers=4, ctx=64, batch=8),
          "gpt-256": lambda: gpt_step(d=256, layers=4, ctx=128, batch=8, heads=4, vocab=512),
          "cnn-64": cnn64_step}


def _clock() -> tuple[float, float, float]:
    return time.perf_counter(), time.process_time(), time.thread_time()


def _since(t: tuple[float, float, float]) -> tuple[float, float, float]:
    return time.perf_counter() - t[0], time.process_time() - t[1], time.thread_time() - t[2]


def _median(xs: list[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(statistics.median(x[i] for x in xs) for i in range(len(xs[0])))


def measure(name: str, repeat: int, rounds: int, tmp: str,
            max_bytes: int = DEFAULT_MAX_BYTES, digest: str = "xxh3_128") -> dict:
    """One row: per step, wall clock and CPU time (``process_time``: what the machine's load
    barely moves) of the plain step (median of ``repeat``) and of capturing and judging
    (median of ``rounds``), as ratios."""
    from tapescope.app.capture import capture
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge

    step = MODELS[name]()
    step()  # warm-up (first-call allocations, lazy inits)
    times = []
    for _ in range(repeat):
        t = _clock()
        step()
        times.append(_since(t))
    plain = _median(times)  # wall, cpu, main thread
    # the floor: the same step under a dispatch mode that records nothing (torch's own cost of
    # calling a Python ``__torch_dispatch__`` for every op): no recorder built on a dispatch
    # mode, ours or another's, can be cheaper than this
    empty = _empty_mode()
    times = []
    for _ in range(repeat):
        t = _clock()
        with empty():
            step()
        times.append(_since(t))
    floor = _median(times)
    warm = os.path.join(tmp, "warm.capture")
    with capture(warm, steps=1):  # one-time imports (recorder, reference forms), not per step
        step()
    judge(load(warm))
    row = {"model": name, "step_ms": plain[0] * 1e3, "step_cpu_ms": plain[1] * 1e3,
           "cpu_mode": floor[1] / plain[1]}
    for label, kw in (("values", {"max_bytes": max_bytes}), ("hashes", {"hashes_only": True})):
        f = os.path.join(tmp, f"{name}-{label}.capture")
        got = []
        for _ in range(rounds):
            if os.path.exists(f):  # the last round's file removed off the clock: replacing
                os.remove(f)  # it frees its pages (~30 ms for 256 MB), not the capture's cost
            t = _clock()
            with capture(f, steps=2, digest=digest, **kw) as rec:
                step()
                step()
            got.append(_since(t))
            if label == "values":
                row["ops"] = rec.steps_done() and rec.step_start[2] // 2
                row["mib"] = rec.stored_bytes / (1 << 20)
                vf = f
            # freed here, off the clock: held until the next round's ``as rec``, the stored
            # values' release (~0.1 s for gpt-256's 1.35 GB) would be charged to that round
            del rec
        w, c, m = _median(got)
        row[f"capture_{label}"] = w / 2 / plain[0]
        row[f"cpu_{label}"] = c / 2 / plain[1]
        row[f"main_{label}"] = m / 2 / plain[2]
    got, loads = [], []
    for _ in range(rounds):
        t = _clock()
        cap = load(vf)
        loads.append(_since(t))
        rep = judge(cap)
        got.append(_since(t))
        del cap
    w, c, _ = _median(got)
    row["parity"] = w / 2 / plain[0]
    row["cpu_parity"] = c / 2 / plain[1]
    row["cpu_load"] = _median(loads)[1] / 2 / plain[1]  # of cpu_parity: the file's read and check
    row["us_per_op"] = (row["cpu_values"] - 1) * plain[1] / row["ops"] * 1e6
    c = rep["counts"]
    row["no_ref"] = c["no-reference"] / max(1, sum(c.values()))
    row["unjudged"] = c["unjudged"] / max(1, sum(c.values()))
    return row


def _empty_mode() -> type:
    """A ``TorchDispatchMode`` that records nothing: each op passed on as it came."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Empty(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            return func(*args, **(kwargs or {}))
    return Empty


def micro(rounds: int = 5, n: int = 3000) -> None:
    """The per-op cost alone: a loop of small ops (16x16 mul and add) plain, under an empty
    TorchDispatchMode, and under the recorder; the best of ``rounds``, wall clock and this
    thread's CPU time (the latter barely moves with the machine's load)."""
    import torch

    from tapescope.app.capture.recorder import Recorder

    Empty = _empty_mode()
    x = torch.randn(16, 16)

    def work() -> tuple[float, float]:
        y, t, c = x, time.perf_counter(), time.thread_time()
        for _ in range(n):
            y = y * 1.0001 + 0.5
        return ((time.perf_counter() - t) / (2 * n) * 1e6,
                (time.thread_time() - c) / (2 * n) * 1e6)

    got: dict[str, list[tuple[float, float]]] = {"plain": [], "empty mode": [], "recorder": []}
    for _ in range(rounds):
        got["plain"].append(work())
        with Empty():
            got["empty mode"].append(work())
        rec = Recorder(steps=10**9).start()
        try:
            got["recorder"].append(work())
        finally:
            rec.stop()
    best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in got.items()}
    print("per op (16x16 mul/add), wall / cpu: " + ", ".join(
        f"{k} {w:.1f} / {c:.1f} us" for k, (w, c) in best.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="captures and judgements per row (their median)")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                    help="the capture's value budget (default capture's 256 MiB: a bigger "
                         "model's values beyond it are digests, their ops unjudged)")
    ap.add_argument("--digest", choices=("xxh3_128", "sha256"), default="xxh3_128",
                    help="the values' digest algorithm (capture --digest)")
    ap.add_argument("--micro", action="store_true", help="also the per-op cost alone")
    ap.add_argument("--recorder", choices=("c", "python"), default="c",
                    help="the recorder's per-op path: its C twin (app/capture/recorder_hot.c, "
                         "built here first) or its Python (an A/B)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared machine OpenMP's spinning "
                         "threads make the plain step itself swing 100x)")
    a = ap.parse_args()
    import torch

    from tapescope.core import native

    torch.set_num_threads(a.threads)
    native.set_threads(a.threads)  # the judge's products: the step's thread budget
    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    # (this process is tapescope's own: the C path is built here, as the CLI's is before it
    # starts the script; a recorder only looks it up)
    Recorder.native = a.recorder == "c" and recorder_native.module(build=True) is not None

    from machine import machine_line

    print(machine_line())
    print("ratios per step against the same process's uncaptured step, wall clock, CPU time "
          "of all threads and of the script's own (main) thread (targets: capture <= 3x, "
          "hashes <= 1.5x, parity <= 5x); us/op: the recorder's CPU per op; load: the CPU of "
          "parity's file read and check; mode: the CPU of the step under a dispatch mode that "
          f"records nothing (the floor of any recorder built on one); digests: {a.digest}; "
          f"the recorder's per-op path: {'C' if Recorder.native else 'Python'}")
    print(f"{'':<9} {'':>8} {'':>8} {'':>7} {'--------- wall ---------':>24} "
          f"{'---------- cpu ---------':>24} {'---- main ----':>15}")
    print(f"{'model':<9} {'ops/step':>8} {'step ms':>8} {'MiB':>7} {'capture':>8} "
          f"{'hashes':>7} {'parity':>7} {'capture':>8} {'hashes':>7} {'parity':>7} "
          f"{'capture':>8} {'hashes':>6} {'no-ref':>7} {'unjudged':>8} {'us/op':>6} "
          f"{'load':>5} {'mode':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            r = measure(name, a.repeat, a.rounds, tmp, a.max_bytes, a.digest)
            print(f"{r['model']:<9} {r['ops']:>8} {r['step_ms']:>8.2f} {r['mib']:>7.2f} "
                  f"{r['capture_values']:>7.1f}x {r['capture_hashes']:>6.1f}x "
                  f"{r['parity']:>6.1f}x {r['cpu_values']:>7.1f}x {r['cpu_hashes']:>6.1f}x "
                  f"{r['cpu_parity']:>6.1f}x {r['main_values']:>7.1f}x "
                  f"{r['main_hashes']:>5.1f}x {r['no_ref']:>6.1%} {r['unjudged']:>7.1%} "
                  f"{r['us_per_op']:>6.0f} {r['cpu_load']:>4.1f}x {r['cpu_mode']:>4.1f}x",
                  flush=True)
    for name in a.models:
        print(f"  {name}: {SIZES[name]}")
    if a.micro:
        micro()


if __name__ == "__main__":
    main()
