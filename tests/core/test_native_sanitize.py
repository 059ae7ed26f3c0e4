"""The native kernels under AddressSanitizer and UBSan (issue 49, red team 3): refkernels.c and
refmath_host.c built with ``TAPESCOPE_NATIVE_SANITIZE=1`` (core.native.SANITIZE: a cache entry
of its own), loaded in a child with libasan preloaded, run the hostile Conv/pool geometry
(straight into the C entry points, and as ONNX models) and normal convolutions and pools; any
out-of-bounds access, overflow or other undefined behaviour stops the child with a report.
A planted overflow proves the sanitizer is on. The -O0 build takes ~20 s once (more on a loaded
machine), then it is cached."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.hostile_geometry import C_CHILD, HOSTILE
from tests.helpers.sanitize import LIBASAN, ROOT, assert_clean, run_sanitized

pytestmark = pytest.mark.skipif(LIBASAN is None or os.environ.get("TAPESCOPE_NO_NATIVE"),
                                reason="needs gcc with libasan (and native code)")

NORMAL = textwrap.dedent("""
    import numpy as np
    from tapescope.core import native
    from tapescope.core.ops import nn
    assert native.library() is not None and native.sanitize_flags()
    maps = open("/proc/self/maps").read()
    assert "libasan" in maps and "libubsan" in maps, "not the sanitized build"
    rng = np.random.default_rng(0)

    def conv_ref(x, w, st, dil, padw, group):
        # the windows view and einsum: what the C product must agree with (to rounding)
        v, outs = nn.windows(x, w.shape[2:], st, dil, padw, 0)
        n, c = x.shape[:2]
        m = w.shape[0]
        vg = v.reshape((n, group, c // group) + v.shape[2:])
        wg = w.reshape((group, m // group) + w.shape[1:])
        y = np.einsum("ngcrsuv,gmcuv->ngmrs", vg, wg)
        return y.reshape((n, m) + tuple(outs))

    done = 0
    for dt in (np.float32, np.float64):
        for (n, c, h, wd, m, g, k, st, dil, pad) in [
                (1, 3, 9, 7, 4, 1, 3, (1, 1), (1, 1), (1, 1)),
                (2, 4, 12, 12, 8, 2, 3, (2, 2), (1, 1), (0, 1)),
                (1, 6, 16, 16, 6, 6, 3, (1, 1), (2, 2), (2, 2)),   # depthwise, dilated
                (1, 4, 14, 14, 4, 4, 3, (2, 1), (1, 1), (1, 0)),   # depthwise, strided
                (1, 8, 7, 7, 64, 1, 1, (1, 1), (1, 1), (0, 0)),    # 1x1: small-plane product
                (1, 16, 6, 6, 32, 1, 3, (1, 1), (1, 1), (1, 1)),
                (1, 2, 5, 40, 3, 1, 2, (1, 3), (1, 1), (0, 0))]:
            x = rng.standard_normal((n, c, h, wd)).astype(dt)
            w = rng.standard_normal((m, c // g, k, k)).astype(dt)
            padw = [(pad[0], pad[0]), (pad[1], pad[1])]
            y = nn.conv_nd(x, w, st, padw, dil, g)
            assert np.allclose(y, conv_ref(x, w, st, dil, padw, g), rtol=1e-4, atol=1e-4)
            outs = y.shape[2:]
            cols = native.im2col2d(x, (k, k), st, dil, padw, outs)
            assert cols is not None and cols.shape[1] == c * k * k
            done += 1
        for (h, wd, k, st, pad, dil) in [(8, 8, (2, 2), (2, 2), (0, 0), (1, 1)),
                                         (13, 11, (3, 3), (2, 2), (1, 1), (1, 1)),
                                         (9, 9, (3, 3), (1, 1), (1, 1), (1, 1)),
                                         (30, 30, (3, 2), (3, 2), (0, 1), (2, 1)),
                                         (5, 64, (1, 64), (1, 1), (0, 0), (1, 1))]:
            x = rng.standard_normal((2, 3, h, wd)).astype(dt)
            padw = [(pad[0], pad[0]), (pad[1], pad[1])]
            outs = [nn.out_size(x.shape[2 + i], k[i], st[i], dil[i], *padw[i])
                    for i in range(2)]
            want = nn.pool_nd(x, "max", k, st, padw, dil)
            got = native.pool2d("max", x, None, k, st, dil, padw, outs)
            assert got is None or got.tobytes() == want.tobytes()
            cnt = np.ascontiguousarray(nn.pool_counts(x, k, st, padw, dil, 0, 0), dtype=dt)
            want = nn.pool_nd(x, "avg", k, st, padw, dil)
            got = native.pool2d("avg", x, cnt, k, st, dil, padw, outs)
            assert got is None or got.tobytes() == want.tobytes()
            done += 1
    print("normal", done)
""")

MODELS = textwrap.dedent("""
    import contextlib, io, sys
    from tapescope.app.cli import main
    n = 0
    for path in sys.argv[1:]:  # as `tapescope onnx M.onnx` runs them (inputs generated)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["onnx", path])
        assert rc == 2 and "out of range" in err.getvalue(), (path, rc, err.getvalue())
        n += 1
    print("refused", n)
""")

PLANTED = textwrap.dedent("""
    import numpy as np
    from tapescope.core import native
    lib = native.library()
    x = np.ones((1, 1, 8, 8), np.float32)
    cols = np.zeros(4, np.float32)  # far smaller than the 9 x 36 matrix im2col writes
    lib.ts_im2col_f32(x.ctypes.data, cols.ctypes.data, 1, 1, 8, 8, 3, 3, 6, 6, 1, 1, 0, 0, 1, 1)
    print("not caught")
""")


def test_hostile_and_normal_geometry_run_clean_under_asan_and_ubsan(tmp_path):
    p = run_sanitized(NORMAL)  # the first call builds the sanitized library (~20 s, cached)
    assert_clean(p)
    assert "normal 24" in p.stdout, p.stdout
    p = run_sanitized(C_CHILD)  # straight into the C entry points, as no checked caller does
    assert_clean(p)
    assert "survived 7" in p.stdout
    paths = [build(tmp_path / f"{name}.onnx") for name, (build, _) in HOSTILE.items()]
    p = run_sanitized(MODELS, *paths)
    assert_clean(p)
    assert f"refused {len(paths)}" in p.stdout, p.stdout


def test_the_sanitizer_is_on():
    p = run_sanitized(PLANTED)
    assert p.returncode != 0 and "not caught" not in p.stdout
    assert "AddressSanitizer: heap-buffer-overflow" in p.stderr, p.stderr[-3000:]


def test_the_sanitized_build_without_libasan_falls_back_to_numpy():
    """TAPESCOPE_NATIVE_SANITIZE=1 in a process without libasan preloaded: loading the library
    would abort the process, so the numpy reference runs instead (the same bits)."""
    env = dict(os.environ, TAPESCOPE_NATIVE_SANITIZE="1", PYTHONPATH=ROOT)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([sys.executable, "-c", "from tapescope.core import native; "
                        "print('lib', native.library(), native.refmath_ext())"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0 and "lib None None" in p.stdout, p.stderr[-2000:]
