"""The device side of a pair through a worker command: ``--worker "ssh gpu-box tapescope worker"``.

GPUs live in servers, the app on a laptop. ``RemoteDevice`` runs the worker command (split with
``shlex``, never a shell) and speaks the worker protocol with it over the command's stdin and
stdout; ``RemoteRun`` is a ``DeviceRun`` whose program lives in that worker. The CPU reference
stays here: every step the candidate gets this side's inputs, and the comparison ships this
side's reference arrays to the worker, where the same device diff (``gpu.parity.compare``) as a
local run reduces them, so a run through a worker gives the same numbers as a local one.

The protocol (``PROTOCOL``): one JSON object per line each way, a request and exactly one reply.
The client's first line is ``{"cmd": "hello", "protocol": N}``; a worker of another version
answers with one error line and exits 2. Nothing is ever pickled: arrays travel as dtype, shape
and base64 of the raw bytes (``app.wire.encode_array``), and a received array's size is
checked against its declared shape and a cap before anything is allocated. ``serve`` is the
worker's side (``tapescope worker``).
"""

from __future__ import annotations

import atexit
import json
import shlex
import subprocess
import threading
import traceback
from typing import IO, Any

import numpy as np

from app.runs import CpuRun, DeviceRun, RunSpec
from app.wire import decode_array, encode_array

__all__ = ["PROTOCOL", "RemoteDevice", "RemoteError", "RemoteRun", "serve"]
PROTOCOL = 1  # bump on any change of the messages below
MAX_LINE = 1 << 31  # bytes of one protocol line (a step's arrays as base64 fit many times)


class RemoteError(RuntimeError):
    """The worker command failed, ended, or answered something this side cannot use."""


def read_message(f: IO[bytes], what: str) -> dict | None:
    """One protocol line as a dict (None at EOF); too long or not a JSON object raises."""
    line = f.readline(MAX_LINE + 1)
    if not line:
        return None
    if len(line) > MAX_LINE:
        raise RemoteError(f"{what}: a protocol line longer than {MAX_LINE} bytes")
    try:
        msg = json.loads(line)
    except ValueError:
        text = line[:80].decode("utf-8", "replace").strip()
        raise RemoteError(f"{what}: not a protocol line: {text!r}") from None
    if not isinstance(msg, dict):
        raise RemoteError(f"{what}: a protocol line must be a JSON object")
    return msg


def write_message(f: IO[bytes], msg: dict) -> None:
    """One protocol line (non-finite floats spelled as JSON's NaN/Infinity, as json reads)."""
    f.write(json.dumps(msg).encode("utf-8") + b"\n")
    f.flush()


