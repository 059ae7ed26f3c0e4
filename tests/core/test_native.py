"""The native reference-order matmul gives the numpy reference's bits, and degrades cleanly."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.ops.reference import mm, mm_numpy
from tapescope.core.parity import same_under_nan_policy
from tests.helpers.epilogue import apply_epilogue

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
pytestmark = pytest.mark.usefixtures("native_isa")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_mm_is_bit_identical_to_numpy_reference(dtype):
    if native.library() is None:
        pytest.skip("no C compiler here: the numpy reference runs instead (covered elsewhere)")
    rng = np.random.default_rng(11)
    for m, k, n in [(1, 1, 1), (4, 3, 5), (7, 9, 13), (64, 100, 33), (5, 0, 3), (0, 4, 2)]:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        # values spanning many binades make every rounding visible
        a *= np.exp2(rng.integers(-20, 20, a.shape)).astype(dtype)
        got = native.mm(a, b)
        assert got.dtype == dtype
        assert got.tobytes() == mm_numpy(a, b).tobytes(), (m, k, n)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_transposed_operands_are_read_in_place_with_the_same_bits(dtype):
    """A transposed (F-contiguous) operand goes to the kernel through its strides, not copied:
    the same chains as the contiguous product, whatever the panel widths, k-blocks (k > 128)
    and thread count."""
    if native.library() is None:
        pytest.skip("no C compiler here: the numpy reference runs instead (covered elsewhere)")
    rng = np.random.default_rng(12)
    before = native.threads()
    try:
        for m, k, n in [(1, 1, 1), (7, 9, 13), (64, 300, 37), (33, 129, 130), (5, 0, 3)]:
            a, b = _spread(rng, (m, k), dtype), _spread(rng, (k, n), dtype)
            want = mm_numpy(a, b).tobytes()
            at, bt = np.asfortranarray(a), np.asfortranarray(b)
            assert not at.flags.c_contiguous or m == 1 or k <= 1
            for t in (1, 3):
                native.set_threads(t)
                for x, y in ((at, b), (a, bt), (at, bt), (a, b)):
                    assert native.mm(x, y).tobytes() == want, (m, k, n, t)
    finally:
        native.set_threads(before)


def test_special_values_follow_ieee():
    a = np.array([[np.inf, 1.0], [np.nan, -0.0], [-0.0, -0.0]])
    b = np.array([[0.0, 1.0], [1.0, -0.0]])
    assert mm(a, b).tobytes() == mm_numpy(a, b).tobytes()


def test_without_native_the_numpy_path_runs(monkeypatch):
    monkeypatch.setattr(native, "_lib", None)
    a = np.arange(6.0).reshape(2, 3)
    assert native.mm(a, a.T) is None
    assert np.array_equal(mm(a, np.ascontiguousarray(a.T)), mm_numpy(a, np.ascontiguousarray(a.T)))


def test_a_corrupt_cached_library_is_rebuilt_not_trusted(monkeypatch, tmp_path):
    if native.library() is None:
        pytest.skip("no C compiler here")
    import shutil
    import subprocess

    good = native._build("gcc")  # the usual cache's verified library
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path))
    compiled, real_run = [], subprocess.run

    def copy_in(cmd, **kw):  # the first build: the good library copied in, not compiled again
        if "-o" not in cmd:
            return real_run(cmd, **kw)  # (the compiler's --version, for the key)
        shutil.copyfile(good, cmd[cmd.index("-o") + 1])
        return subprocess.CompletedProcess(cmd, 0)

    def count(cmd, **kw):  # the rebuild: counted, and the good library copied in again (a
        if "-o" in cmd:  # real compile of refkernels.c is ~20 CPU s; what is tested here is
            compiled.append(cmd)  # that the corrupt entry is rebuilt and replaced, not how)
            return copy_in(cmd, **kw)
        return real_run(cmd, **kw)

    monkeypatch.setattr(subprocess, "run", copy_in)
    first = native._build("gcc")
    monkeypatch.setattr(subprocess, "run", count)
    first.write_bytes(b"\x7fELF garbage")  # what a crash half-way through a copy leaves
    second = native._build("gcc")
    assert len(compiled) == 1  # the corrupt entry was built again, not loaded
    assert second == first and second.read_bytes() == good.read_bytes()


def _spread(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    return x * np.exp2(rng.integers(-20, 20, shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_thread_count_never_changes_a_bit(dtype):
    """Threads split whole output rows: each element keeps its one serial k-chain."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(5)
    a = _spread(rng, (203, 301), dtype)
    b = _spread(rng, (301, 97), dtype)
    want = mm_numpy(a, b).tobytes()
    before = native.threads()
    try:
        for t in (1, 2, 3, 7, 64):
            native.set_threads(t)
            assert native.mm(a, b).tobytes() == want, t
    finally:
        native.set_threads(before)


