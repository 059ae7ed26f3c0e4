"""core/explain_aten.py: PyTorch's CPU kernels written out in numpy reproduce torch's own bits
here (torch 2.13 CPU, AVX-512), and core.explain names them (issue 44)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tapescope.core import explain_aten as A
from tapescope.core.explain import explain, explain_grad

torch = pytest.importorskip("torch")

DTYPES = [np.float64, np.float32]


def _bits_equal(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _avx512():
    return torch.backends.cpu.get_cpu_capability() == "AVX512"


@pytest.fixture(autouse=True)
def _need_avx512():
    if not _avx512():
        pytest.skip("these are ATen's AVX-512 kernels; this CPU's torch runs another build")


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [3, 8, 16, 24, 37])
def test_softmax_is_torch_softmax(dt, n):
    x = (np.random.default_rng(n).standard_normal((64, n)) * 4).astype(dt)
    got = torch.softmax(torch.from_numpy(x), -1).numpy()
    assert _bits_equal(A.ATEN_FORWARD["softmax"][0]([x], {"axis": -1}), got)


@pytest.mark.parametrize("dt", DTYPES)
def test_sleef_exp_is_softmax_exp(dt):
    """A one-element row's softmax is exp(0) * (1/1); a two-element row [0, x] (x <= 0) gives
    exp(x) * (1 / (1 + exp(x))): SLEEF's exp is what puts torch's bits there, also for
    arguments far down to the underflow (subnormal results)."""
    x = -np.concatenate([np.linspace(0, 20, 500), [700.0, 705.5, 708.3]] if dt == np.float64
                        else [np.linspace(0, 20, 500), [87.0, 95.5, 103.0]]).astype(dt)
    rows = np.stack([np.zeros_like(x), x], axis=1)
    got = torch.softmax(torch.from_numpy(rows), -1).numpy()
    assert _bits_equal(A.ATEN_FORWARD["softmax"][0]([rows], {"axis": -1}), got)
    e = A.sleef_exp(x)
    assert not _bits_equal(e, np.exp(x)), "SLEEF's exp equal to numpy's: nothing modelled"


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [40, 64 + 5])
def test_swiglu_forward_and_backward_are_torch(dt, n):
    """silu(a) * u and its autograd, the vector part and the scalar tail (n not a multiple of
    two registers) included."""
    rng = np.random.default_rng(n)
    a, u, g = ((rng.standard_normal((3, n)) * 4).astype(dt) for _ in range(3))
    ta = torch.from_numpy(a.copy()).requires_grad_()
    tu = torch.from_numpy(u.copy()).requires_grad_()
    y = torch.nn.functional.silu(ta) * tu
    y.backward(torch.from_numpy(g))
    assert _bits_equal(A.ATEN_FORWARD["swiglu"][0]([a, u], {}), y.detach().numpy())
    ga, gu = A.ATEN_BACKWARD["swiglu"][0](None, g, [a, u], None, {}, [True, True])
    assert _bits_equal(ga, ta.grad.numpy()) and _bits_equal(gu, tu.grad.numpy())


@pytest.mark.parametrize("dt", DTYPES)
def test_explain_names_torch_softmax_and_swiglu(dt):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 8, 16)) * 3).astype(dt)
    node = SimpleNamespace(op="softmax", attrs={"axis": -1}, shape=x.shape)
    c = explain(node, [x], torch.softmax(torch.from_numpy(x), -1).numpy())
    assert c.cause == "libm" and c.variant == A.ATEN_FORWARD["softmax"][1], c
    a, u = ((rng.standard_normal((16, 48)) * 3).astype(dt) for _ in range(2))
    node = SimpleNamespace(op="swiglu", attrs={}, shape=a.shape)
    y = (torch.nn.functional.silu(torch.from_numpy(a)) * torch.from_numpy(u)).numpy()
    c = explain(node, [a, u], y)
    assert c.cause == "libm" and c.variant == A.ATEN_FORWARD["swiglu"][1], c


def test_explain_grad_names_torch_silu_backward():
    """A gradient made by a swiglu consumer: its rule rerun as ATen's silu backward."""
    rng = np.random.default_rng(3)
    a, u, g = (rng.standard_normal((8, 40)) for _ in range(3))
    ta = torch.from_numpy(a.copy()).requires_grad_()
    (torch.nn.functional.silu(ta) * torch.from_numpy(u)).backward(torch.from_numpy(g))

    def recompute(math=None, rules=None):
        from tapescope.core import mathlib
        from tapescope.core.optable.registry import REGISTRY
        rule = rules("swiglu") if rules else REGISTRY["swiglu"].backward
        return rule(math or mathlib.get("refmath"), g, [a, u], None, {}, [True, False])[0]

    c = explain_grad(recompute, ["swiglu"], ta.grad.numpy())
    assert c.cause == "libm" and "silu backward" in c.variant, c


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape,axis", [((50, 301), -1), ((50, 5), -1), ((4, 4, 16), -1),
                                        ((24, 16), 0), ((3, 8, 16), (0, 1)), ((24, 64), 0),
                                        ((7, 40), 0), ((130, 37), -1), ((16, 7), 0),
                                        ((301, 3), 0), ((2000, 6), 0), ((1000, 1), 0),
                                        ((37, 4), 0)])
