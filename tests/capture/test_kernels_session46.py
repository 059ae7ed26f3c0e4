"""The kernels session 46's user scripts met with no reference or an ``unknown`` cause: ``prod``
(a DETR-style box area) and ATen's ``binary_kernel_reduce_vec``; a sigmoid on a chunk of a
wider tensor along the channels (a WaveNet's gate) placed by its recorded layout; oneDNN's 1x1
convolution weight gradient (``jit_1x1``); ``smooth_l1_loss_backward``'s two paths; a
BatchNorm1d backward of 12 channels (the AVX2 build's vectors) and of a ``torch.cat``'s
column slice (the generic path); and a 0-d ``lerp_`` (fma's 0-d shape). Each reproduces
torch's own bits here and is named by ``explain_op``; the hostile cases are refused."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture import aten_ref  # noqa: F401  (the forms registered)
from tapescope.core.capture.aten_ref_table import FORMS, NoReference
from tapescope.core.capture.explain import explain_op
from tapescope.core.capture.file import STRIDED_KW
from tapescope.core.explain_aten import aten_reduce_vec
from tapescope.core.explain_prims import fma, fma_emulated
from tests.helpers.ref_forms import diff_of, recorded_outputs

torch = pytest.importorskip("torch")

need_avx512 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512",
    reason="SLEEF's lanes and oneDNN's jit_1x1:avx512_core are written for the AVX-512 build")


_diff = diff_of


def _threads(n: int):
    class _T:
        def __enter__(self):
            self.was = torch.get_num_threads()
            torch.set_num_threads(n)

        def __exit__(self, *exc):
            torch.set_num_threads(self.was)
    return _T()


# --- prod ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, dim", [((5, 7), 1), ((5, 7), 0), ((3, 4, 5), -2),
                                        ((2, 3, 0), 2), ((4, 200), 1), ((200,), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prod_is_a_serial_product_from_one(shape, dim, dtype):
    x = (0.9 + 0.2 * np.random.default_rng(1).random(shape)).astype(dtype)
    y = FORMS["aten.prod.dim_int"]([x, dim], {})[0]
    want = np.multiply.accumulate(np.moveaxis(x, dim, -1), axis=-1)[..., -1] if x.size else \
        np.ones(np.delete(shape, dim), dtype)
    assert y.dtype == dtype and y.shape == want.shape
    assert np.array_equal(y, want)
    assert np.array_equal(FORMS["aten.prod.dim_int"]([x, dim, True], {})[0],
                          np.expand_dims(want, dim))


def test_prod_of_integers_and_bools_is_int64_wrapping_as_torchs():
    x = np.arange(1, 30, dtype=np.int32)
    got = FORMS["aten.prod.default"]([x], {})[0]
    assert got.dtype == np.int64 and int(got) == int(torch.from_numpy(x).prod())
    b = np.array([[True, False], [True, True]])
    assert FORMS["aten.prod.dim_int"]([b, 1], {})[0].tolist() == [0, 1]


def test_a_prod_asking_for_more_outputs_than_recorded_is_no_reference():
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (0, 1 << 40), (4, 4))
    with recorded_outputs([np.zeros(4, np.float32)]), pytest.raises(NoReference, match="prod"):
        FORMS["aten.prod.dim_int"]([x, 0], {})


def test_atens_prod_kernel_is_written_out_bit_for_bit():
    rng = np.random.default_rng(2)
    seen = 0
    for trial in range(120):
        nd = int(rng.integers(1, 4))
        shape = tuple(int(s) for s in rng.integers(1, 120, nd))
        if np.prod(shape) >= 32768:
            continue
        dt = (np.float32, np.float64)[trial % 2]
        x = (0.9 + 0.2 * rng.random(shape)).astype(dt)
        dim = int(rng.integers(0, nd))
        want = torch.from_numpy(x).prod(dim).numpy()
        assert np.array_equal(aten_reduce_vec(x, np.multiply, (dim,)), want), (shape, dim, dt)
        seen += not np.array_equal(FORMS["aten.prod.dim_int"]([x, dim], {})[0], want)
    assert seen > 10  # (the kernel's order is not the reference's: something was explained)


def test_explain_names_atens_prod_and_not_a_product_one_ulp_off():
    x = (0.9 + 0.2 * np.random.default_rng(3).random((6, 100))).astype(np.float32)
    rec = torch.from_numpy(x).prod(1).numpy()
    ref = FORMS["aten.prod.dim_int"]([x, 1], {})[0]
    d = _diff(ref, rec)
    assert d["n_diff"]
    got = explain_op("aten.prod.dim_int", [x, 1], {}, rec, d, threads=1)
    assert got["cause"] == "reassociation" and "prod" in got["variant"], got
    off = rec.copy()
    off.view(np.int32)[2] += 1
    assert explain_op("aten.prod.dim_int", [x, 1], {}, off, _diff(ref, off),
                      threads=1)["cause"] == "unknown"


# --- a sigmoid on a channel chunk, by the recorded layout -----------------------------------------

@need_avx512
def test_a_sigmoid_on_a_channel_chunk_is_placed_by_its_recorded_layout():
    h = torch.from_numpy(np.random.default_rng(4).standard_normal((3, 32, 39)).astype(np.float32))
    b = h.chunk(2, 1)[1]  # (3, 16, 39), strides (1248, 39, 1): rows of 624 apart
    rec = torch.sigmoid(b).numpy()
    x = np.ascontiguousarray(b.numpy())
    ref = FORMS["aten.sigmoid.default"]([x], {})[0]
    d = _diff(ref, rec)
    assert d["n_diff"]
    kw = {STRIDED_KW: ((1248, 39, 1), 624)}
    got = explain_op("aten.sigmoid.default", [x], kw, rec, d, threads=1)
    assert got["cause"] == "libm" and "rows of 624" in got["variant"]


@need_avx512
def test_a_silu_backward_on_a_last_dim_chunk_runs_the_scalar_lambda_on_each_short_row():
    xz = torch.from_numpy(np.random.default_rng(6).standard_normal((3, 11, 32)).astype(
        np.float32))
    z = xz[..., 16:]  # (a Mamba gate: rows of 16, shorter than a register pair)
    g = torch.from_numpy(np.random.default_rng(7).standard_normal((3, 11, 16)).astype(
        np.float32))
    rec = torch.ops.aten.silu_backward(g, z).numpy()
    args = [g.numpy(), np.ascontiguousarray(z.numpy())]
    ref = FORMS["aten.silu_backward.default"](args, {})[0]
    d = _diff(ref, rec)
    assert d["n_diff"]
    got = explain_op("aten.silu_backward.default", args, {}, rec, d, threads=1)
    assert got["cause"] == "libm" and "rows of 16" in got["variant"], got


# --- oneDNN's 1x1 convolution weight gradient -----------------------------------------------------

def _conv1x1_backward(mb: int, ci: int, co: int, length: int, threads: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(mb, ci, length, generator=g)
    w = torch.randn(co, ci, 1, generator=g)
    gy = torch.randn(mb, co, length, generator=g)
    with _threads(threads):
        backend = torch._C._select_conv_backend(x, w, None, [1], [0], [1], False, [0], 1, None)
        out = torch.ops.aten.convolution_backward(gy, x, w, [co], [1], [0], [1], False, [0], 1,
                                                  [True, True, True])
    args = [gy.numpy(), x.numpy(), w.numpy(), [co], [1], [0], [1], False, [0], 1,
            [True, True, True]]
    return str(backend), args, out[1].numpy()


@need_avx512
def test_onednns_1x1_weight_gradient_cuts_each_images_pixels_in_blocks():
    backend, args, rec = _conv1x1_backward(3, 16, 16, 39, 2)
    if not backend.endswith("Mkldnn"):
        pytest.skip(f"torch runs this convolution by {backend} here, not oneDNN")
    ref = FORMS["aten.convolution_backward.default"](args, {})[1]
    d = _diff(ref, rec)
    assert d["n_diff"]
    got = explain_op("aten.convolution_backward.default", args, {}, rec, d, output=1, threads=2)
    assert got["cause"] == "fma" and "jit_1x1" in got["variant"]
    assert "blocks of 13 pixels, 2 threads" in got["variant"]  # (39 = 3 x 13: best_divider)
    off = rec.copy()
    off.view(np.int32)[0, 0, 0] += 1
    assert explain_op("aten.convolution_backward.default", args, {}, off, _diff(ref, off),
                      output=1, threads=2)["cause"] == "unknown"


# --- smooth_l1_loss_backward ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [9, 40, 70])
def test_smooth_l1_backward_is_atens_two_paths(n):
    rng = np.random.default_rng(n)
    x = (0.2 * rng.standard_normal(n)).astype(np.float32)
    y = (0.2 * rng.standard_normal(n)).astype(np.float32)
    g = np.asarray(np.float32(0.7))
    with _threads(1):
        rec = torch.ops.aten.smooth_l1_loss_backward(torch.from_numpy(g), torch.from_numpy(x),
                                                     torch.from_numpy(y), 1, 0.3).numpy()
    args = [g, x, y, 1, 0.3]
    ref = FORMS["aten.smooth_l1_loss_backward.default"](args, {})[0]
    d = _diff(ref, rec)
    if not d["n_diff"]:
        pytest.fail("the reference met torch's bits: no order tested")
    got = explain_op("aten.smooth_l1_loss_backward.default", args, {}, rec, d, threads=1)
    assert got["cause"] == "reassociation" and "smooth_l1_loss backward" in got["variant"], got


# --- batch_norm backward: 12 channels, and a column slice's gradient ------------------------------

def _bn_backward(x: np.ndarray, dy: torch.Tensor, threads: int):
    c = x.shape[1]
    w = torch.linspace(0.5, 1.5, c)
    xt = torch.from_numpy(x)
    with _threads(threads):
        y = torch.ops.aten.native_batch_norm(xt, w, torch.zeros(c), torch.zeros(c),
                                             torch.ones(c), True, 0.1, 1e-5)
        out = torch.ops.aten.native_batch_norm_backward(dy, xt, w, torch.zeros(c),
                                                        torch.ones(c), y[1], y[2], True, 1e-5,
                                                        [True, True, True])
    args = [np.ascontiguousarray(dy.numpy()), x, w.numpy(), None, None, y[1].numpy(),
            y[2].numpy(), True, 1e-5, [True, True, True]]
    return args, out[0].numpy()


@pytest.mark.parametrize("rows", [29, 34])
def test_batch_norm_backward_of_12_channels_is_explained(rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 12)).astype(np.float32)
    args, rec = _bn_backward(x, torch.from_numpy(rng.standard_normal((rows, 12)).astype(
        np.float32)), 1)
    ref = FORMS["aten.native_batch_norm_backward.default"](args, {})[0]
    d = _diff(ref, rec)
    assert d["n_diff"]
    got = explain_op("aten.native_batch_norm_backward.default", args, {}, rec, d, threads=1)
    assert got["cause"] == "reassociation", got


def test_batch_norm_backward_of_a_column_slice_takes_the_generic_path():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    wide = torch.from_numpy(rng.standard_normal((9, 12)).astype(np.float32))
    found = 0
    for seed in range(6):  # (a few draws: one may meet the reference's bits)
        wide = torch.from_numpy(np.random.default_rng(seed).standard_normal((9, 12)).astype(
            np.float32))
        args, rec = _bn_backward(x, wide[:, 7:], 2)
        ref = FORMS["aten.native_batch_norm_backward.default"](args, {})[0]
        d = _diff(ref, rec)
        if not d["n_diff"]:
            continue
        got = explain_op("aten.native_batch_norm_backward.default", args, {}, rec, d, threads=2)
        assert got["cause"] == "reassociation" and "generic path" in got["variant"], got
        found += 1
    assert found


# --- fma of 0-d operands (a 0-d lerp_: CLIP's logit scale's Adam moment) --------------------------

def test_fma_keeps_a_0d_shape_and_a_0d_lerp_is_explained():
    a, b, c = np.float32(0.1), np.float32(1.0616), np.asarray(np.float32(0.165))
    assert np.shape(fma(a, b, c)) == () and np.shape(fma_emulated(a, b, c)) == ()
    assert np.shape(fma_emulated(np.float64(0.1), np.float64(2), np.float64(1))) == ()
    s, e = np.asarray(np.float32(0.16541018)), np.asarray(np.float32(1.2270392))
    rec = torch.from_numpy(s.copy()).lerp_(torch.from_numpy(e), 0.09999999999999998).numpy()
    args = [s, e, 0.09999999999999998]
    ref = FORMS["aten.lerp.Scalar"](args, {})[0]  # (the in-place op's form is its own)
    d = _diff(ref, rec)
    assert d["n_diff"]  # (the reference's mul and add rounded apart: one ulp off here)
    assert explain_op("aten.lerp_.Scalar", args, {}, rec, d)["cause"] == "fma"


# --- oneDNN's convolutions: a first layer of one channel, and 3-D ---------------------------------

def _conv_case(x_shape, w_shape, pad, threads, mask, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(x_shape, generator=g), torch.randn(w_shape, generator=g)
    nd = len(x_shape) - 2
    with _threads(threads):
        y = torch.ops.aten.convolution(x, w, None, [1] * nd, [pad] * nd, [1] * nd, False,
                                       [0] * nd, 1)
        gy = torch.randn(y.shape, generator=g)
        out = torch.ops.aten.convolution_backward(gy, x, w, [w_shape[0]], [1] * nd, [pad] * nd,
                                                  [1] * nd, False, [0] * nd, 1, mask)
    args = [gy.numpy(), x.numpy(), w.numpy(), [w_shape[0]], [1] * nd, [pad] * nd, [1] * nd,
            False, [0] * nd, 1, mask]
    return args, [o.numpy() for o in out if o is not None]


def _explained(op: str, args: list, recs: list, threads: int, words: str) -> None:
    refs = FORMS[op](args, {})
    checked = 0
    for o, (ref, rec) in enumerate(zip(refs, recs, strict=True)):
        d = _diff(ref, rec)
        if not d["n_diff"]:
            continue
        got = explain_op(op, args, {}, rec, d, output=o, threads=threads)
        assert got["cause"] == "fma" and words in got["variant"], (o, got)
        off = rec.copy()
        off.reshape(-1).view(np.int32)[0] += 1
        assert explain_op(op, args, {}, off, _diff(ref, off), output=o,
                          threads=threads)["cause"] == "unknown"
        checked += 1
    assert checked


@need_avx512
# (lines, not images; 3 images of 8 lines or 5 of 7 are split by images, oneDNN's heuristic
# not written out: the runs variant names those)
@pytest.mark.parametrize("n, size", [(3, 16), (3, 20)])
def test_a_one_channel_convolutions_gradients_cut_its_lines_among_the_threads(n, size):
    args, recs = _conv_case((n, 1, size, size), (16, 1, 5, 5), 0, 2, [False, True, True])
    _explained("aten.convolution_backward.default", args, recs, 2, "lines cut among 2 threads")


@need_avx512
@pytest.mark.parametrize("ci, co", [(1, 8), (8, 16), (24, 16), (40, 32)])
def test_a_3d_convolution_is_onednns_direct_order(ci, co):
    g = torch.Generator().manual_seed(ci)
    x, w, b = (torch.randn(s, generator=g) for s in ((2, ci, 5, 5, 5), (co, ci, 3, 3, 3), (co,)))
    rec = torch.nn.functional.conv3d(x, w, b, padding=1).numpy()
    args = [x.numpy(), w.numpy(), b.numpy(), [1, 1, 1], [1, 1, 1], [1, 1, 1], False,
            [0, 0, 0], 1]
    ref = FORMS["aten.convolution.default"](args, {})[0]
    d = _diff(ref, rec)
    assert d["n_diff"]
    got = explain_op("aten.convolution.default", args, {}, rec, d, threads=1)
    assert got["cause"] == "fma" and "3-D convolution" in got["variant"], got


@need_avx512
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("ci, co, n, size", [(1, 8, 3, 5), (3, 16, 3, 5), (8, 16, 2, 4),
                                             (16, 32, 3, 4)])
def test_a_3d_convolutions_gradients_are_onednns(ci, co, n, size, threads):
    args, recs = _conv_case((n, ci, size, size, size), (co, ci, 3, 3, 3), 1, threads,
                            [ci > 1, True, True])
    _explained("aten.convolution_backward.default", args, recs, threads, "3-D convolution")


# --- window functions (an STFT loss's hann_window) --------------------------------------------

@pytest.mark.parametrize("op, fn", [("aten.hann_window.periodic", "hann_window"),
                                    ("aten.hamming_window.periodic", "hamming_window")])
@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("dtype", ["torch.float32", "torch.float64"])
def test_a_window_is_correctly_rounded_and_atens_steps_explain_torchs(op, fn, periodic, dtype):
    import mpmath

    n = 1024  # (long enough that numpy's cos, not torch's, misses some: VML's is torch's)
    args, kw = [n, periodic], {"dtype": dtype}
    ref = FORMS[op](args, kw)[0]
    alpha, beta = (0.5, 0.5) if fn == "hann_window" else (0.54, 0.46)
    m = n + 1 if periodic else n
    with mpmath.workprec(200):
        exact = [mpmath.mpf(alpha) - mpmath.mpf(beta) * mpmath.cos(2 * mpmath.pi * k / (m - 1))
                 for k in range(n)]
    # (each 200-bit value rounded to a double, then to the dtype: correctly rounded for these
    # 1,024, none near a float32 midpoint)
    want = np.array([float(v) for v in exact], np.float64).astype(ref.dtype)
    assert ref.dtype == np.dtype(dtype[6:])
    assert np.array_equal(ref, want)
    rec = getattr(torch, fn)(n, periodic, dtype=getattr(torch, dtype[6:])).numpy()
    d = _diff(ref, rec)
    assert d["n_diff"]
    got = explain_op(op, args, kw, rec, d)
    assert got["cause"] == "libm" and "VML's cos" in got["variant"], got


def test_a_window_past_the_budget_or_of_a_bad_length_is_no_reference():
    with pytest.raises(NoReference, match="budget"):
        FORMS["aten.hann_window.default"]([1 << 20], {})
    for bad in (-1, 2.5, True):
        with pytest.raises(NoReference, match="window length"):
            FORMS["aten.hann_window.default"]([bad], {})
    assert FORMS["aten.hann_window.default"]([0], {})[0].shape == (0,)
    assert FORMS["aten.hann_window.default"]([1], {})[0].tolist() == [1.0]


# --- the modulus of a complex value (an STFT's magnitude) -----------------------------------------

@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_abs_is_the_exact_modulus_correctly_rounded_and_sgn_divides_by_it(dtype):
    import mpmath

    from tapescope.core.capture.aten_ref import reference

    rng = np.random.default_rng(9)
    z = (rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300)
         + 1j * rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300)).astype(dtype)
    z[:5] = [0, complex(np.inf, 1), complex(np.nan, 0), complex(3e38, 3e38), complex(-0.0, 2)]
    got = reference("aten.abs.default", [z], {})[0]
    target = np.float32 if dtype == np.complex64 else np.float64
    assert got.dtype == target
    assert got[0] == 0 and np.isinf(got[1]) and np.isnan(got[2]) and got[4] == 2
    bits = 24 if target == np.float32 else 53
    for k in range(3, 300):  # (the exact modulus, rounded once to the component type; 3e38
        with mpmath.workprec(bits + 80), np.errstate(over="ignore"):  # + 3e38j: inf in float32
            m = mpmath.sqrt(mpmath.mpf(float(z[k].real)) ** 2 + mpmath.mpf(float(z[k].imag)) ** 2)
            want = target(float(m)) if target == np.float64 else np.float32(
                float(mpmath.nint(m * 2 ** (bits - 1 - int(mpmath.floor(mpmath.log(m, 2)))))
                      / 2 ** (bits - 1 - int(mpmath.floor(mpmath.log(m, 2))))))
        assert got[k] == want, (k, z[k], got[k], want)
    s = reference("aten.sgn.default", [z], {})[0]
    assert s.dtype == dtype and s[0] == 0
    ok = got[5:] > 0
    assert np.array_equal(s[5:][ok].real, (z[5:][ok].real / got[5:][ok]).astype(target))
    assert np.array_equal(s[5:][ok].imag, (z[5:][ok].imag / got[5:][ok]).astype(target))


def test_complex128_abs_past_the_budget_is_no_reference():
    from tapescope.core.capture.aten_ref import reference

    z = np.ones(1 << 15, np.complex128)
    with pytest.raises(NoReference, match="budget"):
        reference("aten.abs.default", [z], {})
