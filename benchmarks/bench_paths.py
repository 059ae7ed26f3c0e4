"""Issue 49's speed targets on every native path this CPU runs, in one command, one table.

For each path (``TAPESCOPE_ISA``: avx512, avx2, c; core/native/isa.py) it runs the target
scripts in a child with that path forced and reads their ratio columns:

- ``bench_tape.py --threads 1``: the MLP Adam step and the tanh chain against PyTorch (goal
  MLP ≤ 0.8, chain ≤ 1.0);
- ``bench_onnx.py``: reference mode against onnxruntime with one thread (goal ≤ 1.5);
- ``bench_model_parity.py``: the resnet18 parity step against its tape step (goal ≤ 2);
- the product floor: the reference's 512 x 512 product against PyTorch's (one thread each),
  float32 and float64, with its GFLOP/s: what a target made mostly of products cannot beat.

Every ratio is the script's own (ours and the peer measured in the same run, interleaved);
the table adds the path, the CPU and the load, so rows from two machines can stand side by side
in docs/benchmarks.md. Which path is fastest depends on the CPU: an Intel Xeon with one 512-bit
FMA unit may run the avx2 path faster than avx512, and on every Intel AVX-512 CPU an engine that
fuses (FMA) has twice our mul + add peak (docs/benchmarks.md, session 10).

    python benchmarks/bench_paths.py [--paths avx512,avx2,c] [--models squeezenet,shufflenet]
                                     [--repeat 5] [--skip parity]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tapescope.core.native import isa  # noqa: E402


def _run(script: str, args: list[str], path: str) -> str:
    env = dict(os.environ, TAPESCOPE_ISA=path)
    proc = subprocess.run([sys.executable, str(HERE / script), *args], env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{script} on {path}: exit {proc.returncode}: {tail[0]}")
    return proc.stdout


def tape_rows(path: str, repeat: int) -> list[tuple[str, str, float]]:
    out = _run("bench_tape.py", ["--threads", "1", "--repeat", str(repeat)], path)
    rows = []
    for label, goal, key in (("MLP Adam step / PyTorch", "≤ 0.8", "MLP AE"),
                             ("tanh chain / PyTorch", "≤ 1.0", "every 5th op tanh")):
        line = next(ln for ln in out.splitlines() if key in ln)
        rows.append((label, goal, float(line.split("|")[5])))
    return rows


def onnx_rows(path: str, models: str, repeat: int) -> list[tuple[str, str, float]]:
    out = _run("bench_onnx.py", ["--models", models, "--repeat", str(repeat)], path)
    rows = []
    for name in models.split(","):
        line = next((ln for ln in out.splitlines() if ln.split()[:1] == [name]), None)
        if line is not None:
            # name, ort1, ort dflt, fast, ref, fast/ort, fast/ort1, ref/ort, ref/ort1, ...
            rows.append((f"ONNX {name} ref / ort1", "≤ 1.5", float(line.split()[8])))
    return rows


def parity_rows(path: str) -> list[tuple[str, str, float]]:
    out = _run("bench_model_parity.py", ["--models", "resnet18", "--steps", "5"], path)
    line = next(ln for ln in out.splitlines() if re.match(r"resnet18\s+\d", ln))
    return [("resnet18 parity / tape step", "≤ 2", float(line.split()[4]))]


# the product floor: the reference's product (core.native.mm, mul and add rounded apart) against
# PyTorch's (MKL, fused multiply-add), one thread each, interleaved, the best of each; what the
# targets that are mostly products (the ONNX models' convolutions, the MLP's matmuls) cannot go
# below on this CPU and path
_FLOOR = """
import sys, time, numpy as np, torch
from tapescope.core import native
native.set_threads(1); torch.set_num_threads(1)
for dt, tdt in ((np.float32, torch.float32), (np.float64, torch.float64)):
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(dt); b = a.T.copy()
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ours = theirs = 1e9
    for _ in range(7):
        t = time.perf_counter(); native.mm(a, b); ours = min(ours, time.perf_counter() - t)
        t = time.perf_counter(); ta @ tb; theirs = min(theirs, time.perf_counter() - t)
    print(np.dtype(dt).name, ours / theirs, 2 * 512 ** 3 / ours / 1e9)
"""


def floor_rows(path: str) -> list[tuple[str, str, float]]:
    env = dict(os.environ, TAPESCOPE_ISA=path)
    proc = subprocess.run([sys.executable, "-c", _FLOOR], env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the product floor on {path}: exit {proc.returncode}: {tail[0]}")
    rows = []
    for line in proc.stdout.splitlines():
        name, ratio, gflops = line.split()
        rows.append((f"floor: {name} product / PyTorch", "-", float(ratio)))
        rows.append((f"floor: {name} product GFLOP/s", "-", float(gflops)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", default=",".join(isa.runnable()) or "native")
    ap.add_argument("--models", default="squeezenet,shufflenet,resnet_like224")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma-separated: tape, onnx, parity, floor")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    print(f"CPU {isa.cpu_model()}; runs {', '.join(isa.runnable()) or 'native only'}; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"| {'target':<32} | goal  | " + " | ".join(f"{p:>7}" for p in a.paths.split(","))
          + " |")
    print(f"|{'-' * 34}|-------|" + "|".join("-" * 9 for _ in a.paths.split(",")) + "|")
    table: dict[tuple[str, str], dict[str, float]] = {}
    for path in a.paths.split(","):
        rows = []
        if "tape" not in skip:
            rows += tape_rows(path, a.repeat)
        if "onnx" not in skip:
            rows += onnx_rows(path, a.models, a.repeat)
        if "parity" not in skip:
            rows += parity_rows(path)
        if "floor" not in skip:
            rows += floor_rows(path)
        for label, goal, ratio in rows:
            table.setdefault((label, goal), {})[path] = ratio
    for (label, goal), by in table.items():
        cells = " | ".join(f"{by[p]:7.2f}" if p in by else "      -"
                           for p in a.paths.split(","))
        print(f"| {label:<32} | {goal:<5} | {cells} |")
    print(f"(load at end {os.getloadavg()[0]:.1f}; each ratio is its script's own: ours / the "
          "peer in the same run, lower is better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
