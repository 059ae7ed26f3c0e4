"""Live sessions: throughput against the headless run, GUI latency, memory over 1,000 steps.

    python benchmarks/bench_live.py [--steps 1000] [--workloads mlp,transformer]
    python benchmarks/bench_live.py --feed-only [--feed-steps 40] [--memory-steps 10000]

For each workload on the host device (CPU reference vs device, as ``tapescope parity`` runs it):

- headless steps/s: ``PairRunner.step()`` in a loop, the same operations as ``tapescope parity``
  (record, backward, set inputs, forward, backward, diff every node, both optimizer steps);
- live steps/s: the same in a live session of an offscreen MainWindow, measured in the GUI from
  the first snapshot to the last (worker start-up excluded), with every snapshot drawn;
- ratio live / headless (target >= 0.9);
- GUI latency: a 10 ms QTimer's lateness while training (max and p99; target max <= 50 ms);
- memory: RSS of the GUI process and of the worker after step 100 and at the end (target flat,
  < 10 % growth);
- GUI work per snapshot on a big tape (``--feed-nodes N``, default a 238-block transformer:
  10,005 nodes): a synthetic worker (``FeedSession``: no process) hands the window one step's
  snapshot at a time through the live session's own mailbox (``LiveSession._post``, as its
  reader thread does), and the window takes it as from a real worker (the table, the graph
  colours and marks, the heatmap, the scrubber); per snapshot the GUI thread's time;
- memory over ``--memory-steps N`` (e.g. 10000): that feed for N snapshots, the GUI's RSS at
  steps 100/1000/5000/10000, and a real worker on the mlp for N steps (GUI and worker RSS at
  the same steps);
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


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc."""
    with open(f"/proc/{pid or 'self'}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def headless(workload: str, steps: int, provenance: str = "every", math: str = "refmath",
             fuse: bool = False, times: list | None = None, cpu: list | None = None,
             warmup: int = 5) -> float:
    """Steps per second of the headless pair (what ``tapescope parity`` does per step);
    ``times`` collects each step's provenance seconds, ``cpu`` gets the CPU seconds a step."""
    from tapescope.app.runs import PairRunner, SessionConfig

    r = PairRunner(SessionConfig(workload=workload, device="host", math=math, fuse=fuse),
                   provenance=provenance)
    for _ in range(warmup):  # warm-up: first launches, caches
        r.step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        res = r.step()
        if times is not None:
            times.append(res.provenance_s)
    if cpu is not None:
        cpu.append((time.process_time() - c0) / steps)
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
                from tapescope.app.runs import PairRunner, SessionConfig

                r = PairRunner(SessionConfig(workload=wl, device="host", math=math, fuse=fuse))
                intro = np.mean([len(r.step().introduced) for _ in range(5)])
                t = np.array(times) * 1e3
                print(f"{wl:<12}{math:<9}{'yes' if fuse else 'no':<7}{max(off):>8.1f}"
                      f"{max(on):>8.1f}{max(on) / max(off):>7.2f}{t.mean():>13.2f}"
                      f"{np.percentile(t, 95):>7.2f}{intro:>16.1f}", flush=True)


MEMORY_AT = (100, 1000, 5000, 10000)  # steps at which the memory table reads RSS


def count_objects(x: object) -> int:
    """Python objects a decoded message holds (each dict, list, str, number, array: one),
    the decoder's allocations, counted the same way before and after a change of the wire."""
    if isinstance(x, dict):
        return 1 + sum(1 + count_objects(v) for v in x.values())  # (+1: each key)
    if isinstance(x, (list, tuple)):
        return 1 + sum(count_objects(v) for v in x)
    return 1


