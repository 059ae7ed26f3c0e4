"""PyTorch's CPU flash attention in bfloat16 (an autocast's ``scaled_dot_product_attention``)
written out (core.explain_aten's ``flash_attention(..., reduced=True)``): MKL's bfloat16 gemm,
``fexp_u20``, the probabilities rounded for ``p @ v``; held to torch's bits on the CPU they
were measured on (an Intel Xeon with AMX)."""

from __future__ import annotations

import ctypes
import math
import os

import ml_dtypes
import numpy as np
import pytest

from tapescope.core.capture.explain import explain_op
from tapescope.core.explain_aten import (
    _mkl_bf16,
    _mkl_bf16_row,
    exp_u20,
    fexp_u20,
    flash_attention,
)

torch = pytest.importorskip("torch")

BF16 = np.dtype(ml_dtypes.bfloat16)
FWD = "aten._scaled_dot_product_flash_attention_for_cpu.default"


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.split(":", 1)[-1].split())


def _measured_here() -> bool:
    """AVX-512 ATen, MKL, an Intel CPU with AMX-BF16: where MKL's bfloat16 kernels were
    measured (another CPU's MKL picks other kernels: their orders are not written out)."""
    return (torch.backends.cpu.get_cpu_capability() == "AVX512"
            and "amx_bf16" in _cpu_flags()
            and "Math Kernel Library" in torch.__config__.show())


pytestmark = pytest.mark.skipif(
    not _measured_here(), reason="MKL's bfloat16 gemm was measured on an Intel CPU with AMX")


def _mkl_gemm():
    """MKL's ``cblas_gemm_bf16bf16f32`` as torch's library exports it, or None."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    fn = getattr(lib, "cblas_gemm_bf16bf16f32", None)
    if fn is not None:
        ci, cf, cp = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
        fn.argtypes = [ci, ci, ci, ci, ci, ci, cf, cp, ci, cp, ci, cf, cp, ci]
    return fn


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def _t(x: np.ndarray):
    if x.dtype == np.float16:
        return torch.from_numpy(np.ascontiguousarray(x))
    return torch.from_numpy(np.ascontiguousarray(x).view(np.uint16)).view(torch.bfloat16)


def _n(t, dt: np.dtype = BF16) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(dt)


@pytest.mark.parametrize("m, k, n", [(16, 8, 16), (3, 33, 5), (64, 100, 40), (32, 300, 64),
                                     (1, 33, 32), (1, 100, 64), (1, 17, 36), (1, 64, 7)])
def test_mkls_bfloat16_gemm_is_written_out(m, k, n):
    """``_mkl_bf16`` (several rows) and ``_mkl_bf16_row`` (one row, both of its layouts) are
    MKL's ``gemm_bf16bf16f32`` bit for bit, beta 0 and 1, as the flash kernels call it
    (column-major: ``q @ kᵀ`` as (T, N), ``p @ v`` as (N, N)); a plain float32 product is
    not (the test tells them apart)."""
    fn = _mkl_gemm()
    if fn is None:
        pytest.skip("this torch's library exports no cblas_gemm_bf16bf16f32")
    rng = np.random.default_rng(m * 1000 + k)
    a = (rng.standard_normal((m, k)) * 1.5).astype(BF16)
    kt = (rng.standard_normal((n, k)) * 1.5).astype(BF16)   # q @ kᵀ: b a transposed view
    v = (rng.standard_normal((k, n)) * 1.5).astype(BF16)    # p @ v: b by rows
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    mine = _mkl_bf16_row if m == 1 else _mkl_bf16
    f32 = np.float32
    departs = 0
    for beta in (0.0, 1.0):
        qk = c0.copy() if beta else np.zeros((m, n), f32)
        fn(102, 112, 111, n, m, k, 1.0, kt.ctypes.data, k, a.ctypes.data, k, beta,
           qk.ctypes.data, n)
        pv = c0.copy() if beta else np.zeros((m, n), f32)
        fn(102, 111, 111, n, m, k, 1.0, v.ctypes.data, n, a.ctypes.data, k, beta,
           pv.ctypes.data, n)
        c = c0 if beta else None
        got_qk = mine(a.astype(f32), np.swapaxes(kt.astype(f32), 0, 1), c)
        got_pv = mine(a.astype(f32), v.astype(f32), c)
        assert np.array_equal(_bits(got_qk), _bits(qk)), ("q @ kᵀ", beta)
        assert np.array_equal(_bits(got_pv), _bits(pv)), ("p @ v", beta)
        plain = (a.astype(f32) @ v.astype(f32) + (c0 if beta else 0)).astype(f32)
        departs += int(np.sum(_bits(plain) != _bits(pv)))
    assert departs, "a plain float32 product gives MKL's bits here: nothing is tested"


def test_fexp_u20_is_atens():
    """``fexp_u20`` is ATen's, read through the bfloat16 flash kernel's logsumexp: one query
    against 32 keys of score 0, every key masked but the first (score 0) and the second
    (score x), so the logsumexp is ``log(fexp(0) + fexp(x))``; 40,000 x in [-20, 0]. The
    accurate ``exp_u20`` (the float32 kernel's) is not it."""
    from tapescope.core.explain_prims import _LIBC_MATH

    f32 = np.float32
    xs = np.concatenate([np.linspace(-20, 0, 20001),
                         -np.random.default_rng(1).exponential(3, 20000)]).astype(f32)
    q = torch.zeros(1, 1, len(xs), 8, dtype=torch.bfloat16)
    k = torch.zeros(1, 1, 32, 8, dtype=torch.bfloat16)
    mask = torch.full((1, 1, len(xs), 32), -math.inf)
    mask[0, 0, :, 0] = 0.0
    mask[0, 0, :, 1] = torch.from_numpy(xs)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, k, attn_mask=mask)[1].numpy()[0, 0]
    finally:
        torch.set_num_threads(before)

    def lse_of(exp) -> np.ndarray:
        s = (exp(np.zeros_like(xs)) + exp(xs)).astype(f32)
        return np.asarray(_LIBC_MATH.log(s)).astype(f32)
    assert np.array_equal(lse_of(fexp_u20).view(np.uint32), lse.view(np.uint32))
    assert not np.array_equal(lse_of(exp_u20).view(np.uint32), lse.view(np.uint32))


