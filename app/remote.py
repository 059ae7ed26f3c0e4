"""The whole pair through a worker command: ``--worker "ssh gpu-box tapescope worker"``.

GPUs live in servers, the app on a laptop. ``RemoteDevice`` runs the worker command (split with
``shlex``, never a shell) and speaks the worker protocol with it over the command's stdin and
stdout, every request to a deadline and every reply read in bounded chunks. ``RemotePair`` is a
``PairRunner`` that lives in that worker: the reference (the CPU tape) and the candidate both
run on the worker's machine, each step only its record comes back (``app.step_wire``: the
step's scalars and ``core.step_record.pack`` of its columns, checked row by row here), and
tensors move only when the user asks (``arrays``: inspect, the element view, a repro). So a
run through a worker gives the same numbers, and the same ``--json``, as a local one.

The protocol (``PROTOCOL``): one JSON object per line each way, a request and exactly one reply:
``hello``, ``device``, ``open`` (the session config: the worker builds its ``PairRunner``),
then ``step``, ``params``, ``arrays``, ``stats``, ``quit``. The client's first line is
``{"cmd": "hello", "protocol": N}``; a worker of another version answers with one error line
and exits 2. Nothing is ever pickled: arrays travel as dtype, shape and base64 of the raw
bytes (``app.wire.encode_array``), and a received array's size is checked against its declared
shape and a cap before anything is allocated; a record's layout is this side's own. ``serve``
is the worker's side (``tapescope worker``).
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.runs import PairRunner, SessionConfig, StepResult
from app.step_wire import step_from_wire, step_to_wire
from app.wire import (
    LinePipe,
    LineTimeout,
    LineTooLong,
    decode_array,
    encode_array,
    parse_line,
)
from core.step_record import check, exact, node_parity, pack, record_of, unpack

__all__ = ["PROTOCOL", "RemoteDevice", "RemoteError", "RemotePair", "serve", "worker_timeouts"]
PROTOCOL = 2  # bump on any change of the messages below (2: the whole pair in the worker)
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


@dataclass(frozen=True)
class NodeInfo:
    """A compared node as the worker's tape holds it (what the client shows and exports)."""

    id: int
    op: str
    name: str | None
    shape: tuple[int, ...]
    inputs: tuple[int, ...]


def _node_table(nodes: Any) -> dict:
    """The compared nodes as a few flat columns (a 10k-node tape: six JSON containers)."""
    return {"op": [n.op for n in nodes], "name": [n.name for n in nodes],
            "ndim": encode_array(np.array([len(n.shape) for n in nodes], dtype=np.int64)),
            "dims": encode_array(np.array([d for n in nodes for d in n.shape], dtype=np.int64)),
            "nin": encode_array(np.array([len(n.inputs) for n in nodes], dtype=np.int64)),
            "inputs": encode_array(np.array([j for n in nodes for j in n.inputs],
                                            dtype=np.int64))}


def _read_node_table(t: Any) -> tuple[NodeInfo, ...]:
    """The inverse of ``_node_table``; ValueError when its columns do not fit together."""
    if not isinstance(t, dict):
        raise ValueError("no node table")
    ops, names = t.get("op"), t.get("name")
    if not (isinstance(ops, list) and isinstance(names, list) and len(ops) == len(names)
            and all(isinstance(o, str) for o in ops)
            and all(x is None or isinstance(x, str) for x in names)):
        raise ValueError("the node table's ops and names are not strings, one per node")
    cols = {k: decode_array(t.get(k), f"node table {k}") for k in ("ndim", "dims", "nin",
                                                                   "inputs")}
    if any(c is None or c.dtype.kind != "i" or c.ndim != 1 for c in cols.values()):
        raise ValueError("the node table's columns are not integer lists")
    n = len(ops)
    ndim, nin = cols["ndim"], cols["nin"]
    if (len(ndim) != n or len(nin) != n or (ndim < 0).any() or (nin < 0).any()
            or ndim.sum() != len(cols["dims"]) or nin.sum() != len(cols["inputs"])
            or (cols["dims"] < 0).any()):
        raise ValueError("the node table's shapes and inputs do not fit its nodes")
    out, d, k = [], 0, 0
    dims, inputs = cols["dims"].tolist(), cols["inputs"].tolist()
    for i, (nd, ni) in enumerate(zip(ndim.tolist(), nin.tolist(), strict=True)):
        ins = tuple(inputs[k:k + ni])
        if any(not 0 <= j < i for j in ins):
            raise ValueError(f"node #{i}'s inputs {ins} are not earlier nodes")
        out.append(NodeInfo(i, ops[i], names[i], tuple(dims[d:d + nd]), ins))
        d, k = d + nd, k + ni
    return tuple(out)


