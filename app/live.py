"""The live session controller: a worker thread steps a ``PairRunner``; the GUI gets snapshots.

The worker is a plain Python thread (the work is numpy and ctypes, not Qt); control (pause,
single-step, resume, stop) goes through a lock and an event, so the GUI never waits on a step.
Results cross to the GUI thread through a queued Qt signal at a bounded rate: every step's
small numbers (losses, max ulp per node, time) are batched into the next ``Snapshot``, the
per-node parity dicts only of the latest step, so a slow GUI sees fewer, fuller snapshots.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal

from app.report_data import ReportAccumulator
from app.runs import PairRunner, SessionConfig, StepResult

IDLE, RUNNING, PAUSED, STOPPED, FAILED = "idle", "running", "paused", "stopped", "failed"


@dataclass
class Snapshot:
    """What the GUI receives: the steps since the last snapshot, and the latest in full."""

    steps: list[tuple[int, float, float, float, bool]]  # (step, loss_ref, loss_cand, s, exact)
    ulp_columns: list  # per step: np.ndarray of per-node worst ulp (-1 NaN)
    latest: StepResult
    first: dict | None  # the session's first divergence so far: {"step", "node", "op", "which"}
    steps_per_s: float
    state: str = RUNNING
    extra: dict = field(default_factory=dict)


class LiveSession(QObject):
    """Owns the worker thread of one ``SessionConfig``; emits ``snapshot`` and ``failed``."""

    snapshot = Signal(object)
    state_changed = Signal(str)
    failed = Signal(str, str)  # message, traceback
    ready = Signal(object)  # once built: {"plan", "device", "reference", "candidate"}

    def __init__(self, config: SessionConfig, interval_s: float = 0.1, max_steps: int | None =
                 None, parent=None) -> None:
        super().__init__(parent)
        self.config = config
        self.interval_s = interval_s
        self.max_steps = max_steps
        self.runner: PairRunner | None = None
        self.report: ReportAccumulator | None = None
        self.state = IDLE
        self.steps_done = 0
        self.first: dict | None = None
        self._lock = threading.Lock()
        self._go = threading.Event()  # set while running (or one step is owed)
        self._single = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._pending: list[StepResult] = []
        self._rate: list[float] = []

    # ---- control (GUI thread) ---------------------------------------------------------------
    def start(self, paused: bool = False) -> None:
        """Build the runner and start stepping in the worker thread."""
        if self._thread is not None:
            raise RuntimeError("this live session was already started")
        self._set_state(PAUSED if paused else RUNNING)
        if not paused:
            self._go.set()
        self._thread = threading.Thread(target=self._main, name="tapescope-live", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        """Stop after the current step (a snapshot of it still arrives)."""
        with self._lock:
            if self.state == RUNNING:
                self._go.clear()
                self._set_state(PAUSED)

    def resume(self) -> None:
        """Continue stepping."""
        with self._lock:
            if self.state == PAUSED:
                self._single = False
                self._set_state(RUNNING)
                self._go.set()

    def single_step(self) -> None:
        """While paused: run exactly one more step."""
        with self._lock:
            if self.state == PAUSED:
                self._single = True
                self._go.set()

    def stop(self, wait_s: float = 5.0) -> None:
        """End the session; waits (bounded) for the current step to finish."""
        with self._lock:
            self._stop = True
            self._go.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(wait_s)
        if self.state not in (FAILED,):
            self._set_state(STOPPED)

    def is_alive(self) -> bool:
        """True while the worker thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _set_state(self, s: str) -> None:
        if s != self.state:
            self.state = s
            self.state_changed.emit(s)

    # ---- worker -----------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            r = self.runner = PairRunner(self.config)
            plan = r.plan.to_json() if r.plan is not None else None
            self.report = ReportAccumulator(self.config, r.nodes, r.ref_spec.label(),
                                            r.cand_spec.label(), r.describe_device(), plan)
        except Exception as e:  # noqa: BLE001 — the user's workload or a device may fail anyhow
            self._fail(e)
            return
        self.ready.emit({"plan": plan, "device": r.describe_device(),
                         "reference": r.ref_spec.label(), "candidate": r.cand_spec.label()})
        last_emit = 0.0
        while True:
            self._go.wait()
            with self._lock:
                if self._stop:
                    break
                single = self._single
                if single:
                    self._single = False
                    self._go.clear()
            try:
                res = self.runner.step()
            except Exception as e:  # noqa: BLE001 — shown in the GUI, the app stays up
                self._fail(e)
                return
            self.steps_done += 1
            self.report.add(res)
            if self.first is None and res.first is not None:
                self.first = {"step": res.step, **res.first}
            self._pending.append(res)
            self._rate.append(time.perf_counter())
            del self._rate[:-20]
            done = self.max_steps is not None and self.steps_done >= self.max_steps
            now = time.perf_counter()
            paused = not self._go.is_set()
            if done or paused or now - last_emit >= self.interval_s:
                self._flush(PAUSED if paused else (STOPPED if done else RUNNING))
                last_emit = now
            if done:
                with self._lock:
                    self._stop = True
                    self._go.clear()
                self._set_state(STOPPED)
                break

    def _flush(self, state: str) -> None:
        pend, self._pending = self._pending, []
        if not pend:
            return
        r = self._rate
        sps = (len(r) - 1) / (r[-1] - r[0]) if len(r) > 1 and r[-1] > r[0] else 0.0
        self.snapshot.emit(Snapshot(
            steps=[(p.step, p.loss_ref, p.loss_cand, p.seconds, p.exact) for p in pend],
            ulp_columns=[p.node_max_ulp() for p in pend], latest=pend[-1], first=self.first,
            steps_per_s=sps, state=state))

    def _fail(self, e: BaseException) -> None:
        details = getattr(e, "details", "") or traceback.format_exc()
        self._set_state(FAILED)
        self.failed.emit(f"{type(e).__name__}: {e}", details)