def test_aten_sum_is_torch_sum(dt, shape, axis):
    """ATen's inner (trailing axes) and outer (leading axes) sum paths, with leftovers; an
    outer sum of fewer columns than a vector (scalar_outer_sum: groups of 4 columns by
    multi_row_sum, the rest by row_sum: a Linear(d, 7)'s bias gradient), one column the
    inner sum."""
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(dt)
    assert _bits_equal(A.aten_sum(x, axis), torch.sum(torch.from_numpy(x), axis).numpy())


def test_aten_sum_refuses_what_it_does_not_model():
    with pytest.raises(ValueError):
        A.aten_sum(np.ones((3, 4, 5, 6)), (1, 3))  # two runs of axes apart
    with pytest.raises(ValueError):  # (a middle run past the grain at two threads)
        A.aten_sum(np.ones((3, 40000, 5)), 1, threads=2)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(2, 12, 16), (5, 40), (3, 7)])
def test_rms_norm_backward_is_torch_autograd(dt, shape):
    rng = np.random.default_rng(sum(shape))
    d = shape[-1]
    x, g = (rng.standard_normal(shape).astype(dt) for _ in range(2))
    w = (rng.random(d) + 0.5).astype(dt)
    tx = torch.from_numpy(x.copy()).requires_grad_()
    tw = torch.from_numpy(w.copy()).requires_grad_()
    torch.nn.functional.rms_norm(tx, (d,), tw, 1e-5).backward(torch.from_numpy(g))
    gx, gw = A.ATEN_BACKWARD["rms_norm"][0](None, g, [x, w], None, {"eps": 1e-5},
                                            [True, True])
    assert _bits_equal(gx.total(), tx.grad.numpy())
    if not (dt == np.float32 and d < 8):  # the float32 outer sum below one vector: not written
        assert _bits_equal(gw, tw.grad.numpy())


def test_a_second_search_of_the_same_op_and_shape_tries_the_last_match_first(monkeypatch):
    """The search's memory (core.explain._HINTS): the variant that reproduced a softmax of this
    shape is tried first next time, so the second search runs one variant, not the whole
    list before it, and names the same cause."""
    import tapescope.core.explain as E

    monkeypatch.setattr(E, "_HINTS", {})
    runs = []
    real = E.compare_arrays
    monkeypatch.setattr(E, "compare_arrays", lambda a, b: runs.append(1) or real(a, b))
    rng = np.random.default_rng(12)
    node = SimpleNamespace(op="softmax", attrs={"axis": -1}, shape=(6, 16))
    causes = []
    for _ in range(2):
        x = rng.standard_normal((6, 16)) * 3
        runs.clear()
        causes.append(explain(node, [x], torch.softmax(torch.from_numpy(x), -1).numpy()))
        causes[-1] = (causes[-1], len(runs))
    (c1, n1), (c2, n2) = causes
    assert c1.cause == c2.cause == "libm" and c1.variant == c2.variant
    assert n1 > 2 and n2 == 2, (n1, n2)  # the reference's own diff, then the hinted variant


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("c", [3, 8, 16, 40, 100])
def test_log_softmax_with_sleef_log_is_torch(dt, c):
    """SLEEF's log of the row sums is what puts torch's log_softmax bits there (glibc's log
    and refmath's miss some rows in float32, numpy's many)."""
    x = (np.random.default_rng(c).standard_normal((500, c)) * 2).astype(dt)
    got = torch.log_softmax(torch.from_numpy(x), -1).numpy()
    assert _bits_equal(A._log_softmax(x), got)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(32, 64), (2, 8, 13), (4, 100)])
def test_cross_entropy_backward_is_torch_autograd(dt, shape):
    rng = np.random.default_rng(sum(shape))
    c = shape[-1]
    x = (rng.standard_normal(shape) * 2).astype(dt)
    t = rng.integers(0, c, shape[:-1])
    tx = torch.from_numpy(x.copy()).requires_grad_()
    torch.nn.functional.cross_entropy(tx.reshape(-1, c), torch.from_numpy(t.reshape(-1))).backward()
    gx, _ = A.ATEN_BACKWARD["cross_entropy"][0](None, np.array(1.0, dtype=dt),
                                                [x, t.astype(dt)], None, {}, [True, False])
    assert _bits_equal(gx, tx.grad.numpy())


