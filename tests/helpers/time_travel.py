"""Time travel without a worker: the transformer's real steps with the platform libm (an exact step
1 put in front), fed to the window as snapshots, and an unstarted ``LiveSession`` standing in for
the worker that records what the window asks (``inspect(node, step)``); the answers are the
arrays the same ``PairRunner`` left at that step (tests/app: test_time_travel,
test_heat_tells_nodes_apart, test_inspector_follows_step, test_live_stepper, test_window_frame,
test_window_trust; the fixtures ``episode`` and ``tt`` are tests/app/conftest.py's)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tapescope.app.qt.live import PAUSED, Inspection, LiveSession, Snapshot
from tapescope.app.runs import PairRunner, SessionConfig

CFG = SessionConfig(workload="transformer", compare="cpu-platform", math="platform")


STEPS = 4


def record_episode():
    """(StepResults numbered 2.., arrays[step][node]) with an exact step 1 put in front, so the
    first divergence is at step 2, not at the first step."""
    r = PairRunner(CFG)
    results, arrays = [], {}
    for _ in range(STEPS):
        res = r.step()
        results.append(dataclasses.replace(res, step=res.step + 1))
        arrays[res.step + 1] = [r.arrays(i) for i in range(len(r.nodes))]
    first = results[0]
    rec = first.record.copy()  # nothing differs, nothing introduced
    for k in ("v_diff", "v_ulp", "v_nan", "g_ulp", "g_nan"):
        rec[k] = 0
    rec["g_diff"] = np.where(rec["g_n"] < 0, -1, 0)
    rec["flags"] = 0
    exact = dataclasses.replace(first, step=1, exact=True, first=None, record=rec,
                                roots=[], introduced=[], kernels=[])
    arrays[1] = arrays[2]  # (not asked for: step 1 is never inspected here)
    return [exact, *results], arrays, r.nodes


class Asked(list):
    """What the window asked the (stand-in) worker for: (node, step)."""


def fake_live(win) -> LiveSession:
    lv = LiveSession(CFG, parent=win.live)
    lv.state = PAUSED
    lv.info = {"plan": None, "device": "host", "reference": "CPU refmath",
               "candidate": "CPU platform"}
    lv.asked = Asked()

    def inspect(node, step=None):
        lv.asked.append((int(node), step))
        lv.pending.add(len(lv.asked))
        return len(lv.asked)

    lv.inspect = inspect
    lv.is_alive = lambda: True
    ctl = win.live
    # connected as start() connects them, so close() (the window closing) disconnects cleanly
    for sig, slot in (("log", getattr(getattr(ctl, "log_window", None), "append", None)),
                      ("unresponsive", getattr(getattr(ctl, "watchdog", None), "silent_for",
                                               None)),
                      ("answered", getattr(getattr(ctl, "watchdog", None), "hide", None)),
                      ("inspected", ctl._on_inspected), ("snapshot", ctl._on_snapshot),
                      ("state_changed", ctl._on_state), ("failed", ctl._on_failed),
                      ("ready", ctl._on_ready)):
        if slot is not None and hasattr(lv, sig):
            getattr(lv, sig).connect(slot)
    win.live.live = lv
    win.live.travel.reset()
    return lv


def feed(win, results) -> None:
    lv = win.live.live
    lv.steps_done = results[-1].step
    first = next(({"step": r.step, **r.first} for r in results if r.first), None)
    lv.first = first
    snap = Snapshot(results=list(results), first=first, steps_per_s=10.0, state=PAUSED,
                    extra={"steps_done": results[-1].step})
    win.live._on_snapshot(snap)


def answer(win, arrays, node: int, step: int) -> None:
    a = arrays[step][node]
    win.live._on_inspected(Inspection(None, node, step, "CPU refmath", "CPU platform",
                                      a["ref"]["value"], a["ref"]["grad"], a["cand"]["value"],
                                      a["cand"]["grad"]))


def answer_all(win, arrays) -> None:
    lv = win.live.live
    for node, step in list(lv.asked):
        answer(win, arrays, node, step)
    lv.asked.clear()
    lv.pending.clear()
