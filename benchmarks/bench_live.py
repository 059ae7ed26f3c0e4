"""Live sessions: throughput against the headless run, GUI latency, memory over 1,000 steps.

    python benchmarks/bench_live.py [--steps 1000] [--workloads mlp,transformer]

For each workload on the host device (CPU reference vs device, as ``tapescope parity`` runs it):

- headless steps/s: ``PairRunner.step()`` in a loop, the same operations as ``tapescope parity``
  (record, backward, set inputs, forward, backward, diff every node, both optimizer steps);
- live steps/s: the same in a live session of an offscreen MainWindow, measured in the GUI from
  the first snapshot to the last (worker start-up excluded), with every snapshot drawn;
- ratio live / headless (target >= 0.9);
- GUI latency: a 10 ms QTimer's lateness while training (max and p99; target max <= 50 ms);
- memory: RSS of the GUI process and of the worker after step 100 and at the end (target flat,
  < 10 % growth);
- provenance (``core.provenance`` on every step, on by default in the pair loop): headless
  steps/s with it off and on, and its own time per step (mean and p95, ms), for refmath
  (everything exact: the skip hints leave nothing to recompute) and platform math (drifting:
  every drifted node is recomputed), unfused and fused. ``--provenance-only`` prints just this.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402


def rss_mb(pid: int | None = None) -> float:
    """Resident set size of a process (this one by default) in MiB, from /proc."""
    with open(f"/proc/{pid or 'self'}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def headless(workload: str, steps: int, provenance: str = "every", math: str = "refmath",
             fuse: bool = False, times: list | None = None) -> float:
    """Steps per second of the headless pair (what ``tapescope parity`` does per step);
    ``times`` collects each step's provenance seconds."""
    from app.runs import PairRunner, SessionConfig

    r = PairRunner(SessionConfig(workload=workload, device="host", math=math, fuse=fuse),
                   provenance=provenance)
    for _ in range(5):  # warm-up: first launches, caches
        r.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        res = r.step()
        if times is not None:
            times.append(res.provenance_s)
    return steps / (time.perf_counter() - t0)


def provenance_table(workloads: list[str], steps: int, repeat: int) -> None:
    """Headless steps/s without and with provenance, and provenance's own time per step."""
    print(f"provenance cost: {steps} headless steps per run, host device, float64, best of "
          f"{repeat} interleaved rounds (steps/s), provenance ms over all rounds")
    print(f"{'workload':<12}{'math':<9}{'fused':<7}{'off/s':>8}{'on/s':>8}{'ratio':>7}"
          f"{'prov ms mean':>13}{'p95':>7}{'introduced/step':>16}")
    for wl in workloads:
        for math in ("refmath", "platform"):
            for fuse in (False, True):
                off, on, times = [], [], []
                for _ in range(repeat):
                    off.append(headless(wl, steps, "off", math, fuse))
                    on.append(headless(wl, steps, "every", math, fuse, times))
                from app.runs import PairRunner, SessionConfig

                r = PairRunner(SessionConfig(workload=wl, device="host", math=math, fuse=fuse))
                intro = np.mean([len(r.step().introduced) for _ in range(5)])
                t = np.array(times) * 1e3
                print(f"{wl:<12}{math:<9}{'yes' if fuse else 'no':<7}{max(off):>8.1f}"
                      f"{max(on):>8.1f}{max(on) / max(off):>7.2f}{t.mean():>13.2f}"
                      f"{np.percentile(t, 95):>7.2f}{intro:>16.1f}", flush=True)


