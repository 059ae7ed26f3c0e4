"""The worker's side of the worker protocol (``app.remote``): ``tapescope worker``.

``serve`` reads one request line at a time (bounded, its nesting bounded before it is parsed)
and answers each with exactly one line; ``_Worker`` holds the device and the ``PairRunner`` the
client opened, so the whole pair runs here and only step records go back.
"""

from __future__ import annotations

import traceback
from typing import Any

from app.remote_protocol import (
    CONTAINERS_BASE,
    CONTAINERS_PER_NODE,
    MAX_REQUEST,
    PROTOCOL,
    node_table,
)
from app.runs import PairRunner, SessionConfig
from app.step_wire import step_to_wire
from app.wire import LinePipe, LineTooLong, encode_array, parse_line
from core.step_record import pack, record_of

__all__ = ["serve"]


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
        return {"type": "opened", "nodes": node_table(r.nodes), "kind": r.device_kind,
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
