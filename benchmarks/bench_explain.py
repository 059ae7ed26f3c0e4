"""What `--explain` costs: `parity --device torch` on the transformer, plain against `--explain`
(issue 44's target: the explained run at most 1.5x the plain one).

Two measures, interleaved plain / explain ``--reps`` times on the same machine, medians:

- ``steps``: ``PairRunner(...).step()`` ``--steps`` times on a fresh runner (both runs, the
  compare, provenance; with ``explain`` every introduced array's cause and class), process CPU
  seconds (the machine is shared: wall time counts other jobs' turns) and the main thread's
  alone (PyTorch's worker threads spin while they wait: they add CPU to both sides);
- ``command``: the whole ``tapescope parity --workload transformer --device torch --steps N
  [--explain]`` in a child process (start-up, torch's import and the JSON included), wall and
  the child's CPU seconds.

    python benchmarks/bench_explain.py [--dtype float64] [--steps 2] [--reps 5] [--no-command]
                                       [--torch-threads N]

Prints one row per measure with the ratio explain / plain (and the steps' minima: under load
the least disturbed rep says most), and how many introduced arrays the
explained run named (and how many stayed ``unknown``). The load average is printed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from machine import machine_line  # noqa: E402


def steps_cpu(dtype: str, steps: int, explain: bool, threads: int | None = None
              ) -> tuple[float, float, list]:
    """(process CPU s, main-thread CPU s, introduced entries) of ``steps`` steps."""
    from tapescope.app.runs import PairRunner, SessionConfig

    r = PairRunner(SessionConfig(workload="transformer", device="torch", dtype=dtype,
                                 explain=explain, torch_threads=threads))
    intro: list = []
    c0, t0 = time.process_time(), time.thread_time()
    for _ in range(steps):
        intro += r.step().introduced
    return time.process_time() - c0, time.thread_time() - t0, intro


def command(dtype: str, steps: int, explain: bool) -> tuple[float, float, dict]:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "p.json")
        argv = [sys.executable, "-c", "import sys; from tapescope.app.cli import main; "
                "sys.exit(main())", "parity", "--workload", "transformer", "--device",
                "torch", "--dtype", dtype, "--steps", str(steps), "--json", out]
        if explain:
            argv.append("--explain")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        with open(out) as f:
            return wall, cpu, json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-command", action="store_true")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch.set_num_threads for both runs (default: PyTorch's)")
    a = ap.parse_args()
    print(machine_line())
    print(f"load average {os.getloadavg()[0]:.2f}; transformer, --device torch, {a.dtype}, "
          f"{a.steps} steps, {a.reps} reps, medians")
    steps_cpu(a.dtype, 1, True, a.torch_threads)  # warm: imports, torch's first kernels
    plain, expl, plain_t, expl_t = [], [], [], []
    intro: list = []
    for _ in range(a.reps):
        c, t, _ = steps_cpu(a.dtype, a.steps, False, a.torch_threads)
        plain.append(c)
        plain_t.append(t)
        c, t, intro = steps_cpu(a.dtype, a.steps, True, a.torch_threads)
        expl.append(c)
        expl_t.append(t)
    p, e = statistics.median(plain), statistics.median(expl)
    pt, et = statistics.median(plain_t), statistics.median(expl_t)
    unk = sum(1 for x in intro if x.get("cause") == "unknown")
    print(f"steps    plain {p:.3f} CPU s  explain {e:.3f} CPU s  ratio {e / p:.2f}; main thread "
          f"{pt:.3f} / {et:.3f} s  ratio {et / pt:.2f}  ({len(intro)} introduced arrays, "
          f"{unk} unknown)")
    print(f"steps    minima: plain {min(plain):.3f} explain {min(expl):.3f} CPU s  ratio "
          f"{min(expl) / min(plain):.2f}; main thread {min(plain_t):.3f} / {min(expl_t):.3f} s "
          f" ratio {min(expl_t) / min(plain_t):.2f} (the least disturbed rep of each)")
    if a.no_command:
        return
    cw, cc, ew, ec = [], [], [], []
    for _ in range(a.reps):
        w, c, _ = command(a.dtype, a.steps, False)
        cw.append(w)
        cc.append(c)
        w, c, _ = command(a.dtype, a.steps, True)
        ew.append(w)
        ec.append(c)
    print(f"command  plain {statistics.median(cw):.2f} s wall {statistics.median(cc):.2f} CPU s"
          f"  explain {statistics.median(ew):.2f} s wall {statistics.median(ec):.2f} CPU s  "
          f"ratio {statistics.median(ew) / statistics.median(cw):.2f} wall, "
          f"{statistics.median(ec) / statistics.median(cc):.2f} CPU")


if __name__ == "__main__":
    main()
