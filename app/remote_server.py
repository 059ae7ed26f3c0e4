"""The worker's side of the worker protocol (``app.remote``): ``tapescope worker``.

``serve`` reads one request line at a time (bounded, its nesting bounded before it is parsed)
and answers each with exactly one line; ``_Worker`` holds the device and the ``PairRunner`` the
client opened, so the whole pair runs here and only step records go back.
"""

from __future__ import annotations

import traceback
from typing import Any

from tapescope.app.remote_protocol import (
    CONTAINERS_BASE,
    CONTAINERS_PER_NODE,
    MAX_REQUEST,
    PROTOCOL,
    node_table,
)
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.app.step_wire import step_to_wire
from tapescope.app.wire import LinePipe, LineTooLong, encode_array, parse_line
from tapescope.core.step_record import pack, record_of

__all__ = ["serve"]


class _TorchSide:
    """The worker's "device" for ``--device torch``: PyTorch runs the candidate there (the pair
    opens no gpu device); its line names torch and where it runs."""

    def __init__(self, name: str) -> None:
        from tapescope.app.torch_run import import_torch

        torch = import_torch()  # (not installed on the worker: one line back to the client)
        self.kind = name if name != "torch:cpu" else "torch"
        where = name.split(":", 1)[1] if ":" in name else "cpu"
        if where == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {name}: torch.cuda has no device on the worker")
        self._line = f"device: torch {torch.__version__} on {where}"

    def describe(self) -> str:
        """The device line."""
        return self._line


class BadRequest(ValueError):
    """A request this protocol has no answer for (no or an unknown ``cmd``, a field missing
    or of the wrong type): an error reply without a traceback, and the worker goes on."""


# what each request must carry (name: type); other fields are optional and checked where read
_REQUESTS: dict[str, dict[str, type]] = {
    "device": {"name": str}, "open": {"config": dict, "provenance": str}, "step": {},
    "params": {}, "arrays": {}, "stats": {}, "judge_capture": {"path": str}}
MESSAGE_CHARS = 4000  # an error reply's message: one line, at most this long


def _checked(msg: dict) -> str:
    """The request's command, once it is one of ours with its fields; else BadRequest."""
    cmd = msg.get("cmd")
    if not isinstance(cmd, str):
        raise BadRequest(f"a request needs a 'cmd' string, not {_short(cmd)}")
    if cmd not in _REQUESTS:
        raise BadRequest(f"unknown command {cmd[:40]!r} (one of hello, "
                         f"{', '.join(_REQUESTS)}, quit)" if cmd != "hello"
                         else "hello was said already")
    for key, kind in _REQUESTS[cmd].items():
        if not isinstance(msg.get(key), kind):
            raise BadRequest(f"{cmd!r} needs {key!r} as a JSON "
                             f"{'string' if kind is str else 'object'}, not "
                             f"{_short(msg.get(key))}")
    return cmd


def _short(v: Any) -> str:
    return "nothing" if v is None else f"{type(v).__name__} {str(v)[:40]!r}"


def error_reply(message: str, details: str = "") -> dict:
    """The protocol's one error reply: ``{"type": "error", "message", "details"}``, the
    message one line of at most MESSAGE_CHARS characters, the details ("" or a traceback)
    at most 20,000."""
    one = " ".join(str(message).split())
    if len(one) > MESSAGE_CHARS:
        one = one[:MESSAGE_CHARS - 1] + "…"
    return {"type": "error", "message": one, "details": details[-20000:]}


