"""The live session (GUI side): a worker process steps the pair, Qt signals bring snapshots.

``LiveSession`` starts ``python -m tapescope.app.live_worker`` (see there why a process), sends it
commands, and a reader thread turns its JSON lines into queued Qt signals, so the GUI thread
never waits on a step and never competes with it for the GIL. ``inspect(node)`` asks the
worker for one node's arrays on both sides; the answer comes back as an ``inspected`` signal,
through the same mailbox as the snapshots (decoded in the reader thread, not the GUI's).

The worker is hostile-proof on this side too: what its workload writes to fd 1 and fd 2 arrives
as ``log`` lines, each cut to ``LOG_LINE_MAX`` bytes, ``LOG_TAIL_BYTES`` kept; a worker that
exits is reaped at once; ``close()`` never waits more than a few seconds (it ends the worker's
whole process group); and a watchdog emits ``unresponsive(seconds)`` when the worker owes an
answer (a step, an inspection, its start) and has said nothing for ``watchdog_s``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.app.live_worker import (
    FAILED,
    IDLE,
    PAUSED,
    ROOT,
    RUNNING,
    STOPPED,
    WorkerProcess,
    decode_array,
    launch,
)
from tapescope.app.runs import SessionConfig, StepResult
from tapescope.app.step_history import compact
from tapescope.app.step_wire import step_from_wire
from tapescope.core.step_record import worst

__all__ = ["FAILED", "IDLE", "Inspection", "LiveSession", "LogTail", "PAUSED", "ROOT", "RUNNING",
           "STOPPED", "Snapshot"]
LOG_TAIL_BYTES = 256 * 1024  # the worker's output kept (a 10 MB line once took the GUI to 2 GB)
LOG_LINE_MAX = 8192  # bytes of one line kept; the rest is counted, not stored
LOG_POST_LINES = 2000  # lines one log message to the GUI carries at most
STARTUP_S = 120.0  # the watchdog's patience before "ready": kernels compile on a cold cache

# Sessions whose reader threads may still run. The threads hold references to their session;
# if the last one were dropped when a thread ends, the QObject would be destroyed in that thread,
# not the GUI's, and the GUI crashed (a segfault in the event loop, seen under load in the live
# tests). This set keeps each session until, in the GUI thread, its threads have all ended.
_RUNNING_SESSIONS: set = set()


def _release_finished_sessions() -> None:
    """Drop (in the GUI thread) the sessions whose reader threads have all ended."""
    for sess in [x for x in _RUNNING_SESSIONS if not any(t.is_alive() for t in x._threads)]:
        _RUNNING_SESSIONS.discard(sess)


@dataclass
class Snapshot:
    """What the GUI receives: every step since the last snapshot, each with its step record
    (``core.step_record``, decoded once in the reader thread); the views read its columns."""

    results: list[StepResult]
    first: dict | None  # the session's first divergence so far: {"step", "node", "op", "which"}
    steps_per_s: float
    state: str = RUNNING
    extra: dict = field(default_factory=dict)

    @property
    def latest(self) -> StepResult:
        """The newest step."""
        return self.results[-1]

    @property
    def steps(self) -> list[tuple]:
        """Per step (step, loss_ref, loss_cand, seconds, exact): the training plots' points."""
        return [(r.step, r.loss_ref, r.loss_cand, r.seconds, r.exact) for r in self.results]

    @property
    def ulp_columns(self) -> list[np.ndarray]:
        """Per step, per node the worst ulp (-1 NaN), from the record's columns."""
        return [r.node_max_ulp() for r in self.results]


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


