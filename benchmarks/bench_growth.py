"""How cost grows with the tape (issue 29, target 5): the transformer workload at ~1k, 10k and
100k nodes (23, 238, 2380 blocks; ``--blocks`` for others), each stage timed once in a fresh
process per size:

  record       ``wl.record(0)`` (the forward on the CPU tape)
  backward     ``tape.backward(loss)``
  capture      ``gpu.capture`` on the host device (kernels from the compile cache)
  replay       ``prog.run_episode()`` on the host device (forward + backward)
  compare      ``gpu.parity.compare(tape, prog)`` (every value and gradient, bit for bit)
  provenance   ``core.provenance.provenance`` of that step (the candidate's own inputs rerun)
  save         ``tapefile.save`` (version 2)
  read v2      ``tapefile.load`` of that file (every block read and checked)
  open v2      ``tapefile.load(lazy=True)`` (the header; what the window does)
  read v1      the same tape in the version-1 zip (the old format, for the ratio)
  graph open   ``GraphModel.from_tape`` + ``display()`` + a fresh ``layered_layout`` (no Qt;
               on the lazily opened tape, as the window; the window itself reuses a cached
               layout of a structure it has laid out before)

Before each stage ``gc.collect(); gc.freeze()`` (``--no-freeze``: not): a stage's own cost,
not the garbage collector rescanning the millions of objects earlier stages left alive (at
100k nodes without it, compare and graph open grew superlinearly: docs/benchmarks.md).

Times are CPU seconds of this process (``time.process_time``: on a shared machine the wall
clock also counts other jobs' turns); file reads also give wall seconds. The table gives each
stage's seconds per size, then ``per node xN``: its cost per node at the largest size over
that at the smallest (1.0: linear; 10: each decade costs 100x) and the growth exponent between
the two largest sizes (1.0 linear, 2.0 quadratic).

1M nodes (23,800 blocks) is not run by default: its arrays alone are ~8.6 GB for the tape, as
much again for the host device's copy and the file, over what the 24 GiB development machine
holds beside other jobs (``--blocks 23800`` runs it where memory allows). ``--skip capture
replay compare provenance "read v1"`` runs the rest at 1M: the tape, its file and the graph
(~11 GB here), no device copy.

Run: ``python benchmarks/bench_growth.py [--blocks 23 238 2380] [--skip STAGE ...] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["record", "backward", "capture", "replay", "compare", "provenance", "save",
          "read v2", "open v2", "read v1", "graph open"]


def measure(blocks: int, cache: Path, freeze: bool = True, skip: frozenset = frozenset()) -> dict:
    """Every stage once at ``blocks`` blocks: {stage: cpu seconds}, plus nodes and wall times."""
    sys.path.insert(0, str(ROOT))
    from tapescope import gpu
    from tapescope.core import tapefile, workloads
    from tapescope.core.provenance import StepState, provenance
    from tapescope.gpu.backends import open_device
    from tapescope.gpu.parity import compare
    from tapescope.views.models.graph_model import GraphModel
    from tapescope.views.models.layout import layered_layout

    out: dict = {}
    clock = time.process_time

    def timed(name: str, fn, wall: bool = False):
        if name in skip:
            out[name] = float("nan")
            if wall:
                out[name + " wall"] = float("nan")
            return None
        if freeze:  # what earlier stages left alive is not rescanned by this stage's collections
            gc.collect()
            gc.freeze()
        w0, t0 = time.perf_counter(), clock()
        r = fn()
        out[name] = clock() - t0
        if wall:
            out[name + " wall"] = time.perf_counter() - w0
        return r

    wl = workloads.get("transformer", seed=0, blocks=blocks)
    loss = timed("record", lambda: wl.record(0))
    tape = wl.tape
    out["nodes"] = len(tape)
    timed("backward", lambda: tape.backward(loss))
    device = {"capture", "replay", "compare", "provenance"}
    if device <= skip:  # (no host device copy of the arrays at all)
        for name in sorted(device):
            timed(name, None)
        prog = st = rep = None
    else:
        dev = open_device("host")
        prog = timed("capture", lambda: gpu.capture(dev, tape, loss))
        timed("replay", lambda: prog.run_episode())
        rep = timed("compare", lambda: compare(tape, prog))
        out["exact"] = rep.first_divergence is None if hasattr(rep, "first_divergence") else None
        nodes = tape.nodes
        st = StepState(0, nodes, loss.id, lambda i: prog.read(i, "value"),
                       lambda i: prog.read(i, "grad"))
        timed("provenance", lambda: provenance(st))
        prog = st = rep = None  # (freed before the file stages)
    p2, p1 = cache / f"growth-{blocks}.v2.tape", cache / f"growth-{blocks}.v1.tape"
    timed("save", lambda: tapefile.save(tape, p2, meta={"loss": loss.id}))
    if "read v1" not in skip:
        tapefile.save(tape, p1, meta={"loss": loss.id}, version=1)
    out["MB"] = p2.stat().st_size / 1e6
    lid = loss.id
    tape = wl = loss = None
    timed("read v2", lambda: tapefile.load(p2), wall=True)
    lazy, _ = timed("open v2", lambda: tapefile.load(p2, lazy=True), wall=True)
    timed("graph open", lambda: layered_layout(GraphModel.from_tape(lazy, lid).display().inputs))
    timed("read v1", lambda: tapefile.load(p1), wall=True)
    for p in (p1, p2):
        p.unlink(missing_ok=True)
    out["peak MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[23, 238, 2380])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--no-freeze", action="store_true",
                    help="no gc.freeze() before each stage (each stage then also pays for the "
                         "garbage collector rescanning what earlier stages left alive)")
    ap.add_argument("--skip", nargs="+", default=[], choices=STAGES, metavar="STAGE",
                    help="stages not run (a cell of nan): e.g. the device stages at 1M nodes, "
                         "whose host device copy of the arrays does not fit beside the tape")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one size, JSON out
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.cache, freeze=not args.no_freeze,
                                 skip=frozenset(args.skip))))
        return
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows = []
    for b in args.blocks:
        r = subprocess.run([sys.executable, __file__, "--one", str(b), "--cache", str(args.cache),
                            *(["--no-freeze"] if args.no_freeze else []),
                            *(["--skip", *args.skip] if args.skip else [])],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{b} blocks FAILED: {r.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"{rows[-1]['nodes']} nodes measured "
              f"(load {' '.join(f'{x:.1f}' for x in os.getloadavg())})", flush=True)
    if not rows:
        sys.exit(1)
    print()
    head = " | ".join(f"{r['nodes']:,} nodes" for r in rows)
    print(f"| stage (CPU s) | {head} | per node x{rows[-1]['nodes'] // rows[0]['nodes']} "
          "| exponent (last decade) |")
    print("|---|" + "---:|" * (len(rows) + 2))
    for s in STAGES:
        cells = " | ".join(f"{r[s]:.3f}" for r in rows)
        a, z = rows[0], rows[-1]
        per = (z[s] / z["nodes"]) / max(a[s] / a["nodes"], 1e-12)
        y, x = rows[-2] if len(rows) > 1 else a, z
        expo = math.log(max(x[s], 1e-9) / max(y[s], 1e-9)) / math.log(x["nodes"] / y["nodes"]) \
            if x["nodes"] != y["nodes"] else float("nan")
        print(f"| {s} | {cells} | {per:.2f} | {expo:.2f} |")
    walls = " | ".join(f"{r['read v2 wall']:.2f} / {r['open v2 wall']:.2f} / "
                       f"{r['read v1 wall']:.2f}" for r in rows)
    print(f"| file read wall s (v2 / open v2 / v1) | {walls} | | |")
    sizes = " | ".join(f"{r['MB']:.0f}" for r in rows)
    print(f"| file MB (v2) | {sizes} | | |")
    peaks = " | ".join(f"{r['peak MB']:.0f}" for r in rows)
    print(f"| peak RSS MB | {peaks} | | |")
    print(f"\nload average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
