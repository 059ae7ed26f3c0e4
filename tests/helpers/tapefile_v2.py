"""Version 2 tape files crafted for the tests: a file's body and header taken apart and put back
(the trailer rewritten to match), a header edited, a load that must be refused in one line
within a memory budget, a long chain, the small fixture tape, and bit-for-bit tape equality
(tests/core/test_tapefile_v2.py, test_tapefile_v2_layout.py, tests/app/test_tape_open_lazy.py)."""

from __future__ import annotations

import hashlib
import json
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import Tape, ops, tapefile
from tapescope.core.tapefile import Limits, TapeFileError

MiB = 1 << 20
TRAILER = struct.Struct("<8sQQ32s")


# ---- crafting ------------------------------------------------------------------------------
def parts(path: Path) -> tuple[bytes, dict]:
    """(body: everything before the header, header dict) of a version-2 file."""
    raw = path.read_bytes()
    magic, hoff, hlen, _ = TRAILER.unpack_from(raw, len(raw) - TRAILER.size)
    assert magic == tapefile.TRAILER_MAGIC
    return raw[:hoff], json.loads(raw[hoff:hoff + hlen])


def assemble(path: Path, body: bytes, header: dict | str) -> Path:
    """``body`` + the header (a dict is dumped; a str is the JSON text) + a correct trailer."""
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(body + text + TRAILER.pack(tapefile.TRAILER_MAGIC, len(body), len(text),
                                                hashlib.sha256(text).digest()))
    return path


def edited(src: Path, dst: Path, edit) -> Path:
    """``src`` with ``edit(header)`` applied (in place or returning a new header)."""
    body, h = parts(src)
    out = edit(h)
    return assemble(dst, body, h if out is None else out)


def refused(path: Path, match: str = "", limits: Limits | None = None, lazy: bool = False,
            budget_bytes: int = 32 * MiB) -> TapeFileError:
    """Load ``path``: a one-line TapeFileError naming the file (and ``match``), within a memory
    budget (tracemalloc sees numpy's buffers: an allocation sized by the file shows up)."""
    tracemalloc.start()
    try:
        with pytest.raises(TapeFileError) as ei:
            tapefile.load(path, limits=limits, lazy=lazy)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = str(ei.value)
    assert str(path) in msg, msg
    assert match.lower() in msg.lower(), msg
    assert "\n" not in msg, msg
    assert peak < budget_bytes, f"peak {peak / MiB:.0f} MiB: {msg}"
    return ei.value


def chain(n: int = 40) -> tuple[Tape, int]:
    """x[4,8] -> n tanh/mul steps -> sum, with gradients (many arrays: many small blocks)."""
    t = Tape()
    x = t.param(np.linspace(-1, 1, 32).reshape(4, 8), name="x")
    w = t.param(np.full((4, 8), 0.5), name="w")
    y = x
    for k in range(n):
        y = ops.tanh(ops.mul(y, w), name=f"h{k}")
    loss = ops.sum(y, name="loss")
    t.backward(loss)
    return t, loss.id


def small_tape(folder: Path) -> Path:
    """x[2,3] param -> tanh -> sum, with gradients; meta names the loss; one block an array."""
    t = Tape()
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
    loss = ops.sum(ops.tanh(x))
    t.backward(loss)
    return tapefile.save(t, folder / "small.tape", meta={"loss": loss.id}, block_bytes=64)


def same(a: Tape, b: Tape) -> None:
    assert len(a) == len(b)
    for na, nb in zip(a.nodes, b.nodes, strict=True):
        assert (na.op, na.inputs, dict(na.attrs), na.shape, na.name, na.requires_grad) == (
            nb.op, nb.inputs, dict(nb.attrs), nb.shape, nb.name, nb.requires_grad)
        assert a.value(na.id).tobytes() == b.value(nb.id).tobytes()
        ga, gb = a.grad(na.id), b.grad(nb.id)
        assert (ga is None) == (gb is None)
        if ga is not None:
            assert ga.tobytes() == gb.tobytes()
    assert [p.id for p in a.params()] == [p.id for p in b.params()]


# ---- hostile: sizes, offsets, dtypes, shapes, duplicates -----------------------------------
def loc_of(h: dict, kind: str, i: int) -> list[int]:
    return h[kind][2 * i:2 * i + 2]


def set_loc(h: dict, kind: str, i: int, loc: list[int]) -> None:
    h[kind][2 * i:2 * i + 2] = loc