def live(workload: str, steps: int) -> dict:
    """Run a live session of ``steps`` in an offscreen window; measure rate, latency, memory."""
    from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer

    from app.live import FAILED, STOPPED
    from app.main_window import MainWindow
    from app.runs import SessionConfig

    win = MainWindow()
    win.resize(1440, 900)
    win.show()
    marks: list[tuple[float, int]] = []  # (time, steps seen by the GUI)
    mem: dict[str, float] = {}
    lateness: list[float] = []
    startup: list[float] = []
    cpu: list[float] = []  # this (GUI) process's CPU time at each snapshot
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        # while training: after the first snapshots (opening the workload, laying out the graph
        # and sizing the table happen once, before; reported apart as "start ms")
        (lateness if len(marks) >= 2 else startup).append(now - last[0] - 0.010)
        last[0] = now

    def on_snapshot(snap) -> None:
        done = snap.extra["steps_done"]
        marks.append((time.perf_counter(), done))
        cpu.append(time.process_time())
        if "gui_start" not in mem and done >= 100:
            mem["gui_start"] = rss_mb()
            mem["worker_start"] = rss_mb(win.live.live.proc.pid)
            mem["at_step"] = done
        if done >= steps:
            mem["gui_end"] = rss_mb()
            mem["worker_end"] = rss_mb(win.live.live.proc.pid)

    win.live.start(SessionConfig(workload=workload, device="host"), max_steps=steps)
    win.live.live.snapshot.connect(on_snapshot)
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    loop = QEventLoop()  # event-driven like app.exec(): a polling loop would cost GUI CPU

    def check(*_) -> None:
        st = win.live.live.state
        if st == FAILED or (st == STOPPED and marks and marks[-1][1] >= steps):
            loop.quit()

    win.live.live.snapshot.connect(check)
    win.live.live.state_changed.connect(check)
    QTimer.singleShot(600_000, loop.quit)
    loop.exec()
    timer.stop()
    win.live.close()
    win.close()
    win.deleteLater()
    QCoreApplication.processEvents()
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    lat = np.array(lateness[1:]) * 1e3
    return {"rate": (s1 - s0) / (t1 - t0), "gui_cpu": (cpu[-1] - cpu[0]) / (t1 - t0) * 100,
            "lat_max": float(lat.max()),
            "lat_p99": float(np.percentile(lat, 99)), "snapshots": len(marks),
            "startup": float(max(startup) * 1e3), **mem}


def main() -> None:
    """Measure (interleaved, repeated: the machine is shared) and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workloads", default="mlp,transformer")
    ap.add_argument("--provenance-only", action="store_true",
                    help="only the provenance table (no GUI runs)")
    a = ap.parse_args()
    provenance_table(a.workloads.split(","), min(a.steps, 300), a.repeat)
    if a.provenance_only:
        return
    __import__("views")  # the PySide6 guard
    from PySide6.QtWidgets import QApplication

    _app = QApplication.instance() or QApplication([])
    print(f"{a.steps} steps per live run, host device, CPU reference vs device; "
          f"{os.cpu_count()} CPUs; {a.repeat} interleaved rounds")
    head = (f"{'workload':<12}{'round':>6}{'headless/s':>11}{'live/s':>9}{'ratio':>7}"
            f"{'lat max ms':>11}{'lat p99':>9}{'start ms':>9}{'snaps':>7}{'GUI CPU':>8}"
            f"{'GUI MiB':>15}{'growth':>8}{'worker MiB':>15}{'growth':>8}")
    print(head)
    rows: dict[str, list] = {wl: [] for wl in a.workloads.split(",")}
    for k in range(a.repeat):
        for wl in rows:
            h = headless(wl, min(a.steps, 300))
            r = live(wl, a.steps)
            g = (r["gui_end"] - r["gui_start"]) / r["gui_start"] * 100
            w = (r["worker_end"] - r["worker_start"]) / r["worker_start"] * 100
            rows[wl].append((h, r, g, w))
            print(f"{wl:<12}{k + 1:>6}{h:>11.1f}{r['rate']:>9.1f}{r['rate'] / h:>7.2f}"
                  f"{r['lat_max']:>11.1f}{r['lat_p99']:>9.1f}{r['startup']:>9.0f}"
                  f"{r['snapshots']:>7}{r['gui_cpu']:>7.0f}%{r['gui_start']:>7.0f}→{r['gui_end']:<7.0f}{g:>7.1f}%"
                  f"{r['worker_start']:>7.0f}→{r['worker_end']:<7.0f}{w:>7.1f}%", flush=True)
    print("summary (best steps/s of each side; latency: median of the rounds' max and p99; "
          "growth: worst round)")
    for wl, rs in rows.items():
        h = max(x[0] for x in rs)
        lv = max(x[1]["rate"] for x in rs)
        lat = float(np.median([x[1]["lat_max"] for x in rs]))
        p99 = float(np.median([x[1]["lat_p99"] for x in rs]))
        print(f"{wl:<12}{'best':>6}{h:>11.1f}{lv:>9.1f}{lv / h:>7.2f}{lat:>11.1f}{p99:>9.1f}"
              f"{'':>9}{'':>7}{'':>8}{'':>15}{max(x[2] for x in rs):>7.1f}%{'':>15}"
              f"{max(x[3] for x in rs):>7.1f}%")
    print("memory: RSS after step ~100 → after the last step; targets: ratio >= 0.9, "
          "latency max <= 50 ms, growth < 10 %")


if __name__ == "__main__":
    main()