def _size(node: Any) -> int:
    return int(np.prod(node.shape, dtype=np.int64))


class RemotePair:
    """A ``PairRunner`` in the worker's process (``app.pairs.Pair``): the reference and the
    candidate both run there; each step only its record comes back (``app.step_wire``), and
    tensors only when asked (``arrays``: the Inspector, the element view, a repro)."""

    def __init__(self, config: Any, provenance: str = "every", inject: Any = None,
                 keep_states: int = 0, scan_nonfinite: bool = False) -> None:
        if keep_states:
            raise ValueError("keep_states needs the pair in this process: drop --worker")
        if inject is not None and not isinstance(inject, str):
            inject = inject.label()  # (the worker parses it against its own tape)
        self.config = config
        self.ref_spec, self.cand_spec = config.pair()
        self.remote = RemoteDevice(config.worker, config.device, config.workload, config.seed,
                                   config.worker_timeout, config.worker_open_timeout)
        self.command = config.worker
        here = {k: getattr(config, k) for k in ("workload", "device", "fuse", "dtype", "math",
                                                "compare", "seed", "explain", "torch_threads",
                                                "tf32", "deterministic", "torch_optimizer")}
        got = self.remote.request({"cmd": "open", "config": here, "provenance": provenance,
                                   "inject": inject, "scan_nonfinite": bool(scan_nonfinite)},
                                  "opened", max_bytes=OPENED_REPLY)
        try:
            self.nodes = _read_node_table(got.get("nodes"))
        except ValueError as e:
            raise self._malformed("open", str(e)) from None
        self.remote.nodes_hint = n = len(self.nodes)
        self.sizes = [_size(nd) for nd in self.nodes]
        self.step_index = 0
        plan = got.get("plan")
        segments = plan.get("segments", []) if isinstance(plan, dict) else None
        if plan is not None and not (isinstance(segments, list)
                                     and all(isinstance(x, dict) for x in segments)):
            raise self._malformed("open", "its plan is not a fusion plan")
        self.plan = _RemotePlan(plan) if plan is not None else None
        self.inject = None
        inj = got.get("inject")
        if inj is not None:
            from app.run_provenance import Inject

            if not (isinstance(inj, list) and len(inj) == 3 and isinstance(inj[0], int)
                    and 0 <= inj[0] < n and inj[1] in ("value", "grad")
                    and isinstance(inj[2], int)):
                raise self._malformed("open", f"the fault {str(inj)[:40]!r}")
            self.inject = Inject(*inj)
        self.device_kind = _field(got, "kind", str, self.command, "open")
        self._has_grad: list[bool] | None = None
        self.store = None  # no step arrays here: tensors cross only in ``arrays``

    def _malformed(self, cmd: str, why: str) -> RemoteError:
        return RemoteError(f"the worker {self.command!r} sent a malformed reply to {cmd!r}: "
                           f"{why}")

    def describe_device(self) -> str:
        """The worker's device line, and which command it runs through."""
        return self.remote.describe()

    def stats(self) -> dict | None:
        """The worker's device program's launch and transfer counts (None: no device)."""
        got = self.remote.request({"cmd": "stats"}, "stats").get("stats")
        if got is not None and not isinstance(got, dict):
            raise self._malformed("stats", "its stats are not an object")
        return got

    def _record(self, d: Any, cmd: str, what: str) -> np.ndarray:
        """A packed record of every compared node, checked row by row (``core.step_record``)."""
        n = len(self.nodes)
        if not isinstance(d, dict) or d.get("n") != n:
            raise self._malformed(cmd, f"{what} is not a record of {n} nodes")
        try:
            rec = unpack(d.get("record"), n, what)
            if self._has_grad is None:  # which nodes have a gradient: the first step says
                self._has_grad = (rec["g_n"] >= 0).tolist()
            check(rec, self.sizes, self._has_grad)
        except ValueError as e:
            raise self._malformed(cmd, str(e)) from None
        return rec

    def step(self, provenance: bool | None = None) -> StepResult:
        """One step of the pair in the worker; its record (checked) and scalars come back."""
        n = len(self.nodes)
        got = self.remote.request({"cmd": "step", "provenance": provenance}, "stepped",
                                  max_bytes=STEP_REPLY_PER_NODE * n)
        d = got.get("step")
        rec = self._record(d, "step", "the step's record")
        try:
            res = step_from_wire({**d, "record": pack(rec)}, n, self.nodes)
        except ValueError as e:
            raise self._malformed("step", str(e)) from None
        if res.step != self.step_index + 1:
            raise self._malformed("step", f"step {res.step} after step {self.step_index}")
        if res.exact != bool(exact(rec)):
            raise self._malformed("step", "its exact flag contradicts its record")
        self.step_index = res.step
        return res

    def compare_params(self) -> Any:
        """The parameters after the last update, compared in the worker."""
        from core.parity import ParityReport

        got = self.remote.request({"cmd": "params"}, "params",
                                  max_bytes=STEP_REPLY_PER_NODE * len(self.nodes))
        params = [nd for nd in self.nodes if nd.op == "param"]
        d = got.get("params")
        if not isinstance(d, dict) or d.get("n") != len(params):
            raise self._malformed("params", f"not a record of {len(params)} parameters")
        try:
            rec = unpack(d.get("record"), len(params), "the parameters' record")
            if rec["id"].tolist() != [p.id for p in params]:
                raise ValueError("its rows are not the parameters")
            if (rec["g_n"] != -1).any() or (rec["v_n"] != [_size(p) for p in params]).any():
                raise ValueError("its counts are not the parameters'")
        except ValueError as e:
            raise self._malformed("params", str(e)) from None
        return ParityReport.of(node_parity(rec, self.nodes))

    def arrays(self, node_id: Any) -> dict:
        """One node's value and gradient on both sides, from the worker (``PairRunner.arrays``'
        form); only now do its tensors cross."""
        if isinstance(node_id, bool) or not isinstance(node_id, int):
            raise TypeError(f"node must be an integer id, not {node_id!r}")
        if not 0 <= node_id < len(self.nodes):
            raise IndexError(f"node #{node_id} is not compared (ids 0..{len(self.nodes) - 1})")
        nd = self.nodes[node_id]
        got = self.remote.request({"cmd": "arrays", "node": node_id}, "arrays",
                                  max_bytes=4 * _b64_len(8 * _size(nd)) + 4096)
        if got.get("error") is not None:
            raise ValueError(str(got["error"])[:400])
        out: dict = {"step": got.get("step")}
        if not isinstance(out["step"], int):
            raise self._malformed("arrays", "no step number")
        for side in ("ref", "cand"):
            d = got.get(side)
            if not isinstance(d, dict):
                raise self._malformed("arrays", f"no {side!r} arrays")
            out[side] = {}
            for w in ("value", "grad"):
                try:
                    a = decode_array(d.get(w), f"node #{node_id} {side} {w} from the worker")
                except ValueError as e:
                    raise RemoteError(str(e)) from None
                if a is not None and a.shape != nd.shape:
                    raise self._malformed("arrays", f"node #{node_id} {w} has shape {a.shape}, "
                                          f"not {nd.shape}")
                out[side][w] = a
        return out

    def close(self) -> None:
        """End the worker."""
        self.remote.close()