class PipeCount:
    """Counts what the worker's message pipe carries to the GUI: bytes of each message type,
    and per snapshot the objects its JSON decodes into (``count_objects``)."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = {}
        self.snapshots = 0
        self.objects: list[int] = []
        self.steps = 0

    def __enter__(self) -> PipeCount:
        import json

        from tapescope.app.live_worker import WorkerProcess

        self._real = WorkerProcess.messages
        me = self

        def messages(proc):  # WorkerProcess.messages, counting
            with os.fdopen(proc.msg_fd, "rb") as f:
                for line in f:
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(msg, dict) or "type" not in msg:
                        continue
                    kind = msg["type"]
                    me.bytes[kind] = me.bytes.get(kind, 0) + len(line)
                    if kind == "snapshot":
                        me.snapshots += 1
                        me.objects.append(count_objects(msg))
                        me.steps += len(msg.get("steps") or ())
                    yield msg

        WorkerProcess.messages = messages
        return self

    def __exit__(self, *exc) -> None:
        from tapescope.app.live_worker import WorkerProcess

        WorkerProcess.messages = self._real


def live(workload: str, steps: int, pipe: PipeCount | None = None) -> dict:
    """Run a live session of ``steps`` in an offscreen window; measure rate, latency, memory
    (``mem_at``: step → (GUI MiB, worker MiB) at the first snapshot past each MEMORY_AT);
    ``pipe`` counts the message pipe's bytes and objects."""
    from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer

    from tapescope.app.qt.live import FAILED, STOPPED
    from tapescope.app.qt.main_window import MainWindow
    from tapescope.app.runs import SessionConfig

    win = MainWindow()
    win.resize(1440, 900)
    win.show()
    marks: list[tuple[float, int]] = []  # (time, steps seen by the GUI)
    mem: dict = {"mem_at": {}}
    lateness: list[float] = []
    startup: list[float] = []
    cpu: list[float] = []  # this (GUI) process's CPU time at each snapshot
    wcpu: list[float] = []  # the worker's
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
        wcpu.append(cpu_s(win.live.live.proc.pid))
        if "gui_start" not in mem and done >= 100:
            mem["gui_start"] = rss_mb()
            mem["worker_start"] = rss_mb(win.live.live.proc.pid)
            mem["at_step"] = done
        for at in MEMORY_AT:
            if done >= at and at <= steps and at not in mem["mem_at"]:
                mem["mem_at"][at] = (rss_mb(), rss_mb(win.live.live.proc.pid))
        if done >= steps:
            mem["gui_end"] = rss_mb()
            mem["worker_end"] = rss_mb(win.live.live.proc.pid)

    if pipe is not None:
        with pipe:  # the reader thread takes the patched generator when the session starts
            win.live.start(SessionConfig(workload=workload, device="host"), max_steps=steps)
    else:
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
    QTimer.singleShot(1_800_000, loop.quit)  # (a 100k-node live run: minutes a step)
    loop.exec()
    timer.stop()
    win.live.close()
    win.close()
    win.deleteLater()
    QCoreApplication.processEvents()
    (t0, s0), (t1, s1) = marks[0], marks[-1]
    lat = np.array(lateness[1:]) * 1e3
    return {"rate": (s1 - s0) / (t1 - t0), "gui_cpu": (cpu[-1] - cpu[0]) / (t1 - t0) * 100,
            # CPU seconds per step, worker and GUI: what the load on the cores cannot change
            "worker_cpu_step": (wcpu[-1] - wcpu[0]) / (s1 - s0),
            "gui_cpu_step": (cpu[-1] - cpu[0]) / (s1 - s0),
            "lat_max": float(lat.max()),
            "lat_p99": float(np.percentile(lat, 99)), "snapshots": len(marks),
            "startup": float(max(startup) * 1e3), **mem}


# ---- the synthetic feed: a big tape's snapshots without a worker -----------------------------
def big_session(blocks: int = 238):
    """A session on a recorded ``blocks``-block transformer (238: 10,005 nodes)."""
    from tapescope.app.session import Session
    from tapescope.core import workloads

    wl = workloads.get("transformer", seed=0, blocks=blocks)
    loss = wl.record(0)
    wl.tape.backward(loss)
    return Session(wl.tape, loss.id, "workload:transformer", {"workload": "transformer",
                                                             "step": 0}, workload=wl)


