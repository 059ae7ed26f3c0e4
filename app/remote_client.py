"""The client of the worker protocol (``app.remote``): this side of ``--worker``.

``RemoteDevice`` runs the worker command (split with ``shlex``, never a shell) and speaks the
protocol with it over the command's stdin and stdout, every request to a deadline and every
reply read in bounded chunks. ``RemotePair`` is a ``PairRunner`` that lives in that worker
(``app.pairs.Pair``): each step only its record comes back, checked row by row here, and
tensors only when asked.
"""

from __future__ import annotations

import atexit
import os
import shlex
import subprocess
import threading
import time
from typing import Any

import numpy as np

from tapescope.app.remote_protocol import (
    CONTAINERS_BASE,
    CONTAINERS_PER_NODE,
    JUDGED_REPLY,
    OPENED_REPLY,
    OPENING,
    PROTOCOL,
    SMALL_REPLY,
    STEP_REPLY_PER_NODE,
    RemoteError,
    b64_len,
    hello_timeout,
    node_size,
    read_node_table,
    reply_field,
    worker_timeouts,
)
from tapescope.app.runs import StepResult
from tapescope.app.step_wire import step_from_wire
from tapescope.app.wire import LinePipe, LineTimeout, LineTooLong, decode_array, parse_line
from tapescope.core.step_record import check, exact, node_parity, pack, unpack

__all__ = ["RemoteDevice", "RemotePair"]


class RemoteDevice:
    """A worker command with an open device; stands where ``gpu.open_device`` would.

    Every request has a deadline (``worker_timeouts``): a worker that says nothing, stops, or
    sends half a line is ended and named; every reply is read in bounded chunks up to what that
    reply can need, its nesting bounded before it is parsed."""

    def __init__(self, command: str, device: str | None, workload: str, seed: int,
                 timeout: float | None = None, open_timeout: float | None = None,
                 hello_s: float | None = None) -> None:
        argv = shlex.split(command)
        if not argv:
            raise ValueError("--worker: the command is empty")
        self.command, self.workload, self.seed = command, workload, seed
        self.timeout, self.open_timeout = worker_timeouts(timeout, open_timeout)
        self.hello_timeout = hello_timeout(hello_s)  # hello: the smaller of it and open's
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
        if device is None:  # a worker that judges a capture: no device opened
            self.kind, self._describe = None, "no device"
            return
        got = self.request({"cmd": "device", "name": device}, "device")
        self.kind = reply_field(got, "kind", str, command, "device")
        self._describe = reply_field(got, "describe", str, command, "device")

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
        flag = "--worker-open-timeout S" if opening else "--worker-timeout S"
        if cmd == "hello" and self.hello_timeout <= self.open_timeout:
            limit_s = self.hello_timeout
            flag = ("--worker-hello-timeout S" if self.hello_timeout < self.open_timeout else
                    "--worker-hello-timeout S and --worker-open-timeout S")
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
                give = "give" if " and " in flag else "gives"
                raise RemoteError(f"{who} did not answer {cmd!r} within {limit_s:g} s (it was "
                                  f"ended; {flag} {give} it longer)") from None
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

    def judge_capture(self, path: str, explain: bool = False) -> dict:
        """The capture at ``path`` on the worker's machine judged there: the report
        (``core.capture.judge``'s dict, as ``strict_json`` made it for the wire)."""
        import json

        got = self.request({"cmd": "judge_capture", "path": path, "explain": bool(explain)},
                           "judged", JUDGED_REPLY)
        text = reply_field(got, "report", str, self.command, "judge_capture")
        try:
            rep = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise RemoteError(f"the worker {self.command!r} sent a report that is not JSON "
                              f"({' '.join(str(e).split())[:120]})") from None
        if not isinstance(rep, dict) or not all(k in rep for k in (
                "ops", "counts", "losses", "settings", "phases", "exact")):
            raise RemoteError(f"the worker {self.command!r} sent a malformed report to "
                              "'judge_capture'")
        return rep

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
                                   config.worker_timeout, config.worker_open_timeout,
                                   getattr(config, "worker_hello_timeout", None))
        self.command = config.worker
        here = {k: getattr(config, k) for k in ("workload", "device", "fuse", "dtype", "math",
                                                "compare", "seed", "explain", "torch_threads",
                                                "tf32", "deterministic", "torch_optimizer",
                                                "amp", "loss_scale", "optimizer")}
        got = self.remote.request({"cmd": "open", "config": here, "provenance": provenance,
                                   "inject": inject, "scan_nonfinite": bool(scan_nonfinite)},
                                  "opened", max_bytes=OPENED_REPLY)
        try:
            self.nodes = read_node_table(got.get("nodes"))
        except ValueError as e:
            raise self._malformed("open", str(e)) from None
        self.remote.nodes_hint = n = len(self.nodes)
        self.sizes = [node_size(nd) for nd in self.nodes]
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
            from tapescope.app.run_provenance import Inject

            if not (isinstance(inj, list) and len(inj) == 3 and isinstance(inj[0], int)
                    and 0 <= inj[0] < n and inj[1] in ("value", "grad")
                    and isinstance(inj[2], int)):
                raise self._malformed("open", f"the fault {str(inj)[:40]!r}")
            self.inject = Inject(*inj)
        self.device_kind = reply_field(got, "kind", str, self.command, "open")
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
        from tapescope.core.parity import ParityReport

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
            if (rec["g_n"] != -1).any() or (rec["v_n"] != [node_size(p) for p in params]).any():
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
                                  max_bytes=4 * b64_len(8 * node_size(nd)) + 4096)
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
