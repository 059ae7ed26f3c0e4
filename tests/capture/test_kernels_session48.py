"""The kernels session 48's user scripts met with an ``unknown`` cause on an AMD EPYC (Zen 4):
oneDNN's 1x1 convolution (``jit_1x1``) sums its channels in reduce blocks whose size follows the
CPU's cache sizes (80 channels of 96 at 16x16 pixels there, one block on the Intel Xeon of
sessions 41-47), forward and input gradient, the block fitted on a sample; MKL's float64
products on an AMD CPU (a PINN's float64 ``nn.Linear`` layers: ``mkl_dgemm_amd``); oneDNN's
gemm convolution's input gradient (a WaveNet's conv1d of dilation 16 and 32). Each order
reproduces torch's bits and is named by ``explain_op``; the hostile cases are refused."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture import aten_ref  # noqa: F401  (the forms registered)
from tapescope.core.capture.aten_ref_table import FORMS
from tapescope.core.capture.explain import (
    _chain_onto,
    _conv_input_grad_gemm,
    _onednn_1x1_dgrad,
    _onednn_1x1_fwd,
    explain_op,
)
from tapescope.core.explain_aten import mkl_dgemm_amd
from tapescope.core.explain_prims import fma
from tests.helpers.mkl import need_amd_mkl
from tests.helpers.ref_forms import diff_of

torch = pytest.importorskip("torch")

need_amd_mkl = need_amd_mkl()
need_avx512 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512",
    reason="oneDNN's jit_1x1:avx512_core is written for the AVX-512 build")


_diff = diff_of


def _blocked(wm: np.ndarray, xm: np.ndarray, start: np.ndarray, blk: int) -> np.ndarray:
    """``wm @ xm`` over k in blocks of ``blk``: the first block's fma chain from ``start``,
    the others' from zero, added in order (written here from the docstring, one ``fma`` a
    step, not the native chain the fit runs)."""
    total = None
    for k0 in range(0, wm.shape[1], blk):
        acc = start.copy() if k0 == 0 else np.zeros_like(start)
        for k in range(k0, min(k0 + blk, wm.shape[1])):
            acc = fma(wm[:, k:k + 1], xm[k:k + 1, :], acc)
        total = acc if total is None else (total + acc).astype(np.float32)
    return total


def _conv_args(x, w, b, stride=(1, 1), pad=(0, 0), transposed=False, groups=1):
    return [x, w, b, list(stride), list(pad), [1, 1], transposed, [0, 0], groups]


def _forward_case(blk: int, bias: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 96, 5, 6)).astype(np.float32)
    w = rng.standard_normal((24, 96, 1, 1)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32) if bias else None
    rec = np.empty((2, 24, 5, 6), np.float32)
    for i in range(2):
        start = np.zeros((24, 30), np.float32) if b is None else \
            np.broadcast_to(b.reshape(-1, 1), (24, 30)).astype(np.float32)
        rec[i] = _blocked(w.reshape(24, 96), x[i].reshape(96, 30), start, blk).reshape(24, 5, 6)
    return _conv_args(x, w, b), rec


def test_the_blocked_chain_is_what_the_helper_chains():
    """The fit's chain helper (``_chain_onto``: native fma) against the float64 form above."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 40)).astype(np.float32), \
        rng.standard_normal((40, 7)).astype(np.float32)
    acc = rng.standard_normal((4, 7)).astype(np.float32)
    assert np.array_equal(_chain_onto(acc, a, b), _blocked(a, b, acc, 40))


@pytest.mark.parametrize("blk, bias", [(80, True), (32, True), (48, False), (96, True)])
def test_a_1x1_forward_in_reduce_blocks_is_fitted_and_named(blk, bias):
    args, rec = _forward_case(blk, bias)
    y, words = _onednn_1x1_fwd(args, {}, rec)
    assert np.array_equal(y.view(np.uint32), rec.view(np.uint32))
    assert words == (f"{blk}-channel reduce blocks" if blk < 96 else "one block")
    ref = FORMS["aten.convolution.default"](args, {})[0]
    d = _diff(ref, rec)
    assert d["n_diff"]  # (the reference's order is not oneDNN's)
    got = explain_op("aten.convolution.default", args, {}, rec, d)
    # (one block is also the direct order's own "one block" chain: either name is right)
    assert got["cause"] != "unknown" and (blk == 96 or got["variant"].endswith(words)), got