# ---- the client: this side of --worker ----------------------------------------------------------
class RemoteDevice:
    """A worker command with an open device; stands where ``gpu.open_device`` would."""

    def __init__(self, command: str, device: str, workload: str, seed: int) -> None:
        argv = shlex.split(command)
        if not argv:
            raise ValueError("--worker: the command is empty")
        self.command, self.workload, self.seed = command, workload, seed
        self._lock = threading.Lock()
        self._runs = 0
        try:
            # stderr is ours: the worker's complaints (and an ssh error) reach the user as-is
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as e:
            raise RemoteError(f"cannot run the worker command {command!r}: "
                              f"{e.strerror or e}") from None
        atexit.register(self.close)
        hello = self.request({"cmd": "hello", "protocol": PROTOCOL}, "hello")
        if hello.get("protocol") != PROTOCOL:
            self.close()
            raise RemoteError(f"the worker {command!r} speaks protocol {hello.get('protocol')!r}"
                              f", this tapescope speaks {PROTOCOL}: install the same tapescope "
                              "on both sides")
        got = self.request({"cmd": "device", "name": device}, "device")
        self.kind = str(got["kind"])
        self._describe = str(got["describe"])

    def describe(self) -> str:
        """The worker's device line, and which command it runs through."""
        return f"{self._describe} (through the worker {self.command!r})"

    def request(self, msg: dict, expect: str) -> dict:
        """Send one request, return its reply (of type ``expect``); errors raise RemoteError."""
        with self._lock:
            p = self.proc
            try:
                write_message(p.stdin, msg)
                reply = read_message(p.stdout, f"the worker {self.command!r}")
            except (BrokenPipeError, OSError, ValueError):
                reply = None
            if reply is None:
                try:
                    rc = p.wait(5)
                except subprocess.TimeoutExpired:
                    rc = None
                how = "" if rc is None else f" (exit status {rc})"
                raise RemoteError(f"the worker command {self.command!r} ended{how} before it "
                                  f"answered {msg.get('cmd')!r}")
        if reply.get("type") == "error":
            raise RemoteError(f"worker: {reply.get('message')}")
        if reply.get("type") != expect:
            raise RemoteError(f"the worker {self.command!r} answered {reply.get('type')!r} "
                              f"to {msg.get('cmd')!r}")
        return reply

    def new_run(self) -> int:
        """An id for the next run this worker holds."""
        self._runs += 1
        return self._runs

    def close(self) -> None:
        """Let the worker go (quit, EOF, then kill if it lingers); safe to call twice."""
        p = self.proc
        if p.poll() is None:
            try:
                write_message(p.stdin, {"cmd": "quit"})
            except (OSError, ValueError):
                pass
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()  # our own child, by its handle
            p.wait()


class _RemoteProgram:
    """The parts of a ``gpu.Program`` that this side reads from a remote one."""

    def __init__(self, run: RemoteRun, loss_id: int) -> None:
        self._run, self.loss_id = run, loss_id

    @property
    def stats(self) -> dict:
        """The worker program's launch and transfer counts."""
        return self._run._ask({"cmd": "stats"}, "stats")["stats"]

    def completed_at(self, node: int, which: str) -> Any:
        raise ValueError("--inject needs the device in this process: drop --worker")


class _Segment:
    def __init__(self, d: dict) -> None:
        self.__dict__.update(d)


class _RemotePlan:
    """A fusion plan as the worker sent it: ``to_json()`` and its ``segments``."""

    def __init__(self, data: dict) -> None:
        self._data = data
        self.segments = [_Segment(s) for s in data.get("segments", [])]

    def to_json(self) -> dict:
        """The plan's JSON, as the worker's ``FusionPlan.to_json`` made it."""
        return self._data