def _nudged(rec: np.ndarray) -> np.ndarray:
    out = np.array(rec, copy=True, order="C")
    flat = out.reshape(-1).view(np.uint16 if out.dtype.itemsize == 2 else np.uint32)
    flat[int(np.argmax(np.abs(rec.astype(np.float32)).reshape(-1)))] += 1
    return out


_GEOMETRIES = [
    (1, 1, 16, 16, 8, "plain"), (2, 2, 40, 40, 8, "plain"), (2, 4, 16, 16, 8, "causal"),
    (1, 2, 64, 64, 16, "plain"), (1, 1, 70, 600, 32, "plain"), (2, 2, 32, 32, 64, "causal"),
    (4, 4, 16, 16, 8, "padding"), (1, 2, 33, 33, 32, "causal")]
# float16's own: a last query block of 4 rows by 128 terms (MKL's dots kernel), two key
# blocks, a last key block of one key and a query block of one row over three key blocks
_F16 = np.dtype(np.float16)
_F16_GEOMETRIES = [(1, 2, 100, 100, 128, "plain"), (1, 1, 600, 600, 64, "plain"),
                   (1, 1, 513, 513, 16, "plain"), (1, 1, 1025, 1025, 64, "causal")]


@pytest.mark.parametrize("B, H, L, S, E, how, dt", [
    g + (dt,) for dt in (BF16, _F16) for g in _GEOMETRIES] + [
    g + (_F16,) for g in _F16_GEOMETRIES], ids=lambda p: str(p))
def test_bfloat16_flash_attention_is_torchs(B, H, L, S, E, how, dt):
    """The bfloat16 kernel's output and logsumexp are torch's bits (a BERT's padding mask,
    turned into a bfloat16 0 / -inf mask as SDPA does; a causal last query block of one
    row: MKL's one-row kernels), ``explain_op`` names each output that departs from the
    reference, and one ulp off is ``unknown``. The float16 kernel likewise (session 41: MKL's
    float16 gemm, whose exact products run its sgemm's kernels -- a last query block of 4
    rows by 128 terms is its dots kernel)."""
    rng = np.random.default_rng(L * 7 + E)
    q, k, v, causal, kw, tkw = _case(rng, B, H, L, S, E, how, dt)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            _t(q), _t(k), _t(v), is_causal=causal, **tkw)[:2]
    finally:
        torch.set_num_threads(before)
    want = (_n(out, dt), lse.numpy())
    mask = kw["attn_mask"].astype(np.float32) if kw else None
    got = flash_attention(q, k, v, causal, np.float32(1 / math.sqrt(E)), 16, mask,
                          reduced=True)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(_bits(g), _bits(w))
    _each_departing_output_named(FWD, [q, k, v, 0.0, causal], kw, want, dt.name)


def _case(rng, B, H, L, S, E, how, dt):
    """q, k, v of ``dt``, causal, the op's keywords and torch's: a padding ``how`` a BERT's
    mask (the last 4 keys hidden, 0 / -inf in ``dt`` as SDPA makes it)."""
    q, k, v = ((rng.standard_normal((B, H, n, E)) * 1.5).astype(dt) for n in (L, S, S))
    kw: dict = {}
    if how == "padding":
        m = np.zeros((B, 1, 1, S), np.float32)
        m[..., S - 4:] = -np.inf
        kw["attn_mask"] = m.astype(dt)
    tkw = {"attn_mask": _t(kw["attn_mask"])} if kw else {}
    return q, k, v, how == "causal", kw, tkw


