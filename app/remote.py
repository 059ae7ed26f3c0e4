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
import math
import os
import shlex
import subprocess
import threading
import time
import traceback
from typing import Any

import numpy as np

from app.runs import CpuRun, DeviceRun, RunSpec
from app.wire import (
    LinePipe,
    LineTimeout,
    LineTooLong,
    decode_array,
    encode_array,
    parse_line,
)

__all__ = ["PROTOCOL", "RemoteDevice", "RemoteError", "RemoteRun", "serve", "worker_timeouts"]
PROTOCOL = 1  # bump on any change of the messages below
MAX_REQUEST = 1 << 31  # bytes of one request line the worker reads (compare ships every array)
SMALL_REPLY = 1 << 20  # bytes of a reply with no arrays (an error's traceback fits many times)
# NOTE: a reply's containers are bounded per node: json.loads makes ~30x its text in objects
CONTAINERS_PER_NODE, CONTAINERS_BASE = 16, 4096
TIMEOUT_S, OPEN_TIMEOUT_S = 300.0, 1800.0  # per request; hello, device and open (first compile)
TIMEOUT_ENV, OPEN_TIMEOUT_ENV = "TAPESCOPE_WORKER_TIMEOUT", "TAPESCOPE_WORKER_OPEN_TIMEOUT"
OPENING = ("hello", "device", "open")  # requests under the open timeout


class RemoteError(RuntimeError):
    """The worker command failed, ended, or answered something this side cannot use."""


def seconds(value: Any, name: str) -> float:
    """``value`` as a positive, finite number of seconds; ValueError naming ``name``."""
    try:
        s = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}") from None
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return s


def worker_timeouts(timeout: float | None = None,
                    open_timeout: float | None = None) -> tuple[float, float]:
    """(per-request, opening) deadlines in seconds: the flags, else the environment
    (``TAPESCOPE_WORKER_TIMEOUT``, ``TAPESCOPE_WORKER_OPEN_TIMEOUT``), else the defaults."""
    out = []
    for given, env, flag, default in (
            (timeout, TIMEOUT_ENV, "--worker-timeout", TIMEOUT_S),
            (open_timeout, OPEN_TIMEOUT_ENV, "--worker-open-timeout", OPEN_TIMEOUT_S)):
        if given is not None:
            out.append(seconds(given, flag))
        elif os.environ.get(env):
            out.append(seconds(os.environ[env], env))
        else:
            out.append(default)
    return out[0], out[1]