class RemoteRun(DeviceRun):
    """A ``DeviceRun`` whose program lives in a worker; ``feed`` (the CPU tape) stays here."""

    def __init__(self, spec: RunSpec, device: RemoteDevice, feed: CpuRun) -> None:
        self.spec, self.feed, self.remote = spec, feed, device
        self.inject: Any = None
        self.dopt = None
        self.key = device.new_run()
        loss = feed.wl.record(0)  # as DeviceRun does: the episode the worker captures
        got = device.request({"cmd": "open", "run": self.key, "workload": device.workload,
                              "seed": device.seed, "math": spec.math, "dtype": spec.dtype,
                              "fuse": spec.fuse}, "opened")
        self.nodes = feed.wl.tape.nodes[: loss.id + 1]
        theirs = [(str(op), tuple(shape)) for op, shape in got["nodes"]]
        ours = [(n.op, tuple(n.shape)) for n in self.nodes]
        if theirs != ours:
            raise RemoteError(f"the worker recorded another episode of {device.workload!r} "
                              f"({len(theirs)} nodes, here {len(ours)}): is it the same "
                              "tapescope and workload file?")
        self.prog = _RemoteProgram(self, int(got["loss_id"]))
        self.plan = _RemotePlan(got["plan"]) if got.get("plan") is not None else None

    def _ask(self, msg: dict, expect: str) -> dict:
        return self.remote.request({**msg, "run": self.key}, expect)

    def _array(self, d: Any, i: int, which: str) -> np.ndarray | None:
        a = decode_array(d, f"node #{i} {which} from the worker")
        if a is not None and a.shape != tuple(self.nodes[i].shape):
            raise RemoteError(f"node #{i} {which} from the worker has shape {a.shape}, not "
                              f"{tuple(self.nodes[i].shape)}")
        return a

    def advance(self, step: int) -> None:
        """Ship this step's inputs (the feed's); forward and backward in the worker."""
        tape = self.feed.wl.tape
        self._ask({"cmd": "advance", "inputs": {str(v.id): encode_array(tape.value(v))
                                                for v in self.feed.wl.inputs.values()}}, "ok")

    def compare(self, tape: Any) -> Any:
        """``gpu.parity.compare(tape, prog)`` in the worker, on this side's reference arrays."""
        from core.parity import NodeParity, ParityReport, TensorDiff

        n = len(self.nodes)
        got = self._ask({"cmd": "compare",
                         "values": [encode_array(tape.value(i)) for i in range(n)],
                         "grads": [encode_array(tape.grad(i)) for i in range(n)]}, "parity")
        # the worker sends each node's {"value", "grad"} summaries; the node's id, op and name
        # are this side's own (TensorDiff.from_json checks every field's type)
        return ParityReport.of(
            NodeParity(node.id, node.op, node.name, TensorDiff.from_json(e["value"]),
                       None if e["grad"] is None else TensorDiff.from_json(e["grad"]))
            for e, node in zip(got["nodes"], self.nodes, strict=True))

    def update(self) -> None:
        """The device optimizer step, in the worker."""
        self._ask({"cmd": "update"}, "ok")

    def loss(self) -> float:
        """This step's loss (one scalar from the worker)."""
        return float(self._ask({"cmd": "loss"}, "loss")["value"])

    def array(self, i: int, which: str) -> np.ndarray | None:
        """A node's value or gradient, from the worker."""
        return self._array(self._ask({"cmd": "read", "node": int(i), "which": which},
                                     "array")["array"], i, which)

    def optimizer_arrays(self, after: bool) -> dict:
        """The worker's device optimizer settings and moments (provenance)."""
        got = self._ask({"cmd": "optimizer", "after": bool(after)}, "optimizer")["data"]
        got["params"] = [(int(i), l2, self._array(m, i, "m"), self._array(v, i, "v"))
                         for i, l2, m, v in got["params"]]
        return got


# ---- the worker: `tapescope worker` -------------------------------------------------------------
class _TapeView:
    """What ``gpu.parity.compare`` reads of a tape: the worker's nodes, the client's arrays."""

    def __init__(self, tape: Any, values: list, grads: list) -> None:
        self._tape, self._values, self._grads = tape, values, grads

    def __len__(self) -> int:
        return len(self._values)

    def node(self, i: int) -> Any:
        return self._tape.node(i)

    def value(self, i: int) -> np.ndarray:
        return self._values[i]

    def grad(self, i: int) -> np.ndarray | None:
        return self._grads[i]


