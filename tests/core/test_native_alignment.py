"""Arrays whose first element is not aligned to its type (``np.frombuffer(b"\\0" + data,
offset=1)``: an ONNX tensor's raw bytes, a file's array, a user's input) through every
core.native entry that hands C an address (tests/helpers/misaligned.py): the aligned array's
bits, or a refusal where the entry writes the array in place or keeps its address (adam's m and
v, conv_call's w, the extension's tanh_grad, sqsums); and no misaligned element read in C
(UBSan's alignment check, in the sanitized build: before, ``mm`` read a float at an odd address
in ``mm_rows_f32``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tapescope.core import native
from tests.helpers.misaligned import BATTERY
from tests.helpers.sanitize import LIBASAN, assert_clean, run_sanitized

# every entry the battery must reach (a check that stopped running fails here, not silently)
ENTRIES = {"mm", "mm transposed", "bmm", "bmm shared", "mm_few_rows", "colsum", "chansum",
           "adam", "adam (w, g)", "channel_norm", "im2col2d", "conv2d", "conv2d 1x1 small plane",
           "conv2d_pack", "conv2d_one_per_group", "ep_apply", "conv2d_one_per_group + epilogue",
           "conv2d + epilogue", "conv_call + run_conv", "conv_call (w)", "pool2d avg",
           "pool2d max", "float_diff", "float_diff_ctypes", "square_sums", "swap_last2"} \
    | {f"refmath {n}" for n in native.REFMATH} | {f"refmath ctypes {n}" for n in native.REFMATH}


def _battery() -> dict[str, int]:
    scope: dict = {"__name__": "battery"}
    exec(compile(BATTERY, "tests/helpers/misaligned.py:BATTERY", "exec"), scope)
    return scope["battery"]()


def test_aligned_copies_only_where_needed():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert native.aligned(a) is a
    raw = bytearray(a.nbytes + 1)
    m = np.frombuffer(raw, a.dtype, a.size, offset=1).reshape(3, 4)
    m[...] = a
    got = native.aligned(m)
    assert not m.flags.aligned and got.flags.aligned and got.flags.c_contiguous
    assert got.tobytes() == a.tobytes()
    t = native.aligned(a.T)
    assert t.flags.c_contiguous and t.flags.aligned and (t == a.T).all()


@pytest.mark.skipif(bool(os.environ.get("TAPESCOPE_NO_NATIVE")), reason="no native code")
def test_misaligned_arrays_give_the_aligned_bits_on_every_path(native_isa):
    if native.library() is None:
        pytest.skip("no native code (no compiler)")
    ran = _battery()
    want = ENTRIES | ({"tanh_grad", "tanh_grad (g)", "zero_le", "zero_le (v)"}
                      if native.refmath_ext() else set())
    assert want <= ran.keys(), sorted(want - ran.keys())
    assert set(ran.values()) == {2}  # (each for float32 and float64)


@pytest.mark.skipif(LIBASAN is None or bool(os.environ.get("TAPESCOPE_NO_NATIVE")),
                    reason="needs gcc with libasan (and native code)")
def test_no_misaligned_read_in_c_under_ubsan():
    p = run_sanitized(BATTERY)  # (the sanitized build: ~20 s once, then cached)
    assert_clean(p)
    assert "'mm', 2" in p.stdout, p.stdout[-2000:]
