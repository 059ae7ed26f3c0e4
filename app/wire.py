"""Arrays on the live worker's JSON pipe: dtype, shape and base64 of the raw bytes.

Below ``app.live_worker`` and ``app.remote`` (both speak it), so that neither imports the
other. A received array's dtype and size are checked before anything is allocated.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import time

import numpy as np

from tapescope.core.precision import BFLOAT16

WIRE_KINDS = "fiub"  # numeric dtypes only: an object dtype can never come off the wire
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
MAX_WIRE_BYTES = 1 << 30  # one array off the wire: refused beyond this before decoding


def encode_array(a: np.ndarray | None) -> dict | None:
    """An array as JSON: dtype, shape and base64 of its raw bytes (C order); None stays None."""
    if a is None:
        return None
    a = np.asarray(a)  # NOTE: not ascontiguousarray, which makes a 0-d loss 1-d
    if a.dtype == BFLOAT16:  # ml_dtypes' bfloat16 is numpy kind "V": sent by its name
        return {"dtype": "bfloat16", "shape": list(a.shape),
                "data": base64.b64encode(a.tobytes(order="C")).decode("ascii")}
    if a.dtype.kind not in WIRE_KINDS:
        raise ValueError(f"cannot send a {a.dtype} array (numeric dtypes only)")
    return {"dtype": a.dtype.str, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes(order="C")).decode("ascii")}


def decode_array(d: dict | None, what: str = "array") -> np.ndarray | None:
    """The inverse of ``encode_array``; a malformed entry raises ValueError naming ``what``."""
    if d is None:
        return None
    try:
        # bfloat16 by its name (one known 2-byte type), everything else numpy's own spelling
        dt = BFLOAT16 if d["dtype"] == "bfloat16" else np.dtype(d["dtype"])
        shape = d["shape"]  # a list of ints: a string "23" would iterate as (2, 3)
        if not isinstance(shape, list) or not all(type(n) is int for n in shape):
            raise ValueError(f"shape {str(shape)[:40]!r} is not a list of integers")
        shape = tuple(shape)
        data = d["data"]
        if not isinstance(data, str) or not _BASE64.fullmatch(data):
            raise ValueError("data is not base64 text")
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{what}: malformed array message ({e})") from None
    if dt.kind not in WIRE_KINDS and dt != BFLOAT16:
        raise ValueError(f"{what}: dtype {dt} is not a numeric dtype")
    # sizes are checked before anything is allocated: Python ints, no overflow
    nbytes = dt.itemsize
    for n in shape:
        nbytes *= n
    if any(n < 0 for n in shape) or len(shape) > 32 or nbytes > MAX_WIRE_BYTES:
        raise ValueError(f"{what}: shape {shape} of {dt} is refused (at most "
                         f"{MAX_WIRE_BYTES} bytes, 32 dimensions)")
    if len(data) != 4 * ((nbytes + 2) // 3):  # what base64 of nbytes is, checked undecoded
        held = len(data) // 4 * 3 - data.endswith("=") - data.endswith("==")
        raise ValueError(f"{what}: {held} bytes do not fill shape {shape} of {dt}")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError as e:
        raise ValueError(f"{what}: malformed array message ({e})") from None
    if len(raw) != nbytes:
        raise ValueError(f"{what}: {len(raw)} bytes do not fill shape {shape} of {dt}")
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()  # writable, owns its memory


# ---- JSON lines on a pipe, bounded and with a deadline (the worker protocol, app.remote) -------
MAX_DEPTH = 32  # nesting of one protocol message: the deepest real one (optimizer data) is 5
_CHUNK = 1 << 20  # bytes read or written per system call
_ESCAPE = re.compile(rb"\\.", re.S)  # removed first: what is left of a string has no quote
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class LineTimeout(TimeoutError):
    """The other side did not finish its line (or take ours) before the deadline."""


class LineTooLong(ValueError):
    """The other side's line passed the bound its message can need."""


def json_shape(line: bytes, max_containers: int) -> tuple[int, int]:
    """(containers, deepest nesting) of a JSON text, counted without parsing it; the depth is
    only measured (0) when the containers are at most ``max_containers``.

    json.loads makes ~30 bytes of Python objects per byte of ``[]`` and recurses per level, so
    both are bounded before it runs (``parse_line``)."""
    if b"\\" in line:  # base64 arrays have none: the common big line skips this pass
        line = _ESCAPE.sub(b"", line)
    # outside strings: every other piece between quotes (a bracket in a string does not nest)
    brackets = b"".join(line.split(b'"')[0::2]).translate(None, _NOT_BRACKET)
    opens = brackets.count(b"[") + brackets.count(b"{")
    if not brackets or opens > max_containers:
        return opens, 0
    step = np.frombuffer(brackets, np.uint8)
    depth = np.cumsum(np.where((step == ord("[")) | (step == ord("{")), 1, -1), dtype=np.int64)
    return opens, int(depth.max())


def parse_line(line: bytes, what: str, max_containers: int) -> dict:
    """One protocol line as a dict; too deep, too many containers, not JSON or not an object
    raise ValueError naming ``what``."""
    containers, depth = json_shape(line, max_containers)
    if containers > max_containers:
        raise ValueError(f"{what}: a protocol line with {containers} arrays and objects (this "
                         f"message needs at most {max_containers})")
    if depth > MAX_DEPTH:
        raise ValueError(f"{what}: a protocol line nested {depth} deep (at most {MAX_DEPTH})")
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        text = line[:80].decode("utf-8", "replace").strip()
        raise ValueError(f"{what}: not a protocol line: {text!r}") from None
    if not isinstance(msg, dict):
        raise ValueError(f"{what}: a protocol line must be a JSON object")
    return msg


class LinePipe:
    """JSON lines over two pipe fds: each line read in bounded chunks up to a bound, and both
    directions kept to a deadline (``time.monotonic()`` seconds, or None: wait for ever)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self._buf = bytearray()
        self._eof = False

    def _wait(self, fd: int, event: int, deadline: float | None, doing: str) -> None:
        poller = select.poll()
        poller.register(fd, event | select.POLLHUP | select.POLLERR)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise LineTimeout(doing)
            if poller.poll(None if left is None else max(1, int(left * 1000) + 1)):
                return

    def send(self, msg: dict, deadline: float | None = None) -> None:
        """Write ``msg`` as one line (non-finite floats as JSON's NaN/Infinity, as json reads);
        BrokenPipeError when the reader is gone, LineTimeout past the deadline."""
        data = memoryview(json.dumps(msg).encode("utf-8") + b"\n")
        while data:
            self._wait(self.wfd, select.POLLOUT, deadline, "sending")
            try:
                n = os.write(self.wfd, data[:_CHUNK])
            except BlockingIOError:
                continue
            data = data[n:]

    def receive(self, max_bytes: int, deadline: float | None = None) -> bytes | None:
        """The next line (without its newline), None at EOF; never holds more than
        ``max_bytes`` + one chunk (LineTooLong), LineTimeout past the deadline."""
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end >= 0:
                if end > max_bytes:
                    break
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                return line
            start = len(self._buf)
            if start > max_bytes:
                break
            if self._eof:
                self._buf.clear()
                return None
            self._wait(self.rfd, select.POLLIN, deadline, "receiving")
            chunk = os.read(self.rfd, min(_CHUNK, max_bytes + 1 - start + 1))
            if not chunk:
                self._eof = True
            self._buf += chunk
        self._buf.clear()
        raise LineTooLong(f"a protocol line longer than {max_bytes} bytes")
