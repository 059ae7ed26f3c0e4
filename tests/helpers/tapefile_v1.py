"""Version 1 tape files (a zip of .npy members and a JSON header) crafted for the tests: members
read and written back, a header replaced, member flags patched, and a load that must be refused
in one line within a memory budget (tests/core/test_tapefile_hostile.py, test_tapefile_zip.py)."""

from __future__ import annotations

import hashlib
import io
import json
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import tapefile
from tapescope.core.tapefile import Limits, TapeFileError


def save_v1(*args, **kw):
    """These files craft version-1 zips (tests/core/test_tapefile_v2.py holds version 2's)."""
    return tapefile.save(*args, version=1, **kw)


MiB = 1 << 20


# ---- crafting ------------------------------------------------------------------------------
def npy(a: np.ndarray) -> bytes:
    """``a`` in .npy format (no pickle)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()


def digest(a: np.ndarray) -> str:
    """The digest the saver writes: SHA-256 of the C-order bytes."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def read_members(path: Path) -> dict[str, bytes]:
    """Every zip member's raw bytes, in order."""
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def header_of(members: dict[str, bytes]) -> dict:
    """The JSON header of a member dict."""
    raw = np.lib.format.read_array(io.BytesIO(members["header.npy"]), allow_pickle=False)
    return json.loads(raw.tobytes())


def with_header(members: dict[str, bytes], header: dict | str) -> dict[str, bytes]:
    """The members with the header replaced (a dict is dumped; a str is used as the JSON text)."""
    text = header if isinstance(header, str) else json.dumps(header)
    return {**members, "header.npy": npy(np.frombuffer(text.encode(), np.uint8))}


def write_zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    """A zip of the members (np.savez writes ZIP_STORED)."""
    with zipfile.ZipFile(path, "w", compression, allowZip64=True) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def refused(path: Path, match: str = "", limits: Limits | None = None, budget_s: float = 10.0,
            budget_bytes: int = 64 * MiB) -> TapeFileError:
    """Load ``path``: a TapeFileError naming the file (and ``match``), in bounded time and memory.

    tracemalloc sees numpy's array buffers and zlib's output, so an allocation sized by the file
    before it was checked shows up in the peak.
    """
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TapeFileError) as ei:
            tapefile.load(path, limits=limits) if limits else tapefile.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - t0
    msg = str(ei.value)
    assert str(path) in msg, msg
    assert match.lower() in msg.lower(), msg
    assert "\n" not in msg, msg
    assert took < budget_s, f"{took:.1f} s: {msg}"
    assert peak < budget_bytes, f"peak {peak / MiB:.0f} MiB: {msg}"
    return ei.value


def patch_member_flags(path: Path, name: str, flag: int = 0, method: int | None = None) -> None:
    """Set general-purpose flag bits / the method of ``name`` in its local and central headers."""
    data = bytearray(path.read_bytes())
    enc = name.encode()
    for sig, flag_at, method_at, name_at in ((b"PK\x03\x04", 6, 8, 30), (b"PK\x01\x02", 8, 10, 46)):
        pos = data.find(sig)
        while pos >= 0:
            if data[pos + name_at: pos + name_at + len(enc)] == enc:
                old = int.from_bytes(data[pos + flag_at: pos + flag_at + 2], "little")
                data[pos + flag_at: pos + flag_at + 2] = (old | flag).to_bytes(2, "little")
                if method is not None:
                    data[pos + method_at: pos + method_at + 2] = method.to_bytes(2, "little")
            pos = data.find(sig, pos + 4)
    path.write_bytes(bytes(data))