def _each_departing_output_named(op, args, kw, want, words):
    """``explain_op`` names each of torch's outputs ``want`` that departs from the reference
    (the variant saying ``words``), one ulp off is ``unknown``; at least one departs."""
    from tapescope.core.capture.aten_ref import reference

    ref = reference(op, args, kw)
    named = 0
    for j, rec in enumerate(want):
        n_diff = int(np.sum(_bits(np.asarray(ref[j], dtype=rec.dtype)) != _bits(rec)))
        if not n_diff:
            continue
        d = {"n_diff": n_diff, "max_ulp": 1, "n_signed_zero": 0, "n_nan": 0}
        c = explain_op(op, args, kw, rec, d, j)
        assert c["cause"] == "reassociation" and words in c["variant"], (j, c)
        assert explain_op(op, args, kw, _nudged(rec), d, j)["cause"] == "unknown", j
        named += 1
    assert named, "torch's outputs are the reference's here: nothing is explained"


BWD = "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"


@pytest.mark.parametrize("B, H, L, S, E, how, threads", [
    (2, 2, 48, 48, 16, "causal", 1), (1, 2, 100, 100, 32, "plain", 2),
    (1, 2, 200, 200, 64, "causal", 1), (1, 1, 600, 600, 128, "plain", 1),
    (1, 2, 256, 256, 48, "causal", 2), (4, 2, 16, 16, 8, "padding", 1),
    (1, 1, 33, 33, 80, "plain", 1)], ids=lambda p: str(p))
def test_bfloat16_flash_attention_backward_is_torchs(B, H, L, S, E, how, threads):
    """The bfloat16 backward (an autocast GPT's SDPA backward: 12 ``unknown`` outputs of a
    2-step capture before, session 41): the three gradients are torch's bits (query blocks of
    32 and 64, two key blocks, a padding mask, 1 and 2 threads), ``explain_op`` names each
    that departs from the reference, one ulp off is ``unknown``."""
    from tapescope.core.explain_aten import flash_attention_backward

    rng = np.random.default_rng(L * 11 + E)
    case = _case(rng, B, H, L, S, E, how, BF16)
    args, kw, want = _torch_backward(rng, case, threads)
    mask = kw["attn_mask"].astype(np.float32) if kw else None
    got = flash_attention_backward(*args[:6], args[7], np.float32(1 / math.sqrt(E)),
                                   mask=mask, reduced=True)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(_bits(g), _bits(w))
    _each_departing_output_named(BWD, args, kw, want, "backward in bfloat16")


def _torch_backward(rng, case, threads):
    """torch's flash forward and backward of ``_case``'s ``case`` at ``threads`` threads (the
    output gradient drawn from ``rng``): the backward op's arguments as numpy, its keywords,
    its three gradients."""
    q, k, v, causal, kw, tkw = case
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            _t(q), _t(k), _t(v), is_causal=causal, **tkw)[:2]
        dy = _t(rng.standard_normal(out.shape).astype(q.dtype))
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dy, _t(q), _t(k), _t(v), out, lse, 0.0, causal, **tkw)
    finally:
        torch.set_num_threads(before)
    args = [_n(dy, q.dtype), q, k, v, _n(out, q.dtype), lse.numpy(), 0.0, causal]
    return args, kw, [_n(t, q.dtype) for t in grads]


@pytest.mark.parametrize("B, H, L, S, E, how, threads", [
    (2, 2, 48, 48, 16, "causal", 1), (1, 2, 100, 100, 32, "plain", 2),
    (1, 1, 200, 200, 64, "causal", 1), (1, 2, 100, 100, 96, "causal", 1),
    (1, 1, 600, 600, 64, "plain", 1), (1, 1, 1000, 1000, 32, "causal", 2),
    (4, 2, 16, 16, 8, "padding", 2)], ids=lambda p: str(p))
def test_float16_flash_attention_backward_is_torchs(B, H, L, S, E, how, threads):
    """The float16 backward (an fp16 autocast GPT's SDPA backward: 12 ``unknown`` outputs a
    capture before, session 41): MKL's float16 gemm for the scores and ``g @ vᵀ``, oneDNN's
    float16 matmul into the gradients; MKL takes the scores' scale into k for some shapes
    (E = 32, 96 here), so one of the two ways is torch's bits, and ``explain_op`` names each
    gradient that departs from the reference, one ulp off ``unknown``."""
    from tapescope.core.explain_aten import flash_attention_backward

    rng = np.random.default_rng(L * 13 + E)
    case = _case(rng, B, H, L, S, E, how, _F16)
    args, kw, want = _torch_backward(rng, case, threads)
    mask = kw["attn_mask"].astype(np.float32) if kw else None
    ways = [flash_attention_backward(*args[:6], args[7], np.float32(1 / math.sqrt(E)),
                                     mask=mask, key_scaled=ks, reduced=True)
            for ks in (False, True)]
    assert any(all(np.array_equal(_bits(g), _bits(w)) for g, w in zip(got, want, strict=True))
               for got in ways), "neither way of taking the scale gives torch's bits"
    _each_departing_output_named(BWD, args, kw, want, "backward in float16")
