"""What an exact step moves device → host, and what it costs: issue 47 item 2 ("exact steps
move summaries only").

A ``PairRunner`` (CPU reference vs the host device, float64, provenance every step) of each
workload runs 2 warm-up steps, then ``--steps`` bit-identical steps; printed per step: the
device's ``bytes_to_host`` (``prog.stats``), and the CPU time of a step (``time.process_time``,
so other jobs on the machine count less). "cuda-like": the same host device with ``host_view``
off, so every read is a copy as on cuda (the host backend counts transfers as cuda would).

Run: ``python benchmarks/bench_exact_step_bytes.py [--steps 300] [--workloads mlp transformer]``
from a checkout whose ``tapescope`` is importable (``PYTHONPATH`` for another checkout: it uses
``PairRunner``'s public API only, so it runs on the commits before item 2 too).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def measure(workload: str, fuse: bool, cuda_like: bool, steps: int) -> tuple[float, float,
                                                                              int]:
    """(bytes to host per step, CPU ms per step, parameter bytes)."""
    from tapescope import gpu
    from tapescope.app.runs import PairRunner, SessionConfig

    dev = gpu.open_device("host")
    if cuda_like:
        dev.host_view = lambda buf: None
    r = PairRunner(SessionConfig(workload=workload, device="host", fuse=fuse), device=dev)
    params = sum(r.ref.tape.value(n.id).nbytes for n in r.nodes if n.op == "param")
    r.step()
    r.step()
    b0 = r.stats()["bytes_to_host"]
    t0 = time.process_time()
    for _ in range(steps):
        if not r.step().exact:
            raise SystemExit(f"{workload}: a step was not exact (this measures exact steps)")
    cpu = time.process_time() - t0
    return (r.stats()["bytes_to_host"] - b0) / steps, 1e3 * cpu / steps, params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workloads", nargs="+", default=["mlp", "transformer"])
    a = ap.parse_args()
    from machine import machine_line

    print(machine_line(()))
    print("| workload | fused | device | parameter bytes | bytes to host per step | "
          "CPU ms per step |")
    print("|---|---|---|---|---|---|")
    for w in a.workloads:
        for fuse in (False, True):
            for cuda_like in (False, True):
                moved, ms, params = measure(w, fuse, cuda_like, a.steps)
                print(f"| {w} | {'yes' if fuse else 'no'} | "
                      f"{'cuda-like' if cuda_like else 'host'} | {params:,} | {moved:,.0f} | "
                      f"{ms:.2f} |", flush=True)


if __name__ == "__main__":
    main()