class _Worker:
    """The worker's state: one device, the runs the client opened on it."""

    def __init__(self) -> None:
        self.device: Any = None
        self.runs: dict[int, DeviceRun] = {}

    def handle(self, msg: dict) -> dict:
        cmd = msg.get("cmd")
        if cmd == "device":
            import gpu

            if self.device is None:
                self.device = gpu.open_device(str(msg["name"]))
            return {"type": "device", "kind": self.device.kind,
                    "describe": self.device.describe()}
        if cmd == "open":
            return self._open(msg)
        run = self.runs.get(msg.get("run"))  # type: ignore[arg-type]
        if run is None:
            raise ValueError(f"no run {msg.get('run')!r} is open (send 'open' first)")
        prog = run.prog
        if cmd == "advance":
            inputs = msg["inputs"]
            for k, d in inputs.items():
                prog.set_input(int(k), decode_array(d, f"input #{k}"))
            prog.forward()
            prog.backward()
            return {"type": "ok"}
        if cmd == "compare":
            import gpu

            n = len(prog.nodes)
            vals = [decode_array(d, f"reference value #{i}") for i, d in enumerate(msg["values"])]
            grads = [decode_array(d, f"reference grad #{i}") for i, d in enumerate(msg["grads"])]
            if len(vals) != n or len(grads) != n:
                raise ValueError(f"compare needs {n} values and gradients")
            rep = gpu.parity.compare(_TapeView(run.feed.wl.tape, vals, grads), prog)
            return {"type": "parity", "nodes": [
                {"value": e.value.to_json(), "grad": None if e.grad is None else e.grad.to_json()}
                for e in rep.nodes]}
        if cmd == "update":
            run.update()
            return {"type": "ok"}
        if cmd == "loss":
            return {"type": "loss", "value": run.loss()}
        if cmd == "read":
            which = msg.get("which")
            if which not in ("value", "grad"):
                raise ValueError(f"which must be 'value' or 'grad', not {which!r}")
            return {"type": "array", "array": encode_array(run.array(int(msg["node"]), which))}
        if cmd == "optimizer":
            data = run.optimizer_arrays(bool(msg.get("after")))
            data["params"] = [(i, l2, encode_array(m), encode_array(v))
                              for i, l2, m, v in data["params"]]
            return {"type": "optimizer", "data": data}
        if cmd == "stats":
            return {"type": "stats", "stats": prog.stats}
        raise ValueError(f"unknown command {cmd!r}")

    def _open(self, msg: dict) -> dict:
        if self.device is None:
            raise ValueError("no device is open (send 'device' first)")
        key = msg["run"]
        if not isinstance(key, int) or key in self.runs:
            raise ValueError(f"run id {key!r} is not a new integer")
        spec = RunSpec("device", str(msg["math"]), str(msg["dtype"]), bool(msg["fuse"]))
        seed = int(msg["seed"])
        # the worker records the episode only to capture it; its inputs come from the client
        feed = CpuRun(RunSpec("cpu", "refmath", spec.dtype), str(msg["workload"]), seed)
        run = self.runs[key] = DeviceRun(spec, self.device, feed)
        prog = run.prog
        return {"type": "opened", "loss_id": prog.loss_id,
                "nodes": [[n.op, list(n.shape)] for n in prog.nodes],
                "plan": run.plan.to_json() if run.plan is not None else None}


def serve(fin: IO[bytes], fout: IO[bytes]) -> int:
    """The worker's loop: a hello, then one reply per request until ``quit`` or EOF.

    Returns the exit code: 0 after quit/EOF, 2 for a protocol mismatch or a garbled line.
    """
    what = "tapescope worker"
    try:
        hello = read_message(fin, what)
    except RemoteError as e:
        write_message(fout, {"type": "error", "message": str(e)})
        return 2
    if hello is None:
        return 0
    if hello.get("cmd") != "hello" or hello.get("protocol") != PROTOCOL:
        theirs = hello.get("protocol")
        write_message(fout, {"type": "error", "message": (
            f"protocol mismatch: this tapescope worker speaks protocol {PROTOCOL}, the client "
            f"{theirs!r}: install the same tapescope on both sides"
            if hello.get("cmd") == "hello" else "the first line must be a hello")})
        return 2
    write_message(fout, {"type": "hello", "protocol": PROTOCOL, "tapescope": _version()})
    worker = _Worker()
    while True:
        try:
            msg = read_message(fin, what)
        except RemoteError as e:
            write_message(fout, {"type": "error", "message": str(e)})
            return 2
        if msg is None or msg.get("cmd") == "quit":
            return 0
        try:
            reply = worker.handle(msg)
        except Exception as e:  # noqa: BLE001 — the client shows it as one line
            reply = {"type": "error", "message": f"{type(e).__name__}: {e}",
                     "details": traceback.format_exc()}
        write_message(fout, reply)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tapescope")
    except PackageNotFoundError:
        return "unknown"