class LogTail:
    """The worker's fd 1 and fd 2 as lines, each cut to LOG_LINE_MAX, LOG_TAIL_BYTES kept."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque()
        self.size = 0
        self._part = bytearray()
        self._cut = 0
        self._lock = threading.Lock()

    def feed(self, data: bytes) -> list[str]:
        """Take a piece of output; return the lines it completed."""
        out = []
        start = 0
        with self._lock:
            while True:
                nl = data.find(b"\n", start)
                end = len(data) if nl < 0 else nl
                room = max(0, LOG_LINE_MAX - len(self._part))
                self._part += data[start:min(end, start + room)]
                self._cut += max(0, end - start - room)
                if nl < 0:
                    break
                out.append(self._line())
                start = nl + 1
            for line in out:
                self._keep(line)
        return out

    def finish(self) -> list[str]:
        """End of output: the unfinished last line, if any, as a line."""
        with self._lock:
            if not self._part and not self._cut:
                return []
            line = self._line()
            self._keep(line)
            return [line]

    def text(self) -> str:
        """What is kept, the unfinished line included."""
        with self._lock:
            part = self._part.decode("utf-8", "replace")
            return "".join(line + "\n" for line in self.lines) + part

    def _line(self) -> str:
        text = self._part.decode("utf-8", "replace")
        if self._cut:
            text += f" … [{self._cut} bytes cut]"
        self._part, self._cut = bytearray(), 0
        return text

    def _keep(self, line: str) -> None:
        self.lines.append(line)
        self.size += len(line.encode()) + 1
        # NOTE: the unfinished line must fit beside the kept ones: LOG_LINE_MAX bytes, each of
        # which may decode to a 3-byte U+FFFD
        while self.lines and self.size > LOG_TAIL_BYTES - 3 * LOG_LINE_MAX:
            self.size -= len(self.lines.popleft().encode()) + 1


class LiveSession(QObject):
    """One worker process for one ``SessionConfig``; emits ``snapshot``, ``failed``, ..."""

    snapshot = Signal(object)
    state_changed = Signal(str)
    failed = Signal(str, str)  # message, traceback
    ready = Signal(object)  # {"plan", "device", "reference", "candidate"}
    inspected = Signal(object)  # an Inspection
    log = Signal(list)  # new lines of the worker's fd 1 / fd 2
    unresponsive = Signal(float)  # seconds without an answer the worker owes (repeats)
    answered = Signal()  # the worker spoke again after ``unresponsive``
    progress = Signal(object)  # while opening: {"event", "what", "done", "total", "elapsed"}
    _message = Signal(object)

    def __init__(self, config: SessionConfig, interval_s: float = 0.1,
                 max_steps: int | None = None, parent=None, watchdog_s: float = 30.0) -> None:
        super().__init__(parent)
        self.config, self.interval_s, self.max_steps = config, interval_s, max_steps
        self.watchdog_s = watchdog_s
        self.state = IDLE
        self.steps_done = 0
        self.first: dict | None = None
        self.info: dict | None = None
        self.worker: WorkerProcess | None = None
        self.proc = None  # the worker's Popen (reaped by a thread of its own)
        self.returncode: int | None = None
        self.killed = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        self.logs = LogTail()
        self.silent_s = 0.0  # how long the worker has owed an answer (0: it does not)
        self._heard = time.monotonic()
        self._owe_step = False
        self._reports: queue.Queue = queue.Queue()
        self._mail: list = []
        # RLock: the reader threads post under it, and a post must never race close() (below)
        self._mail_lock = threading.RLock()
        self.pending: set[int] = set()  # inspect requests not answered yet
        self._req = 0
        self._message.connect(self._on_mail)
        self._watch = QTimer(self)
        self._watch.setInterval(250)
        self._watch.timeout.connect(self._check_watchdog)

    # ---- control (GUI thread) ---------------------------------------------------------------
    def start(self, paused: bool = False) -> None:
        """Start the worker process (it builds the runner, then steps unless ``paused``)."""
        if self.worker is not None:
            raise RuntimeError("this live session was already started")
        self.worker = launch({"config": self.config.__dict__, "interval_s": self.interval_s,
                              "max_steps": self.max_steps, "paused": paused})
        self.proc = self.worker.proc
        self._heard = time.monotonic()
        self._set_state(PAUSED if paused else RUNNING)
        reader = threading.Thread(target=self._read, daemon=True, name="tapescope-live-reader")
        self._threads = [
            reader,
            threading.Thread(target=self._read_log, daemon=True, name="tapescope-live-log"),
            threading.Thread(target=self._reap, args=(reader,), daemon=True,
                             name="tapescope-live-reaper")]
        _release_finished_sessions()
        _RUNNING_SESSIONS.add(self)  # released in the GUI thread once these threads end
        for t in self._threads:
            t.start()
        self._watch.start()

    def _send(self, cmd: str, **args) -> bool:
        return self.worker is not None and self.worker.send({"cmd": cmd, **args})

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
        if self.state == PAUSED and self._send("step"):
            if not self._owe_step:
                self._heard = time.monotonic()
            self._owe_step = True

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
        if not self.pending:
            self._heard = time.monotonic()
        self.pending.add(self._req)
        return self._req

    def close(self, wait_s: float = 2.0) -> None:
        """Stop and end the worker's whole process group; returns within about ``wait_s``."""
        w = self.worker
        if w is None:
            return
        self.stop()
        self.pending.clear()
        with self._mail_lock:
            # from here on the reader threads post nothing: they outlive this object's C++
            # side (its parent may delete it once close returns), and a signal emitted on a
            # QObject being destroyed crashed the GUI (seen under load in the live tests)
            self._closed = True  # the watchdog's timer stops itself (its own thread: the GUI's)
            self._mail = []
        w.close(wait_s)
        _release_finished_sessions()

    def kill(self) -> None:
        """End the worker now (the watchdog's Kill): its whole group, no questions asked."""
        if self.worker is None:
            return
        self.killed = True
        self.pending.clear()
        self._set_state(STOPPED)
        self.worker.end_group()

    def is_alive(self) -> bool:
        """True while the worker process runs."""
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        """The kept tail of what the worker's workload wrote to fd 1 and fd 2."""
        return self.logs.text()

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
        for msg in self.worker.messages():  # blocks in C without the GIL
            if msg["type"] == "report":
                self._reports.put(msg["data"])
            elif msg["type"] == "inspect":
                self._post(_inspection(msg))
            else:
                self._post(_decoded(msg) if msg["type"] == "snapshot" else msg)
        self._post({"type": "eof"})

    def _post(self, msg) -> None:
        # one ordered mailbox; a snapshot following a snapshot the GUI has not taken yet merges
        # into it, so however slow the GUI is, at most one notification is queued
        with self._mail_lock:
            if self._closed:
                return  # close() has run: nobody listens, and the QObject may be going away
            box = self._mail
            notify = not box
            if box and isinstance(msg, Snapshot) and isinstance(box[-1], Snapshot):
                box[-1] = _merge(box[-1], msg)
            elif box and _is_log(msg) and _is_log(box[-1]):
                box[-1]["lines"] = (box[-1]["lines"] + msg["lines"])[-LOG_POST_LINES:]
            else:
                box.append(msg)
            if notify:  # under the lock, so close() cannot slip in between check and emit
                try:
                    self._message.emit(None)
                except RuntimeError:  # the C++ object is already gone (closed without close())
                    self._closed = True

    def _read_log(self) -> None:
        for data in self.worker.log_chunks():
            lines = self.logs.feed(data)
            if lines:
                self._post({"type": "log", "lines": lines[-LOG_POST_LINES:]})
        lines = self.logs.finish()
        if lines:
            self._post({"type": "log", "lines": lines})

    def _reap(self, reader: threading.Thread) -> None:
        # wait() as soon as it exits (no zombie), after the messages it sent before exiting
        rc = self.proc.wait()
        reader.join(2.0)
        self._post({"type": "exited", "rc": rc})

    def _on_mail(self, _=None) -> None:
        with self._mail_lock:
            box, self._mail = self._mail, []
        for msg in box:
            if not _is_log(msg):
                self._heard = time.monotonic()
            self._on_message(msg)

    def _owes_answer(self) -> bool:
        return self.is_alive() and (self.info is None or self.state == RUNNING
                                    or self._owe_step or bool(self.pending))

    def _check_watchdog(self) -> None:
        if self._closed:  # after close: tick on until the reader threads end, then let go
            if not any(t.is_alive() for t in self._threads):
                self._watch.stop()
                _release_finished_sessions()
            return
        owes = self._owes_answer()
        silent = time.monotonic() - self._heard
        limit = self.watchdog_s if self.info is not None else max(self.watchdog_s, STARTUP_S)
        if owes and silent > limit:
            self.silent_s = silent
            self.unresponsive.emit(silent)
        elif self.silent_s:
            self.silent_s = 0.0
            self.answered.emit()
        if not self.is_alive() and self.returncode is not None:
            self._watch.stop()

    def _on_message(self, msg) -> None:
        if isinstance(msg, Inspection):
            self.pending.discard(msg.req)
            self.inspected.emit(msg)
            return
        if isinstance(msg, Snapshot):
            self._owe_step = False
            self.steps_done = msg.extra["steps_done"]
            self.first = msg.first
            if self.state not in (STOPPED, FAILED):
                self._set_state(msg.state)
            self.snapshot.emit(msg)
            return
        kind = msg["type"]
        if kind == "log":
            self.log.emit(msg["lines"])
        elif kind == "progress":
            self.progress.emit(msg)
        elif kind == "ready":
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
        elif kind == "exited":
            self.returncode = msg["rc"]
            self.pending.clear()
            self._owe_step = False
            if self.state in (RUNNING, PAUSED, IDLE):
                rc = msg["rc"]
                how = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
                self._set_state(FAILED)
                self.failed.emit(f"the live worker process ended unexpectedly ({how})",
                                 "\n".join(list(self.logs.lines)[-40:]))


