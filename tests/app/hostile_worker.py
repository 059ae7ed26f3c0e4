"""A hostile or broken stand-in for ``tapescope worker``: ``python hostile_worker.py MODE``.

Each mode misbehaves in one way the client must survive with one line and exit 2, in bounded
time and memory (tests/app/test_worker_hostile.py). Modes that start honest run the real
worker (``app.remote_server._Worker``) for the requests before they misbehave. Every mode ends by
itself after ``LIFETIME_S``, so a client that fails to end it leaves nothing behind for long.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
LIFETIME_S = 120


def _line() -> dict | None:
    line = sys.stdin.buffer.readline(1 << 30)  # the client is the test's: trusted here
    return json.loads(line) if line.strip() else None


def _say(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _reply(msg: dict) -> None:
    _say(json.dumps(msg).encode() + b"\n")


def _hang() -> None:
    time.sleep(LIFETIME_S)
    sys.exit(0)


def _hello() -> None:
    _line()
    if len(sys.argv) > 2:  # the test's own PROTOCOL: no numpy import before the answer (a
        protocol = int(sys.argv[2])  # second of imports, more on a loaded machine, ate the
    else:  # 3 s open deadline the device request is meant to miss)
        from tapescope.app.remote import PROTOCOL as protocol
    _reply({"type": "hello", "protocol": protocol})


def _honest_until(stop, keep: dict | None = None) -> dict:
    """Serve like the real worker; return the first request ``stop(msg, counts)`` says to
    (``keep["it"]``: the worker, to answer it after all)."""
    from tapescope.app.remote_server import _Worker

    worker, counts = _Worker(), {}
    if keep is not None:
        keep["it"] = worker
    while True:
        msg = _line()
        if msg is None or msg.get("cmd") == "quit":
            sys.exit(0)
        counts[msg["cmd"]] = counts.get(msg["cmd"], 0) + 1
        if stop(msg, counts):
            return msg
        _reply(worker.handle(msg))


def main(mode: str) -> None:
    signal.alarm(LIFETIME_S)  # never outlive a test run
    if mode == "silent":  # reads the hello, never answers
        _line()
        _hang()
    _hello()
    if mode == "after_hello":  # answers hello, then nothing
        _line()
        _hang()
    if mode == "half_line":  # half a device reply, then sleeps
        _line()
        _say(b'{"type": "device", "kind": "ho')
        _hang()
    if mode == "huge_line":  # 700 MiB without a newline, made lazily a MiB at a time
        _line()
        chunk = b"A" * (1 << 20)
        try:
            for _ in range(700):
                _say(chunk)
        except BrokenPipeError:
            sys.exit(0)
        _hang()
    if mode == "deep":  # a line nested 4,000 deep (json.loads would recurse per level)
        _line()
        _say(b'{"type": "device", "kind": ' + b"[" * 4000 + b"\n")
        _hang()
    if mode == "wide":  # a valid line of 300,000 empty lists: ~30x its size as objects
        _line()
        _say(b'{"type": "device", "kind": "host", "describe": "x", "pad": ['
             + b"[]," * 300_000 + b"[]]}\n")
        _hang()
    if mode == "no_kind":  # a device reply without its fields
        _line()
        _reply({"type": "device"})
        _hang()
    if mode == "no_type":  # a device reply without a type
        _line()
        _reply({"kind": "host"})
        _hang()
    if mode == "stall_mid_run":  # honest until the second step, then silent
        _honest_until(lambda msg, n: msg["cmd"] == "step" and n["step"] == 2)
        _hang()
    if mode.startswith("bad_record:"):  # honest, but the first step's record is doctored
        field, value = mode.split(":", 2)[1:]
        worker = {}
        msg = _honest_until(lambda msg, n: msg["cmd"] == "step", worker)
        _reply(_doctored_step(worker["it"].handle(msg), field, json.loads(value)))
        _line()
        _hang()
    raise SystemExit(f"unknown mode {mode!r}")


def _doctored_step(reply: dict, field: str, value) -> dict:
    """The honest ``stepped`` reply with node 0's record column ``field`` set to ``value``
    (for field "count": the record of one node fewer)."""
    from tapescope.core.step_record import pack, unpack

    d = reply["step"]
    rec = unpack(d["record"], d["n"])
    if field == "count":
        rec = rec[:-1]
    else:
        rec[field][0] = value
    d["record"], d["n"] = pack(rec), len(rec) if field == "count" else d["n"]
    return reply


if __name__ == "__main__":
    main(sys.argv[1])
