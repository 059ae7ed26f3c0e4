"""Cost of half-precision episodes against float32 (issue 28): the CPU tape and the host
backend, per workload and dtype. `python benchmarks/bench_half.py [--steps N] [--repeat R]`.

Per (workload, dtype) it times, best of R: the CPU tape training N steps (record, backward,
Adam), and a `tapescope parity` pair (the CPU tape + the host replay, unfused and fused) over N
steps, compare included, provenance off. Prints one markdown table; ratios are against float32.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tape(workload: str, dtype: str, steps: int) -> float:
    from tapescope.core import workloads

    wl = workloads.get(workload, dtype=dtype, math="refmath", seed=0)
    opt = wl.make_optimizer()
    t0 = time.perf_counter()
    for s in range(1, steps + 1):
        loss = wl.record(s)
        wl.tape.backward(loss)
        opt.step()
    return time.perf_counter() - t0


def _pair(workload: str, dtype: str, steps: int, fuse: bool) -> float:
    from tapescope.app.runs import PairRunner, SessionConfig

    runner = PairRunner(SessionConfig(workload=workload, device="host", fuse=fuse, dtype=dtype))
    runner.step(provenance=False)  # the first step compiles (cached) and warms up
    t0 = time.perf_counter()
    for _ in range(steps):
        r = runner.step(provenance=False)
        assert r.exact, (workload, dtype, fuse)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {a.steps} steps, best of {a.repeat}")
    print("| workload | dtype | CPU tape, ms/step | pair unfused, ms/step | pair fused, ms/step |")
    print("|---|---|---|---|---|")
    for wl in ("mlp", "transformer"):
        base = None
        for dt in ("float32", "float16", "bfloat16"):
            cols = [min(f(wl, dt) for _ in range(a.repeat)) for f in (
                lambda w, d: _tape(w, d, a.steps),
                lambda w, d: _pair(w, d, a.steps, False),
                lambda w, d: _pair(w, d, a.steps, True))]
            ms = [1e3 * c / a.steps for c in cols]
            if base is None:
                base = ms
            cells = [f"{m:.2f}" + ("" if dt == "float32" else f" ({m / b:.2f}×)")
                     for m, b in zip(ms, base, strict=True)]
            print(f"| {wl} | {dt} | " + " | ".join(cells) + " |", flush=True)
    print(f"load average after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
