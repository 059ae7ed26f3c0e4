"""The live session (GUI side): a worker process steps the pair, Qt signals bring snapshots.

``LiveSession`` starts ``python -m app.live_worker`` (see there why a process), sends it
commands, and a reader thread turns its JSON lines into queued Qt signals, so the GUI thread
never waits on a step and never competes with it for the GIL. ``inspect(node)`` asks the
worker for one node's arrays on both sides; the answer comes back as an ``inspected`` signal,
through the same mailbox as the snapshots (decoded in the reader thread, not the GUI's).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Signal

from app.live_worker import FAILED, IDLE, PAUSED, RUNNING, STOPPED, decode_array
from app.runs import SessionConfig, StepResult

__all__ = ["FAILED", "IDLE", "Inspection", "LiveSession", "PAUSED", "RUNNING", "STOPPED",
           "Snapshot"]
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Snapshot:
    """What the GUI receives: the steps since the last snapshot, and the latest in full."""

    steps: list[tuple]  # (step, loss_ref, loss_cand, seconds, exact)
    ulp_columns: list[np.ndarray]  # per step: per-node worst ulp (-1 NaN)
    latest: StepResult
    first: dict | None  # the session's first divergence so far: {"step", "node", "op", "which"}
    steps_per_s: float
    state: str = RUNNING
    extra: dict = field(default_factory=dict)
    summaries: list[dict] = field(default_factory=list)  # every step: app.step_history


@dataclass
class Inspection:
    """The worker's answer for one node: both sides' value and gradient at ``step``."""

    req: int | None
    node: int
    step: int = -1
    reference: str = ""
    candidate: str = ""
    ref_value: np.ndarray | None = None
    ref_grad: np.ndarray | None = None
    cand_value: np.ndarray | None = None
    cand_grad: np.ndarray | None = None
    error: str | None = None  # why there are no arrays (no step yet, unknown node, ...)


class LiveSession(QObject):
    """One worker process for one ``SessionConfig``; emits ``snapshot``, ``failed``, ..."""

    snapshot = Signal(object)
    state_changed = Signal(str)
    failed = Signal(str, str)  # message, traceback
    ready = Signal(object)  # {"plan", "device", "reference", "candidate"}
    inspected = Signal(object)  # an Inspection
    _message = Signal(object)

    def __init__(self, config: SessionConfig, interval_s: float = 0.1,
                 max_steps: int | None = None, parent=None) -> None:
        super().__init__(parent)
        self.config, self.interval_s, self.max_steps = config, interval_s, max_steps
        self.state = IDLE
        self.steps_done = 0
        self.first: dict | None = None
        self.info: dict | None = None
        self.proc: subprocess.Popen | None = None
        self._reports: queue.Queue = queue.Queue()
        self._stderr: list[str] = []
        self._mail: list = []
        self._mail_lock = threading.Lock()
        self.pending: set[int] = set()  # inspect requests not answered yet
        self._req = 0
        self._message.connect(self._on_mail)

    # ---- control (GUI thread) ---------------------------------------------------------------
    def start(self, paused: bool = False) -> None:
        """Start the worker process (it builds the runner, then steps unless ``paused``)."""
        if self.proc is not None:
            raise RuntimeError("this live session was already started")
        arg = json.dumps({"config": self.config.__dict__, "interval_s": self.interval_s,
                          "max_steps": self.max_steps, "paused": paused})
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.live_worker", arg], cwd=str(ROOT), env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1)
        self._set_state(PAUSED if paused else RUNNING)
        threading.Thread(target=self._read, daemon=True, name="tapescope-live-reader").start()
        threading.Thread(target=self._read_err, daemon=True, name="tapescope-live-err").start()

    def _send(self, cmd: str, **args) -> bool:
        p = self.proc
        if p is None or p.poll() is not None:
            return False
        try:
            p.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
            p.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def pause(self) -> None:
        """Stop after the current step (a snapshot of it still arrives)."""
        if self.state == RUNNING and self._send("pause"):
            self._set_state(PAUSED)

    def resume(self) -> None:
        """Continue stepping."""
        if self.state == PAUSED and self._send("resume"):
            self._set_state(RUNNING)

    def single_step(self) -> None:
        """While paused: run exactly one more step."""
        if self.state == PAUSED:
            self._send("step")

    def stop(self) -> None:
        """End the stepping; the worker stays to answer ``report()`` until ``close()``."""
        if self.state in (RUNNING, PAUSED, IDLE) and self.proc is not None:
            self._send("stop")
            self._set_state(STOPPED)

    def inspect(self, node_id: int, step: int | None = None) -> int | None:
        """Ask for one node's value and gradient on both sides (at ``step``, if the worker still
        keeps it; default the latest); ``inspected`` answers.

        Returns the request id (None when the worker is gone). Never waits.
        """
        if self.state == FAILED:
            return None
        self._req += 1
        extra = {} if step is None else {"step": int(step)}
        if not self._send("inspect", node=int(node_id), req=self._req, **extra):
            return None
        self.pending.add(self._req)
        return self._req

    def close(self, wait_s: float = 3.0) -> None:
        """Stop and end the worker process."""
        p = self.proc
        if p is None:
            return
        self.stop()
        self._send("quit")
        self.pending.clear()
        try:
            p.wait(wait_s)
        except subprocess.TimeoutExpired:
            p.kill()  # our own child, by its handle
            p.wait(wait_s)
        for f in (p.stdin, p.stdout, p.stderr):
            try:
                f.close()
            except OSError:
                pass

    def is_alive(self) -> bool:
        """True while the worker process runs."""
        return self.proc is not None and self.proc.poll() is None

    def report(self, timeout_s: float = 10.0) -> dict | None:
        """The report data of the steps run so far (asks the worker; None if it is gone)."""
        while not self._reports.empty():
            self._reports.get_nowait()
        if not self._send("report"):
            return None
        try:
            return self._reports.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def _set_state(self, s: str) -> None:
        if s != self.state:
            self.state = s
            self.state_changed.emit(s)

    # ---- messages ---------------------------------------------------------------------------
    def _read(self) -> None:
        for line in self.proc.stdout:  # blocks in C without the GIL
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # e.g. a stray print in the user's workload: not ours
            if not isinstance(msg, dict) or "type" not in msg:
                continue
            if msg["type"] == "report":
                self._reports.put(msg["data"])
            elif msg["type"] == "inspect":
                self._post(_inspection(msg))
            else:
                self._post(_snapshot(msg) if msg["type"] == "snapshot" else msg)
        self._post({"type": "eof"})

    def _post(self, msg) -> None:
        # one ordered mailbox; a snapshot following a snapshot the GUI has not taken yet merges
        # into it, so however slow the GUI is, at most one notification is queued
        with self._mail_lock:
            box = self._mail
            notify = not box
            if box and isinstance(msg, Snapshot) and isinstance(box[-1], Snapshot):
                box[-1] = _merge(box[-1], msg)
            else:
                box.append(msg)
        if notify:
            self._message.emit(None)

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-200]

    def _on_mail(self, _=None) -> None:
        with self._mail_lock:
            box, self._mail = self._mail, []
        for msg in box:
            self._on_message(msg)

    def _on_message(self, msg) -> None:
        if isinstance(msg, Inspection):
            self.pending.discard(msg.req)
            self.inspected.emit(msg)
            return
        if isinstance(msg, Snapshot):
            self.steps_done = msg.extra["steps_done"]
            self.first = msg.first
            if self.state not in (STOPPED, FAILED):
                self._set_state(msg.state)
            self.snapshot.emit(msg)
            return
        kind = msg["type"]
        if kind == "ready":
            self.info = msg
            self.ready.emit(msg)
        elif kind == "state":
            self.steps_done = max(self.steps_done, msg["steps_done"])
            if self.state not in (FAILED,):
                self._set_state(msg["state"])
        elif kind == "failed":
            self.pending.clear()
            self._set_state(FAILED)
            self.failed.emit(msg["message"], msg["details"])
        elif kind == "eof":
            self.pending.clear()  # nothing more will answer
        if kind == "eof" and self.state in (RUNNING, PAUSED, IDLE):
            err = "".join(self._stderr[-40:])
            self._set_state(FAILED)
            self.failed.emit("the live worker process ended unexpectedly", err)


def _merge(old: Snapshot, new: Snapshot) -> Snapshot:
    """Two snapshots the GUI has not seen yet as one (all steps kept, the newest in full)."""
    new.steps = old.steps + new.steps
    new.ulp_columns = old.ulp_columns + new.ulp_columns
    new.summaries = old.summaries + new.summaries
    return new


def _snapshot(msg: dict) -> Snapshot:
    latest = StepResult(**msg["latest"])
    return Snapshot(steps=[tuple(s) for s in msg["steps"]],
                    ulp_columns=[np.asarray(c, dtype=np.float64) for c in msg["columns"]],
                    latest=latest, first=msg["first"], steps_per_s=msg["steps_per_s"],
                    state=msg["state"], extra={"steps_done": msg["steps_done"]},
                    summaries=list(msg.get("summaries") or []))


def _inspection(msg: dict) -> Inspection:
    """Decode an ``inspect`` message (in the reader thread: base64 work stays off the GUI)."""
    req = msg.get("req")
    node = msg.get("node")
    out = Inspection(req if isinstance(req, int) else None, node if isinstance(node, int) else -1)
    if msg.get("error"):
        out.error = str(msg["error"])
        return out
    try:
        out.step = int(msg["step"])
        out.reference, out.candidate = str(msg["reference"]), str(msg["candidate"])
        for side in ("ref", "cand"):
            for which in ("value", "grad"):
                a = decode_array(msg[side][which], f"node #{node} {side} {which}")
                setattr(out, f"{side}_{which}", a)
    except (KeyError, TypeError, ValueError) as e:
        out.error = f"bad inspect reply from the worker: {e}"
    return out
