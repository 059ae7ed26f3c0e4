"""Arrays on the live worker's JSON pipe: dtype, shape and base64 of the raw bytes.

Below ``app.live_worker`` and ``app.remote`` (both speak it), so that neither imports the
other. A received array's dtype and size are checked before anything is allocated.
"""

from __future__ import annotations

import base64
import re

import numpy as np

WIRE_KINDS = "fiub"  # numeric dtypes only: an object dtype can never come off the wire
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
MAX_WIRE_BYTES = 1 << 30  # one array off the wire: refused beyond this before decoding


def encode_array(a: np.ndarray | None) -> dict | None:
    """An array as JSON: dtype, shape and base64 of its raw bytes (C order); None stays None."""
    if a is None:
        return None
    a = np.asarray(a)  # NOTE: not ascontiguousarray, which makes a 0-d loss 1-d
    if a.dtype.kind not in WIRE_KINDS:
        raise ValueError(f"cannot send a {a.dtype} array (numeric dtypes only)")
    return {"dtype": a.dtype.str, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes(order="C")).decode("ascii")}


def decode_array(d: dict | None, what: str = "array") -> np.ndarray | None:
    """The inverse of ``encode_array``; a malformed entry raises ValueError naming ``what``."""
    if d is None:
        return None
    try:
        dt = np.dtype(d["dtype"])
        shape = tuple(int(n) for n in d["shape"])
        data = d["data"]
        if not isinstance(data, str) or not _BASE64.fullmatch(data):
            raise ValueError("data is not base64 text")
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{what}: malformed array message ({e})") from None
    if dt.kind not in WIRE_KINDS:
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