def _is_log(msg) -> bool:
    return isinstance(msg, dict) and msg.get("type") == "log"


def _merge(old: Snapshot, new: Snapshot) -> Snapshot:
    """Two snapshots the GUI has not seen yet as one (all steps kept)."""
    new.results = old.results + new.results
    return new


def _decoded(msg: dict) -> Snapshot | dict:
    """A snapshot, or the session's failure when the worker sent one this side cannot read."""
    try:
        return _snapshot(msg)
    except (KeyError, TypeError, ValueError) as e:
        return {"type": "failed", "message": f"the live worker sent a malformed snapshot: {e}",
                "details": ""}


def _snapshot(msg: dict, labels: tuple = ()) -> Snapshot:
    """Decode a ``snapshot`` message (in the reader thread): each step's record unpacked once.
    Its row count is the first step's (the worker compares the same nodes every step)."""
    steps = msg["steps"]
    n = steps[0]["n"] if steps and isinstance(steps[0], dict) else 0
    results = [step_from_wire(d, n, labels) for d in steps]
    for r in results:
        # NOTE: what the GUI reads of each record, made here, off the GUI thread (at 100k
        # nodes each is ~5-30 ms of strided reads over the 15 MB record, issue 29 target 4)
        r.derived["max_ulp"] = worst(r.record)
        r.derived["history"] = compact(r.record)
    return Snapshot(results=results, first=msg["first"],
                    steps_per_s=msg["steps_per_s"], state=msg["state"],
                    extra={"steps_done": msg["steps_done"]})


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