def _adam_numpy(w, g, m, v, k):
    """core.optim.Adam's numpy spelling (the oracle of the C update), on copies of m and v."""
    m, v = m.copy(), v.copy()
    m *= k["b1"]
    m += k["omb1"] * g
    gg = g * g
    gg *= k["omb2"]
    v *= k["b2"]
    v += gg
    den = np.sqrt(v)
    den += k["eps"]
    upd = np.divide(m, den, out=den)
    upd *= k["lr_t"]
    return np.subtract(w, upd, out=upd), m, v


def _pool_cases(dtype, seed):
    """Products big enough for several pool workers (and small ones that stay on one thread),
    with their oracle bits, and an Adam update of 300k elements with its numpy bits."""
    from tapescope.core.ops.reference import bmm_numpy

    rng = np.random.default_rng(seed)
    cases = []
    for m, k, n in [(64, 784, 128), (784, 64, 128), (128, 64, 784), (203, 301, 97), (3, 5, 7)]:
        a, b = _spread(rng, (m, k), dtype), _spread(rng, (k, n), dtype)
        cases.append(("mm", (a, b), mm_numpy(a, b).tobytes()))
    a, b = _spread(rng, (6, 70, 90), dtype), _spread(rng, (6, 90, 65), dtype)
    cases.append(("bmm", (a, b), bmm_numpy(a, b).tobytes()))
    size = (600, 500)
    w, g = _spread(rng, size, dtype), _spread(rng, size, dtype)
    m0, v0 = _spread(rng, size, dtype), np.abs(_spread(rng, size, dtype))
    k = {name: dtype(x) for name, x in
         dict(b1=0.9, omb1=0.1, b2=0.999, omb2=1 - 0.999, eps=1e-8, lr_t=3e-3).items()}
    want = b"".join(x.tobytes() for x in _adam_numpy(w, g, m0, v0, k))
    cases.append(("adam", (w, g, m0, v0, k), want))
    return cases