def _feed_session_class():
    from tapescope.app.qt.live import RUNNING, LiveSession

    class FeedSession(LiveSession):
        """A live session whose snapshots come from ``feed`` (no worker process)."""

        def start(self, paused: bool = False) -> None:
            self._set_state(RUNNING)

        def is_alive(self) -> bool:
            return False  # nothing to ask for a node's arrays

        def feed(self, msg: dict) -> None:
            """One worker message, decoded and posted as the reader thread does."""
            from tapescope.app.qt.live import _snapshot

            self._post(_snapshot(msg))

    return FeedSession


def synthetic_messages(n: int, kinds: int = 8, seed: int = 0):
    """``step → the worker's snapshot message`` of one step on an ``n``-node tape: a few
    per cent of the nodes differ by 1-3 ulp (which ones changes with the step), the rest agree;
    each step's record packed as the worker packs it (``app.step_wire``)."""
    from tapescope.core.step_record import F_V_INTRO, STEP_RECORD, pack

    rng = np.random.default_rng(seed)
    tmpl = []
    for k in range(kinds):
        u = rng.integers(0, 4, n) * (rng.random(n) < 0.02 * (k % 5))
        rec = np.zeros(n, STEP_RECORD)
        rec["id"] = np.arange(n)
        rec["v_n"] = rec["g_n"] = 8
        rec["v_diff"], rec["v_ulp"] = (u > 0).astype(int), u
        rec["v_first"] = np.where(u > 0, 0, -1)
        rec["v_abs"] = np.where(u > 0, 1e-16, 0.0)
        rec["g_first"] = -1
        rec["flags"] = np.where(u > 0, F_V_INTRO * (rng.random(n) < 0.3), 0)
        tmpl.append((pack(rec), not (u > 0).any()))

    def message(step: int) -> dict:
        packed, exact = tmpl[step % kinds]
        first = {"step": 2, "node": 7, "op": "matmul", "which": "value"}
        wire = {"step": step, "loss_ref": 1.0 / step, "loss_cand": 1.0 / step, "seconds": 1.4,
                "exact": exact, "first": None if step != 2 else {"node": 7, "op": "matmul",
                                                                  "which": "value"},
                "provenance": True, "kernels": [], "provenance_s": 0.0, "produced": [],
                "roots": [], "n": n, "record": packed}
        return {"type": "snapshot", "state": "running", "steps_done": step,
                "steps": [wire], "first": first if step >= 2 else None, "steps_per_s": 0.7}

    return message


def feed(steps: int, blocks: int = 238, memory_at: tuple = ()) -> dict:
    """Feed ``steps`` one-step snapshots of a ``blocks``-block transformer to an offscreen
    window's live session; the GUI thread's time per snapshot (CPU and wall) and RSS at the
    ``memory_at`` steps."""
    from PySide6.QtCore import QCoreApplication

    import tapescope.app.qt.live_controller as lc
    from tapescope.app.qt.main_window import MainWindow
    from tapescope.app.runs import SessionConfig

    win = MainWindow()
    win.resize(1440, 900)
    win.show()
    win.set_session(big_session(blocks))
    win.wait_until_ready(60)
    n = len(win.session.tape)
    real = lc.LiveSession
    lc.LiveSession = _feed_session_class()
    try:
        win.live.start(SessionConfig(workload="transformer", device="host"))
    finally:
        lc.LiveSession = real
    sess = win.live.live
    message = synthetic_messages(n)
    cpu, wall, mem, gui = [], [], {}, []
    rss0 = rss_mb()
    from tapescope.app.qt.live import _snapshot

    for step in range(1, steps + 1):
        msg = message(step)
        t, c = time.perf_counter(), time.process_time()
        snap = _snapshot(msg)  # what the reader thread decodes (as sess.feed does)
        g = time.process_time()
        sess._post(snap)  # the window takes it (the mailbox calls the GUI at once in its thread)
        QCoreApplication.processEvents()  # and paints it
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        gui.append(time.process_time() - g)
        if step in memory_at:
            mem[step] = rss_mb()
    hist = win.live.travel.history
    out = {"nodes": n, "cpu": np.array(cpu) * 1e3, "wall": np.array(wall) * 1e3,
           "gui": np.array(gui) * 1e3,
           "rss_open": rss0, "mem_at": mem, "stored": len(hist),
           "history_mib": hist.nbytes / 2**20}
    win.live.close()
    win.close()
    win.deleteLater()
    QCoreApplication.processEvents()
    return out