def test_a_1x1_forward_one_ulp_off_is_not_fitted():
    args, rec = _forward_case(80, True)
    off = rec.copy()
    off.view(np.int32)[1, 3, 4, 5] += 1  # (outside the fitted sample: the whole is checked)
    ref = FORMS["aten.convolution.default"](args, {})[0]
    got = explain_op("aten.convolution.default", args, {}, off, _diff(ref, off))
    assert got["cause"] == "unknown"
    off = rec.copy()
    off.view(np.int32)[0, 0, 0, 0] += 1  # (inside it: no block fits)
    with pytest.raises(ValueError, match="no block size"):
        _onednn_1x1_fwd(args, {}, off)


@pytest.mark.parametrize("change, says", [
    ({"pad": (1, 1)}, "no padding"), ({"groups": 2}, "one group"),
    ({"transposed": True}, "one group"), ({"dtype": np.float64}, "float32")])
def test_a_1x1_forward_of_another_geometry_is_refused(change, says):
    args, rec = _forward_case(80, True)
    x, w, b = args[:3]
    if "dtype" in change:
        x, w = x.astype(change["dtype"]), w.astype(change["dtype"])
    kw = {k: v for k, v in change.items() if k != "dtype"}
    with pytest.raises(ValueError, match=says):
        _onednn_1x1_fwd(_conv_args(x, w, b, **kw), {}, rec)