OPENED_REPLY = 256 << 20  # the node table and the fusion plan's generated sources
# a step reply per node: the packed record (149 raw bytes a row, in base64 when nothing
# deflates) and up to three introduced entries of ~300 bytes
STEP_REPLY_PER_NODE = 2048


# ---- the worker: `tapescope worker` -------------------------------------------------------------
class _TorchSide:
    """The worker's "device" for ``--device torch``: PyTorch runs the candidate there (the pair
    opens no gpu device); its line names torch and where it runs."""

    def __init__(self, name: str) -> None:
        from app.torch_run import import_torch

        torch = import_torch()  # (not installed on the worker: one line back to the client)
        self.kind = name if name != "torch:cpu" else "torch"
        where = name.split(":", 1)[1] if ":" in name else "cpu"
        if where == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {name}: torch.cuda has no device on the worker")
        self._line = f"device: torch {torch.__version__} on {where}"

    def describe(self) -> str:
        """The device line."""
        return self._line


class _Worker:
    """The worker's state: one device, and the pair the client opened on it."""

    def __init__(self) -> None:
        self.device: Any = None
        self.pair: Any = None

    def handle(self, msg: dict) -> dict:
        cmd = msg.get("cmd")
        if cmd == "device":
            import gpu

            name = str(msg["name"])
            if self.device is None and (name == "torch" or name.startswith("torch:")):
                self.device = _TorchSide(name)  # PyTorch runs the candidate: no gpu device
            if self.device is None:
                self.device = gpu.open_device(name)
            return {"type": "device", "kind": self.device.kind,
                    "describe": self.device.describe()}
        if cmd == "open":
            return self._open(msg)
        r = self.pair
        if r is None:
            raise ValueError("no pair is open (send 'open' first)")
        if cmd == "step":
            prov = msg.get("provenance")
            res = r.step(None if prov is None else bool(prov))
            return {"type": "stepped", "step": step_to_wire(res)}
        if cmd == "params":
            rec = record_of(r.compare_params().nodes)
            return {"type": "params", "params": {"n": len(rec), "record": pack(rec)}}
        if cmd == "arrays":
            try:
                got = r.arrays(msg.get("node"))
            except (ValueError, TypeError, IndexError) as e:  # (no step yet, no such node)
                return {"type": "arrays", "error": str(e)}
            return {"type": "arrays", "error": None, "step": got["step"],
                    **{side: {w: encode_array(a) for w, a in got[side].items()}
                       for side in ("ref", "cand")}}
        if cmd == "stats":
            return {"type": "stats", "stats": r.stats()}
        raise ValueError(f"unknown command {cmd!r}")

    def _open(self, msg: dict) -> dict:
        if self.device is None:
            raise ValueError("no device is open (send 'device' first)")
        if self.pair is not None:
            raise ValueError("a pair is open already")
        cfg = msg.get("config")
        if not isinstance(cfg, dict):
            raise ValueError("open needs a config")
        config = SessionConfig(**cfg)  # (worker None: the pair runs here)
        dev = None if isinstance(self.device, _TorchSide) else self.device
        r = self.pair = PairRunner(config, dev, provenance=str(msg["provenance"]),
                                   inject=msg.get("inject"),
                                   scan_nonfinite=bool(msg.get("scan_nonfinite")))
        inj = r.inject
        return {"type": "opened", "nodes": _node_table(r.nodes), "kind": r.device_kind,
                "plan": r.plan.to_json() if r.plan is not None else None,
                "inject": None if inj is None else [inj.node, inj.which, inj.step]}


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
        limit = CONTAINERS_BASE + CONTAINERS_PER_NODE * (
            len(worker.pair.nodes) if worker.pair is not None else 0)
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