def feed_table(steps: int, blocks: int) -> None:
    """The GUI's work per snapshot on a big tape (synthetic feed)."""
    r = feed(steps, blocks)
    c, w = r["cpu"][3:], r["wall"][3:]  # the first ones build the heatmap and the scrubber
    g = r["gui"][3:]
    print(f"GUI work per snapshot, {r['nodes']} nodes, {steps} snapshots (synthetic feed, "
          f"one step each), load {os.getloadavg()[0]:.1f}: CPU median {np.median(c):.1f} ms, "
          f"p90 {np.percentile(c, 90):.1f}, max {c.max():.1f}; wall median {np.median(w):.1f} "
          f"ms, max {w.max():.1f}", flush=True)
    print(f"  of which the GUI thread's (the snapshot taken and painted; the rest is the "
          f"reader thread's decoding): CPU median {np.median(g):.1f} ms, p90 "
          f"{np.percentile(g, 90):.1f}, max {g.max():.1f}", flush=True)


def memory_table(steps: int, blocks: int) -> None:
    """RSS over ``steps`` live steps: the synthetic feed on a big tape, a real mlp worker."""
    at = tuple(a for a in MEMORY_AT if a <= steps) or (steps,)
    t = time.perf_counter()
    r = feed(steps, blocks, at)
    fed_s = time.perf_counter() - t
    t = time.perf_counter()
    m = live("mlp", steps)
    mlp_s = time.perf_counter() - t
    # growth from the first column, and from step 1000 on (by then the feed's step history
    # has filled its 128 MiB budget: what it holds no longer grows, by design)
    late = at.index(1000) if 1000 in at and len(at) > 2 else None
    print(f"memory over {steps} live steps (RSS MiB; growth from step {at[0]}"
          + (f", and from step {at[late]}" if late is not None else "") + ")")
    print(f"{'':<44}" + "".join(f"{'step ' + str(a):>12}" for a in at) + f"{'growth':>9}"
          + (f"{'from ' + str(at[late]):>11}" if late is not None else ""))
    rows = [(f"feed, {r['nodes']} nodes: GUI (opened: {r['rss_open']:.0f})",
             [r["mem_at"][a] for a in at]),
            ("mlp, real worker: GUI", [m["mem_at"][a][0] for a in at]),
            ("mlp, real worker: worker", [m["mem_at"][a][1] for a in at])]
    for name, vals in rows:
        g = (vals[-1] - vals[0]) / vals[0] * 100
        g2 = (f"{(vals[-1] - vals[late]) / vals[late] * 100:>10.1f}%" if late is not None
              else "")
        print(f"{name:<44}" + "".join(f"{v:>12.0f}" for v in vals) + f"{g:>8.1f}%" + g2)
    print(f"feed: {fed_s:.0f} s, {r['stored']} steps stored ({r['history_mib']:.0f} MiB of "
          f"history, budget 128); mlp: {mlp_s:.0f} s, {m['rate']:.0f} steps/s", flush=True)


BIG = str(Path(__file__).resolve().parent / "transformer10k.py")