def _b64_len(nbytes: int) -> int:
    return 4 * ((nbytes + 2) // 3)


# ---- the client: this side of --worker ----------------------------------------------------------
class RemoteDevice:
    """A worker command with an open device; stands where ``gpu.open_device`` would.

    Every request has a deadline (``worker_timeouts``): a worker that says nothing, stops, or
    sends half a line is ended and named; every reply is read in bounded chunks up to what that
    reply can need, its nesting bounded before it is parsed."""

    def __init__(self, command: str, device: str, workload: str, seed: int,
                 timeout: float | None = None, open_timeout: float | None = None) -> None:
        argv = shlex.split(command)
        if not argv:
            raise ValueError("--worker: the command is empty")
        self.command, self.workload, self.seed = command, workload, seed
        self.timeout, self.open_timeout = worker_timeouts(timeout, open_timeout)
        self._lock = threading.Lock()
        self._runs = 0
        self.nodes_hint = 0  # the largest episode opened: bounds a reply's containers
        try:
            # stderr is ours: the worker's complaints (and an ssh error) reach the user as-is
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as e:
            raise RemoteError(f"cannot run the worker command {command!r}: "
                              f"{e.strerror or e}") from None
        os.set_blocking(self.proc.stdin.fileno(), False)  # writes wait in poll, to a deadline
        self.pipe = LinePipe(self.proc.stdout.fileno(), self.proc.stdin.fileno())
        atexit.register(self.close)
        hello = self.request({"cmd": "hello", "protocol": PROTOCOL}, "hello")
        if hello.get("protocol") != PROTOCOL:
            self.close()
            raise RemoteError(f"the worker {command!r} speaks protocol {hello.get('protocol')!r}"
                              f", this tapescope speaks {PROTOCOL}: install the same tapescope "
                              "on both sides")
        got = self.request({"cmd": "device", "name": device}, "device")
        self.kind = _field(got, "kind", str, command, "device")
        self._describe = _field(got, "describe", str, command, "device")

    def describe(self) -> str:
        """The worker's device line, and which command it runs through."""
        return f"{self._describe} (through the worker {self.command!r})"

    def request(self, msg: dict, expect: str, max_bytes: int = SMALL_REPLY) -> dict:
        """Send one request, return its reply (of type ``expect``, at most ``max_bytes`` +
        ``SMALL_REPLY`` long); errors, a missed deadline and a malformed reply raise
        RemoteError naming the request and the worker command."""
        cmd = msg.get("cmd")
        opening = cmd in OPENING
        limit_s = self.open_timeout if opening else self.timeout
        who = f"the worker {self.command!r}"
        with self._lock:
            p = self.proc
            deadline = time.monotonic() + limit_s
            try:
                self.pipe.send(msg, deadline)
                line = self.pipe.receive(max_bytes + SMALL_REPLY, deadline)
                reply = None if line is None else parse_line(
                    line, f"{who} answering {cmd!r}",
                    CONTAINERS_BASE + CONTAINERS_PER_NODE * self.nodes_hint)
            except LineTimeout:
                self.kill()
                flag = "--worker-open-timeout" if opening else "--worker-timeout"
                raise RemoteError(f"{who} did not answer {cmd!r} within {limit_s:g} s (it was "
                                  f"ended; {flag} S gives it longer)") from None
            except LineTooLong as e:
                self.kill()
                raise RemoteError(f"{who} answering {cmd!r}: {e} (more than that reply can "
                                  "need)") from None
            except ValueError as e:
                self.kill()
                raise RemoteError(str(e)) from None
            except OSError:
                reply = None
            if reply is None:
                try:
                    rc = p.wait(5)
                except subprocess.TimeoutExpired:
                    rc = None
                how = "" if rc is None else f" (exit status {rc})"
                raise RemoteError(f"the worker command {self.command!r} ended{how} before it "
                                  f"answered {cmd!r}")
        if reply.get("type") == "error":
            text = reply.get("message")
            raise RemoteError(f"worker: {text if isinstance(text, str) else 'an error'} "
                              f"(answering {cmd!r})")
        if reply.get("type") != expect:
            got = reply.get("type")
            said = f"a {got!r} reply" if isinstance(got, str) else "a reply with no type"
            raise RemoteError(f"{who} sent {said[:80]} to {cmd!r} (expected {expect!r})")
        return reply

    def new_run(self) -> int:
        """An id for the next run this worker holds."""
        self._runs += 1
        return self._runs

    def kill(self) -> None:
        """End the worker at once (it missed a deadline or sent what no reply can be)."""
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its handle
        self.close()

    def close(self) -> None:
        """Let the worker go (quit, EOF, then kill if it lingers); safe to call twice."""
        p = self.proc
        if p.poll() is None:
            try:
                self.pipe.send({"cmd": "quit"}, time.monotonic() + 1)
            except (OSError, ValueError):  # LineTimeout is an OSError: a worker that stopped
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


def _field(reply: dict, key: str, kind: type, command: str, cmd: str) -> Any:
    """``reply[key]`` when it is a ``kind``; else RemoteError naming the reply and command."""
    v = reply.get(key)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise RemoteError(f"the worker {command!r} sent a malformed {reply.get('type')!r} reply "
                          f"to {cmd!r}: {key!r} is {type(v).__name__}, not {kind.__name__}")
    return v


class _RemoteProgram:
    """The parts of a ``gpu.Program`` that this side reads from a remote one."""

    def __init__(self, run: RemoteRun, loss_id: int) -> None:
        self._run, self.loss_id = run, loss_id

    @property
    def stats(self) -> dict:
        """The worker program's launch and transfer counts."""
        got = self._run._ask({"cmd": "stats"}, "stats")
        return _field(got, "stats", dict, self._run.remote.command, "stats")

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
        self.nodes = feed.wl.tape.nodes[: loss.id + 1]
        n = len(self.nodes)
        device.nodes_hint = max(device.nodes_hint, n)
        # the plan's generated sources are the big part of this reply
        got = device.request({"cmd": "open", "run": self.key, "workload": device.workload,
                              "seed": device.seed, "math": spec.math, "dtype": spec.dtype,
                              "fuse": spec.fuse}, "opened", max_bytes=(64 << 20) + n * (64 << 10))
        cmd = device.command
        try:
            theirs = [(str(op), tuple(int(k) for k in shape))
                      for op, shape in _field(got, "nodes", list, cmd, "open")]
        except (TypeError, ValueError):
            raise RemoteError(f"the worker {cmd!r} sent a malformed 'opened' reply to 'open': "
                              "its nodes are not [op, shape] pairs") from None
        ours = [(n.op, tuple(n.shape)) for n in self.nodes]
        if theirs != ours:
            raise RemoteError(f"the worker recorded another episode of {device.workload!r} "
                              f"({len(theirs)} nodes, here {len(ours)}): is it the same "
                              "tapescope and workload file?")
        loss_id = _field(got, "loss_id", int, cmd, "open")
        if loss_id != loss.id:
            raise RemoteError(f"the worker {cmd!r} sent a malformed 'opened' reply to 'open': "
                              f"loss node #{loss_id}, here #{loss.id}")
        self.prog = _RemoteProgram(self, loss_id)
        plan = got.get("plan")
        segments = plan.get("segments", []) if isinstance(plan, dict) else None
        if plan is not None and not (isinstance(segments, list)
                                     and all(isinstance(x, dict) for x in segments)):
            raise RemoteError(f"the worker {cmd!r} sent a malformed 'opened' reply to 'open': "
                              "its plan is not a fusion plan")
        self.plan = _RemotePlan(plan) if plan is not None else None

    def _ask(self, msg: dict, expect: str, max_bytes: int = SMALL_REPLY) -> dict:
        return self.remote.request({**msg, "run": self.key}, expect, max_bytes)

    def _nbytes(self, i: int) -> int:
        """Base64 bytes of node ``i``'s array (float64 at most: the reply's line bound)."""
        return _b64_len(8 * int(np.prod(self.nodes[i].shape, dtype=np.int64)))

    def _malformed(self, cmd: str, why: str) -> RemoteError:
        return RemoteError(f"the worker {self.remote.command!r} sent a malformed reply to "
                           f"{cmd!r}: {why}")

    def _array(self, d: Any, i: int, which: str) -> np.ndarray | None:
        try:
            a = decode_array(d, f"node #{i} {which} from the worker")
        except ValueError as e:
            raise RemoteError(str(e)) from None
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
        grads = [tape.grad(i) for i in range(n)]
        got = self._ask({"cmd": "compare",
                         "values": [encode_array(tape.value(i)) for i in range(n)],
                         "grads": [encode_array(g) for g in grads]}, "parity",
                        max_bytes=1024 * n)
        # the worker sends each node's {"value", "grad"} summaries; the node's id, op and name
        # are this side's own, and every summary field is checked (TensorDiff.from_json)
        entries = got.get("nodes")
        if not isinstance(entries, list) or len(entries) != n:
            count = len(entries) if isinstance(entries, list) else "no"
            raise self._malformed("compare", f"{count} node summaries for {n} nodes")
        out = []
        for e, node, g in zip(entries, self.nodes, grads, strict=True):
            size = int(np.prod(node.shape, dtype=np.int64))
            try:
                if not isinstance(e, dict):
                    raise ValueError("not an object")
                if (e.get("grad") is None) != (g is None):
                    raise ValueError("a gradient summary where the reference has none"
                                     if g is None else "no gradient summary")
                value = TensorDiff.from_json(e.get("value"))
                grad = None if g is None else TensorDiff.from_json(e["grad"])
                if value.n != size or (grad is not None and grad.n != size):
                    raise ValueError(f"counts {value.n} elements of {size}")
            except ValueError as why:
                raise self._malformed("compare", f"node #{node.id} {node.op}: {why}") from None
            out.append(NodeParity(node.id, node.op, node.name, value, grad))
        return ParityReport.of(out)

    def update(self) -> None:
        """The device optimizer step, in the worker."""
        self._ask({"cmd": "update"}, "ok")

    def loss(self) -> float:
        """This step's loss (one scalar from the worker)."""
        v = self._ask({"cmd": "loss"}, "loss").get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._malformed("loss", f"the loss is {str(v)[:40]!r}, not a number")
        return float(v)

    def array(self, i: int, which: str) -> np.ndarray | None:
        """A node's value or gradient, from the worker."""
        if not 0 <= int(i) < len(self.nodes):
            raise ValueError(f"no node #{i} (the episode has {len(self.nodes)})")
        got = self._ask({"cmd": "read", "node": int(i), "which": which}, "array",
                        max_bytes=self._nbytes(int(i)))
        return self._array(got.get("array"), i, which)

    def optimizer_arrays(self, after: bool) -> dict:
        """The worker's device optimizer settings and moments (provenance)."""
        params = [n.id for n in self.nodes if n.op == "param"]
        got = self._ask({"cmd": "optimizer", "after": bool(after)}, "optimizer",
                        max_bytes=sum(2 * self._nbytes(i) + 1024 for i in params))
        data = _field(got, "data", dict, self.remote.command, "optimizer")
        try:
            rows = [(int(i), l2, m, v) for i, l2, m, v in data["params"]]
        except (KeyError, TypeError, ValueError):
            raise self._malformed("optimizer", "its params are not [node, l2, m, v]") from None
        if any(i not in params for i, *_ in rows):
            raise self._malformed("optimizer", "a moment of a node that is not a parameter")
        data["params"] = [(i, l2, self._array(m, i, "m"), self._array(v, i, "v"))
                          for i, l2, m, v in rows]
        return data


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


def serve(fin: int, fout: int) -> int:
    """The worker's loop on fds ``fin``/``fout``: a hello, then one reply per request until
    ``quit`` or EOF. A line too long, too deep or not JSON gets one error line on ``fout``.

    Returns the exit code: 0 after quit/EOF, 2 for a protocol mismatch or a garbled line.
    """
    what = "tapescope worker"
    pipe = LinePipe(fin, fout)
    worker = _Worker()

    def receive() -> dict | None:
        line = pipe.receive(MAX_REQUEST)  # the client is ours to wait for: no deadline
        limit = CONTAINERS_BASE + CONTAINERS_PER_NODE * max(
            (len(r.prog.nodes) for r in worker.runs.values()), default=0)
        return None if line is None else parse_line(line, what, limit)

    try:
        hello = receive()
    except ValueError as e:  # LineTooLong too
        pipe.send({"type": "error", "message": f"{what}: {e}" if isinstance(e, LineTooLong)
                   else str(e)})
        return 2
    if hello is None:
        return 0
    if hello.get("cmd") != "hello" or hello.get("protocol") != PROTOCOL:
        theirs = hello.get("protocol")
        pipe.send({"type": "error", "message": (
            f"protocol mismatch: this tapescope worker speaks protocol {PROTOCOL}, the client "
            f"{theirs!r}: install the same tapescope on both sides"
            if hello.get("cmd") == "hello" else "the first line must be a hello")})
        return 2
    pipe.send({"type": "hello", "protocol": PROTOCOL, "tapescope": _version()})
    while True:
        try:
            msg = receive()
        except ValueError as e:
            pipe.send({"type": "error", "message": f"{what}: {e}" if isinstance(e, LineTooLong)
                       else str(e)})
            return 2
        if msg is None or msg.get("cmd") == "quit":
            return 0
        try:
            reply = worker.handle(msg)
        except MemoryError:
            reply = {"type": "error", "message": "the worker ran out of memory answering "
                     f"{str(msg.get('cmd'))[:40]!r}"}
        except Exception as e:  # noqa: BLE001 — the client shows it as one line
            reply = {"type": "error", "message": f"{type(e).__name__}: {e}",
                     "details": traceback.format_exc()[-20000:]}
        pipe.send(reply)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tapescope")
    except PackageNotFoundError:
        return "unknown"
