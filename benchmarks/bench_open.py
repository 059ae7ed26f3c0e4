"""Opening a recorded tape in the whole window: a 10k-node and a 100k-node transformer tape.

The tape is the ``transformer`` workload with ``blocks`` blocks (238 blocks: 10,005 nodes; 2380:
99,969), recorded with gradients and saved once into the cache folder given (default: the
system temp folder; the 100k file is ~860 MB and takes minutes to record). Then, in one
process, offscreen at 1280x800: read the file (``app.session.open_path``), ``set_session``,
wait until the layout is on screen, first paint (a grab). Issue 15's target is the time after
the file is read (≤ 1 s at 10k, ≤ 5 s at 100k); the read is reported beside it.

Run: ``python benchmarks/bench_open.py [--blocks 238 2380] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tape_path(cache: Path, blocks: int) -> Path:
    """The recorded tape of ``blocks`` blocks, recorded and saved on first use."""
    p = cache / f"tapescope-bench-transformer{blocks}.tape"
    if not p.exists():
        from core import tapefile, workloads

        wl = workloads.get("transformer", seed=0, blocks=blocks)
        loss = wl.record(0)
        wl.tape.backward(loss)
        tmp = p.with_suffix(".part")
        tapefile.save(wl.tape, tmp, meta={"workload": "transformer", "step": 0, "seed": 0,
                                          "loss": loss.id})
        tmp.replace(p)
    return p


def measure(path: Path) -> None:
    """One open in this process; prints one tab-separated result line."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.session import open_path

    app = QApplication([])
    w = MainWindow()
    w.resize(1280, 800)
    w.show()
    app.processEvents()
    t0 = time.perf_counter()
    s = open_path(str(path))
    s.ensure_gradients()
    t1, c1 = time.perf_counter(), time.process_time()
    w.set_session(s)
    t2 = time.perf_counter()
    w.wait_until_ready(120)
    app.processEvents()
    w.grab()
    t3, c3 = time.perf_counter(), time.process_time()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(s.tape)}\t{t1 - t0:.2f}\t{t2 - t1:.2f}\t{t3 - t1:.2f}\t{c3 - c1:.2f}\t{rss:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[238, 2380])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--repeat", type=int, default=1, help="opens per tape, each a fresh process")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # internal: measure this file
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.one:
        measure(args.one)
        return
    print("| nodes | read s | set_session s | after read: on screen + painted s (CPU s) "
          "| peak RSS MB |")
    print("|---:|---:|---:|---:|---:|")
    for blocks in args.blocks:
        path = tape_path(args.cache, blocks)
        for _ in range(args.repeat):  # a fresh process each: nothing cached between opens
            out = subprocess.run([sys.executable, __file__, "--one", str(path)], check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
            n, read, ss, total, cpu, rss = out.split("\t")
            print(f"| {n} | {read} | {ss} | {total} ({cpu}) | {rss} |")


if __name__ == "__main__":
    main()