def big_live_table(steps: int, repeat: int, workload: str = BIG) -> None:
    """A real worker on the 10k-node tape (benchmarks/transformer10k.py, host device; or
    ``workload``, e.g. transformer100k.py): steps/s and CPU per step headless vs live,
    interleaved; the CPU ratio is the steady one on a shared machine (the steps/s of two runs
    minutes apart swing by 30 %)."""
    print(f"real worker, {Path(workload).stem}, {steps} steps a run, {repeat} rounds, load "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'round':>5}{'headless/s':>11}{'live/s':>8}{'ratio':>7}{'CPU/step headless':>19}"
          f"{'worker':>8}{'CPU ratio':>10}{'GUI CPU/step':>13}{'lat max':>9}{'p99 ms':>8}")
    pipes = []
    for k in range(repeat):
        cpu: list = []
        # (a 100k-node step is ~45 CPU s: one warm-up step, as the live run's first snapshot)
        h = headless(workload, steps, cpu=cpu, warmup=5 if workload == BIG else 1)
        pipe = PipeCount()
        r = live(workload, steps, pipe)
        pipes.append(pipe)
        print(f"{k + 1:>5}{h:>11.3f}{r['rate']:>8.3f}{r['rate'] / h:>7.2f}"
              f"{cpu[0] * 1e3:>17.0f}ms{r['worker_cpu_step'] * 1e3:>6.0f}ms"
              f"{cpu[0] / r['worker_cpu_step']:>10.2f}{r['gui_cpu_step'] * 1e3:>11.0f}ms"
              f"{r['lat_max']:>9.1f}{r['lat_p99']:>8.1f}", flush=True)
    # counts, not times: what the pipe carried and what the GUI decoded (the same each run)
    print(f"{'round':>5}{'snapshots':>10}{'steps':>7}{'snapshot bytes/step':>21}"
          f"{'other bytes':>12}{'objects/snapshot':>18}")
    for k, p in enumerate(pipes):
        other = sum(v for t, v in p.bytes.items() if t != "snapshot")
        print(f"{k + 1:>5}{p.snapshots:>10}{p.steps:>7}"
              f"{p.bytes.get('snapshot', 0) / max(p.steps, 1):>21,.0f}{other:>12,}"
              f"{(sum(p.objects) / max(len(p.objects), 1)):>18,.0f}", flush=True)


def main() -> None:
    """Measure (interleaved, repeated: the machine is shared) and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workloads", default="mlp,transformer")
    ap.add_argument("--provenance-only", action="store_true",
                    help="only the provenance table (no GUI runs)")
    ap.add_argument("--feed-steps", type=int, default=40,
                    help="snapshots of the synthetic feed on the big tape (0: none)")
    ap.add_argument("--feed-blocks", type=int, default=238,
                    help="transformer blocks of the fed tape (238: 10,005 nodes)")
    ap.add_argument("--memory-steps", type=int, default=0,
                    help="RSS over this many live steps (feed on the big tape, mlp worker)")
    ap.add_argument("--big-steps", type=int, default=0,
                    help="steps of a real worker on the 10k-node tape, headless vs live (0: "
                         "none; ~1.4 s a step here)")
    ap.add_argument("--big-workload", default=BIG,
                    help="the workload file of --big-steps (benchmarks/transformer100k.py: "
                         "99,969 nodes, ~45 CPU s a step here)")
    ap.add_argument("--feed-only", action="store_true",
                    help="only the synthetic feed (and --memory-steps): no provenance or "
                         "workload tables")
    a = ap.parse_args()
    if not a.feed_only:
        provenance_table(a.workloads.split(","), min(a.steps, 300), a.repeat)
    if a.provenance_only:
        return
    __import__("tapescope.views")  # the PySide6 guard
    from PySide6.QtWidgets import QApplication

    _app = QApplication.instance() or QApplication([])
    if a.feed_steps:
        feed_table(a.feed_steps, a.feed_blocks)
    if a.memory_steps:
        memory_table(a.memory_steps, a.feed_blocks)
    if a.big_steps:
        big_live_table(a.big_steps, a.repeat, a.big_workload)
    if a.feed_only:
        return
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