def _run_case(kind, args):
    if kind == "adam":
        w, g, m0, v0, k = args
        m, v = m0.copy(), v0.copy()
        out = native.adam(w, g, m, v, k)
        return out.tobytes() + m.tobytes() + v.tobytes()
    return getattr(native, kind)(*args).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_worker_pool_never_changes_a_bit(dtype):
    """The persistent pool: many products and Adam updates, over 1/2/4/8 threads in turn and
    repeated (workers reused, grown, stopped and restarted), each the oracle's bits."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    cases = _pool_cases(dtype, 21)
    before = native.threads()
    try:
        for rnd in range(3):
            for t in (1, 2, 4, 8, 2, 1, 8):
                native.set_threads(t)
                for kind, args, want in cases:
                    assert _run_case(kind, args) == want, (kind, t, rnd)
            assert native.pool_size() >= 1  # the workers stay between products
            if rnd == 1:
                assert native.shutdown_pool() >= 1 and native.pool_size() == 0
    finally:
        native.set_threads(before)


def _child_runs_cases(cases, threads):
    """In a forked child: the cases on a pool of `threads`, exit status 0 when every bit is
    right and the child has a pool of its own (3: a wrong bit, 4: an exception, 5: no workers
    of its own: the parent's pool was not reset, so the child runs everything serially).
    Never returns."""
    code = 4
    try:
        native.set_threads(threads)
        ok = all(_run_case(kind, args) == want for kind, args, want in cases for _ in range(3))
        code = 0 if ok and native.pool_size() >= 1 else (3 if not ok else 5)
    finally:
        os._exit(code)


def _wait_child(pid, seconds=120):
    """The child's exit status; a child still running after `seconds` is killed (a deadlock)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "deadlocked"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_the_worker_pool_survives_fork():
    """A child forked after the parent's pool has started workers (which the child does not
    inherit) runs threaded products to the oracle's bits, without deadlock; so does a child
    forked while another thread of the parent is inside a threaded product (the pool's locks
    held at the fork); and the parent's pool still works afterwards."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    cases = _pool_cases(np.float64, 23)
    before = native.threads()
    try:
        native.set_threads(4)
        for kind, args, want in cases:
            assert _run_case(kind, args) == want
        assert native.pool_size() >= 1
        pid = os.fork()
        if pid == 0:
            _child_runs_cases(cases, 4)
        assert _wait_child(pid) == 0

        # fork while a second thread keeps the pool busy
        stop = threading.Event()
        errors = []

        def busy():
            while not stop.is_set():
                for kind, args, want in cases[:3]:
                    if _run_case(kind, args) != want:
                        errors.append(kind)

        th = threading.Thread(target=busy)
        th.start()
        try:
            for _ in range(4):
                time.sleep(0.01)
                pid = os.fork()
                if pid == 0:
                    _child_runs_cases(cases, 2)
                assert _wait_child(pid) == 0
        finally:
            stop.set()
            th.join()
        assert not errors
        for kind, args, want in cases:  # the parent's pool after all that
            assert _run_case(kind, args) == want
    finally:
        native.set_threads(before)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_bmm_is_bit_identical_and_broadcasts(dtype):
    from tapescope.core.ops.reference import bmm, bmm_numpy

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(9)
    for bsz, m, k, n in [(1, 1, 1, 1), (3, 5, 7, 4), (6, 1, 9, 50), (2, 33, 0, 3), (4, 17, 64, 70)]:
        a = _spread(rng, (bsz, m, k), dtype)
        b = _spread(rng, (bsz, k, n), dtype)
        want = bmm_numpy(a, b).tobytes()
        assert native.bmm(a, b).tobytes() == want
        assert bmm(a, b).tobytes() == want
        shared = np.broadcast_to(a[:1], a.shape)  # one weight for every batch entry
        assert native.bmm(shared, b).tobytes() == bmm_numpy(np.array(shared), b).tobytes()
        assert native.bmm(a[:1], b).tobytes() == bmm_numpy(np.array(shared), b).tobytes()
    bt = _spread(rng, (3, 6, 5), dtype).transpose(0, 2, 1)  # non-contiguous operand
    at = _spread(rng, (3, 4, 5), dtype)
    assert native.bmm(at, bt).tobytes() == bmm_numpy(at, bt).tobytes()
    assert native.bmm(at, bt[:2]) is None  # mismatched batches are the caller's error


def test_machine_code_has_no_fused_multiply_add():
    """-ffp-contract=off with -march=native: no FMA instruction may appear (it rounds once)."""
    import re
    import shutil
    import subprocess

    if native.library() is None or shutil.which("objdump") is None:
        pytest.skip("no C compiler or objdump here")
    paths = [native._build(shutil.which("gcc"))]
    ext = native.refmath_ext()
    if ext is not None:
        paths.append(ext.__file__)  # the CPython extension (refmath_py.c)
    for path in paths:
        dis = subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True,
                             check=True).stdout
        fma = re.findall(r"\bv?f(?:n?m(?:add|sub)|maddsub|msubadd)\w*", dis)
        assert not fma, f"FMA instructions in {path}: {sorted(set(fma))[:5]}"
        assert "divpd" in dis  # the audit looked at compiled refmath code
    dis = subprocess.run(["objdump", "-d", str(paths[0])], capture_output=True, text=True,
                         check=True).stdout
    assert "tsv_tanh" in dis and "ts_mm_f64" in dis  # the audit looked at the right object


def test_without_native_bmm_returns_none(monkeypatch):
    monkeypatch.setattr(native, "_lib", None)
    a = np.ones((2, 3, 4))
    assert native.bmm(a, np.ones((2, 4, 5))) is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_im2col_is_the_window_view(dtype, monkeypatch):
    """The C im2col writes exactly the matrix of the numpy window view (padding +0.0)."""
    from tapescope.core.ops import nn

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(2)
    cases = [((2, 3, 7, 9), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 1),
             ((1, 4, 8, 8), (3, 2), (2, 3), (1, 2), ((0, 2), (3, 1)), 2),
             ((1, 6, 5, 5), (3, 3), (1, 1), (2, 2), ((2, 2), (2, 2)), 6),
             ((3, 2, 4, 6), (1, 1), (2, 2), (1, 1), ((0, 0), (0, 0)), 1),
             ((1, 1, 3, 3), (5, 5), (1, 1), (1, 1), ((2, 2), (2, 2)), 1)]
    for shape, k, st, dil, padw, g in cases:
        x = rng.standard_normal(shape).astype(dtype)
        x.flat[::5] = -0.0
        got, gouts = nn.im2col(x, k, st, dil, padw, g)
        with monkeypatch.context() as m:
            m.setattr(native, "_lib", None)
            want, wouts = nn.im2col(x, k, st, dil, padw, g)
        assert list(gouts) == list(wouts) and got.shape == want.shape
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_direct_conv_with_one_output_per_group_equals_im2col_matmul(dtype):
    """Depthwise (and C/G > 1 with one output per group) conv in C: the reference chains."""
    from tapescope.core.ops import nn
    from tapescope.core.ops.reference import matmul

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(4)
    cases = [((2, 6, 9, 11), (6, 1, 3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
             ((1, 8, 10, 7), (4, 2, 3, 2), (2, 3), (1, 2), ((0, 2), (3, 1))),
             ((1, 3, 5, 5), (3, 1, 5, 5), (1, 1), (2, 2), ((4, 4), (4, 4))),
             ((1, 4, 6, 6), (4, 1, 1, 1), (2, 2), (1, 1), ((0, 0), (0, 0)))]
    for xs, ws, st, dil, padw in cases:
        x = _spread(rng, xs, dtype)
        w = _spread(rng, ws, dtype)
        w.flat[0] = np.inf  # inf * the padding's 0.0 is NaN: padding taps must be multiplied
        w.flat[-1] = -0.0
        x.flat[::7] = -0.0
        g = ws[0]
        got = nn.conv_nd(x, w, st, padw, dil, g)
        want = nn.conv_nd(x, w, st, padw, dil, g, matmul=lambda a, b: matmul(a, b))
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes(), (xs, ws, st, dil, padw)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_average_pool_tap_loop_is_serial_sum(dtype):
    """pool_nd's per-tap adds give serial_sum's bits (signed zeros, inf, NaN included)."""
    from tapescope.core.ops import nn
    from tapescope.core.ops.reference import serial_sum

    rng = np.random.default_rng(8)
    x = _spread(rng, (2, 3, 9, 8), dtype)
    x[0, 0] = -0.0  # an all -0.0 window: the sum must be +0.0
    x[1, 1, 2, 3], x[1, 2, 4, 4] = np.inf, np.nan
    for k, st, padw, ceil, cip in [((3, 3), (2, 2), ((1, 1), (1, 1)), 0, 0),
                                   ((2, 3), (1, 2), ((0, 1), (1, 0)), 1, 1),
                                   ((1, 1), (1, 1), ((0, 0), (0, 0)), 0, 0)]:
        got = nn.pool_nd(x, "avg", k, st, padw, None, ceil, cip)
        want = nn.pool_nd(x, "avg", k, st, padw, None, ceil, cip,
                          sum_fn=lambda v, a: serial_sum(v, a))
        assert got.tobytes() == want.tobytes(), (k, st, padw)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_serial_sum_equals_accumulate(dtype, monkeypatch):
    """serial_sum through the C column sum gives the numpy spelling's bits (-0.0 sums too)."""
    from tapescope.core.ops.reference import serial_sum

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(12)
    x = _spread(rng, (7, 5, 6), dtype)
    x[:, 0, 0] = -0.0  # a slot whose every element is -0.0 sums to +0.0
    x[2, 1, 1], x[3, 2, 2], x[4, 3, 3] = np.inf, -np.inf, np.nan
    cases = [None, 0, 1, 2, (0, 2), (1, 2), (0, 1, 2)]
    got = [serial_sum(x, a, keepdims=k) for a in cases for k in (False, True)]
    with monkeypatch.context() as m, np.errstate(all="ignore"):  # inf + -inf in the numpy path
        m.setattr(native, "_lib", None)
        want = [serial_sum(x, a, keepdims=k) for a in cases for k in (False, True)]
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.tobytes() == w.tobytes()
    assert serial_sum(np.full((3, 2), -0.0, dtype), 0).tobytes() == np.zeros(2, dtype).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_adam_equals_the_numpy_update(dtype, monkeypatch):
    """Adam in C: the same m, v and weights, bit for bit, over several steps."""
    from tapescope.core import Tape, ops, optim

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(13)
    w0 = _spread(rng, (17, 9), dtype)
    x0 = _spread(rng, (5, 17), dtype)

    def train(with_native):
        t = Tape(dtype)
        w = t.param(w0)
        opt = optim.Adam(t, lr=1e-2)
        opt.add_all()
        mark = t.mark()
        with monkeypatch.context() as m:
            if not with_native:
                m.setattr(native, "_lib", None)
            for _ in range(4):
                t.reset_to(mark)
                loss = ops.mean(ops.tanh(t.const(x0) @ w) * 3.0)
                t.backward(loss)
                opt.step()
        return t.value(w).tobytes(), opt.slots[0]

    a, sa = train(True)
    b, sb = train(False)
    assert a == b
    assert sa.m.tobytes() == sb.m.tobytes() and sa.v.tobytes() == sb.v.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_channel_norm_equals_the_broadcast_formula(dtype, monkeypatch):
    """ONNX BatchNormalization (inference) through C: the numpy formula's bits."""
    from tapescope.core.onnx.ops.nn import batch_norm

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(14)
    x = _spread(rng, (2, 5, 4, 3), dtype)
    x[0, 1, 0, 0], x[1, 2, 1, 1], x[0, 3, 2, 2] = np.inf, np.nan, -0.0
    mean, scale, bias = (_spread(rng, (5,), dtype) for _ in range(3))
    var = np.abs(_spread(rng, (5,), dtype))
    var[0] = 0.0
    got = native.channel_norm(x, mean, np.sqrt(var + dtype(1e-5)), scale, bias)
    with np.errstate(all="ignore"):
        want = ((x - mean.reshape(1, 5, 1, 1)) / np.sqrt(var.reshape(1, 5, 1, 1) + dtype(1e-5))
                * scale.reshape(1, 5, 1, 1) + bias.reshape(1, 5, 1, 1))
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    via_op = batch_norm(None, x, scale, bias, mean, var)
    with monkeypatch.context() as m, np.errstate(all="ignore"):
        m.setattr(native, "_lib", None)
        numpy_op = batch_norm(None, x, scale, bias, mean, var)
    assert via_op.tobytes() == numpy_op.tobytes() == want.tobytes()


def _same_bits_nan_equal(a, b):
    """Same bits, except that a NaN's sign and payload are free: the product's own rule
    (core.parity.same_under_nan_policy, docs/reference-order.md)."""
    assert same_under_nan_policy(a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bmm_tiles_for_every_row_and_column_remainder(dtype):
    """The narrow column tiles and the 2-row tiles keep every chain: any (m, n) remainder."""
    from tapescope.core.ops.reference import bmm_numpy

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(21)
    for m in (1, 2, 3, 5, 6, 7, 9, 17, 34):
        for n in (1, 7, 8, 9, 15, 16, 17, 31, 33, 49, 63, 64, 65, 80, 196):
            a = _spread(rng, (2, m, 13), dtype)
            b = _spread(rng, (2, 13, n), dtype)
            assert native.bmm(a, b).tobytes() == bmm_numpy(a, b).tobytes(), (m, n)
    a = _spread(rng, (3, 9, 300), dtype)  # k-blocks continue across the narrow tiles too
    b = _spread(rng, (3, 300, 21), dtype)
    assert native.bmm(a, b).tobytes() == bmm_numpy(a, b).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bmm_epilogue_equals_the_separate_ops(dtype):
    """bias, BatchNormalization's four roundings, a residual add (either operand order) and
    relu applied per block of rows: the bits of the separate numpy ops, in order."""
    from tapescope.core.ops.reference import bmm_numpy

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(22)
    groups, mg, k, n = 3, 7, 11, 40
    m = groups * mg
    for nb in (1, 2):
        a = _spread(rng, (groups, mg, k), dtype)
        a.flat[0] = np.inf
        b = _spread(rng, (nb * groups, k, n), dtype)
        b.flat[::17] = -0.0
        bias, mean, scale, beta = (_spread(rng, (m,), dtype) for _ in range(4))
        den = np.sqrt(np.abs(_spread(rng, (m,), dtype)))
        den[2] = 0.0
        res = _spread(rng, (nb * groups, mg, n), dtype)
        res.flat[::13] = np.nan
        a_full = np.broadcast_to(a[None], (nb,) + a.shape).reshape(nb * groups, mg, k)
        prod = bmm_numpy(np.ascontiguousarray(a_full), b).reshape(nb, m, n)
        for use_bias, use_bn, res_first, relu in [(True, True, True, True),
                                                  (False, True, False, True),
                                                  (True, False, None, False),
                                                  (False, False, None, True)]:
            want = apply_epilogue(prod, bias if use_bias else None,
                                  (mean, den, scale, beta) if use_bn else None,
                                  res.reshape(nb, m, n) if res_first is not None else None,
                                  bool(res_first), relu)
            ep, keep = native.epilogue(
                dtype, m, bias=bias if use_bias else None,
                bn=(mean, den, scale, beta) if use_bn else None,
                res=res if res_first is not None else None, res_first=bool(res_first),
                relu=relu)
            got = native.bmm_ep(a_full, b, groups, ep)
            _same_bits_nan_equal(got.reshape(nb, m, n), want)
    assert native.epilogue(dtype, 5, bias=np.zeros(4, dtype)) is None  # wrong size: refused


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_direct_conv_epilogue_equals_the_separate_ops(dtype):
    from tapescope.core.ops import nn

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(23)
    x = _spread(rng, (2, 6, 9, 8), dtype)
    x.flat[::11] = np.nan
    w = _spread(rng, (6, 1, 3, 3), dtype)
    mean, scale, beta = (_spread(rng, (6,), dtype) for _ in range(3))
    den = np.abs(_spread(rng, (6,), dtype))
    padw = ((1, 1), (1, 1))
    plain = nn.conv_nd(x, w, (2, 1), padw, (1, 1), 6)
    res = _spread(rng, plain.shape, dtype)
    ch = (None, slice(None), None, None)
    with np.errstate(all="ignore"):
        want = res + ((plain - mean[ch]) / den[ch] * scale[ch] + beta[ch])
        want = np.where(want <= 0, dtype(0), want)
    ep, keep = native.epilogue(dtype, 6, bn=(mean, den, scale, beta), res=res, res_first=True,
                               relu=True)
    got = native.conv2d_one_per_group(x, w, (2, 1), (1, 1), padw, plain.shape[2:], ep)
    _same_bits_nan_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_average_pool_equals_pool_nd(dtype):
    """AveragePool's C pass (reference mode) gives pool_nd's per-tap loop's bits."""
    from tapescope.core.onnx.ops.pool import _avg_pool2d_native
    from tapescope.core.ops import nn

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(24)
    x = _spread(rng, (2, 3, 11, 9), dtype)
    x[0, 0] = -0.0  # all -0.0 windows sum to +0.0
    x[1, 1, 2, 3], x[1, 2, 4, 4], x[0, 2, 5, 5] = np.inf, np.nan, -np.inf
    for k, st, dil, padw, ceil, cip in [((3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 0, 0),
                                        ((3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 0, 1),
                                        ((2, 3), (1, 2), (1, 1), ((0, 1), (1, 0)), 1, 1),
                                        ((2, 3), (3, 2), (1, 1), ((0, 1), (1, 0)), 1, 0),
                                        ((3, 2), (1, 1), (2, 3), ((2, 0), (1, 2)), 0, 0),
                                        ((7, 7), (1, 1), (1, 1), ((0, 0), (0, 0)), 0, 0),
                                        ((1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), 0, 0)]:
        if k == (7, 7):
            x7 = x[:, :, :7, :7]
            got = _avg_pool2d_native(x7, k, st, dil, padw, ceil, cip)
            want = nn.pool_nd(x7, "avg", k, st, padw, dil, ceil, cip)
        else:
            got = _avg_pool2d_native(x, k, st, dil, padw, ceil, cip)
            want = nn.pool_nd(x, "avg", k, st, padw, dil, ceil, cip)
        _same_bits_nan_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_pools_equal_the_numpy_tap_loops(dtype, monkeypatch):
    """The ONNX MaxPool and AveragePool kernels through C (reference mode) give the bits of
    their numpy tap loops: np.maximum's choices between +0.0 and -0.0, NaN, +-inf, padding."""
    from types import SimpleNamespace

    from tapescope.core.onnx.ops.pool import avg_pool, max_pool
    from tapescope.core.onnx.reference import REFERENCE

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(25)
    x = _spread(rng, (2, 3, 11, 9), dtype)
    x[0, 0, ::2] = -0.0
    x[0, 0, 1::2] = 0.0
    x[0, 1, :, ::2] = 0.0
    x[0, 1, :, 1::2] = -0.0
    x[1, 0] = -np.inf
    x[1, 1, 2, 3], x[1, 2, 4, 4], x[0, 2, 5, 5] = np.inf, np.nan, -np.inf
    ctx = SimpleNamespace(wants=lambda i: i == 0, k=REFERENCE)
    cases = [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
             dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0], ceil_mode=1),
             dict(kernel_shape=[2, 3], strides=[3, 2], pads=[0, 1, 1, 0], ceil_mode=1,
                  count_include_pad=1),
             dict(kernel_shape=[3, 2], strides=[1, 1], pads=[2, 1, 0, 2], dilations=[2, 3]),
             dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", strides=[2, 2]),
             dict(kernel_shape=[1, 1])]
    for kw in cases:
        for fn in (max_pool, avg_pool):
            if fn is max_pool:
                kw = {k: v for k, v in kw.items() if k != "count_include_pad"}
            got = fn(ctx, x, **kw)
            with monkeypatch.context() as m, np.errstate(all="ignore"):
                m.setattr(native, "_lib", None)
                want = fn(ctx, x, **kw)
            _same_bits_nan_equal(got, want)
            zeros = (got == 0) & (want == 0)
            assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_pool_loop_shapes_equal_pool_nd(dtype):
    """Every loop shape of the C pools (lanes: global and non-overlapping windows, narrow
    outputs, a last block of fewer planes than lanes; phase: column strides 1, 2 (both column
    phases in one pass, odd and even widths, each end padded or not) and 3, dilations, ceil_mode,
    several row blocks, rows narrower than a vector; same: masked taps across rows and planes)
    gives pool_nd's bits, with -0.0 / +0.0 ties, NaN and +-inf among the taps."""
    from tapescope.core.ops import nn

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(26)
    for shape, k, st, dil, padw, ceil in [
            ((1, 19, 6, 6), (6, 6), (1, 1), (1, 1), ((0, 0), (0, 0)), 0),  # global: lanes
            ((2, 9, 8, 6), (2, 2), (2, 2), (1, 1), ((0, 0), (0, 0)), 0),  # lanes, 2x2 stride 2
            ((1, 17, 7, 9), (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 1),  # lanes, narrow
            ((1, 3, 9, 11), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 0),  # phase, stride 1
            ((1, 2, 11, 21), (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 0),  # stride 2, odd w
            ((1, 2, 10, 20), (3, 3), (2, 2), (1, 1), ((1, 1), (1, 0)), 1),  # even w, left pad
            ((1, 2, 9, 23), (3, 2), (2, 3), (2, 1), ((1, 2), (2, 1)), 1),  # stride 3, dilated
            ((1, 1, 60, 50), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 0),  # several row blocks
            ((1, 2, 5, 3), (2, 2), (1, 1), (1, 2), ((1, 1), (2, 2)), 0),  # 3 columns, dilated
            # same (strides 1, outputs the image's size): tiles across rows and planes, a
            # partial last tile, guarded first and last tiles, planes smaller than a tile
            ((2, 5, 7, 7), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 0),
            ((1, 11, 3, 3), (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1)), 0),
            ((1, 3, 6, 9), (2, 2), (1, 1), (1, 1), ((0, 1), (1, 0)), 0),  # uneven same pads
            ((1, 3, 9, 8), (3, 2), (1, 1), (2, 3), ((1, 3), (2, 1)), 0)]:  # dilated same
        x = _spread(rng, shape, dtype)
        x[0, 0, ::2, ::2] = -0.0
        x[0, 0, 1::2, 1::2] = 0.0
        x.reshape(-1)[rng.integers(0, x.size, 4)] = np.nan
        x.reshape(-1)[rng.integers(0, x.size, 4)] = np.inf
        x.reshape(-1)[rng.integers(0, x.size, 4)] = -np.inf
        for cip in (0, 1):
            cnt = nn.pool_counts(x[:1, :1], k, st, padw, dil, ceil, cip).astype(dtype)
            outs = cnt.shape[2:]
            with np.errstate(all="ignore"):
                want = nn.pool_nd(x, "avg", k, st, padw, dil, ceil, cip)
            _same_bits_nan_equal(native.pool2d("avg", x, cnt, k, st, dil, padw, outs), want)
        want = nn.pool_nd(x, "max", k, st, padw, dil, ceil)
        got = native.pool2d("max", x, None, k, st, dil, padw, want.shape[2:])
        _same_bits_nan_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_global_average_pool_through_c_equals_its_serial_sum(dtype, monkeypatch):
    """GlobalAveragePool's C pass (reference mode) gives serial_sum's bits, then the divide,
    for 1-, 2- and 3-D planes (an all -0.0 plane averages to +0.0)."""
    from types import SimpleNamespace

    from tapescope.core.onnx.ops.pool import global_avg_pool
    from tapescope.core.onnx.reference import REFERENCE

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(27)
    ctx = SimpleNamespace(wants=lambda i: i == 0, k=REFERENCE)
    for shape in [(2, 19, 7), (1, 21, 5, 6), (2, 3, 2, 3, 4)]:
        x = _spread(rng, shape, dtype)
        x[0, 0] = -0.0
        x[-1, 1].reshape(-1)[0] = np.nan
        got = global_avg_pool(ctx, x)
        with monkeypatch.context() as m, np.errstate(all="ignore"):
            m.setattr(native, "_lib", None)
            want = global_avg_pool(ctx, x)
        _same_bits_nan_equal(got, want)


def test_the_native_build_reads_only_core_files():
    """core.native compiles refmath's C twin from core/refmath/ (where gpu reads it too), never
    from gpu/: every source and header it hashes and every -I it passes lies under core/."""
    from pathlib import Path

    from tapescope.core import refmath

    core_dir = Path(native.__file__).resolve().parents[1]
    assert native.REFMATH_C == refmath.C_DIR
    for p in native._SRCS + native._HEADERS:
        assert core_dir in p.parents and p.is_file(), p
    assert {p.name for p in native._HEADERS} >= set(refmath.C_HEADERS)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_direct_conv_over_many_vector_blocks_and_wide_products(dtype):
    """Planes of several vector blocks in the direct conv (the last block partial), and
    products over several packed column blocks and k-blocks (b read through its strides too),
    hold the reference chains bit for bit."""
    from tapescope.core.ops import nn
    from tapescope.core.ops.reference import matmul

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(11)
    for xs, st, padw in [((1, 3, 21, 23), (1, 1), ((1, 1), (1, 1))),
                         ((2, 2, 19, 30), (2, 2), ((1, 0), (0, 1)))]:
        x, w = _spread(rng, xs, dtype), _spread(rng, (xs[1], 1, 3, 3), dtype)
        w.flat[0] = np.inf
        got = nn.conv_nd(x, w, st, padw, (1, 1), xs[1])
        want = nn.conv_nd(x, w, st, padw, (1, 1), xs[1], matmul=lambda a, b: matmul(a, b))
        assert got.tobytes() == want.tobytes(), xs
    for m, k, n in [(7, 300, 611), (100, 20, 530)]:
        a, b = _spread(rng, (m, k), dtype), _spread(rng, (k, n), dtype)
        want = mm_numpy(a, b).tobytes()
        assert native.mm(a, b).tobytes() == want, (m, k, n)
        assert native.mm(a, np.asfortranarray(b)).tobytes() == want, (m, k, n)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_separable_3x3_stride_2_max_pool_keeps_the_tap_fold(dtype):
    """MaxPool 3x3 stride 2 runs separable (row maxima, then across rows): pool_nd's bits, NaN
    payloads included (the first NaN of the row-major taps), the later of tied +0.0 / -0.0,
    padding on either side, ceil_mode's windows past the image, widths around a vector."""
    from tapescope.core.ops import nn

    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(27)
    u = np.dtype(f"u{np.dtype(dtype).itemsize}")
    for (h, w), padw, ceil in [((111, 111), ((0, 0), (0, 0)), 1),  # squeezenet's
                               ((112, 112), ((0, 1), (0, 1)), 0),  # inception_v2's
                               ((112, 112), ((1, 1), (1, 1)), 0),  # resnet's stem
                               ((7, 7), ((0, 0), (0, 0)), 0), ((3, 3), ((1, 1), (1, 1)), 0),
                               ((9, 33), ((2, 0), (0, 2)), 1), ((10, 34), ((1, 0), (2, 1)), 1),
                               ((6, 63), ((0, 0), (1, 1)), 0), ((5, 65), ((1, 1), (0, 0)), 1),
                               ((4, 31), ((0, 1), (0, 0)), 1), ((5, 97), ((0, 1), (1, 0)), 0),
                               ((3, 96), ((0, 0), (0, 0)), 1), ((5, 100), ((2, 0), (1, 1)), 0)]:
        x = _spread(rng, (2, 3, h, w), dtype)
        x[0, 0, ::2] = -0.0  # rows of -0.0 and +0.0: ties across rows
        x[0, 0, 1::2] = 0.0
        x[0, 1, :, ::2] = 0.0  # columns of them: ties within a row
        x[0, 1, :, 1::2] = -0.0
        x[1, 0] = -np.inf
        flat = x.reshape(-1)
        nans = rng.integers(0, x.size, 12)
        for j, i in enumerate(nans):  # NaNs of distinct payloads: which one survives shows
            flat[i] = np.array(np.nan, dtype)
            flat.view(u)[i] |= u.type(j + 1)
        flat[rng.integers(0, x.size, 4)] = np.inf
        flat[rng.integers(0, x.size, 4)] = -np.inf
        want = nn.pool_nd(x, "max", (3, 3), (2, 2), padw, (1, 1), ceil)
        got = native.pool2d("max", x, None, (3, 3), (2, 2), (1, 1), padw, want.shape[2:])
        assert got.shape == want.shape
        assert np.array_equal(got.view(u), want.view(u)), ((h, w), padw, ceil)
