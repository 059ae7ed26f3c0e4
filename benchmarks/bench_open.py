"""Opening a recorded tape in the whole window: a tiny (51-node), a 10k-node and a 100k-node
transformer tape, each in tape file version 1 (the old zip) and version 2 (blocks, read lazily).

The tape is the ``transformer`` workload with ``blocks`` blocks (1 block: 51 nodes; 238:
10,005; 2380: 99,969), recorded with gradients and saved once per version into the cache folder
given (default: the system temp folder; the 100k file is ~860 MB and takes minutes to record;
the other version is converted from the first). Then, in a fresh process per open, offscreen
at 1280x800: read the file (``app.session.open_path``: the graph model included), ``set_session``,
wait until the layout is on screen, first paint (a grab). Issue 29's target: read and on screen
≤ 3 s at 100k, ≤ 0.5 s over the tiny tape at 10k; peak memory ≤ 1.5x the arrays the window
shows (the "arrays read" column: version 2's blocks read, version 1 reads every array).

Run: ``python benchmarks/bench_open.py [--blocks 1 238 2380] [--versions 1 2] [--cache DIR]``.
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


def tape_path(cache: Path, blocks: int, version: int = 2) -> Path:
    """The recorded tape of ``blocks`` blocks in file ``version``, made on first use (converted
    from the other version's file when that exists, else recorded)."""
    p = cache / f"tapescope-bench-transformer{blocks}.v{version}.tape"
    if not p.exists():
        from tapescope.core import tapefile, workloads

        other = cache / f"tapescope-bench-transformer{blocks}.v{3 - version}.tape"
        if other.exists():
            tape, meta = tapefile.load(other)
        else:
            wl = workloads.get("transformer", seed=0, blocks=blocks)
            loss = wl.record(0)
            wl.tape.backward(loss)
            tape, meta = wl.tape, {"workload": "transformer", "step": 0, "seed": 0,
                                   "loss": loss.id}
        tmp = p.with_suffix(".part")
        tapefile.save(tape, tmp, meta=meta, version=version)
        tmp.replace(p)
    return p


def measure(path: Path) -> None:
    """One open in this process; prints one tab-separated result line."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from tapescope.app.qt.main_window import MainWindow
    from tapescope.app.session import open_path

    app = QApplication([])
    w = MainWindow()
    w.resize(1280, 800)
    w.show()
    app.processEvents()
    t0, c0 = time.perf_counter(), time.process_time()
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
    vals = getattr(s.tape, "_values", None)
    # the arrays this process holds of the file: version 2's blocks read, version 1's every one
    held = getattr(vals, "bytes_read", None)
    if held is None:
        held = sum(s.tape.value(i).nbytes + (0 if (g := s.tape.grad(i)) is None else g.nbytes)
                   for i in range(len(s.tape)))
    print(f"{len(s.tape)}\t{t1 - t0:.2f}\t{t2 - t1:.2f}\t{t3 - t1:.2f}\t{c3 - c1:.2f}\t{rss:.0f}"
          f"\t{c1 - c0:.2f}\t{held / 1e6:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 238, 2380])
    ap.add_argument("--versions", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--repeat", type=int, default=1, help="opens per tape, each a fresh process")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # internal: measure this file
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.one:
        measure(args.one)
        return
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| nodes | file | MB | read s (CPU) | after read: on screen + painted s (CPU) "
          "| read + on screen s | over the tiny tape s | peak RSS MB | arrays read MB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    tiny: dict[int, float] = {}
    for blocks in args.blocks:
        for version in args.versions:
            path = tape_path(args.cache, blocks, version)
            for _ in range(args.repeat):  # a fresh process each: nothing cached between opens
                out = subprocess.run([sys.executable, __file__, "--one", str(path)], check=True,
                                     capture_output=True, text=True).stdout.strip()
                n, read, ss, total, cpu, rss, rcpu, held = out.splitlines()[-1].split("\t")
                whole = float(read) + float(total)
                if blocks == min(args.blocks):
                    tiny.setdefault(version, whole)
                over = f"{whole - tiny[version]:.2f}" if version in tiny else ""
                mb = path.stat().st_size / 1e6
                print(f"| {n} | v{version} | {mb:.0f} | {read} ({rcpu}) | {total} ({cpu}) "
                      f"| {whole:.2f} | {over} | {rss} | {held} |", flush=True)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

if __name__ == "__main__":
    main()
