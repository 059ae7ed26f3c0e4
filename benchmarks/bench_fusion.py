"""Fusion benchmark: fused vs unfused episode time (forward, zero-fill, backward, optimizer).

The peer is the same captured program replayed per node (one launch per node and gradient
contribution), measured in the same run on the same device. Both sides are bit-identical (checked
afterwards). On the host backend an episode is one call into the compiled library, so a launch
costs little beyond its loops; on CUDA the seed says ~40 small dependent kernels per episode are
the wall even under a CUDA graph, which is where fusion is meant to pay.

Run: ``python benchmarks/bench_fusion.py [--device host|cuda] [--episodes 200]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from tapescope import gpu  # noqa: E402
from tapescope.core import workloads  # noqa: E402
from tapescope.gpu import fusion  # noqa: E402

CASES = [("mlp", {}, "float64"), ("mlp", {}, "float32"),
         ("mlp", {"batch_size": 256, "dims": (64, 128, 64, 128, 64)}, "float64"),
         ("transformer", {}, "float64"), ("transformer", {"batch_size": 16}, "float64")]


def _program(dev, name: str, kw: dict, dtype: str, fuse: bool):
    wl = workloads.get(name, dtype=dtype, **kw)
    prog = gpu.capture(dev, wl.tape, wl.record(0))
    if fuse:
        fusion.apply(prog)
    return prog, gpu.from_core(wl.make_optimizer())


def _time(prog, opt, episodes: int, repeats: int = 5) -> float:
    """Median seconds per episode over ``repeats`` batches of ``episodes``."""
    prog.run_episode(opt)  # warm: bind the optimizer, build the replay list / graph
    prog.device.synchronize()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(episodes):
            prog.run_episode(opt)
        prog.device.synchronize()
        out.append((time.perf_counter() - t) / episodes)
    return statistics.median(out)


def _same(a, b) -> bool:
    for n in a.nodes:
        for which in ("value", "grad"):
            x, y = a.read(n.id, which), b.read(n.id, which)
            if (x is None) != (y is None) or (x is not None and np.asarray(x).tobytes()
                                              != np.asarray(y).tobytes()):
                return False
    return True


def main() -> int:
    """Print the table; exit 1 if any fused program differs from its unfused peer."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host", choices=["host", "cuda", "auto"])
    ap.add_argument("--episodes", type=int, default=200)
    args = ap.parse_args()
    dev = gpu.open_device(args.device)
    print(dev.describe())
    head = (f"{'workload':<34}{'launches':>10}{'fused':>7}{'unfused ms':>12}"
            f"{'fused ms':>10}{'speedup':>9}  bits")
    print(head)
    print("-" * len(head))
    ok = True
    for name, kw, dtype in CASES:
        (pa, oa), (pb, ob) = (_program(dev, name, kw, dtype, f) for f in (False, True))
        ta = _time(pa, oa, args.episodes)
        tb = _time(pb, ob, args.episodes)
        same = _same(pa, pb)  # both ran the same number of episodes from the same start
        ok &= same
        label = f"{name} {dtype}" + (f" {kw}" if kw else "")
        print(f"{label[:34]:<34}{pa.stats['launches_per_episode']:>10}"
              f"{pb.stats['launches_per_episode']:>7}{ta * 1e3:>12.3f}{tb * 1e3:>10.3f}"
              f"{ta / tb:>8.2f}x  {'==' if same else 'DIFFER'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
