"""The live session's worker: steps a ``PairRunner`` and streams JSON lines (no Qt).

``launch(arg)`` (what ``app.qt.live.LiveSession`` calls) runs ``python -m tapescope.app.live_worker
ARG``.
Commands arrive on a pipe of their own, one JSON object per line (``{"cmd": "pause" | "resume"
| "step" | "stop" | "report" | "quit"}``, or ``{"cmd": "inspect", "node": ID, "req": N,
"step": S}``); messages leave on a second pipe, one per line (``ready``, ``state``,
``snapshot``, ``report``, ``inspect``, ``failed``, and while the pair opens ``progress``:
core.progress's start / advance / end of the first kernel compile and the like). A separate
process, not a thread of the GUI: the stepping is Python work, and a busy Python thread makes
every Qt→Python call of the GUI thread (each table cell, each paint) wait for the GIL, which
froze the window for seconds in our first version.

Snapshots are rate-bounded: every step is batched into the next snapshot, each once, as its
step record packed (``app.step_wire``: the scalars of the step and ``core.step_record.pack``
of its per-node columns); the GUI reads everything per node (table, colours, heatmap, worst
ulp) from those columns. Tensors never stream: ``inspect`` answers for ONE node, when the user
selects it (``inspect_message``), from the step's one store (``app.run_sides.StepArrays``).

The protocol's pipes are its own (``pass_fds``), never fd 0/1/2: a workload may print anything,
with or without a newline, to fd 1 or fd 2; both go to one log pipe the GUI reads in bounded
pieces. The worker runs in its own session (process group), so ``close()`` ends it and whatever
the workload left behind together, and it dies with its parent (the command pipe's EOF, and
``PR_SET_PDEATHSIG`` on Linux for a parent killed with -9).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tapescope.app.pairs import open_pair
from tapescope.app.report_data import ReportAccumulator
from tapescope.app.runs import PairRunner, SessionConfig, StepResult
from tapescope.app.step_wire import step_to_wire
from tapescope.app.tensor_window import TensorWindow

# (re-exported: app.qt.live and the tests import the wire format from here)
from tapescope.app.wire import MAX_WIRE_BYTES, WIRE_KINDS, decode_array, encode_array  # noqa: F401

IDLE, RUNNING, PAUSED, STOPPED, FAILED = "idle", "running", "paused", "stopped", "failed"
ROOT = Path(__file__).resolve().parent.parent
QUIT_GRACE_S = 5.0  # after the command pipe closes, the step in flight gets this long to end


class Stepper:
    """The stepping loop and its controls (thread-safe); ``emit`` receives plain dicts."""

    def __init__(self, config: SessionConfig, emit: Callable[[dict], None],
                 interval_s: float = 0.1, max_steps: int | None = None,
                 paused: bool = False) -> None:
        self.config, self.emit = config, emit
        self.interval_s, self.max_steps = interval_s, max_steps
        self.state = PAUSED if paused else RUNNING
        self.report: ReportAccumulator | None = None
        self.runner: PairRunner | None = None
        self._run_lock = threading.Lock()  # a step and an inspection never interleave
        self.steps_done = 0
        self.first: dict | None = None
        self._lock = threading.Lock()
        self._go = threading.Event()
        if not paused:
            self._go.set()
        self._single = self._stop = False
        self._pending: list[StepResult] = []
        self.window = TensorWindow()  # the last steps' tensors, for the step scrubber
        self._times: list[float] = []
        self._later: threading.Timer | None = None
        self._progress_t = 0.0  # when the last progress message went out

    def command(self, cmd: str, args: dict | None = None) -> None:
        """pause | resume | step | stop | report | inspect (``args``: {"node", "req"})."""
        if cmd == "inspect":
            # its own thread: waiting for a step in flight must not hold up "pause" or "stop"
            threading.Thread(target=self._inspect, args=(dict(args or {}),), daemon=True).start()
            return
        with self._lock:
            if cmd == "pause" and self.state == RUNNING:
                self._go.clear()
                self._state(PAUSED)
                self._flush()  # steps still batched reach the GUI now, not at the next step
            elif cmd == "resume" and self.state == PAUSED:
                self._single = False
                self._state(RUNNING)
                self._go.set()
            elif cmd == "step" and self.state == PAUSED:
                self._single = True
                self._go.set()
            elif cmd == "stop":
                self._stop = True
                self._go.set()
        if cmd == "report":
            data = self.report.to_json() if self.report is not None else None
            self.emit({"type": "report", "data": data})

    def _inspect(self, args: dict) -> None:
        with self._run_lock:
            msg = inspect_message(self.runner, args.get("node"), args.get("step"), self.window)
        msg["req"] = args.get("req")
        self.emit(msg)

    def _progress(self, msg: dict) -> None:
        """A core.progress event as a ``progress`` message (advances: at most 10 a second)."""
        now = time.monotonic()
        if msg["event"] == "advance" and now - self._progress_t < 0.1:
            return
        self._progress_t = now
        self.emit({"type": "progress", **msg})

    def _state(self, s: str) -> None:
        self.state = s
        self.emit({"type": "state", "state": s, "steps_done": self.steps_done})

    def run(self) -> None:
        """Build the runner, then step until stopped (or ``max_steps``)."""
        from tapescope.core.progress import listening, progress

        try:
            # the GUI's progress dialog hears what opening takes (a model's import, the first
            # kernel compile on a cold cache: up to a minute) as "progress" messages
            # (a model's or script's file name, not its whole spec: onnx:/abs/m.onnx::input=...)
            name = os.path.basename((self.config.workload or "mlp").split("::")[0])
            with self._run_lock, listening(self._progress), progress(
                    f"opening {name} on {self.config.device}"):
                r = self.runner = open_pair(self.config, scan_nonfinite=True)
            plan = r.plan.to_json() if r.plan is not None else None
            self.report = ReportAccumulator(self.config, r.nodes, r.ref_spec.label(),
                                            r.cand_spec.label(), r.describe_device(), plan)
        except Exception as e:  # noqa: BLE001 — the user's workload or a device may fail anyhow
            self._fail(e)
            return
        self.emit({"type": "ready", "plan": plan, "device": r.describe_device(),
                   "reference": r.ref_spec.label(), "candidate": r.cand_spec.label()})
        last = 0.0
        while True:
            self._go.wait()
            with self._lock:
                if self._stop:
                    break
                if self._single:
                    self._single = False
                    self._go.clear()
            try:
                with self._run_lock:
                    res = r.step()
                    # paused (a single step): always kept; running: within its time budget
                    self.window.capture(res.step, r, res.seconds, always=not self._go.is_set())
            except Exception as e:  # noqa: BLE001 — shown in the GUI, the app stays up
                self._fail(e)
                return
            self.report.add(res)
            now = time.perf_counter()
            with self._lock:  # commands and messages keep one order on the pipe
                self.steps_done += 1
                if self.first is None and res.first is not None:
                    self.first = {"step": res.step, **res.first}
                self._pending.append(res)
                self._times.append(now)
                del self._times[:-20]
                done = self.max_steps is not None and self.steps_done >= self.max_steps
                if done:
                    self._stop = True
                    self._go.clear()
                    self.state = STOPPED
                if done or not self._go.is_set() or now - last >= self.interval_s:
                    self._flush()
                    last = now
                else:
                    self._flush_later()
                if done:
                    self._state(STOPPED)
                    break

    def _flush_later(self) -> None:
        """Batched steps reach the GUI within ``interval_s`` even when the next step never
        returns (caller holds the lock)."""
        if self._later is None:
            self._later = threading.Timer(self.interval_s, self._flush_now)
            self._later.daemon = True
            self._later.start()

    def _flush_now(self) -> None:
        with self._lock:
            self._later = None
            self._flush()

    def _flush(self) -> None:
        """Send the batched steps (caller holds the lock)."""
        if not self._pending:
            return
        state = self.state
        pend, self._pending = self._pending, []
        t = self._times
        sps = (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 and t[-1] > t[0] else 0.0
        # each step once: its scalars and its packed record (the GUI needs no export detail)
        self.emit({"type": "snapshot", "state": state, "steps_done": self.steps_done,
                   "steps": [step_to_wire(p, detail=False) for p in pend],
                   "first": self.first, "steps_per_s": sps})

    def _fail(self, e: BaseException) -> None:
        details = getattr(e, "details", "") or traceback.format_exc()
        self.state = FAILED
        self.emit({"type": "failed", "message": f"{type(e).__name__}: {e}", "details": details})


MAX_INSPECT = 1 << 21  # elements per array: beyond this a JSON line would be tens of megabytes


def inspect_message(runner: PairRunner | None, node: object, step: object = None,
                    window: TensorWindow | None = None) -> dict:
    """The ``inspect`` reply: one node's value and gradient on both sides at the current step
    (or at a past ``step`` still in the worker's ``window``)."""
    msg: dict = {"type": "inspect", "node": node, "error": None}
    if runner is None:
        msg["error"] = "the live session is still starting"
        return msg
    try:
        past = isinstance(step, int) and step != runner.step_index and window is not None
        got = window.get(step, node) if past else runner.arrays(node)
        for side in ("ref", "cand"):
            for which, a in got[side].items():
                if a is not None and a.size > MAX_INSPECT:
                    raise ValueError(f"node #{node} {which} has {a.size} elements (the limit "
                                     f"is {MAX_INSPECT})")
            msg[side] = {w: encode_array(a) for w, a in got[side].items()}
    except (ValueError, TypeError, IndexError) as e:
        msg["error"] = str(e)
        return msg
    msg.update(step=got["step"], reference=runner.ref_spec.label(),
               candidate=runner.cand_spec.label())
    return msg


class WorkerProcess:
    """A started worker (no Qt): its process, and our ends of the command, message and log pipes.

    The message and log ends are raw fds that ``messages()`` / ``log_chunks()`` own and close
    when they end, so no thread ever closes a pipe another thread is reading.
    """

    def __init__(self, proc: subprocess.Popen, cmd_w: int, msg_r: int, log_r: int) -> None:
        self.proc, self.pgid = proc, proc.pid  # start_new_session: the worker leads its group
        self._cmd = os.fdopen(cmd_w, "w", encoding="utf-8")
        self._cmd_lock = threading.Lock()
        self.msg_fd, self.log_fd = msg_r, log_r

    def send(self, msg: dict) -> bool:
        """Write one command line; False when the worker can no longer hear it."""
        with self._cmd_lock:
            if self._cmd.closed or self.proc.poll() is not None:
                return False
            try:
                self._cmd.write(json.dumps(msg) + "\n")
                self._cmd.flush()
            except (OSError, ValueError):
                return False
        return True

    def messages(self):
        """Yield each decoded message (a reader thread's loop); closes the pipe at its end."""
        with os.fdopen(self.msg_fd, "rb") as f:
            for line in f:  # our own lines: bounded by MAX_INSPECT
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and "type" in msg:
                    yield msg

    def log_chunks(self, size: int = 1 << 16):
        """Yield what the worker's fd 1 and fd 2 carry, in pieces of at most ``size`` bytes."""
        try:
            while True:
                data = os.read(self.log_fd, size)
                if not data:
                    return
                yield data
        finally:
            os.close(self.log_fd)

    def end_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal the worker's whole process group (it and anything the workload started)."""
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # all gone already

    def close(self, wait_s: float = 2.0) -> None:
        """Ask the worker to quit, close its command pipe, then end its group; never blocks
        longer than ``wait_s``."""
        self.send({"cmd": "quit"})
        with self._cmd_lock:
            try:
                self._cmd.close()  # EOF: a worker that missed "quit" ends too
            except OSError:
                pass
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass
        self.end_group()  # also what the workload left behind in the group


def launch(arg: dict) -> WorkerProcess:
    """Start ``python -m tapescope.app.live_worker`` in its own session with its protocol pipes."""
    cmd_r, cmd_w = os.pipe()  # non-inheritable (PEP 446): only pass_fds reaches the child
    msg_r, msg_w = os.pipe()
    log_r, log_w = os.pipe()
    arg = {**arg, "fds": [cmd_r, msg_w], "parent": os.getpid()}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tapescope.app.live_worker",
             json.dumps(arg)], cwd=str(ROOT), env=env,
            stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w, pass_fds=(cmd_r, msg_w),
            start_new_session=True)
    except BaseException:
        for fd in (cmd_w, msg_r, log_r):
            os.close(fd)
        raise
    finally:
        for fd in (cmd_r, msg_w, log_w):
            os.close(fd)
    return WorkerProcess(proc, cmd_w, msg_r, log_r)


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux ``PR_SET_PDEATHSIG``).

    NOTE: the signal follows the parent *thread* that started us; every caller starts workers
    from a thread that lives as long as its process (the GUI thread, a command's main thread).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was armed


def protect_stdio() -> tuple[int, int]:
    """Move the protocol off fd 0/1: returns private (in, out) fds; fd 1 then writes to fd 2
    and fd 0 reads /dev/null, so nothing the user's code does can touch the protocol."""
    pin, pout = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return pin, pout


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: argv[0] is the JSON of {"config", "interval_s", "max_steps",
    "paused"}."""
    args = json.loads((argv or sys.argv[1:])[0])
    die_with_parent(args.get("parent"))
    cmd_fd, msg_fd = args.get("fds") or protect_stdio()
    for fd in (cmd_fd, msg_fd):
        os.set_inheritable(fd, False)  # the workload's own subprocesses never get them
    out = os.fdopen(msg_fd, "w", encoding="utf-8")
    cmd_in = os.fdopen(cmd_fd, "r", encoding="utf-8")
    sys.stdout.reconfigure(line_buffering=True)  # the user's prints reach the log as made
    lock = threading.Lock()

    def emit(msg: dict) -> None:
        line = json.dumps(msg)
        with lock:
            out.write(line + "\n")
            out.flush()

    try:
        cfg = SessionConfig(**args["config"])
    except (TypeError, ValueError) as e:
        emit({"type": "failed", "message": f"bad session config: {e}", "details": ""})
        return 2
    st = Stepper(cfg, emit, args.get("interval_s", 0.1), args.get("max_steps"),
                 args.get("paused", False))

    quit_ = threading.Event()

    def commands() -> None:
        for line in cmd_in:
            try:
                msg = json.loads(line)
                cmd = msg["cmd"]
            except (ValueError, KeyError, TypeError):
                continue  # a garbled line is ignored: the GUI is the only writer
            if cmd == "quit":
                break
            st.command(cmd, msg)
        st.command("stop")  # quit, or the GUI went away
        quit_.set()
        # a step that never returns must not keep us alive once nobody listens
        t = threading.Timer(QUIT_GRACE_S, os._exit, (0,))
        t.daemon = True
        t.start()

    threading.Thread(target=commands, daemon=True).start()
    st.run()
    quit_.wait()  # a stopped session still answers "report" until the GUI lets it go
    return 0


if __name__ == "__main__":
    sys.exit(main())
