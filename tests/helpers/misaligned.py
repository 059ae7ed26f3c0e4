"""Every core.native entry that hands an array's address to C, fed arrays whose first element is
not aligned to their element size (an ndarray over a byte buffer at an odd offset:
``np.frombuffer(b"\\0" + data, offset=1)``, what an ONNX tensor's raw bytes or a file's array can
be), against the same values aligned: the same bits, or the same refusal (None). A misaligned
element read in C is undefined behaviour (UBSan's "misaligned address"; a vectorised loop peeled
for alignment may use aligned loads on it), so each entry passes C aligned memory: the array
itself where it is aligned, else an aligned copy, or it declines (None, the caller's numpy).
``BATTERY`` is run in this process by tests/core/test_native_alignment.py and, as a child's
code, under the sanitized build (UBSan's alignment check)."""

from __future__ import annotations

BATTERY = r'''
import ctypes
import sys

import numpy as np

from tapescope.core import native
from tapescope.core import refmath
from tapescope.core.capture.aten_ref_shape import swap_last2


def mis(a):
    """``a``'s values in a C-contiguous array one byte off its element size's alignment."""
    a = np.asarray(a)
    buf = bytearray(a.nbytes + 1)
    out = np.frombuffer(buf, a.dtype, a.size, offset=1).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def same(got, want, what):
    if want is None or got is None:
        assert got is None and want is None, (what, "one declined", got is None)
        return 0
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            same(g, w, what)
        return 1
    if not isinstance(want, np.ndarray):  # (float_diff's numbers)
        assert repr(got) == repr(want), (what, got, want)
        return 1
    assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype \
        and got.tobytes() == want.tobytes(), (what, "bits differ")
    return 1


def battery():
    rng = np.random.default_rng(3)
    ran = {}

    def check(name, fn, *arrays, mis_at=None, declines=False):
        """fn(*arrays) against fn with each array (or those at ``mis_at``) misaligned;
        ``declines``: the entry refuses misaligned arrays (None: the caller's numpy)."""
        want = fn(*[np.array(a, copy=True) for a in arrays])
        idx = range(len(arrays)) if mis_at is None else mis_at
        got = fn(*[mis(a) if k in idx else np.array(a, copy=True)
                   for k, a in enumerate(arrays)])
        if declines:
            assert want is not None and got is None, (name, "did not decline")
            ran[name] = ran.get(name, 0) + 1
            return
        ran[name] = ran.get(name, 0) + same(got, want, name)

    for dt in (np.float32, np.float64):
        r = lambda *s: rng.standard_normal(s).astype(dt)  # noqa: E731
        a, b = r(37, 29), r(29, 41)
        check("mm", native.mm, a, b)
        check("mm transposed", lambda x, y: native.mm(x.T, y.T), r(29, 37), r(41, 29))
        check("bmm", native.bmm, r(3, 9, 13), r(3, 13, 11))
        check("bmm shared", native.bmm, r(1, 9, 13), r(3, 13, 11))
        check("mm_few_rows", native.mm_few_rows, r(2, 29), b)
        check("colsum", native.colsum, r(33, 17))
        check("chansum", native.chansum, r(3, 5, 19))
        k = {n: dt(v) for n, v in (("b1", 0.9), ("omb1", 0.1), ("b2", 0.999), ("omb2", 0.001),
                                   ("eps", 1e-8), ("lr_t", 1e-3))}

        def adam(w, g, m, v):
            out = native.adam(w, g, m, v, k)
            return None if out is None else (out, m, v)
        # m, v are updated in place: misaligned, adam declines (no copy of them would be)
        check("adam", adam, r(67), r(67), r(67), np.abs(r(67)), declines=True)
        check("adam (w, g)", adam, r(67), r(67), r(67), np.abs(r(67)), mis_at=(0, 1))
        x = r(2, 5, 7, 6)
        chans = [r(5), np.abs(r(5)) + 1, r(5), r(5)]
        check("channel_norm", native.channel_norm, x, *chans)
        check("im2col2d", lambda x: native.im2col2d(x, (3, 3), (1, 1), (1, 1),
                                                     ((1, 1), (1, 1)), (7, 6)), x)
        w = r(8, 5, 3, 3)
        padw = ((1, 1), (1, 1))
        check("conv2d", lambda x, w: native.conv2d(x, w, (1, 1), (1, 1), padw, (7, 6), 1), x, w)
        check("conv2d 1x1 small plane", lambda x, w: native.conv2d(
            x, w, (1, 1), (1, 1), ((0, 0), (0, 0)), (3, 3), 1), r(1, 8, 3, 3), r(64, 8, 1, 1))
        check("conv2d_pack", lambda w: native.conv2d_pack(w, 1, (3, 3)), r(64, 8, 1, 1))
        wd = r(5, 1, 3, 3)
        check("conv2d_one_per_group", lambda x, w: native.conv2d_one_per_group(
            x, w, (1, 1), (1, 1), padw, (7, 6)), x, wd)

        def with_ep(run):
            def fn(bias, mean, den, scale, beta, res):
                made = native.epilogue(dt, 5, bias=bias, bn=(mean, den, scale, beta), res=res,
                                       relu=True)
                return None if made is None else run(made[0])
            return fn
        eps = [r(5), r(5), np.abs(r(5)) + 1, r(5), r(5)]
        res = r(2, 5, 7, 6)
        check("ep_apply", with_ep(lambda e: native.ep_apply(x, e)), *eps, r(2, 5, 7, 6))
        check("conv2d_one_per_group + epilogue", with_ep(lambda e: native.conv2d_one_per_group(
            x, wd, (1, 1), (1, 1), padw, (7, 6), e)), *eps, res)
        w5 = r(5, 5, 3, 3)
        check("conv2d + epilogue", with_ep(lambda e: native.conv2d(
            x, w5, (1, 1), (1, 1), padw, (7, 6), 1, e)), *eps, res)

        def conv_call(x, w):
            call = native.conv_call(x.shape, dt, w, (1, 1), (1, 1), padw, (7, 6), 1,
                                    native.Epilogue(groups=1))
            if call is None:
                return None
            out = np.empty((2, 8, 7, 6), dt)
            native.run_conv(call, x, out)
            return out
        # w is kept by the caller and read on every run: misaligned, conv_call declines
        check("conv_call + run_conv", conv_call, x, w, mis_at=(0,))
        check("conv_call (w)", conv_call, x, w, mis_at=(1,), declines=True)
        outs = (3, 3)
        cnt = np.full(outs, 4, dt)
        check("pool2d avg", lambda x, c: native.pool2d("avg", x, c, (2, 2), (2, 2), (1, 1),
                                                       ((0, 0), (0, 0)), outs), x, cnt)
        check("pool2d max", lambda x: native.pool2d("max", x, None, (2, 2), (2, 2), (1, 1),
                                                    ((0, 0), (0, 0)), outs), x)
        v = r(300) * 3
        for name in native.REFMATH:
            check(f"refmath {name}", getattr(refmath, name), v)
        ext = native.refmath_ext()
        if ext is not None:
            def tanh_grad(g, y):
                try:
                    return ext.tanh_grad(g, y)
                except ValueError:
                    return None  # (refused: the caller's numpy)
            check("tanh_grad", tanh_grad, v, np.tanh(v), declines=True)
            check("tanh_grad (g)", tanh_grad, v, np.tanh(v), mis_at=(0,), declines=True)

            def zero_le(x, g):
                try:
                    return ext.zero_le(x, 0.0, g)
                except ValueError:
                    return None  # (refused: the caller's numpy)
            check("zero_le", zero_le, v, np.tanh(v), declines=True)
            check("zero_le (v)", zero_le, v, np.tanh(v), mis_at=(1,), declines=True)
        for name in native.REFMATH:  # the ctypes loops (where the extension is not built)
            check(f"refmath ctypes {name}", refmath._ctypes_loop(native.refmath_fn(name, dt)), v)
        check("float_diff", lambda p, q: native.float_diff(p, q, 64), v, v + 1)
        check("float_diff_ctypes", lambda p, q: native.float_diff_ctypes(p, q, 64), v, v + 1)
        big = r(70, 90)
        check("swap_last2", lambda x: swap_last2(x, native_min=0), big)
        check("square_sums", lambda p, q: native.square_sums([p, q]), v, r(9), declines=True)
    return ran


if __name__ == "__main__":
    assert native.library() is not None
    print(sorted(battery().items()))
'''