def _dgrad_case(blk: int, stride: int):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 20, 6, 6)).astype(np.float32)
    w = rng.standard_normal((96, 20, 1, 1)).astype(np.float32)
    oh = -(-6 // stride)
    g = rng.standard_normal((2, 96, oh, oh)).astype(np.float32)
    dx = np.zeros_like(x)
    for i in range(2):
        part = _blocked(np.ascontiguousarray(w.reshape(96, 20).T), g[i].reshape(96, -1),
                        np.zeros((20, oh * oh), np.float32), blk)
        dx[i][:, ::stride, ::stride] = part.reshape(20, oh, oh)
    args = [g, x, w, [96], [stride, stride], [0, 0], [1, 1], False, [0, 0], 1,
            [True, True, False]]
    return args, dx


@pytest.mark.parametrize("blk, stride", [(80, 1), (32, 2), (96, 1)])
def test_a_1x1_input_gradient_in_reduce_blocks_is_fitted_and_named(blk, stride):
    args, dx = _dgrad_case(blk, stride)
    outs, words = _onednn_1x1_dgrad(args, {}, dx)
    assert np.array_equal(outs[0].view(np.uint32), dx.view(np.uint32)) and outs[1] is None
    assert words == (f"{blk}-channel reduce blocks" if blk < 96 else "one block")
    ref = FORMS["aten.convolution_backward.default"](args, {})[0]
    d = _diff(ref, dx)
    if d["n_diff"]:
        got = explain_op("aten.convolution_backward.default", args, {}, dx, d, output=0)
        assert got["cause"] != "unknown" and (blk == 96 or got["variant"].endswith(words)), got
    # the weight gradient's slot (output 1) is not this variant's: refused by shape
    with pytest.raises(ValueError, match="input gradient"):
        _onednn_1x1_dgrad(args, {}, np.zeros((96, 20, 1, 1), np.float32))


def _torch_conv1x1(cin: int, cout: int, hw: int, n: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, cin, hw, hw, generator=g, requires_grad=True)
    w = torch.randn(cout, cin, 1, 1, generator=g)
    b = torch.randn(cout, generator=g)
    backend = torch._C._select_conv_backend(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                            None)
    y = torch.nn.functional.conv2d(x, w, b)
    gy = torch.randn(y.shape, generator=g)
    dx, = torch.autograd.grad(y, x, gy)
    fwd = _conv_args(x.detach().numpy(), w.numpy(), b.numpy())
    bwd = [gy.numpy(), x.detach().numpy(), w.numpy(), [cout], [1, 1], [0, 0], [1, 1], False,
           [0, 0], 1, [True, False, False]]
    return str(backend), fwd, y.detach().numpy(), bwd, dx.numpy()


@need_avx512
def test_torchs_1x1_convolution_and_its_input_gradient_are_explained():
    """The diffusion UNet's skip convolution (96 -> 32 channels at 16x16, batch 8) and its input
    gradient: torch's bits, named (80-channel blocks on a Zen 4; whatever block this CPU's
    caches give elsewhere)."""
    backend, fwd, y, bwd, dx = _torch_conv1x1(96, 32, 16, 8)
    if not backend.endswith("Mkldnn"):
        pytest.skip(f"torch runs this convolution by {backend} here, not oneDNN")
    d = _diff(FORMS["aten.convolution.default"](fwd, {})[0], y)
    if d["n_diff"]:
        got = explain_op("aten.convolution.default", fwd, {}, y, d)
        assert got["cause"] != "unknown", got
        assert "reduce blocks" in got["variant"] or "block" in got["variant"]
    # the input gradient of a 32 -> 96 convolution: 96 output channels reduced
    backend, _, _, bwd, dx = _torch_conv1x1(32, 96, 16, 8)
    d = _diff(FORMS["aten.convolution_backward.default"](bwd, {})[0], dx)
    if d["n_diff"]:
        got = explain_op("aten.convolution_backward.default", bwd, {}, dx, d, output=0)
        assert got["cause"] != "unknown", got


# --- MKL's float64 products on an AMD CPU (a PINN's float64 Linear layers) ----------------------

def _fprev(m: int, k: int, n: int, row: int, col: int) -> np.ndarray:
    """FPRev's matrix of ``mkl_dgemm_amd`` for output (row, col): entry (i, j) the count of
    unit terms still added after terms i (2^60) and j (-2^60) met (the tree's shape, read
    without the code)."""
    big = 2.0 ** 60
    out = np.zeros((k, k), int)
    for i in range(k):
        for j in range(i + 1, k):
            a, b = np.ones((m, k)), np.ones((k, n))
            a[row, i], a[row, j] = big, -big
            out[i, j] = out[j, i] = int(mkl_dgemm_amd(a, b)[row, col])
    return out


def test_the_dgemm_forms_trees_are_the_documented_ones():
    # a main column (of 12): one chain in order: i and j meet at max(i, j)
    f = _fprev(4, 6, 12, 0, 5)
    assert [f[0, j] for j in range(1, 6)] == [4, 3, 2, 1, 0]
    # a 4-column group: the even terms and the odd ones apart, meeting last
    f = _fprev(4, 8, 16, 0, 13)
    assert f[0, 2] == 6 and f[0, 1] == 0 and f[1, 3] == 6 and f[0, 4] == 5
    # ... an odd k: the last term after the two sums' meeting
    f = _fprev(4, 7, 16, 0, 13)
    assert f[0, 1] == 1 and all(f[i, 6] == 0 for i in range(6))
    # ... an odd row of an odd k (off the 16-byte boundary): its first term peeled
    f = _fprev(4, 7, 16, 1, 13)
    assert f[0, 1] == 5 and f[0, 2] == 0 and f[2, 4] == 5
    # the last columns: 8 lanes, folded (0 + 2) first, then with (4 + 6), the halves last
    f = _fprev(4, 16, 13, 0, 12)
    assert f[0, 8] == 14 and f[0, 2] == 12 and f[0, 4] == 8 and f[0, 1] == 0
    # one column: (t0 + t1), then the even terms into it and the odd ones into another
    f = _fprev(4, 8, 1, 0, 0)
    assert f[0, 1] == 6 and f[0, 2] == 5 and f[0, 3] == 0 and f[3, 5] == 6


def test_the_dgemm_form_refuses_what_it_does_not_write_out():
    a, b = np.ones((8, 300)), np.ones((300, 14))  # the last 2 columns past 256 terms
    with pytest.raises(ValueError, match="not written out"):
        mkl_dgemm_amd(a, b)
    with pytest.raises(ValueError, match="budget"):
        mkl_dgemm_amd(np.ones((5000, 256)), np.ones((256, 240)))  # (3.07e8 terms)
    assert mkl_dgemm_amd(np.ones((8, 300)), np.ones((300, 12))).shape == (8, 12)


@need_amd_mkl
@pytest.mark.parametrize("m, k, n", [(256, 64, 64), (256, 2, 64), (64, 64, 1), (33, 64, 30),
                                     (16, 11, 5), (100, 7, 6), (256, 300, 28), (64, 1, 30)])
def test_torchs_float64_products_are_the_dgemm_form_and_named(m, k, n):
    g = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    x = torch.randn(m, k, generator=g, dtype=torch.float64)
    w = torch.randn(n, k, generator=g, dtype=torch.float64)
    b = torch.randn(n, generator=g, dtype=torch.float64)
    y = torch.addmm(b, x, w.t()).numpy()
    y0 = torch.mm(x, w.t()).numpy()
    xa, wa, ba = x.numpy(), w.numpy(), b.numpy()
    assert np.array_equal(mkl_dgemm_amd(xa, wa.T, ba), y)
    assert np.array_equal(mkl_dgemm_amd(xa, wa.T), y0)
    args = [ba, xa, wa.T]
    ref = FORMS["aten.addmm.default"](args, {})[0]
    d = _diff(ref, y)
    if d["n_diff"]:
        got = explain_op("aten.addmm.default", args, {}, y, d)
        assert got["cause"] != "unknown", got
        off = y.copy()
        off.view(np.int64)[-1, -1] += 1
        assert explain_op("aten.addmm.default", args, {}, off, _diff(ref, off))["cause"] == \
            "unknown"


# --- oneDNN's gemm convolution's input gradient (a WaveNet's dilated conv1d) ---------------------

def _dilated_case(d: int = 16, seed: int = 2):
    rng = np.random.default_rng(seed)
    n, c, oc, kw, ow = 2, 4, 8, 2, 24
    x = rng.standard_normal((n, c, 1, ow + d * (kw - 1))).astype(np.float32)
    w = rng.standard_normal((oc, c, 1, kw)).astype(np.float32)
    g = rng.standard_normal((n, oc, 1, ow)).astype(np.float32)
    args = [g, x, w, [0], [1, 1], [0, 0], [1, d], False, [0, 0], 1, [True, False, False]]
    # the order written out by hand: per (image, channel, tap, pixel) one fma chain over the
    # output channels from zero, then the taps added in order onto zero where they land
    want = np.zeros(x.shape, np.float32)
    for b in range(n):
        for t in range(kw):
            col = np.zeros((c, ow), np.float32)
            for o in range(oc):
                col = fma(w[o, :, 0, t][:, None], g[b, o, 0][None, :], col)
            want[b, :, 0, t * d:t * d + ow] = want[b, :, 0, t * d:t * d + ow] + col
    return args, want


def test_the_gemm_input_gradient_is_the_columns_then_col2im():
    args, want = _dilated_case()
    got = _conv_input_grad_gemm(args, {})
    assert np.array_equal(got[0].view(np.uint32), want.view(np.uint32))
    ref = FORMS["aten.convolution_backward.default"](args, {})[0]
    d = _diff(ref, want)
    if d["n_diff"]:
        name = explain_op("aten.convolution_backward.default", args, {}, want, d, output=0)
        assert name["cause"] != "unknown", name
    off = want.copy()
    off.view(np.int32)[1, 2, 0, 20] += 1
    assert explain_op("aten.convolution_backward.default", args, {}, off,
                      _diff(ref, off), output=0)["cause"] == "unknown"


def test_the_gemm_input_gradient_refuses_a_weight_gradient_and_a_transposed_one():
    args, _ = _dilated_case()
    with pytest.raises(ValueError):
        _conv_input_grad_gemm(args[:10] + [[False, True, False]], {})
    with pytest.raises(ValueError):
        _conv_input_grad_gemm(args[:7] + [True] + args[8:], {})


@need_avx512
@pytest.mark.parametrize("d", [16, 32])
def test_torchs_dilated_conv1d_input_gradient_is_explained(d):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(2, 32, 256 + d, generator=g, requires_grad=True)
    w = torch.randn(64, 32, 2, generator=g)
    y = torch.nn.functional.conv1d(x, w, dilation=d)
    gy = torch.randn(y.shape, generator=g)
    dx, = torch.autograd.grad(y, x, gy)
    args = [gy.numpy()[:, :, None], x.detach().numpy()[:, :, None], w.numpy()[:, :, None], [0],
            [1, 1], [0, 0], [1, d], False, [0, 0], 1, [True, False, False]]
    rec = dx.numpy()[:, :, None]
    ref = FORMS["aten.convolution_backward.default"](args, {})[0]
    d_ = _diff(ref, rec)
    if not d_["n_diff"]:
        pytest.skip("torch's input gradient equals the reference's here")
    got = explain_op("aten.convolution_backward.default", args, {}, rec, d_, output=0)
    assert got["cause"] != "unknown", got


def test_a_1x1_input_gradient_is_named_jit_1x1s_not_the_gemm_ones():
    """A 1x1 convolution's input gradient in one block is also the gemm order's bits; oneDNN runs
    jit_1x1 there, and the cause names that kernel (session 48's review: a ResNet bottleneck's
    512-channel one was named the gemm's)."""
    args, dx = _dgrad_case(96, 1)
    with pytest.raises(ValueError, match="jit_1x1"):
        _conv_input_grad_gemm(args, {})
    d = _diff(FORMS["aten.convolution_backward.default"](args, {})[0], dx)
    if d["n_diff"]:
        got = explain_op("aten.convolution_backward.default", args, {}, dx, d, output=0)
        assert "gemm convolution" not in got["variant"], got