@pytest.mark.parametrize("dt", DTYPES)
def test_the_fast_contracted_product_is_fmas_bits(dt):
    """core.explain._mm_fma (operands split once) against the chain of fma() calls it
    replaces: equal bits, over magnitudes that make the error terms matter, subnormal
    products and an overflowing chain (redone by fma() itself)."""
    from tapescope.core.explain import _mm_fma, _mm_fma_plain

    rng = np.random.default_rng(5)
    scale = rng.choice([1e-3, 1.0, 1e3], (9, 40))
    a = (rng.standard_normal((9, 40)) * scale).astype(dt)
    b = rng.standard_normal((40, 11)).astype(dt)
    assert _bits_equal(_mm_fma(a, b), _mm_fma_plain(a, b))
    tiny = np.float64(1e-160) if dt == np.float64 else np.float32(1e-22)
    a, b = np.full((3, 4), tiny, dt), np.full((4, 2), tiny, dt)
    assert _bits_equal(_mm_fma(a, b), _mm_fma_plain(a, b))
    big = np.finfo(dt).max / 4
    a, b = np.full((2, 3), big, dt), np.full((3, 2), 8, dt)
    assert _bits_equal(_mm_fma(a, b), _mm_fma_plain(a, b))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [50, 1000, 1037])
def test_sigmoid_is_torch_sigmoid(dt, n):
    x = (np.random.default_rng(n).standard_normal(n) * 4).astype(dt)
    got = torch.sigmoid(torch.from_numpy(x)).numpy()
    assert _bits_equal(A.ATEN_FORWARD["sigmoid"][0]([x], {}), got)
    assert not _bits_equal(1 / (1 + np.exp(-x)), got)  # numpy's exp is not it


def test_a_sqrt_node_is_named_mkls():
    from tapescope.core.explain import _vml_lib

    if _vml_lib() is None:
        pytest.skip("no MKL here")
    for dt in DTYPES:
        x = (np.random.default_rng(1).random(2000) * 10).astype(dt)
        node = SimpleNamespace(op="sqrt", attrs={}, shape=x.shape)
        c = explain(node, [x], torch.sqrt(torch.from_numpy(x)).numpy())
        assert c.cause == "libm" and "MKL VML" in c.variant, c


@pytest.mark.parametrize("n", [50, 1037, 20000])
def test_tanh_is_mkls_vector_math(n):
    """PyTorch's CPU tanh is MKL VML's (vmsTanh / vmdTanh, HA mode), not SLEEF's: called, it
    is torch.tanh bit for bit at every length (tails included), in both float types; a tanh
    node the torch candidate ran is named for it, and a captured tanh_ (a GRU's, in place)."""
    from tapescope.core.capture.explain import explain_op
    from tapescope.core.explain import _vml_lib, vml_tanh

    if _vml_lib() is None:
        pytest.skip("no MKL here")
    for dt in DTYPES:
        x = (np.random.default_rng(n).standard_normal(n) * 3).astype(dt)
        want = torch.tanh(torch.from_numpy(x)).numpy()
        assert _bits_equal(vml_tanh(x), want)
        ref = np.tanh(x.astype(np.float64)).astype(dt)
        d = {"n_diff": int(np.sum(ref != want)), "max_ulp": 1, "n_signed_zero": 0, "n_nan": 0}
        if d["n_diff"]:
            got = explain_op("aten.tanh_.default", [x], {}, want, d)
            assert got["cause"] == "libm" and "MKL VML's tanh" in got["variant"], got
            off = want.copy()
            off[0] = np.nextafter(off[0], np.inf, dtype=dt)
            assert explain_op("aten.tanh_.default", [x], {}, off, d)["cause"] == "unknown"
        node = SimpleNamespace(op="tanh", attrs={}, shape=x.shape)
        c = explain(node, [x], want)
        assert c.cause == "libm" and "MKL VML's tanh" in c.variant, c


@pytest.mark.parametrize("dt", DTYPES)
def test_aten_sum_on_several_threads_cuts_the_outputs_as_torch_does(dt):
    """ATen's parallel_dim_reduction: a sum over leading dimensions of 32,768 elements or
    more, at T threads, cuts its contiguous outputs in parallel_for's chunks, each end rounded
    down to 128 bytes, each part summed on its own (a (1,024, 37) bias gradient at 8 threads:
    columns 0-31 and 32-36); every case is torch's bits, and (float32) enough of them differ
    from one thread's for the cut to show."""
    assert A.sum_column_parts(37, 8, 4) == [(0, 32), (32, 37)]
    assert A.sum_column_parts(37, 2, 4) == [(0, 37)]
    assert A.sum_column_parts(37, 8, 8) == [(0, 16), (16, 32), (32, 37)]
    before = torch.get_num_threads()
    cut = 0
    try:
        for shape, axis in (((1024, 37), 0), ((2048, 37), 0), ((700, 70), 0),
                            ((64, 16, 37), (0, 1)), ((1000, 100), 0), ((40, 30), 0),
                            ((800, 37), 0)):  # (29,600 elements: one thread's, any count)
            x = np.random.default_rng(shape[0]).standard_normal(shape).astype(dt)
            for threads in (2, 3, 8, 16):
                torch.set_num_threads(threads)
                want = torch.sum(torch.from_numpy(x), axis).numpy()
                torch.set_num_threads(1)
                assert _bits_equal(A.aten_sum(x, axis, threads=threads), want), \
                    (shape, threads)
                cut += not _bits_equal(A.aten_sum(x, axis), want)
    finally:
        torch.set_num_threads(before)
    assert cut >= 4 or dt is np.float64, cut  # (doubles: 16 a cut, whole groups alike)