class _Worker:
    """The worker's state: one device, and the pair the client opened on it."""

    def __init__(self) -> None:
        self.device: Any = None
        self.pair: Any = None

    def handle(self, msg: dict) -> dict:
        cmd = _checked(msg)
        if cmd == "device":
            from tapescope import gpu

            name = msg["name"]
            if self.device is None and (name == "torch" or name.startswith("torch:")):
                self.device = _TorchSide(name)  # PyTorch runs the candidate: no gpu device
            if self.device is None:
                self.device = gpu.open_device(name)
            return {"type": "device", "kind": self.device.kind,
                    "describe": self.device.describe()}
        if cmd == "open":
            return self._open(msg)
        if cmd == "judge_capture":
            return _judge_capture(msg)
        r = self.pair
        if r is None:
            raise BadRequest(f"no pair is open to answer {cmd!r} (send 'open' first)")
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
        raise BadRequest(f"unknown command {cmd!r}")  # (a command _REQUESTS has, unserved)

    def _open(self, msg: dict) -> dict:
        if self.device is None:
            raise BadRequest("no device is open (send 'device' first)")
        if self.pair is not None:
            raise BadRequest("a pair is open already")
        config = SessionConfig(**msg["config"])  # (worker None: the pair runs here)
        dev = None if isinstance(self.device, _TorchSide) else self.device
        r = self.pair = PairRunner(config, dev, provenance=msg["provenance"],
                                   inject=msg.get("inject"),
                                   scan_nonfinite=bool(msg.get("scan_nonfinite")))
        inj = r.inject
        return {"type": "opened", "nodes": node_table(r.nodes), "kind": r.device_kind,
                "plan": r.plan.to_json() if r.plan is not None else None,
                "inject": None if inj is None else [inj.node, inj.which, inj.step]}


def _judge_capture(msg: dict) -> dict:
    """``parity --capture FILE --worker CMD``: the capture at ``path`` on this machine loaded
    and judged here (``core.capture.judge``, with PyTorch's eager kernels for compiled graphs
    where torch is here); the report goes back as its JSON text (one string: a report of
    thousands of ops is not parsed container by container on the way)."""
    import json

    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge
    from tapescope.core.parity import strict_json

    path = msg["path"]
    cap = load(path)
    if cap.steps == 0:
        raise ValueError(f"{path}: the capture holds no complete step")
    eager = None
    if cap.graphs:
        from tapescope.app.capture import eager_kernels

        eager = eager_kernels()
    rep = judge(cap, explain=bool(msg.get("explain")), eager=eager)
    return {"type": "judged", "report": json.dumps(strict_json(rep), allow_nan=False)}


def serve(fin: int, fout: int) -> int:
    """The worker's loop on fds ``fin``/``fout``: a hello, then one reply per request until
    ``quit`` or EOF. Every reply to a line it cannot serve is ``error_reply``'s shape: a bad
    request (valid JSON: no or an unknown ``cmd``, a missing field, a request out of order,
    a request that fails) is answered and the worker goes on; a line too long, too deep, too
    wide, not JSON or not an object is answered and ends the worker (exit 2).

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

    def garbled(e: ValueError) -> int:
        # parse_line names the worker itself; RecursionError cannot happen (the nesting is
        # measured first), MemoryError is a line too wide for this machine
        pipe.send(error_reply(f"{what}: {e}" if isinstance(e, LineTooLong) else str(e)))
        return 2

    try:
        hello = receive()
    except (ValueError, RecursionError, MemoryError) as e:  # LineTooLong too
        return garbled(e if isinstance(e, ValueError) else ValueError(f"{what}: {e!r}"))
    if hello is None:
        return 0
    if hello.get("cmd") != "hello" or hello.get("protocol") != PROTOCOL:
        theirs = hello.get("protocol")
        pipe.send(error_reply(
            f"protocol mismatch: this tapescope worker speaks protocol {PROTOCOL}, the client "
            f"{_short_value(theirs)}: install the same tapescope on both sides"
            if hello.get("cmd") == "hello" else "the first line must be a hello"))
        return 2
    pipe.send({"type": "hello", "protocol": PROTOCOL, "tapescope": _version()})
    while True:
        try:
            msg = receive()
        except (ValueError, RecursionError, MemoryError) as e:
            return garbled(e if isinstance(e, ValueError) else ValueError(f"{what}: {e!r}"))
        if msg is None or msg.get("cmd") == "quit":
            return 0
        try:
            reply = worker.handle(msg)
        except BadRequest as e:
            reply = error_reply(f"{what}: bad request: {e}")
        except MemoryError:
            reply = error_reply("the worker ran out of memory answering "
                                f"{str(msg.get('cmd'))[:40]!r}")
        except Exception as e:  # noqa: BLE001 — the client shows it as one line
            reply = error_reply(f"{type(e).__name__}: {e}", traceback.format_exc())
        pipe.send(reply)


def _short_value(v: Any) -> str:
    return repr(v) if isinstance(v, (int, float, type(None))) else f"{str(v)[:40]!r}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tapescope")
    except PackageNotFoundError:
        return "unknown"
