"""Why a captured op introduced its difference: the op re-run on its own recorded inputs under
documented departures from the reference order, the first that reproduces the recorded bits
named (numpy only). The departures are ``core.explain``'s own table (issue 44 item 4: one
table, not a second): a product takes every ``mm`` variant of ``variants_for("matmul")``, a
sum or mean every ``sum`` variant of ``variants_for("sum")``, a transcendental every math
namespace (``M``) of ``VARIANTS``, in the table's order; ``_softmax``, ``silu`` and ``sqrt``
also PyTorch's own CPU kernels (``core.explain_aten``, ``core.explain.UPDATE_VARIANTS``).

==================  ==========================================================================
``signed-zero``     equal but for the sign of zeros (read from the difference alone)
``fma``,            products (mm, bmm, addmm): the table's ``mm`` variants, fma first, then
``reassociation``,  BLAS's blocked ``np.matmul``, the halving tree, BLAS micro-kernel tiles,
``accumulator``     k-lanes, wider / narrower accumulators; sums and means: its ``sum``
                    variants (numpy's pairwise sum, the tree, PyTorch's cascade and ATen's sum
                    kernel, W-lane sums, accumulators)
``libm``            transcendental ops (``tanh``, ``exp``, ``log``, ``sigmoid``, ``erf``,
                    ``gelu``, ``silu``) in each of the table's math namespaces (numpy's, the C
                    library's); ``_softmax`` and ``silu`` as PyTorch's CPU kernels (SLEEF's
                    exp), ``sqrt`` as MKL VML's (PyTorch's CPU ``torch.sqrt``)
``reassociation``   SDPA's CPU flash kernels, forward and backward (``core.explain_aten``'s
                    ``flash_attention``: fma products, ``exp_u20``, the product normalised
                    after; its AVX-512 and AVX2 builds)
==================  ==========================================================================

An op outside this table is ``unknown`` with no variant tried; one inside whose variants all
miss is ``unknown`` with the closest (fewest differing elements) named. Every output is
explained (``explain_op``'s ``output``); PyTorch's own CPU kernels for what a training step
runs most are written out below (norms, losses, optimizers' updates, GELU, convolutions and
their gradients: docs/capture.md, "--explain").
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np

from tapescope.core import native
from tapescope.core.capture.aten_ref_conv import (
    upsample_bicubic,
    upsample_linear1d,
    upsample_linear1d_backward,
    upsample_trilinear3d,
    upsample_trilinear3d_backward,
)
from tapescope.core.capture.aten_ref_layers import bag_backward, bag_forward, bag_grad_args
from tapescope.core.capture.aten_ref_losses import ctc_loss, ctc_loss_backward
from tapescope.core.capture.aten_ref_nn import product as ref_product
from tapescope.core.capture.aten_ref_optim import adam_step, fused_adam
from tapescope.core.capture.aten_ref_sample import affine_grid
from tapescope.core.capture.aten_ref_table import NoReference, as_dtype
from tapescope.core.capture.file import STRIDED_KW, c_strides
from tapescope.core.explain import (
    _HINTS,
    UPDATE_VARIANTS,
    VARIANTS,
    _conv_direct,
    _in_dtype,
    _mm_blas,
    _vml,
    closer,
    distance,
    remember,
    variants_for,
)
from tapescope.core.explain_aten import (
    ATEN_FORWARD,
    GRAIN_SIZE,
    _fma_acc,
    _fma_chain,
    _iterator_order,
    _lane_sum,
    _mkl_bf16,
    _mkl_mm,
    _sgemm,
    _vec_map,
    aten_moments,
    aten_reduce_vec,
    aten_sum,
    aten_sum_strided,
    flash_attention,
    flash_attention_backward,
    gelu_tanh,
    log_softmax_backward_inner,
    log_softmax_inner,
    log_softmax_reduced,
    mkl_amd,
    mkl_col_gemv_rows,
    mkl_no_amx,
    onednn_f16,
    reduce_all,
    reduced_row_sum,
    sleef_exp,
    sleef_expm1f,
    sleef_log1pf,
    softmax_backward,
    softmax_backward_inner,
    softmax_inner_choose,
    softmax_inner_paths,
    sum_column_parts,
    vec_segments,
)
from tapescope.core.explain_aten import _log_softmax as _aten_log_softmax
from tapescope.core.explain_aten import _silu_parts as _aten_silu_parts
from tapescope.core.explain_aten import mish as _aten_mish
from tapescope.core.explain_aten import silu as _aten_silu
from tapescope.core.explain_aten import softplus as _aten_softplus
from tapescope.core.explain_onednn import (
    _chain_product,
    gelu_backward,
    gelu_forward,
    lstm_layer_backward,
    lstm_layer_forward,
)
from tapescope.core.explain_prims import (
    _LIBC_MATH,
    _fold_lanes,
    fma,
    libc_elementwise,
    libm,
    std_sort_order,
)
from tapescope.core.ops.nn import im2col
from tapescope.core.ops.reference import serial_sum
from tapescope.core.parity import compare_arrays, complex_parts

__all__ = ["explain_op"]

# (cause, label, run[, screen]): screen(args, kwargs, recorded) is False when the
# variant cannot reproduce the op (its bits differ on a part of it)
_Variant = tuple


def _f32(x: Any) -> np.ndarray:
    a = np.asarray(x)
    return a.astype(np.float32) if a.dtype.name in ("float16", "bfloat16") else a


def _batched(mm: Callable) -> Callable:
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.ndim == 2:
            return mm(a, b)
        return np.stack([mm(a[i], b[i]) for i in range(a.shape[0])])
    return f


def _dtype(args: list) -> np.dtype:
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype.kind in "fV":
            return a.dtype
    return np.dtype(np.float64)


_SCREEN_ROWS = 4


def _screen(run: Callable, part: Callable) -> Callable:
    """A variant's cheap first look: ``run`` on the part of the inputs ``part(args, recorded)``
    picks (a few output rows of a product, one image of a convolution: parts every variant
    computes independently of the rest), False when its bits already differ there, so the
    whole op is not run (a product's written-out orders loop over k in Python: a failing
    variant on a 512 x 128 x 384 addmm took up to 2.6 s). A variant that gives one of an op's
    several outputs (a tuple, the others None) is screened on that one."""
    def screen(args: list, kw: dict, recorded: np.ndarray) -> bool:
        got = part(args, recorded)
        if got is None:
            return True
        sub, want = got
        y = run(sub, kw)
        if type(y) is tuple:
            ys = [v for v in y if v is not None]
            if len(ys) != 1:
                return True
            y = ys[0]
        y = np.asarray(y)
        return y.shape == want.shape and y.dtype == want.dtype and \
            compare_arrays(y, want).n_diff == 0
    return screen


def _product_rows(op: str) -> Callable:
    def part(args: list, recorded: np.ndarray) -> tuple[list, np.ndarray] | None:
        r = _SCREEN_ROWS
        if op.startswith("aten.addmm"):
            bias, a = np.asarray(args[0]), np.asarray(args[1])
            if a.ndim != 2 or a.shape[0] <= 2 * r:
                return None
            if bias.ndim == 2 and bias.shape[0] == a.shape[0]:
                bias = bias[:r]
            return [bias, a[:r], *args[2:]], recorded[:r]
        a = np.asarray(args[0])
        if a.ndim == 2 and a.shape[0] > 2 * r:
            return [a[:r], *args[1:]], recorded[:r]
        if a.ndim == 3 and a.shape[0] * a.shape[1] > 2 * r:
            return [a[:1, :r], np.asarray(args[1])[:1], *args[2:]], recorded[:1, :r]
        return None
    return part


def _conv_image(args: list, recorded: np.ndarray) -> tuple[list, np.ndarray] | None:
    """A convolution's first image (every image is convolved on its own)."""
    x = np.asarray(args[0])
    if x.ndim != 4 or x.shape[0] < 2:
        return None
    return [x[:1], *args[1:]], recorded[:1]


def _vdpbf16_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """oneDNN's bfloat16 matmul on a CPU with AVX-512 BF16 and no AMX (``brg_matmul:
    avx512_core_bf16``, measured on an AMD EPYC, Zen 4): per output one float32 chain over k
    from zero, k in pairs (``vdpbf16ps``), the odd term added before the even one, each
    product exact (two bfloat16 significands), each sum rounded; a batch (``bmm``) alike.
    ``a``, ``b``: float32 of bfloat16 values, ``(..., m, k) @ (..., k, n)``."""
    k = a.shape[-1]
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], np.float32)
    for p in range(0, k, 2):
        for j in ((p + 1, p) if p + 1 < k else (p,)):
            acc = acc + a[..., :, j:j + 1] * b[..., j:j + 1, :]
    return acc


#: float16 / bfloat16 products' kernels, each (its type, the product, its label), in the order
#: tried: oneDNN's float16 matmul (AVX-512 FP16); AMX's bfloat16 order, then oneDNN's
#: vdpbf16ps chain (AVX-512 BF16 without AMX: an AMD CPU's, first for a capture made there)
_NARROW_PRODUCTS = (
    (np.dtype(np.float16), onednn_f16,
     "oneDNN's float16 matmul (AVX-512 FP16): the exact products in chains from zero over k "
     "split at the largest power of two below it (512 at least), the two parts added; "
     "addmm's bias added to the sum; rounded to float16 once"),
    (np.dtype(ml_dtypes.bfloat16), _mkl_bf16,
     "PyTorch's bfloat16 matmul on a CPU with AMX (tdpbf16ps): k in blocks of 32 terms, each "
     "block's even and odd terms two float32 chains from zero added together, the blocks "
     "added in turn, products exact; addmm's bias added to the sum; rounded to bfloat16 once"),
    (np.dtype(ml_dtypes.bfloat16), _vdpbf16_chain,
     "oneDNN's bfloat16 matmul on an AMD CPU (AVX-512 BF16 without AMX: vdpbf16ps): one "
     "float32 chain an output over k in pairs, the odd term before the even, products exact; "
     "addmm's bias added to the sum; rounded to bfloat16 once"),
)


def _narrow_only(op: str, product: Callable, want: np.dtype) -> Callable:
    """``op`` (mm, bmm, addmm) by ``product`` for operands of type ``want`` only, addmm's with
    beta = alpha = 1; ValueError otherwise."""
    whole = _product_run(op, product)

    def run(args: list, kw: dict) -> np.ndarray:
        n = 3 if _base(op) == "addmm" else 2
        if any(np.asarray(x).dtype != want for x in args[:n]):
            raise ValueError(f"{want.name} operands only")
        if n == 3 and _addmm_scales(args, kw) != (1, 1):
            raise ValueError("beta = alpha = 1")
        return whole(args, kw)
    return run


def _product_run(op: str, m: Callable) -> Callable:
    """A variant of ``op`` (mm, bmm, addmm, baddbmm, mv, dot, vdot) whose product is ``m``
    (float32 or float64 operands, half ones widened): addmm's ``beta * bias + alpha * (a @
    b)`` with the bias added last, mv / dot as the product with a column, rounded to the
    operands' type."""
    def run(args: list, kw: dict) -> np.ndarray:
        if op.startswith(("aten.addmm", "aten.baddbmm")):
            bias, a, b = (_f32(x) for x in args[:3])
            beta, alpha = _addmm_scales(args, kw)
            p = m(a, b)
            if alpha != 1:
                p = p * p.dtype.type(alpha)
            return (p + (bias if beta == 1 else bias * bias.dtype.type(beta))).astype(
                np.asarray(args[1]).dtype)
        a, b = _f32(args[0]), _f32(args[1])
        if b.ndim == 1:  # mv, dot, vdot (real): the product with a column
            p = m(a if a.ndim == 2 else a[None], b[:, None])
            return (p[:, 0] if a.ndim == 2 else p.reshape(())).astype(a.dtype)
        return m(a, b).astype(np.asarray(args[0]).dtype)
    return run


def _linear_args(args: list, kw: dict, with_bias: bool) -> tuple[list, tuple]:
    """``linear(x, w, bias)``'s arguments as addmm's ``(bias, x2, wᵀ)`` (mm's ``(x2, wᵀ)``),
    x's leading axes merged into rows; and those axes."""
    x, w = np.asarray(args[0]), np.asarray(args[1])
    b = args[2] if len(args) > 2 else kw.get("bias")
    if (b is not None) != with_bias or w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError("linear " + ("with" if with_bias else "without") + " a bias only")
    x2 = x.reshape(-1, x.shape[-1])
    return ([np.asarray(b), x2, w.T] if with_bias else [x2, w.T]), x.shape[:-1]


def _as_linear(variant: _Variant, with_bias: bool) -> _Variant:
    """An addmm (mm) product variant as ``aten.linear``'s: ATen's linear is that product of
    x's rows by wᵀ (autograd off: ``inference_mode`` and ``no_grad`` record it whole)."""
    cause, label, run, *_ = variant
    words = f"linear as {'addmm' if with_bias else 'mm'} (ATen's): {label}"
    if getattr(run, "fits", False):
        def fit(args: list, kw: dict, recorded: np.ndarray) -> tuple:
            a, lead = _linear_args(args, kw, with_bias)
            rec = np.asarray(recorded)
            y, found = run(a, {}, rec.reshape(-1, rec.shape[-1]) if rec.ndim else rec)
            return np.asarray(y).reshape(*lead, -1), found
        return (cause, words, _Fits(fit))

    def go(args: list, kw: dict) -> np.ndarray:
        a, lead = _linear_args(args, kw, with_bias)
        return np.asarray(run(a, {})).reshape(*lead, -1)
    return (cause, words, go)


def _euclidean_dist_variants(dt: np.dtype) -> list[_Variant]:
    """``_euclidean_dist`` (``torch.cdist``'s product form): the reference's expansion
    (``aten_ref_nn.euclidean_dist``) with its root MKL VML's, as ``torch.sqrt``'s; then also
    its product ``[-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]ᵀ`` under each of ``mm``'s (a batch:
    ``bmm``'s) variants, the squared norms by the reference's serial sum or by ATen's sum
    kernel."""
    from tapescope.core.capture import aten_ref  # noqa: F401  (the pieces' forms registered)
    from tapescope.core.capture.aten_ref_nn import euclidean_dist
    from tapescope.core.explain_aten import aten_sum

    (_, _, vml_sqrt), = UPDATE_VARIANTS  # (torch.sqrt_'s: MKL VML's, measured)

    def libm(args: list, kw: dict) -> np.ndarray:  # (the reference's product, VML's root)
        return euclidean_dist(np.asarray(args[0]), np.asarray(args[1]), root=vml_sqrt)

    def aten_rows(sq: np.ndarray) -> np.ndarray:
        return aten_sum(sq, -1, keepdims=True)

    out: list[_Variant] = [("libm", "torch.cdist's product form (ATen's _euclidean_dist) as "
                                    "the reference computes it but its root, MKL VML's sqrt "
                                    "(torch.sqrt's)", libm)]
    for prod in ("aten.mm.default", "aten.bmm.default"):
        for cause, label, run, *_ in _products(prod, dt):
            if getattr(run, "fits", False):
                continue
            for by_aten in (False, True):
                def go(args: list, kw: dict, run: Callable = run, by_aten: bool = by_aten,
                       nd: int = 2 if prod == "aten.mm.default" else 3) -> np.ndarray:
                    x1, x2 = np.asarray(args[0]), np.asarray(args[1])
                    if x1.ndim != nd:
                        raise ValueError(f"written for {nd}-D operands")
                    return euclidean_dist(x1, x2, lambda a, bt: run([a, bt], {}),
                                          aten_rows if by_aten else None, vml_sqrt)
                out.append((cause, "torch.cdist's product form (ATen's _euclidean_dist: "
                                   "[-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]ᵀ, clamped at 0, "
                                   f"MKL VML's sqrt), its product {label}; the squared norms "
                                   "by " + ("ATen's sum kernel" if by_aten else "a serial sum"),
                            go))
    return out


def _products(op: str, dt: np.dtype) -> list[_Variant]:
    """mm / bmm / addmm: (bias +) alpha * A @ B under each product variant of core.explain's
    table (the ``mm`` primitive's, in its order); mv / dot / vdot as the product with a
    column (MKL's sgemv of a row-major matrix is its dot-product kernel: measured)."""
    out: list[_Variant] = []
    # the table's order, but numpy's BLAS product first: the cheapest, and what a captured
    # float32 product most often is (a captured model's products can be large; the contracted
    # chains loop over k in Python)
    mms = sorted((v for v in variants_for("matmul", dt) if v.prim == "mm"),
                 key=lambda v: v.value is not _mm_blas)
    for v in mms:
        if dt == _BF16 and v.label.startswith("MKL's"):
            continue  # (MKL's float32 kernels: a bfloat16 product is oneDNN's, below)
        run = _product_run(op, _batched(v.value))
        # BLAS's own kernel can change with the row count: only the table's written-out
        # orders (each output row its own chains) are screened on a few rows first (not the
        # column kernel over a transposed matrix: its rows are the vector kernel's columns,
        # whose last ones past a whole vector take another order)
        out.append((v.cause, v.label, run) if v.value in (_mm_blas, mkl_col_gemv_rows) else
                   (v.cause, v.label, run, _screen(run, _product_rows(op))))
    if _base(op) in ("mm", "bmm", "addmm"):  # (a narrow type's own kernels, first)
        out[:0] = [("reassociation", label, run, _screen(run, _product_rows(op)))
                   for want, product, label in _NARROW_PRODUCTS if want == dt
                   for run in (_narrow_only(op, product, want),)]
    if _base(op) in ("dot", "vdot") and dt == np.float32:  # (first: a dot is its own kernel)
        out.insert(0, ("reassociation", "MKL's sdot on an AMD CPU: no FMA, 16 lanes, the rest "
                                        "as 8-, 4-wide vectors and single terms, folded by "
                                        "128-bit quarters, then in pairs", _sdot_amd_run))
    if _base(op) in ("mm", "addmm") and dt == np.float32:
        for by_rows, threads in ((False, 1), (True, 1), (False, 2), (True, 2)):
            out.append(("reassociation", "MKL's small-product kernel on an AMD CPU (at most 11 "
                        "output columns or 3 rows; " + _SMALL_LAYOUT[by_rows] + "; no FMA"
                        + ("; two threads: the rows in two parts" if threads == 2 else "")
                        + ")", partial(_mkl_small_amd_run, by_rows=by_rows, threads=threads,
                                addmm=_base(op) == "addmm")))
        for by_rows in (False, True):
            out.append(("reassociation", "MKL's products on several threads on an AMD CPU (the "
                        "output cut in a grid, rows in parts of a multiple of 4, columns of 16, "
                        "each part its own product: the small-product kernel for a part of at "
                        "most 3 rows or 11 columns, sgemm's fma chains for the rest; "
                        + _SMALL_LAYOUT[by_rows] + ")",
                        _Fits(partial(_mkl_grid_amd_run, by_rows=by_rows,
                                      addmm=_base(op) == "addmm"))))
    if _base(op) in ("mm", "addmm") and dt == np.float64:
        out.append(("reassociation", "MKL's dgemm on an AMD CPU (float64, a weight's "
                    "transposed view): per 4 rows, the columns in groups of 12 one fma chain "
                    "an output from the bias, groups of 4 an even and an odd sum without FMA, "
                    "the last 1-3 columns 8 lanes without FMA folded; the last rows and a "
                    "one-column product two sums without FMA",
                    partial(_mkl_dgemm_amd_run, addmm=_base(op) == "addmm")))
    if _base(op) in ("bmm", "baddbmm") and dt == np.float32:
        # ATen's bmm / baddbmm of small matrices: each batch its own MKL product
        plus = _base(op) == "baddbmm"
        for by_rows in (False, True):
            out.append(("reassociation", "MKL's small-product kernel on an AMD CPU, each batch "
                        "its own product (at most 11 output columns or 3 rows; "
                        + _SMALL_LAYOUT[by_rows] + "; no FMA)",
                        _per_batch(partial(_mkl_small_amd_run, by_rows=by_rows, threads=1,
                                           addmm=plus), plus)))
        if plus:
            out.append(("fma", "MKL's sgemm as baddbmm calls it on an AMD CPU, each batch its "
                               "own product (float32, beta = alpha = 1): the bias first, then k "
                               "in panels of at most 192 terms, each one fma chain from zero "
                               "added in turn", _per_batch(_mkl_addmm_amd, True)))
    if op.startswith("aten.addmm"):
        out.append(("fma", "MKL's sgemm as addmm calls it (float32, beta = alpha = 1): the "
                           "bias first, then k in ceil(K / 384) equal panels, each one fma "
                           "chain from zero added in turn", _mkl_addmm,
                    _screen(_mkl_addmm, _product_rows(op))))
        out.append(("fma", "MKL's sgemm as addmm calls it in 384-term panels (float32, beta = "
                           "alpha = 1; an Intel CPU past 768 terms: without AMX from 192 output "
                           "columns, with AMX from 192 rows and columns, on two threads for "
                           "some narrower products): the bias first, then k in panels of 384, "
                           "the rest last, each one fma chain from zero added in turn",
                    _mkl_addmm_wide, _screen(_mkl_addmm_wide, _product_rows(op))))
        out.append(("fma", "MKL's sgemm as addmm calls it on two threads (float32, beta = "
                           "alpha = 1; measured on two Intel CPUs): k in two halves, one a "
                           "thread, each in one thread's 384-term panels of fma chains, the "
                           "first onto the bias, the second from zero, the two added after",
                    _mkl_addmm_halves, _screen(_mkl_addmm_halves, _product_rows(op))))
        out.append(("fma", "MKL's sgemm as addmm calls it on an AMD CPU (float32, beta = alpha "
                           "= 1): the bias first, then k in panels of at most 192 terms, each "
                           "one fma chain from zero added in turn", _mkl_addmm_amd,
                    _screen(_mkl_addmm_amd, _product_rows(op))))
        out.append(("fma", "MKL's sgemm over one term (float32, beta = alpha = 1): the bias "
                           "as the accumulator, one fma", _mkl_one_term))
    return out


def _sdot_amd_run(args: list, kw: dict) -> np.ndarray:
    from tapescope.core.explain_aten import sdot_amd

    a, b = np.asarray(args[0]), np.asarray(args[1])
    if a.ndim != 1 or b.ndim != 1 or a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError("sdot of two float32 vectors")
    return np.asarray(sdot_amd(a, b))


def _addmm_scales(args: list, kw: dict) -> tuple:
    """``addmm``'s (beta, alpha), keywords or positions 3 and 4, each 1 by default."""
    return (kw.get("beta", args[3] if len(args) > 3 else 1),
            kw.get("alpha", args[4] if len(args) > 4 else 1))


_SMALL_LAYOUT = {False: "the weight a transposed view: from each row's 16-byte boundary "
                        "4-lane vectors (8 for the last n % 4 columns), a halving fold",
                 True: "the right operand by rows: one chain an output, 8-term blocks halved "
                       "before each output row's 16-byte boundary"}


def _mkl_small_amd_run(args: list, kw: dict, by_rows: bool, threads: int,
                       addmm: bool) -> np.ndarray:
    """``mm`` / ``addmm`` (beta = 1) by ``core.explain_aten.mkl_small_amd``, the bias its
    ``c``: against a transposed weight the product, times alpha, then the bias added; by rows
    ``alpha * a`` first and the bias each chain's start (measured against ``torch.addmm``)."""
    from tapescope.core.explain_aten import mkl_small_amd

    bias, a, b, alpha = _mm_operands(args, kw, addmm)
    c = None if bias is None else np.broadcast_to(bias, (a.shape[0], b.shape[-1]))
    return mkl_small_amd(a, b, by_rows, threads, c, alpha)


def _mkl_dgemm_amd_run(args: list, kw: dict, addmm: bool) -> np.ndarray:
    """``mm`` / ``addmm`` (beta = alpha = 1) of float64 by ``core.explain_aten.mkl_dgemm_amd``
    (measured against ``torch.addmm`` and ``torch.mm`` of ``x @ w.t()``)."""
    from tapescope.core.explain_aten import mkl_dgemm_amd

    if not addmm:
        a, b, c = np.asarray(args[0]), np.asarray(args[1]), None
    else:
        c, a, b = (np.asarray(x) for x in args[:3])
        if _addmm_scales(args, kw) != (1, 1):
            raise ValueError("MKL's AMD dgemm is written out for addmm's beta = alpha = 1")
    if any(x is not None and x.dtype != np.float64 for x in (a, b, c)) or a.ndim != 2 or \
            b.ndim != 2:
        raise ValueError("written for 2-d float64 products")
    return mkl_dgemm_amd(a, b, c)


def _per_batch(run2d: Callable, plus: bool) -> Callable:
    """A 2-d product's variant run on each batch of a ``bmm`` (``plus``: a ``baddbmm``, its
    bias broadcast to the batches and handed over as an ``addmm``'s)."""
    def run(args: list, kw: dict) -> np.ndarray:
        a, b = (np.asarray(x) for x in (args[1:3] if plus else args[:2]))
        if a.ndim != 3 or b.ndim != 3 or not a.shape[0]:
            raise ValueError("a batch of matrices")
        if not plus:
            return np.stack([run2d([a[i], b[i]], kw) for i in range(a.shape[0])])
        c = np.broadcast_to(np.asarray(args[0]), (a.shape[0], a.shape[1], b.shape[2]))
        return np.stack([run2d([c[i], a[i], b[i], *args[3:]], kw) for i in range(a.shape[0])])
    return run


def _mm_operands(args: list, kw: dict, addmm: bool) -> tuple:
    """``(c, a, b, alpha)`` of an ``mm`` (c, alpha None) or an ``addmm`` of beta = 1 and a
    float32 ``c`` (alpha None where 1), as MKL's AMD kernels take them; ValueError for another
    beta."""
    if not addmm:
        return None, np.asarray(args[0]), np.asarray(args[1]), None
    c, a, b = (np.asarray(x) for x in args[:3])
    beta, alpha = _addmm_scales(args, kw)
    if beta != 1 or c.dtype != np.float32:
        raise ValueError("MKL's AMD kernels are written out for addmm's beta = 1")
    return c, a, b, None if alpha == 1 else np.float32(alpha)


class _Fits:
    """A variant with a free choice it fits to the recorded output (``explain_op`` hands it
    over): ``fn(args, kw, recorded)`` gives ``(output, words)``, the words naming what it
    chose, or raises ValueError where no choice gives the recorded bits."""

    fits = True

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, args: list, kw: dict, recorded: np.ndarray | None = None) -> tuple:
        if recorded is None:
            raise ValueError("a fitted variant needs the recorded output")
        return self.fn(args, kw, recorded)


def _layout_rows(x: np.ndarray, kw: dict) -> list[int]:
    """The lengths TensorIterator's inner loop may have over ``x`` (an elementwise op's operand,
    its output laid out in the same order): first from the recorded layout of the op's first
    argument (``ops.strided``: the dimensions ``_iterator_order`` merges from the fastest),
    then each product of ``x``'s trailing dimensions (a chunk of a wider tensor along any
    dimension, an operand other than the first laid out so)."""
    rows = []
    lay = kw.get(STRIDED_KW)
    if lay is not None and len(lay[0]) == x.ndim and x.ndim:
        strides = [int(v) for v in lay[0]]
        rows.append(_iterator_order(list(x.shape), [list(c_strides(x.shape)), strides])[0][0])
    acc = 1
    for n in reversed(x.shape[1:]):
        acc *= n
        rows.append(acc)
    return list(dict.fromkeys(rows))


def _rows_apart(x: np.ndarray, vec: np.ndarray, tail: np.ndarray, kw: dict,
                recorded: np.ndarray) -> tuple:
    """An elementwise ATen kernel on operands whose rows lie apart in memory: each element
    ``vec``'s (the vectorised lambda's) or ``tail``'s (the scalar one's) as its row's part of
    a thread's chunk puts it in a whole register pair or the tail; the rows of
    ``_layout_rows``, each chunking of 1 to ``ceil(n / GRAIN_SIZE)`` threads tried. Returns
    (the output, words), or ValueError where none gives the recorded bits."""
    from tapescope.core.explain_aten import _LANES

    vec, tail = vec.astype(x.dtype).ravel(), tail.astype(x.dtype).ravel()
    want = np.asarray(recorded).ravel().view(np.uint8)
    if vec.size != x.size or want.size != vec.view(np.uint8).size:
        raise ValueError("not the recorded output's size")
    for row in _layout_rows(x, kw):
        for used in range(1, -(-x.size // GRAIN_SIZE) + 1):
            y = tail.copy()
            for lo, v, _ in vec_segments(x.size, 2 * _LANES[x.dtype], used, row):
                y[lo:v] = vec[lo:v]
            if np.array_equal(y.view(np.uint8), want):
                return y.reshape(x.shape), (f"rows of {row}" + (
                    f", {used} threads' chunks" if used > 1 else ""))
    raise ValueError("no chunking gives these bits")


def _sigmoid_rows_apart(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """ATen's sigmoid on a view whose rows lie apart (``core.explain_aten._sigmoid``'s
    ``rows_apart``): each element by SLEEF's exp or the C library's (``_rows_apart``)."""
    from tapescope.core.explain_aten import _libc_exp

    x = np.asarray(args[0])
    if x.dtype not in (np.float32, np.float64) or x.ndim < 2 or not x.size:
        raise ValueError("written for float32 and float64 rows")
    one = x.dtype.type(1)
    with np.errstate(all="ignore"):
        vec = one / (one + sleef_exp(-x))
        tail = one / (one + _libc_exp(-x))
    return _rows_apart(x, vec, tail, kw, recorded)


def _silu_backward_rows_apart(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """ATen's silu backward where an operand's rows lie apart (a Mamba block's gate,
    ``silu(z)`` of ``xz.chunk(2, -1)``: rows of 16, every element the scalar lambda's):
    ``(g * s) * fma(x, 1 - s, 1)``, ``s = 1 / (1 + exp(-x))`` with SLEEF's exp or the C
    library's by where each element falls (``_rows_apart``)."""
    from tapescope.core.explain_aten import _libc_exp

    g, x = np.asarray(args[0]), np.asarray(args[1])
    if x.dtype not in (np.float32, np.float64) or g.shape != x.shape or x.ndim < 2 or \
            not x.size:
        raise ValueError("written for float32 / float64 rows of one shape")
    one = x.dtype.type(1)
    with np.errstate(all="ignore"):
        parts = []
        for e in (sleef_exp(-x), _libc_exp(-x)):
            s = (one / (one + e)).astype(x.dtype)
            parts.append((g * s).astype(x.dtype) * fma(x, one - s, one).astype(x.dtype))
    return _rows_apart(x, parts[0], parts[1], kw, recorded)


def _gelu_half_fit(args: list, kw: dict, recorded: np.ndarray, backward: bool = False
                   ) -> tuple:
    """fp16 autocast's GELU (or its backward) on the CPU (``core.explain_aten.gelu_reduced``):
    ATen's vectorised erf on whole register pairs, the C library's ``erff`` on each thread's
    tail; each chunking of 1 to ``ceil(n / GRAIN_SIZE)`` threads tried, for the AVX-512 build
    and then AVX2's."""
    from tapescope.core.explain_aten import (
        _gelu_backward_half_parts,
        _gelu_half_parts,
        _gelu_tails,
    )

    x = np.asarray(args[1 if backward else 0])
    if x.dtype != np.float16 or \
            _arg(args, kw, 2 if backward else 1, "approximate", "none") != "none":
        raise ValueError("written for float16, gelu's erf form")
    if np.shape(recorded) != x.shape:
        raise ValueError("a recorded output of another shape")
    # (both computations once, each chunking a choice)
    vec, scalar = _gelu_backward_half_parts(np.asarray(args[0]), x) if backward else \
        _gelu_half_parts(x)
    tails = {(lanes, used): _gelu_tails(x.size, used, lanes) for lanes in (32, 16)
             for used in range(1, -(-x.size // GRAIN_SIZE) + 1)}
    every = np.logical_or.reduce(list(tails.values()))
    alone = vec.copy()
    alone[every] = scalar(every)
    want = np.asarray(recorded).view(np.uint8)
    for (lanes, used), tail in tails.items():
        y = np.where(tail, alone, vec).astype(np.float16).reshape(x.shape)
        if np.array_equal(y.view(np.uint8), want):
            isa = "AVX-512" if lanes == 32 else "AVX2"
            return y, f"{isa}, " + (f"{used} threads' chunks" if used > 1 else "one chunk")
    raise ValueError("no chunking gives these bits")


def _mkl_grid_amd_run(args: list, kw: dict, recorded: np.ndarray, by_rows: bool,
                      addmm: bool) -> tuple[np.ndarray, str]:
    """``mm`` / ``addmm`` (beta = 1) by ``core.explain_aten.mkl_grid_amd``, its grid the one
    that gives the recorded bits (``mkl_grid_amd_fit``)."""
    from tapescope.core.explain_aten import mkl_grid_amd_fit

    c, a, b, alpha = _mm_operands(args, kw, addmm)
    got = mkl_grid_amd_fit(a, b, by_rows, recorded, c, alpha)
    if got is None:
        raise ValueError("no grid of MKL's threads gives these bits")
    y, h, w = got
    m, n = y.shape
    return y, (f"rows in parts of {h}" if h < m else "the rows whole") + ", " + \
        (f"columns in parts of {w}" if w < n else "the columns whole")


def _mkl_one_term(args: list, kw: dict) -> np.ndarray:
    """``addmm`` over one term as MKL computes it (``nn.Linear(1, n)``): ``fma(x, w, bias)``,
    the product not rounded before the bias is added (measured against ``torch.addmm``)."""
    bias, a, b = (np.asarray(x) for x in args[:3])
    beta, alpha = _addmm_scales(args, kw)
    if beta != 1 or alpha != 1 or any(x.dtype != np.float32 for x in (bias, a, b)) or \
            a.ndim != 2 or b.ndim != 2 or a.shape[1] != 1 or b.shape[0] != 1:
        raise ValueError("MKL's one-term addmm is written out for float32 (m, 1) @ (1, n), "
                         "beta = alpha = 1")
    return _mkl_mm(a, b, np.broadcast_to(bias, (a.shape[0], b.shape[1])))  # (one term: an fma)


def _mkl_addmm_operands(args: list, kw: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the bias broadcast to the output, a fresh float32 array; a; b) of an ``addmm`` MKL's
    written-out orders take: float32 2-d, beta = alpha = 1; else a ValueError."""
    bias, a, b = (np.asarray(x) for x in args[:3])
    beta, alpha = _addmm_scales(args, kw)
    if beta != 1 or alpha != 1 or any(x.dtype != np.float32 for x in (bias, a, b)) or \
            a.ndim != 2 or b.ndim != 2:
        raise ValueError("MKL's addmm is written out for float32, beta = alpha = 1")
    return np.array(np.broadcast_to(bias, (a.shape[0], b.shape[1])), dtype=np.float32), a, b


def _mkl_addmm(args: list, kw: dict) -> np.ndarray:
    """``addmm`` as MKL computes it (core.explain_aten._sgemm with the bias as the output it
    adds to: a split-K variant's panels summed first and the bias added after differ from it
    once K > 384, the 4x MLP's down projection at d >= 97)."""
    c, a, b = _mkl_addmm_operands(args, kw)
    return _sgemm(a, b, c)


def _mkl_addmm_wide(args: list, kw: dict) -> np.ndarray:
    """``_mkl_addmm`` in MKL's 384-term panels, the rest last (``_mkl_panels(wide=True)``:
    ``core.explain_aten.mkl_sgemm_wide`` says where MKL takes them); ValueError up to 768
    terms (the equal panels of the variant before)."""
    c, a, b = _mkl_addmm_operands(args, kw)
    if a.shape[1] <= 768:
        raise ValueError("the panels of MKL's addmm (the variant before)")
    return _sgemm(a, b, c, wide=True)


def _mkl_addmm_halves(args: list, kw: dict) -> np.ndarray:
    """``_mkl_addmm`` as MKL runs it on two threads where it splits k between them (measured
    on two Intel CPUs, with AMX and without, sessions 40 and 41, at 100 x 777 x 200, 16 x
    1,000 x 64, 2,048 x 1,000 x 64, 100 x 1,000 x 512, 100 x 1,600 x 200, 100 x 2,500 x 64,
    32 x 3,000 x 32 (FPRev trees); other shapes split their rows or take 384-term panels
    whole): k in two halves (the first ``ceil(k / 2)`` terms), each half in one thread's
    384-term panels, the rest last (``_mkl_panels(wide=True)``), the first half added onto
    the bias, the second from zero, the two added after; ValueError where both halves are
    one panel (the same bits as ``_mkl_addmm``)."""
    c, a, b = _mkl_addmm_operands(args, kw)
    h = (a.shape[1] + 1) // 2
    if h <= 384:
        raise ValueError("each half one panel: MKL's addmm on one thread")
    first = _sgemm(a[:, :h], b[:h], c, wide=True)
    second = _sgemm(a[:, h:], b[h:], wide=True)
    return (first + second).astype(np.float32)


def _mkl_addmm_amd(args: list, kw: dict) -> np.ndarray:
    """``_mkl_addmm`` as MKL runs it on an AMD CPU (``_sgemm``'s AMD panels: measured, every
    bit over 6 products of 150-1,000 terms)."""
    with mkl_amd():
        return _mkl_addmm(args, kw)


def _reduced_dims(x: np.ndarray, ax: Any, keep: bool) -> tuple[tuple[int, ...], tuple]:
    """(the reduced dimensions, sorted and non-negative; the output's shape) of a sum of ``x``
    over ``ax`` (keepdim ``keep``); a dimension out of range is refused."""
    if any(not -x.ndim <= int(a) < x.ndim for a in ax):
        raise ValueError("a dimension out of range")
    red = tuple(sorted({int(a) % x.ndim for a in ax}))
    return red, tuple(1 if i in red else n for i, n in enumerate(x.shape)
                      if keep or i not in red)


def _sums(op: str, dt: np.dtype) -> list[_Variant]:
    """sum / mean: the ``sum`` primitive's variants of core.explain's table, in its order."""
    def axes(args: list, kw: dict) -> tuple[Any, bool]:
        if ".dim" not in op:  # sum.default / mean.default: (self, dtype): the whole tensor
            return None, False
        dim = kw.get("dim", args[1] if len(args) > 1 else None)
        keep = kw.get("keepdim", args[2] if len(args) > 2 else False)
        if dim is not None and not isinstance(dim, (list, tuple)):
            dim = [dim]
        return (None if not dim else tuple(dim)), bool(keep)

    def make(fn: Callable) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x = np.asarray(args[0])
            ax, keep = axes(args, kw)
            w = _f32(x)
            if ax is not None and 1 in x.shape:
                # ATen's TensorIterator drops dimensions of size 1 before it picks a loop: a
                # (37, 1) gradient summed over its rows is the inner sum of 37, not a column's
                ax, out = _reduced_dims(x, ax, keep)
                kept = [i for i, n in enumerate(x.shape) if n != 1]
                sq = tuple(kept.index(i) for i in ax if x.shape[i] != 1)
                w = w.reshape([x.shape[i] for i in kept])
                if not sq:  # (only size-1 dimensions reduced: each element its own sum)
                    s = w.reshape(out)
                else:
                    s = np.asarray(fn(w, None if len(sq) == w.ndim else sq, False)).reshape(out)
            else:
                s = np.asarray(fn(w, ax, keep))
            if op.startswith("aten.mean"):
                n = x.size if ax is None else math.prod(x.shape[a] for a in ax)
                s = s / s.dtype.type(n)
            return np.asarray(s).astype(x.dtype)
        return run

    def strided(args: list, kw: dict) -> np.ndarray:
        """The sum over its input as it lay in memory (the recorded layout: ``ops.strided``),
        one thread's order (``aten_sum_strided``)."""
        lay = kw.get(STRIDED_KW)
        x = np.asarray(args[0])
        if lay is None or x.dtype not in (np.float32, np.float64):
            raise ValueError("written for a float32 / float64 input of a recorded layout")
        threads = _RECORDED_THREADS.get()
        if x.size >= GRAIN_SIZE and threads != 1:
            raise ValueError("a sum of several threads' parts")
        ax, keep = axes(args, kw)
        y = aten_sum_strided(x, lay[0], ax, keep)
        if op.startswith("aten.mean"):
            n = x.size if ax is None else math.prod(x.shape[a] for a in ax)
            y = y / y.dtype.type(n)
        return np.asarray(y).astype(x.dtype)

    out = [("reassociation", "ATen's sum over its input as it lay in memory (the recorded "
                             "strides: TensorIterator's dimension order, then cascade_sum's "
                             "2-d loop per outer index)", strided)]
    out += [(v.cause, v.label, make(v.value)) for v in variants_for("sum", dt)
            if v.prim == "sum"]
    if ".dim" in op:
        # (ATen's CPU mean is this sum, then divided by the reduced count: ReduceOps.cpp)
        mean = " / n" if op.startswith("aten.mean") else ""
        out += [("reassociation", f"ATen's sum{mean} of a {name} (its memory in the order "
                                  f"{order}: per outer index the inner block's sum, "
                                  "accumulated into the output in order)",
                 _permuted_sum(order, axes, op)) for name, order in _MEMORY_ORDERS]
        out += [("reassociation", f"ATen's sum{mean} of a {name} (its memory in the order "
                                  f"{order}, the reduced dimensions between kept ones: per "
                                  "outer index the rows' vectorized_outer_sum)",
                 _middle_sum(order, axes, op)) for name, order in _MEMORY_ORDERS
                if len(order) > 2]

        def threads_fit(args: list, kw: dict, recorded: np.ndarray) -> tuple:
            """ATen's sum over leading dimensions on several threads (``aten_sum``'s
            ``threads``): each thread count that cuts the outputs otherwise, 2 to 256."""
            x = np.asarray(args[0])
            ax, _ = axes(args, kw)
            if ax is None or x.size < GRAIN_SIZE:
                raise ValueError("a sum of one thread")
            red = {a % x.ndim for a in ax}
            cols = math.prod(n for i, n in enumerate(x.shape) if i not in red and n != 1)
            seen = set()
            for t in range(2, 257):
                parts = tuple(sum_column_parts(cols, t, x.dtype.itemsize))
                if len(parts) < 2 or parts in seen:
                    continue
                seen.add(parts)
                y = make(partial(aten_sum, threads=t))(args, kw)
                if y.shape == recorded.shape and np.array_equal(
                        y.view(np.uint8), np.asarray(recorded).view(np.uint8)):
                    cuts = ", ".join(str(b) for b, _ in parts[1:])
                    return y, f"as at {t} threads: the outputs cut at {cuts}"
            raise ValueError("no thread count's cut gives these bits")
        out.append(("reassociation", f"ATen's sum{mean} over leading dimensions on several "
                                     "threads (parallel_dim_reduction: the outputs in "
                                     "parallel_for's chunks, each end rounded down to 128 "
                                     "bytes, each part summed on its own)", _Fits(threads_fit)))
    return out


def _mean_of(op: str, x: np.ndarray, red: tuple, s: np.ndarray) -> np.ndarray:
    """A memory-order sum ``s`` of ``x`` over ``red``, divided by the reduced count when the
    op is a mean (ATen's CPU ``mean_out``: ``sum_out(...).div_(count)``)."""
    if not op.startswith("aten.mean"):
        return s
    return s / s.dtype.type(math.prod(x.shape[a] for a in red))


# the layouts a recorded value may have had (its strides are not in the capture file): the
# order of its logical dimensions from the outermost in memory to the innermost
_MEMORY_ORDERS = [("channels-last value over channels-first memory", (0, 3, 1, 2)),
                  ("channels-first value over channels-last memory", (0, 2, 3, 1)),
                  ("view with its last two dimensions swapped", (0, 1, 3, 2)),
                  ("view with its last two dimensions swapped", (0, 2, 1)),
                  ("view with its first two dimensions swapped", (1, 0, 2)),
                  ("transposed matrix", (1, 0)),
                  # in its own order: a per-channel sum over (n, h, w) of a contiguous value
                  # (PReLU's weight gradient; session 43: tried last, the table's sums first)
                  ("contiguous value", (0, 1, 2, 3)), ("contiguous value", (0, 1, 2))]


def _layout_sum_args(order: tuple, axes: Callable, op: str, args: list,
                     kw: dict) -> tuple[np.ndarray, tuple[int, ...], tuple]:
    """``(x, the reduced dimensions, the output's shape)`` of a sum that a memory-order form
    (``_permuted_sum``, ``_middle_sum``) takes: float32 or float64 of ``order``'s rank, over
    some dimensions."""
    x = np.asarray(args[0])
    ax, keep = axes(args, kw)
    if x.ndim != len(order) or x.dtype not in (np.float32, np.float64) or not ax:
        raise ValueError("another rank, type or reduction")
    red, shape = _reduced_dims(x, ax, keep)
    return x, red, shape


def _permuted_sum(order: tuple, axes: Callable, op: str) -> Callable:
    """ATen's sum (float32 / float64) over some dimensions of a value laid out in memory in
    ``order`` (outermost first), as TensorIterator runs it: the kept dimensions one block in
    memory between reduced outer and reduced inner ones; each inner block summed by
    ``vectorized_inner_sum`` (``explain_aten``), the outer index's sums added into the zeroed
    output in order; no inner block: ``vectorized_outer_sum``. Measured: a ConvNeXt layer
    scale's gradient, a channels-last product over channels-first memory, summed over
    (n, h, w)."""
    from tapescope.core.explain_aten import _inner_sum, _outer_sum

    def run(args: list, kw: dict) -> np.ndarray:
        x, red, shape = _layout_sum_args(order, axes, op, args, kw)
        pos = [i for i, d in enumerate(order) if d not in red]  # kept, in memory order
        if not pos or pos != list(range(pos[0], pos[-1] + 1)) or \
                [order[i] for i in pos] != sorted(order[i] for i in pos):
            raise ValueError("the kept dimensions are not one block in memory")
        mem = np.transpose(x, order)
        o = math.prod(mem.shape[:pos[0]])
        k = math.prod(mem.shape[pos[0]:pos[-1] + 1])
        rows = np.ascontiguousarray(mem).reshape(o, k, -1)
        if rows.shape[2] == 1 and o > 1:
            s = _outer_sum(rows[:, :, 0])
        else:
            part = _inner_sum(rows) if rows.shape[2] > 1 else rows[:, :, 0]
            s = np.zeros(k, x.dtype)
            for i in range(o):
                s = (s + part[i]).astype(x.dtype)
        return _mean_of(op, x, red, s.astype(x.dtype)).reshape(shape)
    return run


def _middle_sum(order: tuple, axes: Callable, op: str) -> Callable:
    """ATen's sum (float32 / float64) over dimensions that lie in the middle of a value's
    memory (``order``, outermost first: kept, then reduced, then kept ones): for each index of
    the outer kept block, the reduced block's rows summed as columns over the inner kept block
    by ``vectorized_outer_sum`` (``explain_aten._outer_sum``). Measured: a (b, s, d) view over
    (b, d, s) memory summed over d, 600 of 600 random shapes bit for bit with torch's at 1 and 2
    threads, float32 and float64."""
    from tapescope.core.explain_aten import _outer_sum

    def run(args: list, kw: dict) -> np.ndarray:
        x, red, shape = _layout_sum_args(order, axes, op, args, kw)
        pos = [i for i, d in enumerate(order) if d in red]  # reduced, in memory order
        if pos != list(range(pos[0], pos[-1] + 1)) or pos[0] == 0 or pos[-1] == len(order) - 1:
            raise ValueError("the reduced dimensions are not one block between kept ones")
        kept = [d for d in order if d not in red]
        if kept != sorted(kept):
            raise ValueError("the kept dimensions are not in the output's order in memory")
        mem = np.ascontiguousarray(np.transpose(x, order))
        o, r = math.prod(mem.shape[:pos[0]]), math.prod(mem.shape[pos[0]:pos[-1] + 1])
        rows = mem.reshape(o, r, -1)
        s = np.stack([_outer_sum(rows[i]) for i in range(o)]).astype(x.dtype)
        return _mean_of(op, x, red, s).reshape(shape)
    return run


def _erf(M: Any) -> Callable:
    return lambda x: np.asarray(M.erf(x)).astype(x.dtype)


def _gelu(M: Any) -> Callable:
    def f(x: np.ndarray, a: list, k: dict) -> np.ndarray:
        t = x.dtype.type
        if k.get("approximate", a[1] if len(a) > 1 else "none") == "tanh":
            return t(0.5) * x * (t(1) + M.tanh(t(math.sqrt(2 / math.pi))
                                             * (x + t(0.044715) * x * x * x)))
        return t(0.5) * x * (t(1) + _erf(M)(x / t(math.sqrt(2))))
    return f


# aten op -> its formula in a math namespace M (the ``M`` primitive's variants of the table)
_LIBM: dict[str, Callable[[Any], Callable[[np.ndarray, list, dict], np.ndarray]]] = {
    "tanh": lambda M: lambda x, a, k: M.tanh(x),
    "exp": lambda M: lambda x, a, k: M.exp(x),
    "log": lambda M: lambda x, a, k: M.log(x),
    "sigmoid": lambda M: lambda x, a, k: M.sigmoid(x),
    "erf": lambda M: lambda x, a, k: _erf(M)(x),
    "silu": lambda M: lambda x, a, k: x / (x.dtype.type(1) + M.exp(-x)),
    "gelu": _gelu,
}


def _pointwise_pair(fn: Callable) -> Callable:
    """A (grad, output) backward written as ``fn(a, b, one)`` in the arrays' own float type."""
    def run(args: list, kw: dict) -> np.ndarray:
        a, b = np.asarray(args[0]), np.asarray(args[1])
        if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
            raise ValueError("written for float32 and float64")
        with np.errstate(all="ignore"):
            return np.asarray(fn(a, b, a.dtype.type(1))).astype(a.dtype)
    return run


def _onednn_narrow(kernel: Callable, *xs: Any, dt: Any = None) -> np.ndarray:
    """A float32 oneDNN kernel on bfloat16 (or ``dt``: float16) inputs as PyTorch's CPU runs
    it (oneDNN's bfloat16 / float16 eltwise: each value widened exactly, the float32 kernel,
    the result rounded back; measured on an Intel Xeon for gelu_erf and its backward, 77 to
    100,003 inputs: every bit -- float16's backward on a Xeon with AVX-512 FP16, where
    PyTorch hands it to oneDNN); ValueError for other dtypes."""
    dt = _BF16 if dt is None else np.dtype(dt)
    arrs = [np.asarray(x) for x in xs]
    if any(a.dtype != dt for a in arrs):
        raise ValueError(f"written for {dt.name}")
    return np.asarray(kernel(*(a.astype(np.float32) for a in arrs))).astype(dt)


def _gelu_form(approximate: str, at: int, fn: Callable) -> Callable:
    """A gelu (or gelu_backward) variant for one ``approximate`` form only (its argument at
    ``at``): ``fn(args)``, else ValueError (a miss)."""
    def run(args: list, kw: dict) -> np.ndarray:
        if _arg(args, kw, at, "approximate", "none") != approximate:
            raise ValueError(f"written for gelu's {approximate!r} form")
        return fn(args)
    return run


#: the unary ops PyTorch's CPU build computes with MKL VML (ATen's vml.h with MKL), by VML's
#: name; measured bit for bit on float32 and float64, tails included (tanh: the table's own)
_VML_NAMES = {"exp": "Exp", "log": "Ln", "erf": "Erf"}


def _libm(op: str, name: str) -> list[_Variant]:
    out: list[_Variant] = []
    for v in VARIANTS:
        if v.prim != "M":
            continue
        fn = _LIBM[name](v.value)

        def run(args: list, kw: dict, fn=fn) -> np.ndarray:
            x = np.asarray(args[0])
            return np.asarray(fn(_f32(x), args, kw)).astype(x.dtype)
        out.append((v.cause, v.label, run))
    if name == "gelu":  # PyTorch's CPU float32 GELU: the erf form oneDNN's
        # (core/explain_onednn.py), the tanh form ATen's own (core.explain_aten.gelu_tanh)
        out.append(("libm", "PyTorch's CPU gelu (oneDNN's gelu_erf, AVX-512: a piecewise "
                            "minimax polynomial of erf)",
                    _gelu_form("none", 1, lambda a: gelu_forward(np.asarray(a[0])))))
        out.append(("libm", "PyTorch's CPU gelu in bfloat16 (oneDNN's gelu_erf on the float32 "
                            "values, rounded to bfloat16)",
                    _gelu_form("none", 1, lambda a: _onednn_narrow(gelu_forward, a[0]))))
        out.append(("libm", "PyTorch's CPU gelu, tanh form (ATen's GeluKernel: SLEEF's tanhf, "
                            "beta * fma(kappa, x^3, x))",
                    _gelu_form("tanh", 1, lambda a: gelu_tanh(np.asarray(a[0])))))
        out.append(("libm", "PyTorch's CPU gelu in float16 on a CPU with AVX-512 FP16 "
                            "(oneDNN's gelu_erf on the float32 values, rounded to float16)",
                    _gelu_form("none", 1, lambda a: _onednn_narrow(gelu_forward, a[0],
                                                             dt=np.dtype(np.float16)))))
        out.append(("libm", "PyTorch's CPU gelu in float16 (fp16 autocast; ATen's GeluKernel: "
                            "widened to float32, ATen's vectorised erf (Abramowitz and Stegun "
                            "7.1.26, SLEEF's expf) on whole register pairs, the C library's erff "
                            "on each thread's tail, rounded back)", _Fits(_gelu_half_fit)))
    if name in _VML_NAMES:  # PyTorch's CPU exp, log and erf are MKL VML's (measured)
        vn = _VML_NAMES[name]
        out.append(("libm", f"MKL VML's {name} (HA mode: PyTorch's CPU torch.{name}, float32 "
                            "and float64)", lambda args, kw: _vml(vn, np.asarray(args[0]))))
    if name == "tanh":  # PyTorch's CPU tanh is MKL VML's (the table's aten:tanh variant)
        vml = next(v for v in VARIANTS if v.prim == "aten:tanh")
        out.append((vml.cause, vml.label,
                    lambda args, kw: vml.value([np.asarray(args[0])], {})))
    if name == "sigmoid":  # PyTorch's own CPU kernel (core/explain_aten.py)
        out.append(("libm", ATEN_FORWARD["sigmoid"][1],
                    lambda args, kw: np.asarray(ATEN_FORWARD["sigmoid"][0](
                        [np.asarray(args[0])], {})).astype(np.asarray(args[0]).dtype)))
        # on a view whose rows lie apart (``gates.chunk(3, 1)[0].sigmoid_()``, a GRU's): each
        # row its own vectors and tail (the file holds no strides: tried as a second layout)
        out.append(("libm", ATEN_FORWARD["sigmoid"][1] + ", on rows that lie apart in memory "
                            "(a chunk of a wider tensor, a GRU's gates): each row's whole "
                            "register pairs by SLEEF, its rest by the C library's exp, in each "
                            "thread's chunk", _Fits(_sigmoid_rows_apart)))
    if name == "silu":  # PyTorch's own CPU kernel (core/explain_aten.py)
        out.append(("libm", ATEN_FORWARD["swiglu"][1].replace("silu(a) * u", "silu"),
                    lambda args, kw: _aten_silu(np.asarray(args[0]))))
    return out


def _softmax(op: str) -> list[_Variant]:
    """aten._softmax(x, dim, half_to_float): PyTorch's CPU softmax from the table."""
    fn, label = ATEN_FORWARD["softmax"]

    safe = _base(op) == "_safe_softmax"

    def run(args: list, kw: dict) -> np.ndarray:
        x = np.asarray(args[0])
        with np.errstate(all="ignore"):
            y = np.asarray(fn([x], {"axis": int(args[1])})).astype(x.dtype)
        if safe:  # (a row with every element -inf: 0, not NaN)
            y = np.where(np.all(x == -np.inf, axis=int(args[1]), keepdims=True), 0, y)
        return y.astype(x.dtype)
    def inner(args: list, kw: dict, recorded: np.ndarray) -> tuple:
        """Over another dimension than the last (``_vec_softmax``): its positions' vector and
        scalar paths as each thread count's chunks place them (the recorded count first)."""
        x, dim = np.asarray(args[0]), int(args[1])
        if not x.ndim or dim % x.ndim == x.ndim - 1 or safe:
            raise ValueError("written for _softmax over a dimension other than the last")
        with np.errstate(all="ignore"):
            vec, sca = softmax_inner_paths(x, dim)
        want = np.asarray(recorded).view(np.uint8)
        known = _RECORDED_THREADS.get()
        for t in ([known, 1] if known else range(1, 9)):
            y = softmax_inner_choose(vec, sca, dim, t)
            if np.array_equal(y.view(np.uint8), want):
                return y, f"{t} threads' chunks" if t > 1 else "one chunk"
        raise ValueError("no chunking gives these bits")
    return [("libm", label, run),
            ("libm", "PyTorch's CPU softmax over another dimension than the last (ATen's "
                     "_vec_softmax): per inner position the maximum, exp(x - max) and its sum "
                     "over the dimension in order, then e / sum; SLEEF's exp where a whole "
                     "vector of positions fits in its row and its thread's chunk, the C "
                     "library's on the rest", _Fits(inner))]


def _sqrt(op: str) -> list[_Variant]:
    """aten.sqrt: the square roots of the table's optimizer variants (MKL VML's)."""
    return [(cause, label, lambda args, kw, f=f: np.asarray(f(np.asarray(args[0]))))
            for cause, label, f in UPDATE_VARIANTS]


# ops whose kernels' orders are known not to be written out: an unknown cause of theirs says so
# (a gap of tapescope's, not a fault of the user's run)
_UNWRITTEN = {
    "_scaled_dot_product_flash_attention_for_cpu":
        "PyTorch's CPU flash attention: with dropout, float16, products at several threads, "
        "or in bfloat16 on a CPU without AMX or for some rows of 100 queries and more, its "
        "orders are not written out",
    "_scaled_dot_product_flash_attention_for_cpu_backward":
        "PyTorch's CPU flash attention backward: with dropout, float16 or bfloat16, mixed "
        "scale placements or products at several threads its orders are not written out",
    "convolution":
        "oneDNN's convolutions: dilated or grouped transposed ones, and ones past the search's "
        "budget, are not written out",
    "convolution_backward":
        "oneDNN's convolutions: grouped transposed ones, and weight gradients past the "
        "search's budget, are not written out"}


def _base(op: str) -> str:
    """``aten.add_.Tensor`` -> ``add_`` (judge's ``base_name``; judge imports this module)."""
    parts = op.split(".")
    return parts[1] if len(parts) > 1 else op


def _first(a: Any) -> Any:
    """A foreach op's argument for its output 0: a list's first entry (else ``a`` itself)."""
    return a[0] if isinstance(a, (list, tuple)) and a else a


def _arg(args: list, kw: dict, i: int, name: str, default: Any) -> Any:
    return kw[name] if name in kw else args[i] if len(args) > i else default


def _pw_out(y: Any, like: Any) -> np.ndarray:
    return np.asarray(y).astype(np.asarray(like).dtype)


def _add_alpha_narrow(x: np.ndarray, y: np.ndarray, alpha: float, threads: int) -> np.ndarray:
    """``torch.add(x, y, alpha=alpha)`` of float16 / bfloat16 operands of one shape as ATen's
    CPU kernel computes it (measured, every bit: both types, 3 to 300,001 elements, 1 and 2
    threads): alpha rounded to the type (``scalar_t``, not float), then ``cpu_kernel_vec``
    (``core.explain_aten.vec_segments``) over vectors of 32: ``fma(y, alpha, x)`` in float32
    rounded once, and on each chunk's tail c10's scalar operators, ``x + (alpha * y)`` with the
    product rounded to the type before the add."""
    f32 = np.float32
    al = f32(np.asarray(alpha, dtype=x.dtype))
    X, Y = x.reshape(-1).astype(f32), y.reshape(-1).astype(f32)
    out = np.empty(X.size, x.dtype)
    with np.errstate(all="ignore"):
        for lo, v, hi in vec_segments(X.size, 32, threads):
            if v > lo:
                out[lo:v] = fma(Y[lo:v], al, X[lo:v]).astype(x.dtype)
            if v < hi:
                out[v:hi] = (X[v:hi] + (al * Y[v:hi]).astype(x.dtype).astype(f32)).astype(x.dtype)
    return out.reshape(x.shape)


def _pointwise(base: str) -> list[_Variant]:
    """PyTorch's CPU kernels of the optimizers' pointwise ops (ATen's vectorised
    ``cpu_kernel_vec`` bodies; their scalar tails are compiled with the same contraction),
    the foreach ops' output 0 (their first tensor) included. Each is one multiply-add
    contracted (``fma``), or an evaluation order (``addcdiv``'s ``(value * t1) / t2``)."""
    name = base.removeprefix("_foreach_").rstrip("_")

    def ops(args: list) -> list:
        return [_f32(_first(a)) if isinstance(_first(a), np.ndarray) else _first(a)
                for a in args]

    if name == "lerp":
        def lerp(args: list, kw: dict) -> np.ndarray:
            a = ops(args)
            s, e = a[0], a[1]
            w = np.asarray(_arg(a, kw, 2, "weight", 0.5)).astype(s.dtype)
            small = np.abs(w) < s.dtype.type(0.5)
            coeff = np.where(small, w, w - s.dtype.type(1))
            return _pw_out(fma(coeff, e - s, np.where(small, s, e)), _first(args[0]))
        return [("fma", "PyTorch's CPU lerp (ATen): fma(weight, end - self, self), or "
                        "fma(weight - 1, end - self, end) for |weight| >= 0.5", lerp)]
    if name in ("add", "sub"):
        def add(args: list, kw: dict) -> np.ndarray:
            a = ops(args)
            x, y = a[0], np.asarray(a[1])
            alpha = _arg(a, kw, 2, "alpha", 1)
            if alpha == 1 or x.dtype.kind != "f":
                raise ValueError("no multiply-add to contract")
            al = x.dtype.type(alpha if name == "add" else -alpha)
            return _pw_out(fma(y.astype(x.dtype), al, x), _first(args[0]))

        def add_narrow(threads: int) -> Callable:
            def run(args: list, kw: dict) -> np.ndarray:
                x, y = np.asarray(_first(args[0])), np.asarray(_first(args[1]))
                alpha = _arg(args, kw, 2, "alpha", 1)
                if alpha == 1 or x.dtype not in (np.float16, _BF16) or y.dtype != x.dtype or \
                        y.shape != x.shape:
                    raise ValueError("written for float16 / bfloat16 operands of one shape")
                known = _RECORDED_THREADS.get()  # (one chunk up to the grain: 1's answers)
                if (threads > 1) if x.size <= GRAIN_SIZE else (known or threads) != threads:
                    raise ValueError("another thread count's chunks")
                return _add_alpha_narrow(x, y, alpha if name == "add" else -alpha, threads)
            return run
        return [("fma", f"PyTorch's CPU {name} with alpha (ATen): fma(other, "
                        f"{'' if name == 'add' else '-'}alpha, self)", add)] + [
                ("fma", f"PyTorch's CPU {name} with alpha of float16 / bfloat16 (ATen): alpha "
                        "rounded to the type, whole 32-element vectors by fma(other, alpha, "
                        "self) in float32, each thread's tail in the type's own arithmetic "
                        "(the product rounded to it, then the add)"
                        + (f", {t} threads' chunks" if t > 1 else ""), add_narrow(t))
                for t in (1, 2, 4, 8, 16, 32, 64)]
    if name == "addcmul":
        def addcmul(args: list, kw: dict) -> np.ndarray:
            a = ops(args)
            x, t1, t2 = a[0], a[1], a[2]
            v = x.dtype.type(_arg(a, kw, 3, "value", 1))
            return _pw_out(fma(v * t1, t2, x), _first(args[0]))
        return [("fma", "PyTorch's CPU addcmul (ATen): fma(value * t1, t2, self)", addcmul)]
    if name == "addcdiv":
        def addcdiv(args: list, kw: dict) -> np.ndarray:
            a = ops(args)
            x, t1, t2 = a[0], a[1], a[2]
            v = x.dtype.type(_arg(a, kw, 3, "value", 1))
            return _pw_out(x + (v * t1) / t2, _first(args[0]))
        return [("reassociation", "PyTorch's CPU addcdiv (ATen): self + (value * t1) / t2",
                 addcdiv)]
    return []


_TORCH_NORM = "8-lane vector sum of squares, lanes added in sequence"


def _norms(dt: np.dtype) -> list[_Variant]:
    """``_foreach_norm`` / ``linalg_vector_norm`` of order 2 over the whole tensor: the square
    root of each sum-of-squares variant of core.explain's table (``sumsq``), in its order.
    Measured: PyTorch 2.13's CPU float32 norm is 8 lanes, added in sequence."""
    def make(fn: Callable) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x = np.asarray(_first(args[0]))
            order = _arg(args, kw, 1, "ord", 2)
            dim = kw.get("dim", args[2] if len(args) > 2 else None)
            if order != 2 or dim not in (None, [], ()):
                raise ValueError("written for the 2-norm of a whole tensor")
            w = _f32(x)
            return np.sqrt(np.asarray(fn(w.reshape(-1), None, False))).astype(x.dtype)
        return run

    ins = [w for w in (_in_dtype(v, dt) for v in VARIANTS if v.prim == "sumsq")
           if w is not None]
    # what PyTorch 2.13's CPU norm was measured to be, first: the serial fma chain before it
    # in the table loops over every element in Python (~0.1 s for a 50,000-element grad)
    ins.sort(key=lambda v: v.label != _TORCH_NORM)
    # ATen's reduce-lastdim kernel first: torch's own for the last dimension and for a whole
    # contiguous tensor (one row; measured on 220 tensors of 11 shapes), where the table's
    # orders match only by chance on a single number
    return [("reassociation", "PyTorch's CPU 2-norm over the last dimension (ATen's "
                              "reduce-lastdim kernel, F.normalize's; a whole contiguous "
                              "tensor's as one row): 8-lane vector sums of squares, the lanes "
                              "added in sequence, then the tail's whole fours squared and "
                              "added in turn, the rest by fma", _norm_lastdim),
            ("reassociation", "PyTorch's CPU 2-norm over the last dimensions (ATen's "
                              "reduce-lastdim kernel) of a tensor laid out column-major in its "
                              "last two (a LAPACK result's layout: linalg.solve, "
                              "solve_triangular, cholesky), its elements in memory order",
             _norm_column_major)] + [
        (v.cause, v.label, make(v.value)) for v in ins]


def _embedding_renorm(norm: Callable, lastdim: bool) -> Callable:
    """``embedding_renorm_`` (``nn.Embedding(max_norm=)``) as ATen's CPU loop runs it: each
    looked-up row once, its 2-norm by ``norm`` (a variant of ``_norms``: a whole tensor's, or
    ``lastdim`` the reduce-lastdim kernel's) read as a double, ``scale = max_norm / (norm +
    1e-7)`` in double, the row times ``T(scale)``."""
    def run(args: list, kw: dict) -> np.ndarray:
        w, idx = np.asarray(args[0]), np.asarray(args[1])
        max_norm, p = float(args[2]), float(args[3])
        if p != 2 or w.ndim != 2 or w.dtype not in (np.float32, np.float64) or \
                idx.dtype.kind not in "iu":
            raise ValueError("written for the 2-norm of float32 / float64 rows")
        rows = np.unique(idx.astype(np.int64).reshape(-1))
        if rows.size and (rows[0] < 0 or rows[-1] >= w.shape[0]):
            raise ValueError("an index outside the weight's rows")
        if rows.size > 1 << 16:  # (a norm call a row, for each variant)
            raise ValueError("more rows than the search's budget")
        out = w.copy()
        for r in rows:
            n = float(np.asarray(norm([w[r], 2, [-1]] if lastdim else [w[r], 2],
                                      {})).reshape(-1)[0])
            if n > max_norm:
                out[r] = out[r] * w.dtype.type(max_norm / (n + 1e-7))
        return out
    return run


def _norm_lastdim(args: list, kw: dict) -> np.ndarray:
    """``linalg_vector_norm(x, 2, dim=[-1])`` of a float32 ``x`` as ATen's reduce-lastdim
    kernel computes it, measured (torch 2.13, rows of 1 to 1,000): per row, 8-lane
    accumulators of ``acc + v * v`` over the whole vectors, folded lane 0 + 1 + ... + 7; the
    tail's first ``4 * floor(t / 4)`` elements (the compiler's vectorised squares, added in
    order) ``b + x * x``; the rest ``fma(x, x, b)``; the square root."""
    x = np.asarray(_first(args[0]))
    order = _arg(args, kw, 1, "ord", 2)
    dim = kw.get("dim", args[2] if len(args) > 2 else None)
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    dims_in = list(dims)
    keep = bool(kw.get("keepdim", args[3] if len(args) > 3 else False))
    whole_tensor = not dims and x.ndim > 0  # (a contiguous tensor's elements: one row)
    lead = None
    if whole_tensor:
        shape = x.shape
        x = x.reshape(-1)
        dims = [0]
    elif x.ndim > 1 and len(dims) > 1 and sorted(d % x.ndim for d in dims) == list(
            range(x.ndim - len(dims), x.ndim)):  # the last few dimensions: each run one row
        lead = x.shape[:x.ndim - len(dims)]
        x = x.reshape(lead + (-1,))
        dims = [-1]
    if order != 2 or x.dtype != np.float32 or x.ndim == 0 or [d % x.ndim for d in dims] != [
            x.ndim - 1] or kw.get("dtype") is not None:
        raise ValueError("written for the float32 2-norm over the last dimension")
    n = x.shape[-1]
    whole = n - n % 8
    acc = np.zeros(x.shape[:-1] + (8,), np.float32)
    for d in range(0, whole, 8):
        v = x[..., d:d + 8]
        acc = acc + v * v
    b = acc[..., 0].copy()
    for j in range(1, 8):
        b = b + acc[..., j]
    fours = whole + ((n - whole) // 4) * 4
    for d in range(whole, fours):
        b = b + x[..., d] * x[..., d]
    for d in range(fours, n):
        b = fma(x[..., d], x[..., d], b)
    y = np.sqrt(b)
    if whole_tensor:
        return y.reshape((1,) * len(shape)) if keep else y.reshape(())
    if lead is not None:
        return y.reshape(lead + (1,) * len(dims_in)) if keep else y
    return y[..., None] if keep else y


def _norm_column_major(args: list, kw: dict) -> np.ndarray:
    """``_norm_lastdim`` over the last two (or more) dimensions of a tensor whose last two are
    laid out column-major (LAPACK's results): its elements read in that memory order."""
    x = np.asarray(_first(args[0]))
    dim = kw.get("dim", args[2] if len(args) > 2 else None)
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if x.ndim < 2 or len(dims) < 2 or sorted(d % x.ndim for d in dims) != list(
            range(x.ndim - len(dims), x.ndim)):
        raise ValueError("written for a norm over the last two dimensions or more")
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    return _norm_lastdim([xt, *list(args[1:])], kw)


def _layer_norm() -> list[_Variant]:
    """``native_layer_norm``'s output 0 as PyTorch's CPU kernel computes it (ATen's
    ``LayerNormKernelImplInternal``): the statistics by ``RowwiseMoments`` (core.explain_aten's
    ``aten_moments``), ``rstd = 1 / sqrt(var + eps)``, ``y = fma((x - mean) * rstd, gamma,
    beta)``."""
    def run(args: list, kw: dict) -> np.ndarray:
        x = np.asarray(args[0])
        shape = list(args[1])
        w, b, eps = args[2], args[3], args[4]
        if x.dtype in (np.float16, _BF16) and len(shape) >= 1:
            return _layer_norm_reduced(x, len(shape), w, b, eps)
        if x.dtype not in (np.float32, np.float64) or len(shape) < 1:
            raise ValueError("written for float32 / float64 / float16 / bfloat16")
        t = x.dtype.type
        lead = x.shape[:x.ndim - len(shape)]
        X = x.reshape(lead + (-1,))
        mean, var = aten_moments(X)
        rstd = t(1) / np.sqrt(var + t(eps))
        y = (X - mean) * rstd
        n = X.shape[-1]
        g = np.ones(n, x.dtype) if w is None else np.asarray(w).reshape(-1)
        bb = np.zeros(n, x.dtype) if b is None else np.asarray(b).reshape(-1)
        stat = lead + (1,) * len(shape)
        return (fma(y, g, bb).reshape(x.shape).astype(x.dtype),
                mean.reshape(stat).astype(x.dtype), rstd.reshape(stat).astype(x.dtype))
    return [("reassociation", "PyTorch's CPU layer_norm (ATen: RowwiseMoments' Welford "
                              "statistics, fma((x - mean) * rstd, gamma, beta); a float16 / "
                              "bfloat16 input in float32, fma(fma(x, rstd, -rstd * mean), "
                              "gamma, beta))", run)]


def _ln_param_type(x: np.ndarray, *params: Any) -> np.dtype:
    """The type of a reduced-type layer_norm's statistics: float32 where a float32 gamma or
    beta makes the call mixed-type (ATen's ``is_mixed_type``: autocast's float16 / bfloat16
    activations with the module's float32 parameters), else the input's."""
    arrs = [np.asarray(p) for p in params if p is not None]
    if any(a.dtype not in (x.dtype, np.float32) for a in arrs):
        raise ValueError("gamma and beta in float32 or the input's type")
    return np.dtype(np.float32) if any(a.dtype == np.float32 for a in arrs) else x.dtype


def _layer_norm_reduced(x: np.ndarray, nd: int, w: Any, b: Any, eps: float) -> tuple:
    """``native_layer_norm`` of a float16 / bfloat16 input as ATen's
    ``layer_norm_kernel_mixed_type`` computes it (measured, every bit: both types, float32 and
    same-type parameters, rows of 7 to 1,000): the statistics in float32 by the reduced type's
    ``RowwiseMoments`` (``aten_moments``), ``rstd = 1 / sqrt(var + eps)`` with ``eps`` a
    float, ``y = fma(fma(x, rstd, -rstd * mean), gamma, beta)`` in float32 rounded to the
    input's type; mean and rstd in the parameters' type (``_ln_param_type``)."""
    f32 = np.float32
    pt = _ln_param_type(x, w, b)
    lead = x.shape[:x.ndim - nd]
    X = x.reshape(lead + (-1,))
    n = X.shape[-1]
    mean, var = aten_moments(X)
    with np.errstate(all="ignore"):
        rstd = f32(1) / np.sqrt(var + f32(eps))
        g = np.ones(n, f32) if w is None else np.asarray(w).reshape(-1).astype(f32)
        bb = np.zeros(n, f32) if b is None else np.asarray(b).reshape(-1).astype(f32)
        y = fma(fma(X.astype(f32), rstd, -rstd * mean), g, bb)
    stat = lead + (1,) * nd
    return (y.reshape(x.shape).astype(x.dtype), mean.reshape(stat).astype(pt),
            rstd.reshape(stat).astype(pt))


def _layer_norm_backward(threads: int) -> Callable:
    """``native_layer_norm_backward`` as PyTorch's CPU kernel computes it (ATen's
    ``LayerNormBackwardKernelImplInternal``, 8 float32 / 4 float64 lanes, measured): per row
    ``ds``, ``db`` by :func:`_lane_sum` of ``(dy * x) * gamma`` and ``dy * gamma``, ``b =
    fma(db, mean, -ds) * rstd^3 / N``, ``c = fma(-b, mean, -(db * rstd / N))``, ``dx = fma(b,
    x, (rstd * dy) * gamma) + c``; ``dgamma`` and ``dbeta`` as the rows' sums ``fma(dy,
    fma(rstd, x, -rstd * mean), acc)`` and ``acc + dy`` in one buffer per thread (the rows
    split in ``threads`` even chunks), the buffers added in order. The outputs its mask asks
    for, in order."""
    def run(args: list, kw: dict) -> tuple:
        dy, x = np.asarray(args[0]), np.asarray(args[1])
        shape, mean, rstd, w, mask = list(args[2]), args[3], args[4], args[5], args[7]
        if x.dtype in (np.float16, _BF16) and dy.shape == x.shape and shape:
            return _layer_norm_backward_mixed(dy, x, math.prod(shape), mean, rstd, w, mask,
                                              threads)
        if x.dtype not in (np.float32, np.float64) or dy.shape != x.shape or not shape:
            raise ValueError("written for float32 / float64")
        t = x.dtype.type
        n = math.prod(shape)
        X, DY = x.reshape(-1, n), dy.reshape(-1, n)
        M = np.asarray(mean).reshape(-1)
        A = np.asarray(rstd).reshape(-1)
        g = None if w is None else np.asarray(w).reshape(-1)
        lanes, tree = (8, True) if x.dtype == np.float32 else (4, False)
        out = []
        if mask[0]:
            ds = _lane_sum(DY * X, g, lanes, tree) if g is not None else \
                _lane_sum(DY, X, lanes, tree)
            db = _lane_sum(DY, g, lanes, tree) if g is not None else \
                _lane_sum(DY, None, lanes, tree)
            scale = t(1) / t(n)
            b = fma(db, M, -ds) * A * A * A * scale
            c = fma(-b, M, -((db * A) * scale))
            ad = A[:, None] * DY if g is None else (A[:, None] * DY) * g
            out.append((fma(b[:, None], X, ad) + c[:, None]).reshape(x.shape).astype(x.dtype))
        if mask[1] or mask[2]:
            rows = X.shape[0]
            nt = max(1, min(threads, rows))
            chunk = -(-rows // nt)
            gam, bet = np.zeros(n, x.dtype), np.zeros(n, x.dtype)
            for s0 in range(0, rows, chunk):
                bg, bb = np.zeros(n, x.dtype), np.zeros(n, x.dtype)
                for i in range(s0, min(rows, s0 + chunk)):
                    bg = fma(DY[i], fma(A[i], X[i], -A[i] * M[i]), bg)
                    bb = bb + DY[i]
                gam, bet = gam + bg, bet + bb
            if mask[1]:
                out.append(gam.reshape(shape))
            if mask[2]:
                out.append(bet.reshape(shape))
        return tuple(out)
    return run


def _layer_norm_backward_mixed(dy: np.ndarray, x: np.ndarray, n: int, mean: Any, rstd: Any,
                               w: Any, mask: Any, threads: int) -> tuple:
    """``native_layer_norm_backward`` of a float16 / bfloat16 input with float32 gamma (fp16
    and bf16 autocast's LayerNorm) as ATen's mixed-type ``layer_norm_backward_frame`` computes
    it (measured, every bit, 1 and 2 threads, rows of 1 to 1,000), and with gamma of the
    input's type (a model cast to bfloat16: the same arithmetic, gamma, mean and rstd widened
    exactly, dgamma and dbeta rounded to that type at the end; every bit, rows of 3 to 1,000,
    both types, 1 and 2 threads): in float32, ``ds`` and
    ``db`` by ``core.explain_aten.reduced_row_sum`` (8 lanes, ``ds``'s adds contracted),
    ``b = fma(db, mean, -ds) * rstd^3 / N``, ``c = fma(-b, mean, -(db * rstd / N))``,
    ``dx = fma(b, x, (rstd * dy) * gamma) + c`` rounded to the
    input's type; dgamma and dbeta summed per thread in a buffer **of the input's type**
    (each row's ``fma(dy, fma(rstd, x, -rstd * mean), acc)`` and ``acc + dy`` rounded back),
    then the ``threads`` buffers added in float32."""
    f32 = np.float32
    if w is None or np.asarray(w).dtype not in (f32, x.dtype):
        raise ValueError("written for gamma in float32 (the mixed-type kernel) or the "
                         "input's type")
    pt = np.asarray(w).dtype
    X, DY = x.reshape(-1, n).astype(f32), dy.reshape(-1, n).astype(f32)
    M = np.asarray(mean).astype(f32).reshape(-1)
    A = np.asarray(rstd).astype(f32).reshape(-1)
    g = np.asarray(w).reshape(-1).astype(f32)
    out = []
    with np.errstate(all="ignore"):
        if mask[0]:
            db_t = DY * g  # (ds: x * (dy * gamma), its adds contracted; db's not)
            ds, db = reduced_row_sum(X, db_t, 8, True), reduced_row_sum(DY, g, 8)
            scale = f32(1) / f32(n)
            b = fma(db, M, -ds) * A * A * A * scale
            c = fma(-b, M, -((db * A) * scale))
            dx = fma(b[:, None], X, (A[:, None] * DY) * g) + c[:, None]
            out.append(dx.reshape(x.shape).astype(x.dtype))
        if mask[1] or mask[2]:
            gam, bet = np.zeros(n, f32), np.zeros(n, f32)
            rows = _row_runs(X.shape[0], threads)
            for r in rows:
                bg, bb = np.zeros(n, x.dtype), np.zeros(n, x.dtype)
                for i in r:
                    bg = fma(DY[i], fma(A[i], X[i], -A[i] * M[i]), bg.astype(f32)).astype(x.dtype)
                    bb = (bb.astype(f32) + DY[i]).astype(x.dtype)
                gam, bet = gam + bg.astype(f32), bet + bb.astype(f32)
            # (the threads past the rows' chunks add their zero buffers: no change)
            if mask[1]:
                out.append(gam.reshape(np.shape(w)).astype(pt))
            if mask[2]:
                out.append(bet.reshape(np.shape(w)).astype(pt))
    return tuple(out)


def _batch_norm(args: list, kw: dict) -> tuple:
    """``native_batch_norm`` in training (an input of 3 or more dimensions, contiguous) as
    PyTorch's CPU kernel computes it (ATen's ``batch_norm_cpu_collect_stats_contiguous_impl``,
    ``batch_norm_cpu_update_stats_template`` and ``batch_norm_cpu_transform_input``): per
    channel, over (image, position) in memory order, a serial float64 sum (``acc_type``),
    ``mean = T(sum / n)``; a serial float64 sum of the T squares ``(x - mean)^2``, rounded to T;
    ``invstd = 1 / sqrt(var_sum / n + eps)`` in float64; ``y = fma(x, a, fma(-mean, a,
    bias))``, ``a = invstd * weight``; the running mean ``m * mean + (1 - m) * running`` in
    T (m: the momentum in T), the running variance ``m * var_sum / (n - 1) + (1 - m) *
    running`` in float64, its second product in T. The outputs in the capture's order: the
    running mean and variance (when given), then y, save_mean, save_invstd."""
    x, w, b, rm, rv = np.asarray(args[0]), args[1], args[2], args[3], args[4]
    training, momentum, eps = bool(args[5]), float(args[6]), float(args[7])
    if not training or x.ndim < 3 or x.dtype not in (np.float32, np.float64) or \
            (rm is None) != (rv is None):
        raise ValueError("written for training on N, C, spatial... float32 / float64")
    f64 = np.float64
    c = x.shape[1]
    xc = np.moveaxis(x, 1, 0).reshape(c, -1)  # per channel: (image, position) in memory order
    n = xc.shape[1]
    if n < 2:
        raise ValueError("one value per channel")
    # np.add.accumulate adds in sequence (numpy's sum would be pairwise)
    mean = (np.add.accumulate(xc.astype(f64), axis=1)[:, -1] / f64(n)).astype(x.dtype)
    d = xc - mean[:, None]
    vs = np.add.accumulate((d * d).astype(f64), axis=1)[:, -1].astype(x.dtype)
    return _bn_finish(x, w, b, rm, rv, momentum, eps, mean, vs)


def _batch_norm_eval(args: list, kw: dict) -> tuple:
    """``native_batch_norm`` in evaluation (``model.eval()``: the running statistics read,
    not written) as PyTorch's CPU kernel computes it (ATen's
    ``batch_norm_cpu_collect_linear_and_constant_terms``, then ``kernel0``'s ``x * alpha +
    beta``, contracted): per channel ``invstd = 1 / sqrt(running_var + eps)`` in T (eps
    rounded to T), ``a = invstd * weight``, ``beta = fma(-running_mean, a, bias)``, ``y =
    fma(x, a, beta)``. Elementwise, so any layout (channels-last, rows of channels) alike.
    The outputs in the capture's order: the running mean and variance as they were, y, and
    the empty save_mean and save_invstd."""
    x, w, b, rm, rv = np.asarray(args[0]), args[1], args[2], args[3], args[4]
    if bool(args[5]) or rm is None or rv is None or x.ndim < 2 or \
            x.dtype not in (np.float32, np.float64):
        raise ValueError("written for evaluation with running statistics, float32 / float64")
    t, c = x.dtype.type, x.shape[1]
    rm, rv = np.asarray(rm).reshape(-1), np.asarray(rv).reshape(-1)
    if rm.dtype != x.dtype or rv.dtype != x.dtype:
        raise ValueError("running statistics of another type")
    invstd = t(1) / np.sqrt(rv + t(float(args[7])))
    a = invstd * (np.ones(c, x.dtype) if w is None else np.asarray(w).reshape(-1))
    bias = np.zeros(c, x.dtype) if b is None else np.asarray(b).reshape(-1)
    sh = (1, c) + (1,) * (x.ndim - 2)
    y = fma(x, a.reshape(sh), fma(-rm, a, bias).reshape(sh)).astype(x.dtype)
    empty = np.zeros(0, x.dtype)
    return np.asarray(args[3]), np.asarray(args[4]), y, empty, empty


def _reduced_channel_sums(v: np.ndarray) -> np.ndarray:
    """Each channel's sum of ``v`` (float32, (images, channels, positions)) as ATen's reduced-type
    batch_norm kernels form it: every image's whole vectors of 32 into one 16-lane accumulator
    (each vector's two halves added in turn), the images' tails into a scalar, the lanes folded
    as a tree and added to it."""
    n_b, c, img = v.shape
    whole = img - img % 32
    acc, s = np.zeros((c, 16), np.float32), np.zeros(c, np.float32)
    for i in range(n_b):
        for d in range(0, whole, 16):
            acc = acc + v[i, :, d:d + 16]
        for d in range(whole, img):
            s = s + v[i, :, d]
    return s + _fold_lanes(acc, 16, True)


def _batch_norm_narrow(args: list, kw: dict) -> tuple:
    """``native_batch_norm`` in training of a contiguous bfloat16 input whose parameters and
    running statistics are bfloat16 too (a model cast to it) as ATen's reduced-type kernels
    compute it (``batch_norm_cpu_collect_stats_contiguous_internal``; measured, every bit over
    8 shapes at 1 and 2 threads; float16 takes another path here, not written): per channel in
    float32, every image's whole vectors of 32 into one 16-lane accumulator (each vector's two
    halves added in turn), the images' tails into a scalar, the lanes folded as a tree and
    added to it; ``mean = sum / N``
    stored in the type; the squares ``(x - mean)^2`` (mean unrounded) the same way, their sum
    stored in the type; ``invstd = 1 / sqrt(var_sum / N + eps)``, the division in the type, the
    root in float64; ``y = x * a + b`` in float32, ``a = invstd * weight``, ``b = bias - mean *
    a``; the running statistics by c10's scalar operators with the momentum in the type:
    ``momentum * mean + (1 - momentum) * running``, each product and the sum rounded to the
    type; the variance's ``momentum * unbiased + (1 - momentum) * running``, ``unbiased =
    var_sum / (N - 1)`` divided in the type, its product with the momentum left in float32
    (c10's bfloat16 x float operator), the other rounded. The outputs in the capture's order
    (``_batch_norm``'s)."""
    x, w, b, rm, rv = np.asarray(args[0]), args[1], args[2], args[3], args[4]
    training, momentum, eps = bool(args[5]), float(args[6]), float(args[7])
    dt = x.dtype
    if not training or x.ndim < 3 or dt != _BF16 or \
            any(p is not None and np.asarray(p).dtype != dt for p in (w, b, rm, rv)):
        raise ValueError("written for training on bfloat16 with bfloat16 parameters")
    f32 = np.float32

    def t(v: Any) -> np.ndarray:  # rounded to the type, back in float32
        return np.asarray(v).astype(dt).astype(f32)
    n_b, c = x.shape[:2]
    img = x.size // (n_b * c)
    X = x.reshape(n_b, c, img).astype(f32)
    n = n_b * img
    with np.errstate(all="ignore"):
        mean = _reduced_channel_sums(X) / f32(n)
        dev = X - mean[None, :, None]
        vs = t(_reduced_channel_sums(dev * dev))
        mean_t = t(mean)
        var = t(vs / t(n)).astype(np.float64)
        invstd = t((1.0 / np.sqrt(var + eps)).astype(f32))
        a = invstd * (np.ones(c, f32) if w is None else np.asarray(w).astype(f32).reshape(-1))
        bias = np.zeros(c, f32) if b is None else np.asarray(b).astype(f32).reshape(-1)
        beta = bias - mean_t * a
        y = (X * a[None, :, None] + beta[None, :, None]).astype(dt).reshape(x.shape)
        outs = (y, mean_t.astype(dt), invstd.astype(dt))
        if rm is None:
            return outs
        m, keep = t(momentum), t(1 - momentum)
        new_rm = t(m * mean_t) + t(np.asarray(rm).astype(f32).reshape(-1) * keep)
        new = [new_rm.astype(dt).reshape(np.shape(rm))]
        if rv is not None:  # (c10's mixed operators: the bfloat16 x float product stays float)
            unbiased = t(vs / t(n - 1))
            new_rv = m * unbiased + t(np.asarray(rv).astype(f32).reshape(-1) * keep)
            new.append(new_rv.astype(dt).reshape(np.shape(rv)))
        return (*new, *outs)


def _batch_norm_backward_narrow(args: list, kw: dict) -> tuple:
    """``native_batch_norm_backward`` in training of a contiguous bfloat16 input with bfloat16
    parameters as ATen's reduced-type ``batch_norm_cpu_backward_contiguous_internal`` computes
    it: per channel in float32, ``sum(dy)`` and ``sum((x - mean) * dy)`` as the forward's
    statistics (every image's whole vectors of 32 into a 16-lane accumulator, the tails into a
    scalar, the lanes folded as a tree and added), ``k = dotp * invstd * invstd / N``,
    ``dx = ((dy - sum / N) - (x - mean) * k) * invstd * w`` rounded to bfloat16, dweight
    ``dotp * invstd`` and dbias ``sum`` rounded. Measured (8 shapes, 1 and 2 threads):
    dweight and dbias every bit; dx every bit but one element of 32,768 in one shape (a value
    of ~1e-6 left by cancellation; the contraction and evaluation orders tried give the same
    bits). The outputs its mask asks for, in order."""
    dy, x, w = np.asarray(args[0]), np.asarray(args[1]), args[2]
    smean, sinv, train, mask = args[5], args[6], bool(args[7]), args[9]
    dt = x.dtype
    if not train or x.ndim < 3 or dt != _BF16 or dy.dtype != dt or smean is None or \
            any(p is not None and np.asarray(p).dtype != dt for p in (w, smean, sinv)):
        raise ValueError("written for training on bfloat16 with bfloat16 parameters")
    f32 = np.float32
    n_b, c = x.shape[:2]
    img = x.size // (n_b * c)
    X = x.reshape(n_b, c, img).astype(f32)
    DY = dy.reshape(n_b, c, img).astype(f32)
    n = n_b * img
    mean = np.asarray(smean).astype(f32).reshape(-1)
    inv = np.asarray(sinv).astype(f32).reshape(-1)
    wt = np.ones(c, f32) if w is None else np.asarray(w).astype(f32).reshape(-1)
    with np.errstate(all="ignore"):
        dev = X - mean[None, :, None]
        s, d = _reduced_channel_sums(DY), _reduced_channel_sums(dev * DY)
        k = d * inv * inv / f32(n)
        gm = s / f32(n)
        dx = fma(-dev, k[None, :, None], DY - gm[None, :, None]) * inv[None, :, None] \
            * wt[None, :, None]
        out = []
        if mask[0]:
            out.append(dx.astype(dt).reshape(x.shape))
        if mask[1]:
            out.append((d * inv).astype(dt))
        if mask[2]:
            out.append(s.astype(dt))
    return tuple(out)


def _bn_finish(x: np.ndarray, w: Any, b: Any, rm: Any, rv: Any, momentum: float, eps: float,
               mean: np.ndarray, vs: np.ndarray) -> tuple:
    """batch_norm's outputs from its per-channel mean and variance sum (T): ``invstd``, ``y``
    and the running statistics, in the capture's order (``_batch_norm``'s docstring)."""
    t, f64 = x.dtype.type, np.float64
    c = x.shape[1]
    n = x.size // c
    invstd = (f64(1) / np.sqrt((vs / t(n)).astype(f64) + f64(eps))).astype(x.dtype)
    a = invstd * (np.ones(c, x.dtype) if w is None else np.asarray(w).reshape(-1))
    bias = np.zeros(c, x.dtype) if b is None else np.asarray(b).reshape(-1)
    sh = (1, c) + (1,) * (x.ndim - 2)
    y = fma(x, a.reshape(sh), fma(-mean, a, bias).reshape(sh)).astype(x.dtype)
    if rm is None:
        return y, mean, invstd
    rm, rv = np.asarray(rm), np.asarray(rv)
    m = rm.dtype.type(momentum)
    new_rm = (m * mean.astype(rm.dtype) + (rm.dtype.type(1) - m) * rm).astype(rm.dtype)
    unbiased = (vs / t(n - 1)).astype(f64)
    keep = ((rv.dtype.type(1) - rv.dtype.type(momentum)) * rv).astype(f64)
    new_rv = (f64(rv.dtype.type(momentum)) * unbiased + keep).astype(rv.dtype)
    return new_rm, new_rv, y, mean, invstd


def _row_runs(n: int, threads: int) -> list[range]:
    """``at::parallel_for(0, n, 1)``'s chunks over ``threads`` threads: ceil(n / used) rows
    each, ``used = min(threads, n)``."""
    used = max(1, min(threads, n))
    step = -(-n // used)
    return [range(a, min(a + step, n)) for a in range(0, n, step)]


def _runs_sum(x: np.ndarray, threads: int, step: Callable) -> np.ndarray:
    """Per run of rows (``_row_runs``) ``acc = step(acc, i)`` row by row from zeros in x's
    type (a thread's buffer), the runs' accumulators added in float64, rounded to x's type."""
    total = np.zeros(x.shape[1], np.float64)
    for r in _row_runs(x.shape[0], threads):
        acc = np.zeros(x.shape[1], x.dtype)
        for i in r:
            acc = step(acc, i).astype(x.dtype)
        total = total + acc
    return total


def _batch_norm_rows(threads: int) -> Callable:
    """``native_batch_norm`` in training on (rows, channels) (BatchNorm1d's 2-D input) as
    PyTorch's CPU computes it (ATen's ``batch_norm_cpu_collect_stats_channels_last_impl``,
    measured at 1 and 2 threads over 75 shapes): the rows in ``threads`` runs, each run's
    channels summed row by row in T (a buffer per thread), the runs' sums added in float64,
    ``mean = T(sum / n)``; each run's ``fma(x - mean, x - mean, acc)`` in T, the runs added in
    float64 and rounded to T; then as the N, C, ... kernel: ``invstd = 1 / sqrt(T(var / n) +
    eps)``, ``y = fma(x, a, fma(-mean, a, bias))``, the running statistics."""
    def run(args: list, kw: dict) -> tuple:
        x, w, b, rm, rv = np.asarray(args[0]), args[1], args[2], args[3], args[4]
        training, momentum, eps = bool(args[5]), float(args[6]), float(args[7])
        if not training or x.ndim != 2 or x.dtype not in (np.float32, np.float64) or \
                (rm is None) != (rv is None) or x.shape[0] < 2 or threads > x.shape[0]:
            raise ValueError("written for training on (rows, channels), float32 / float64, "
                             "at most a run per row")
        mean = (_runs_sum(x, threads, lambda acc, i: acc + x[i]) / x.shape[0]).astype(x.dtype)
        d = (x - mean).astype(x.dtype)
        vs = _runs_sum(x, threads, lambda acc, i: fma(d[i], d[i], acc)).astype(x.dtype)
        return _bn_finish(x, w, b, rm, rv, momentum, eps, mean, vs)
    return run


def _batch_norm_rows_backward(threads: int, tail_fma: bool = False,
                              lanes: int | None = None) -> Callable:
    """``native_batch_norm_backward`` in training on (rows, channels) as PyTorch's CPU
    computes it (ATen's ``batch_norm_cpu_backward_channels_last_impl``, measured at 1 and 2
    threads): per run of rows (as the forward's), ``sum += dy`` and ``dotp = fma(x - mean, dy,
    dotp)`` in T, the runs added in float64 and rounded to T; ``k = ((dotp * invstd) * invstd)
    / n``, ``grad_mean = sum / n``, ``dx = ((fma(-(x - mean), k, dy - grad_mean) * invstd) *
    w`` on whole 16- (8-) channel vectors and ``dy - grad_mean - (x - mean) * k`` (no fma: the
    kernel's own tail loop) on the rest; ``dweight = dotp * invstd``, ``dbias = sum``.
    ``tail_fma``: the rest contracted too (the kernel's tail is a partial vector, ``Vec::loadu(p,
    count)``; torch 2.13's build contracts it, measured in session 38 on an AMD EPYC at 8, 24
    and 40 channels, rows and channels-last; tried only where there is a tail). ``lanes``: the
    vector's (None: the AVX-512 build's 16 floats / 8 doubles; 8 floats: the AVX2 build's,
    measured on the Xeon with AMX in session 46: 12 channels as 8 contracted + 4 not; tried
    only where it cuts the channels otherwise)."""
    def run(args: list, kw: dict) -> tuple:
        dy, x, w = np.asarray(args[0]), np.asarray(args[1]), args[2]
        sm, si, train, mask = args[5], args[6], bool(args[7]), args[9]
        if not train or x.ndim != 2 or x.dtype not in (np.float32, np.float64) or \
                dy.shape != x.shape or sm is None or si is None or threads > x.shape[0]:
            raise ValueError("written for training on (rows, channels), float32 / float64")
        t = x.dtype.type
        n, c = x.shape
        full = c - c % (lanes or _LANES_OF[x.dtype])
        if lanes and full == c - c % _LANES_OF[x.dtype]:
            raise ValueError("the same channels in whole vectors as the AVX-512 build's")
        if tail_fma and full == c:
            raise ValueError("no partial vector of channels: the variant without tail_fma")
        mean, invstd = np.asarray(sm).reshape(-1), np.asarray(si).reshape(-1)
        wv = np.ones(c, x.dtype) if w is None else np.asarray(w).reshape(-1)
        d = (x - mean).astype(x.dtype)
        total = _runs_sum(x, threads, lambda acc, i: acc + dy[i]).astype(x.dtype)
        dotp = _runs_sum(x, threads, lambda acc, i: fma(d[i], dy[i], acc)).astype(x.dtype)
        out = []
        if mask[0]:
            k = (((dotp * invstd).astype(x.dtype) * invstd).astype(x.dtype) / t(n)).astype(
                x.dtype)
            gm = (total / t(n)).astype(x.dtype)
            base = (dy - gm).astype(x.dtype)
            inner = fma(-d, k, base).astype(x.dtype)
            if not tail_fma:
                inner[:, full:] = (base[:, full:] - (d[:, full:] * k[full:]).astype(x.dtype))
            out.append(((inner * invstd).astype(x.dtype) * wv).astype(x.dtype))
        if mask[1]:
            out.append((dotp * invstd).astype(x.dtype))
        if mask[2]:
            out.append(total)
        return tuple(out)
    return run


def _channels_last(run: Callable, backward: bool) -> Callable:
    """A (rows, channels) batch_norm variant on an N, C, spatial... input laid out channels
    last (``model.to(memory_format=torch.channels_last)``: ATen's channels-last kernels treat
    it as N x H x W rows of C channels, the ones ``_batch_norm_rows`` writes out; the capture
    keeps values, not layouts, so this is tried on every such input of 8 channels or more):
    x (and dy) permuted to rows, the variant run, its x-shaped outputs permuted back."""
    def go(args: list, kw: dict) -> Any:
        at = (0, 1) if backward else (0,)
        x = np.asarray(args[at[-1]])
        # (torch's channels-last formats are 4-D and 5-D; with fewer than 8 channels the
        # statistics are too few elements to single out one of the runs' orders: one ulp off
        # a contiguous kernel's came out of some run count, measured)
        if x.ndim not in (4, 5) or x.shape[1] < 8:
            raise ValueError("an N, C, H, W (or N, C, D, H, W) input of 8 channels or more")
        order = (0, *range(2, x.ndim), 1)
        a = list(args)
        for i in at:
            a[i] = np.ascontiguousarray(np.transpose(np.asarray(args[i]), order)).reshape(
                -1, x.shape[1])
        rows = a[at[-1]].shape
        back = (x.shape[0], *x.shape[2:], x.shape[1])
        inv = (0, x.ndim - 1, *range(1, x.ndim - 1))

        def unrows(y: Any) -> Any:
            if isinstance(y, np.ndarray) and y.shape == rows:
                return np.ascontiguousarray(np.transpose(y.reshape(back), inv))
            return y
        got = run(a, kw)
        return tuple(unrows(y) for y in got) if isinstance(got, tuple) else unrows(got)
    return go


def _batch_norm_backward_generic(args: list, kw: dict) -> tuple:
    """``native_batch_norm_backward`` in training (float32) where the gradient's layout is not
    the input's (a BatchNorm1d after a transpose: ``dy`` laid out N, L, C, the input N, C, L;
    on (N, C), ``dy`` a column slice of a wider gradient, a ``torch.cat``'s): ATen's generic
    path (``batch_norm_backward_cpu_template``). ``sum`` is ATen's sum kernel over the
    gradient's memory (its rows of channels, summed down); per channel ``dotp +=
    (x - mean) * dy`` (the product in float32, the sum in float64) over the input's order;
    ``k = dotp * invstd * invstd / n`` and ``grad_mean = sum / n`` in float32; ``dx = ((dy -
    grad_mean - (x - mean) * k) * invstd) * w``; ``dweight = dotp * invstd`` (float64, then
    rounded), ``dbias = sum``. The outputs its mask asks for, in order."""
    from tapescope.core.explain_aten import aten_sum

    dy, x, w = np.asarray(args[0]), np.asarray(args[1]), args[2]
    sm, si, train, mask = args[5], args[6], bool(args[7]), args[9]
    if not train or x.ndim < 2 or x.dtype != np.float32 or dy.shape != x.shape or \
            sm is None or si is None:
        raise ValueError("written for training on N, C[, spatial...] float32")
    f = np.float32
    c = x.shape[1]
    n = x.size // c
    order = (0, *range(2, x.ndim), 1)
    total = aten_sum(np.ascontiguousarray(np.transpose(dy, order)).reshape(-1, c), 0).astype(f)
    mean, inv = np.asarray(sm, f).reshape(-1), np.asarray(si, f).reshape(-1)
    wv = np.ones(c, f) if w is None else np.asarray(w, f).reshape(-1)
    X = np.moveaxis(x, 1, 0).reshape(c, -1)
    DY = np.moveaxis(dy, 1, 0).reshape(c, -1)
    centred = (X - mean[:, None]).astype(f)
    # (serial, as cpu_serial_kernel: the products in float32, their sum in float64)
    dotp = serial_sum((centred * DY).astype(f).astype(np.float64), axis=1)
    out = []
    if mask[0]:
        k = ((((dotp.astype(f) * inv).astype(f)) * inv).astype(f) / f(n)).astype(f)
        gm = (total / f(n)).astype(f)
        dx = (((DY - gm[:, None]).astype(f) - (centred * k[:, None]).astype(f)).astype(f)
              * inv[:, None]).astype(f)
        dx = (dx * wv[:, None]).astype(f)
        out.append(np.ascontiguousarray(np.moveaxis(dx.reshape(c, x.shape[0], *x.shape[2:]),
                                                    0, 1)))
    if mask[1]:
        out.append((dotp * inv.astype(np.float64)).astype(f))
    if mask[2]:
        out.append(total)
    return tuple(out)


_LANES_OF = {np.dtype(np.float32): 16, np.dtype(np.float64): 8}
_BN_RUNS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # the thread counts tried


def _batch_norm_backward(args: list, kw: dict) -> tuple:
    """``native_batch_norm_backward`` in training as PyTorch's CPU kernel computes it (ATen's
    ``batch_norm_cpu_backward_contiguous_impl``): per channel and image, ``sum(dy)`` and
    ``sum((x - mean) * dy)`` by :func:`_lane_sum` (layer_norm's lanes), added over the images
    in float64; ``k = dotp * invstd * invstd / N`` and ``grad_mean = sum / N`` in T, ``dx =
    (fma(-(x - mean), k, dy - grad_mean) * invstd) * weight``, ``dweight = dotp * invstd``,
    ``dbias = sum``. The outputs its mask asks for, in order."""
    dy, x, w = np.asarray(args[0]), np.asarray(args[1]), args[2]
    sm, si, train, mask = args[5], args[6], bool(args[7]), args[9]
    if not train or x.ndim < 3 or x.dtype not in (np.float32, np.float64) or \
            dy.shape != x.shape or sm is None or si is None:
        raise ValueError("written for training on N, C, spatial... float32 / float64")
    t, f64 = x.dtype.type, np.float64
    nb, c = x.shape[:2]
    X, DY = x.reshape(nb, c, -1), dy.reshape(nb, c, -1)
    mean, invstd = np.asarray(sm).reshape(-1), np.asarray(si).reshape(-1)
    wv = np.ones(c, x.dtype) if w is None else np.asarray(w).reshape(-1)
    lanes, tree = (8, True) if x.dtype == np.float32 else (4, False)
    total, dotp = np.zeros(c, f64), np.zeros(c, f64)
    for i in range(nb):
        total = total + _lane_sum(DY[i], None, lanes, tree).astype(f64)
        dotp = dotp + _lane_sum(X[i] - mean[:, None], DY[i], lanes, tree).astype(f64)
    n = nb * X.shape[2]
    out = []
    if mask[0]:
        k = dotp.astype(x.dtype) * invstd * invstd / t(n)
        gm = (total / f64(n)).astype(x.dtype)
        inner = fma(-(X - mean[None, :, None]), k[None, :, None], DY - gm[None, :, None])
        out.append(((inner * invstd[None, :, None]) * wv[None, :, None]).reshape(x.shape)
                   .astype(x.dtype))
    if mask[1]:
        out.append((dotp * invstd.astype(f64)).astype(x.dtype))
    if mask[2]:
        out.append(total.astype(x.dtype))
    return tuple(out)


def _group_norm_backward(args: list, kw: dict, inline: bool = False) -> tuple:
    """``native_group_norm_backward`` as PyTorch's CPU kernel computes it (ATen's
    ``GroupNormBackwardKernelImplInternal``, contiguous, 8 float32 / 4 float64 lanes,
    measured): per (image, channel) ``ds = sum(dy * x)``, ``db = sum(dy)`` in lanes from the
    first vector, the tail added (its products contracted in float64 only), folded (halving /
    in sequence); per (image, group) their gamma-weighted sums in a vector of lanes from zero
    (``fma``), its lanes added in order, the channels past the last whole vector contracted
    -- in the copy ``parallel_for``'s threads run; in the one it runs inline (one thread, or
    one image-group) the compiler multiplies those channels' whole 128-bit groups (fours of
    float32, pairs of float64) as a vector, each product then added in turn, only the rest
    contracted (``inline``; measured at 1 and 2 threads, 1 to 23 channels a group);
    ``c2 = fma(db, mean, -ds) * rstd^3 / (D * HxW)``, ``c3 = fma(-(db * rstd), 1 / (D *
    HxW), -c2 * mean)``, ``dx = fma(rstd * gamma, dy, c2 * x) + c3``; ``dgamma`` over the
    images ``fma(fma(-db, mean, ds), rstd, acc)``, ``dbeta`` ``acc + db``. The outputs its
    mask asks for, in order."""
    dy, x, mean, rstd, w = (np.asarray(a) if a is not None else None for a in args[:5])
    n, c, hw, g = (int(a) for a in args[5:9])
    mask = args[9]
    if x.dtype not in (np.float32, np.float64) or dy.shape != x.shape or g < 1 or c % g \
            or x.size != n * c * hw or hw < 1:
        raise ValueError("written for float32 / float64, C divisible by the groups")
    t = x.dtype.type
    d = c // g
    lanes, tree = (8, True) if x.dtype == np.float32 else (4, False)
    DY, X = dy.reshape(n * c, hw), x.reshape(n * c, hw)
    # the tail's multiply-add: rounded twice in float32, contracted in float64 (measured)
    ds = (_lane_sum(DY * X, None, lanes, tree) if x.dtype == np.float32 else
          _lane_sum(DY, X, lanes, tree)).reshape(n, g, d)
    db = _lane_sum(DY, None, lanes, tree).reshape(n, g, d)
    m, r = mean.reshape(n, g), rstd.reshape(n, g)
    gam = np.ones(c, x.dtype) if w is None else w.reshape(-1)
    out = []
    if mask[0]:
        gv = np.broadcast_to(gam.reshape(1, g, d), (n, g, d))
        whole = d // lanes * lanes

        def weighted(v: np.ndarray) -> np.ndarray:
            acc = np.zeros((n, g, lanes), x.dtype)
            for j in range(0, whole, lanes):
                acc = fma(v[..., j:j + lanes], gv[..., j:j + lanes], acc)
            s = np.zeros((n, g), x.dtype)
            for k in range(lanes):
                s = s + acc[..., k]
            grouped = whole + (d - whole) // (16 // x.itemsize) * (16 // x.itemsize) \
                if inline else whole
            for j in range(whole, d):
                s = s + v[..., j] * gv[..., j] if j < grouped else fma(v[..., j], gv[..., j], s)
            return s

        dsa, dba = weighted(ds), weighted(db)
        sc = t(1) / t(d * hw)
        c2 = fma(dba, m, -dsa) * r * r * r * sc
        c3 = fma(-(dba * r), np.broadcast_to(sc, dba.shape), -c2 * m)
        c1 = r[..., None] * gam.reshape(1, g, d)
        dx = fma(c1[..., None], dy.reshape(n, g, d, hw), c2[..., None, None] *
                 x.reshape(n, g, d, hw)) + c3[..., None, None]
        out.append(dx.reshape(x.shape).astype(x.dtype))
    if mask[1] or mask[2]:
        dg, dbt = np.zeros((g, d), x.dtype), np.zeros((g, d), x.dtype)
        for i in range(n):
            dg = fma(fma(-db[i], m[i][:, None], ds[i]), np.broadcast_to(r[i][:, None], (g, d)),
                     dg)
            dbt = dbt + db[i]
        if mask[1]:
            out.append(dg.reshape(-1))
        if mask[2]:
            out.append(dbt.reshape(-1))
    return tuple(out)


def _group_norm(args: list, kw: dict) -> tuple:
    """``native_group_norm`` as PyTorch's CPU kernel computes it (ATen's
    ``GroupNormKernelImplInternal``, contiguous): per (image, group) ``RowwiseMoments``
    (core.explain_aten's ``aten_moments``), ``rstd = 1 / sqrt(max(var, 0) + eps)`` in float64
    (``eps`` is a double), ``y = fma(scale, x, fma(-scale, mean, beta))``, ``scale = rstd *
    gamma``. (y, mean, rstd)."""
    x, w, b = np.asarray(args[0]), args[1], args[2]
    n, c, hw, g = (int(a) for a in args[3:7])
    eps = float(args[7])
    if x.dtype not in (np.float32, np.float64) or g < 1 or c % g or x.size != n * c * hw:
        raise ValueError("written for float32 / float64, C divisible by the groups")
    wide = np.float64
    d = c // g
    mean, var = aten_moments(x.reshape(n * g, d * hw))
    rstd = (wide(1) / np.sqrt(np.maximum(var, 0).astype(wide) + wide(eps))).astype(x.dtype)
    gam = np.ones(c, x.dtype) if w is None else np.asarray(w).reshape(-1)
    bet = np.zeros(c, x.dtype) if b is None else np.asarray(b).reshape(-1)
    scale = rstd.reshape(n, g, 1) * gam.reshape(1, g, d)
    bias = fma(-scale, mean.reshape(n, g, 1), bet.reshape(1, g, d))
    y = fma(scale[..., None], x.reshape(n, g, d, hw), bias[..., None])
    return (y.reshape(x.shape).astype(x.dtype), mean.reshape(n, g).astype(x.dtype),
            rstd.reshape(n, g))


def _log_softmax_ops(base: str) -> list[_Variant]:
    """The loss's three kernels as PyTorch's CPU computes them (core.explain_aten):
    ``_log_softmax`` over the last axis (SLEEF's exp and log, ``reduce_all``), its backward
    ``fma(-exp(out), sum(g), g)``, and ``nll_loss_forward``'s cascade sum."""
    if base == "_log_softmax":
        def lsm(args: list, kw: dict) -> np.ndarray:
            x = np.asarray(args[0])
            if x.ndim and x.dtype in (np.float16, _BF16) and int(args[1]) % x.ndim == x.ndim - 1:
                return log_softmax_reduced(x)
            if x.dtype not in (np.float32, np.float64) or x.ndim == 0:
                raise ValueError("written for float32 and float64, and float16 / bfloat16 "
                                 "over the last axis")
            if int(args[1]) % x.ndim != x.ndim - 1:  # (another dimension: its own kernel)
                return log_softmax_inner(x, int(args[1]))
            return _aten_log_softmax(x).astype(x.dtype)
        return [("libm", "PyTorch's CPU log_softmax (ATen, AVX-512): (x - max) - "
                         "log(sum(exp(x - max))), SLEEF's exp and log (over another dimension "
                         "than the last: per inner position, the sum in order, the C "
                         "library's exp past each chunk's whole vectors; a float16 / bfloat16 "
                         "input in float32, its row sum and that sum's log each stored in the "
                         "input's type)", lsm)]
    if base == "_log_softmax_backward_data":
        def lsm_bwd(args: list, kw: dict) -> np.ndarray:
            g, out = np.asarray(args[0]), np.asarray(args[1])
            if g.dtype not in (np.float32, np.float64) or g.ndim == 0:
                raise ValueError("written for float32 and float64")
            if int(args[2]) % g.ndim != g.ndim - 1:
                return log_softmax_backward_inner(g, out, int(args[2]))
            return fma(-sleef_exp(out), reduce_all(g), g).astype(g.dtype)
        return [("libm", "PyTorch's CPU log_softmax backward (ATen, AVX-512): "
                         "fma(-exp(out), sum(g), g), SLEEF's exp", lsm_bwd)]
    if base == "nll_loss_forward":
        return [("reassociation", "PyTorch's CPU nll_loss (ATen: a cascade of partial sums, "
                                  "levels of 2^max(4, log2(N)/8), in the input's type: a "
                                  "float16 / bfloat16 sum rounded to it at every add; class "
                                  "weights in levels of their own)", _nll_cascade)]
    if base == "nll_loss2d_forward":
        def nll2d(args: list, kw: dict) -> tuple:
            x = np.asarray(args[0])
            if x.ndim != 4:
                raise ValueError("written for (N, C, H, W)")
            rows = np.ascontiguousarray(np.moveaxis(x, 1, -1)).reshape(-1, x.shape[1])
            return _nll_cascade([rows, np.asarray(args[1]).reshape(-1), *args[2:]], kw)
        return [("reassociation", "PyTorch's CPU nll_loss2d (ATen: the pixels in (n, h, w) "
                                  "order by nll_loss's cascade of partial sums)", nll2d)]
    return []


def _nll_cascade(args: list, kw: dict) -> tuple:
    """``nll_loss_forward``'s outputs (the loss, the total weight; mean or sum) as ATen's
    ``nll_loss_out_frame`` sums them (``nll_loss2d_forward_out_frame`` alike, over the pixels
    in (n, h, w) order): ``-x[b, t[b]]`` (times the class weight ``w[t[b]]``, then ``w[t[b]]``
    into the weights' own levels) into level 0, carried up the levels while ``b``'s bits are
    zero (levels of ``2^max(4, CeilLog2(N) / 8)``), the levels then added in order from 0; the
    mean divided by the total weight (without weights the count of targets kept); every step
    in the input's type (float16 / bfloat16: c10's operators, each result rounded to it, the
    count too; measured, every bit, 1 to 4,097 rows; with weights and an ignored index, the
    2-D and the spatial kernel, session 43)."""
    x, t = np.asarray(args[0]), np.asarray(args[1])
    weight, reduction, ignore = args[2], int(args[3]), int(args[4])
    if x.ndim != 2 or reduction not in (1, 2) or \
            x.dtype not in (np.float32, np.float64, np.float16, _BF16) or \
            t.shape != (x.shape[0],):
        raise ValueError("written for 2-D input, mean or sum")
    w = None if weight is None else np.asarray(weight).reshape(-1)
    if w is not None and (w.dtype != x.dtype or w.size != x.shape[1]):
        raise ValueError("a weight of another type or size")
    n = x.shape[0]
    dt = x.dtype.type
    lp = max(4, (int(n - 1).bit_length() if n > 1 else 0) // 8)  # CeilLog2(n) / 8 levels
    mask = (1 << lp) - 1
    levels, wlevels = [dt(0)] * 8, [dt(0)] * 8
    kept = 0
    for b in range(n):
        tb = int(t[b])
        if tb == ignore:
            continue
        kept += 1
        if w is None:
            levels[0] = dt(levels[0] - x[b, tb])
        else:  # (the product rounded: torch 2.13's build does not contract it, measured)
            levels[0] = dt(levels[0] - dt(x[b, tb] * w[tb]))
            wlevels[0] = dt(wlevels[0] + w[tb])
        for j in range(7):
            if b & (mask << (j * lp)):
                break
            levels[j + 1] = dt(levels[j + 1] + levels[j])
            wlevels[j + 1] = dt(wlevels[j + 1] + wlevels[j])
            levels[j] = wlevels[j] = dt(0)
    s = total = dt(0)
    for v in levels:
        s = dt(s + v)
    if w is None:
        total = dt(kept)
    else:
        for v in wlevels:
            total = dt(total + v)
    if reduction == 1:
        s = dt(s / total)
    return np.asarray(s, dtype=x.dtype), np.asarray(total, dtype=x.dtype)


def _embedding_backward_narrow(args: list, kw: dict) -> np.ndarray:
    """``embedding_dense_backward`` of a float16 / bfloat16 gradient as ATen's CPU kernel
    computes it (measured, every bit: both types, 8 to 5,000 indices, a padding index, 1 and 2
    threads): from zeros, each index's gradient row added to its weight row in index order,
    every sum rounded to the gradient's type (the reference sums in float32, rounded once).
    The adds a row receives are in turn, so they are taken one occurrence at a time: the
    first of every row's indices at once, then every second, and so on."""
    g, idx, num, pad, scale = args[:5]
    g = np.asarray(g)
    if g.dtype not in (np.float16, _BF16) or scale:
        raise ValueError("written for float16 / bfloat16, without scale_grad_by_freq")
    f32 = np.float32
    rows = np.asarray(idx).astype(np.int64).reshape(-1)
    gw = g.reshape(rows.size, -1)
    out = np.zeros((int(num), gw.shape[1]), g.dtype)
    keep = np.nonzero(rows != int(pad))[0]
    order = keep[np.argsort(rows[keep], kind="stable")]  # (by row, index order within one)
    rs = rows[order]
    if rs.size:
        starts = np.r_[0, np.nonzero(np.diff(rs))[0] + 1]
        rank = np.arange(rs.size) - np.repeat(starts, np.diff(np.r_[starts, rs.size]))
        for k in range(int(rank.max()) + 1):
            sel = rank == k
            r = rs[sel]
            out[r] = (out[r].astype(f32) + gw[order[sel]].astype(f32)).astype(g.dtype)
    return out


def _silu_backward(args: list, kw: dict) -> np.ndarray:
    """``silu_backward(g, x)`` as PyTorch's CPU kernel: ``s = 1 / (1 + exp(-x))`` (SLEEF's exp on
    whole register pairs), ``(g * s) * fma(x, 1 - s, 1)``."""
    g, x = np.asarray(args[0]), np.asarray(args[1])
    if x.dtype not in (np.float32, np.float64) or g.shape != x.shape:
        raise ValueError("written for float32 / float64 of one shape")
    one = x.dtype.type(1)
    s = one / _aten_silu_parts(x)[0]
    return ((g * s) * fma(x, one - s, one)).astype(x.dtype)


def _reduced_loss(dt: np.dtype, elem: Callable) -> list[_Variant]:
    """A loss's mean or sum (its reduction the third argument): ``elem(x, y, args, kw)`` per
    element, summed by each ``sum`` variant of core.explain's table, then divided by the
    count. Measured: PyTorch 2.13's CPU mean is ATen's sum kernel over the elementwise loss."""
    def make(fn: Callable) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x, y = np.asarray(args[0]), np.asarray(args[1])
            red = int(_arg(args, kw, 2, "reduction", 1))
            if red not in (1, 2) or x.shape != y.shape:
                raise ValueError("written for mean or sum over one shape")
            e = np.asarray(elem(_f32(x), _f32(y), args, kw))
            s = np.asarray(fn(e.reshape(-1), None, False))
            return (s / s.dtype.type(x.size) if red == 1 else s).astype(x.dtype)
        return run

    sums = [v for v in variants_for("sum", dt) if v.prim == "sum"]
    # ATen's own sum kernel first: a scalar's bits often come out of several orders at once,
    # and the first that does is the one named
    sums.sort(key=lambda v: "ATen SumKernel" not in v.label)
    return [(v.cause, v.label, make(v.value)) for v in sums]


def _mse(dt: np.dtype) -> list[_Variant]:
    """``mse_loss``: ``(x - y)^2`` (_reduced_loss)."""
    def sq(x: np.ndarray, y: np.ndarray, args: list, kw: dict) -> np.ndarray:
        d = x - y
        return d * d
    return _reduced_loss(dt, sq)


def _smooth_l1(dt: np.dtype) -> list[_Variant]:
    """``smooth_l1_loss``: ``z = |x - y|``, ``z < beta ? ((0.5 * z) * z) / beta : z - 0.5 *
    beta`` (ATen's smooth_l1 kernel, vector and scalar alike; 0.5 * beta exact, so its
    contraction changes nothing) (_reduced_loss)."""
    def elem(x: np.ndarray, y: np.ndarray, args: list, kw: dict) -> np.ndarray:
        t = x.dtype.type
        beta = t(float(_arg(args, kw, 3, "beta", 1.0)))
        z = np.abs(x - y)
        if beta == 0:
            return z
        return np.where(z < beta, ((t(0.5) * z) * z) / beta, z - t(0.5) * beta)
    return _reduced_loss(dt, elem)


def _smooth_l1_backward(lanes: int) -> Callable:
    """``smooth_l1_loss_backward`` as ATen's CPU kernel runs it (PointwiseOpsKernel.cpp), in
    registers of ``lanes``: on whole register pairs ``(norm * o) * g`` with ``o`` = +-1 where
    ``|x - y| >= beta`` (beta rounded to T), else ``(x - y) / beta``; on the rest (each
    thread's tail) the scalar lambda, whose ``beta`` is the double: the branches compared in
    double, the inner value ``((norm * d) * g) / beta`` divided in double and rounded once."""
    def run(args: list, kw: dict) -> np.ndarray:
        g, x, y = (np.asarray(a) for a in args[:3])
        red, beta = int(args[3]), float(args[4])
        if x.dtype not in (np.float32, np.float64) or y.dtype != x.dtype or beta <= 0:
            raise ValueError("written for float32 / float64 and beta > 0")
        t = x.dtype.type
        norm, bt = t(1.0 / x.size if red == 1 else 1.0), t(beta)
        g, y = np.broadcast_to(g, x.shape), np.broadcast_to(y, x.shape)
        d = x - y
        vec = (norm * np.where(np.abs(d) >= bt, np.where(d > 0, t(1), t(-1)), d / bt)) * g
        d64 = d.astype(np.float64)
        sca = np.where(d64 <= -beta, (-norm) * g, np.where(
            d64 >= beta, norm * g, (((norm * d) * g).astype(np.float64) / beta).astype(t)))
        out = np.empty(x.size, t)
        vf, sf = vec.reshape(-1), sca.reshape(-1)
        for lo, v, hi in vec_segments(x.size, 2 * lanes, _RECORDED_THREADS.get() or 1):
            out[lo:v], out[v:hi] = vf[lo:v], sf[v:hi]
        return out.reshape(x.shape)
    return run


def _huber(dt: np.dtype) -> list[_Variant]:
    """``huber_loss``: ``z = |x - y|``, ``z < delta ? (0.5 * z) * z : delta * (z - 0.5 *
    delta)`` (ATen's huber kernel, vector and scalar alike; 0.5 * delta exact) (_reduced_loss)."""
    def elem(x: np.ndarray, y: np.ndarray, args: list, kw: dict) -> np.ndarray:
        t = x.dtype.type
        delta = t(float(_arg(args, kw, 3, "delta", 1.0)))
        z = np.abs(x - y)
        return np.where(z < delta, (t(0.5) * z) * z, delta * (z - t(0.5) * delta))
    return _reduced_loss(dt, elem)


def _avg_pool2d_backward(args: list, kw: dict) -> np.ndarray:
    """``avg_pool2d_backward`` as ATen's CPU kernels run it (``cpu_avg_pool2d_backward``, its
    channels-last twin alike per pixel): per output cell (oh, ow) in row-major order, ``delta =
    grad / divide`` in T (``divide``: the divisor override, the window's cells with padding
    where ``count_include_pad``, else its cells inside the input; a ``ceil_mode`` window cut at
    the padded edge), added to each input cell of its window. An input cell's adds come in
    (oh, ow) order, i.e. its taps (kh, kw) from the last to the first: one vectorised add per
    tap."""
    g, x = np.asarray(args[0]), np.asarray(args[1])
    if x.ndim not in (3, 4) or g.ndim != x.ndim or x.dtype not in (np.float32, np.float64):
        raise ValueError("written for float32 / float64 (C, H, W) or (N, C, H, W)")
    two = lambda v: [int(v[0])] * 2 if len(v) == 1 else [int(v[0]), int(v[1])]  # noqa: E731
    k = two(list(args[2]))
    st = two(list(args[3])) if args[3] else list(k)
    pd = [int(args[4])] * 2 if isinstance(args[4], int) else two(list(args[4]))
    if min(k + st) < 1 or min(pd) < 0 or k[0] * k[1] > 4096:
        raise ValueError("a window of no cells, or of more taps than the search's budget")
    cip = bool(_arg(args, kw, 6, "count_include_pad", True))
    div = _arg(args, kw, 7, "divisor_override", None)
    if div is not None and int(div) == 0:
        raise ValueError("a divisor of zero")
    t = x.dtype.type
    (h, w), (oh_n, ow_n) = x.shape[-2:], g.shape[-2:]

    def spans(n_out: int, n_in: int, kk: int, s: int, p: int) -> tuple:
        o = np.arange(n_out)
        a0 = o * s - p
        a1 = np.minimum(a0 + kk, n_in + p)
        return a0, a1 - a0, np.maximum(a0, 0), np.minimum(a1, n_in)

    h0, hp, h0c, h1c = spans(oh_n, h, k[0], st[0], pd[0])
    w0, wp, w0c, w1c = spans(ow_n, w, k[1], st[1], pd[1])
    if div is not None:
        d = np.full((oh_n, ow_n), int(div))
    elif cip:
        d = hp[:, None] * wp[None, :]
    else:
        d = (h1c - h0c)[:, None] * (w1c - w0c)[None, :]
    with np.errstate(all="ignore"):
        delta = (g / d.astype(x.dtype)).astype(x.dtype)
    out = np.zeros(x.shape, x.dtype)
    for a in reversed(range(k[0])):
        ih = h0 + a
        vh = (ih >= h0c) & (ih < h1c)
        for b in reversed(range(k[1])):
            iw = w0 + b
            vw = (iw >= w0c) & (iw < w1c)
            if vh.any() and vw.any():
                rows, cols = np.nonzero(vh)[0], np.nonzero(vw)[0]
                sel = (..., ih[rows][:, None], iw[cols][None, :])
                out[sel] = (out[sel] + delta[..., rows[:, None], cols[None, :]]).astype(t)
    return out


def _conv_gemm(xs: list, at: dict) -> np.ndarray:
    """A 2-D convolution (one group, float32) as oneDNN's gemm convolution sums it: the
    im2col matrix with k in (channel, kh, kw) order (zero padding included), times the
    weights by its jit sgemm (``_chain_product``: each output one fma chain over k from zero,
    past 384 terms in even blocks whose sums are added). (N, C_out, OH, OW), no bias."""
    x, w = (np.asarray(a, dtype=np.float32) for a in xs)
    if x.dtype != np.float32 or x.ndim != 4 or w.ndim != 4 or w.shape[1] != x.shape[1]:
        raise ValueError("a float32 2-D convolution of one group")
    (sh, sw), (dh, dw) = at["strides"], at["dilations"]
    ph, pw = at["pads"][0], at["pads"][1]
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1 or n * oh * ow * c * kh * kw > _budget()[0]:
        raise ValueError("an empty output, or past the search's budget")
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((n, oh, ow, c, kh, kw), np.float32)
    for i in range(kh):
        for j in range(kw):
            cols[..., i, j] = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                 j * dw:j * dw + sw * (ow - 1) + 1:sw].transpose(0, 2, 3, 1)
    y = _chain_product(cols.reshape(n * oh * ow, -1), w.reshape(co, -1))
    return y.reshape(n, oh, ow, co).transpose(0, 3, 1, 2)


def _convs(dt: np.dtype) -> list[_Variant]:
    """``convolution`` (2-D, not transposed, one group): each ``conv`` variant of
    core.explain's table (oneDNN's direct order, Winograd), the bias added after; then
    oneDNN's direct order with the bias where oneDNN puts it (the sum starts from it, or the
    first chain does: core.explain's ``_conv_direct``)."""
    def geometry(args: list) -> tuple[np.ndarray, np.ndarray, Any, dict]:
        x, w, b = np.asarray(args[0]), np.asarray(args[1]), args[2]
        st, pad, dil, transposed, _, groups = args[3:9]
        if transposed or x.ndim != 4 or int(groups) != 1:
            raise ValueError("written for 2-D, not transposed, one group")
        pad = list(pad) if len(pad) == 2 else [pad[0], pad[0]]
        at = {"strides": list(st), "dilations": list(dil), "group": 1,
              "pads": [pad[0], pad[1], pad[0], pad[1]]}
        return x, w, b, at

    def make(fn: Callable) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x, w, b, at = geometry(args)
            y = np.asarray(fn([_f32(x), _f32(w)], at))
            if b is not None:
                y = y + _f32(np.asarray(b)).reshape(1, -1, 1, 1)
            return y.astype(x.dtype)
        return run

    def with_bias(fn: Callable) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x, w, b, at = geometry(args)
            return np.asarray(fn([_f32(x), _f32(w), _f32(np.asarray(b))], at)).astype(x.dtype)
        return run

    out = [(v.cause, v.label, make(v.value), _screen(make(v.value), _conv_image))
           for v in variants_for("conv2d", dt) if v.prim == "conv"]
    gemm = make(_conv_gemm)
    out.append(("reassociation", "oneDNN's gemm convolution (x64:gemm:jit, small channel "
                                 "counts): im2col in (channel, kh, kw) order, each output one "
                                 "fma chain over it from zero (past 384 terms in even blocks "
                                 "added), the bias added after", gemm, _screen(gemm, _conv_image)))
    for mode, says in (("first", "the sum starting from the bias, each channel block's partial "
                                 "added to it"),
                       ("start", "the first fma chain starting from the bias")):
        for blk in (16, 8) if mode == "first" else (16, 8, 0):  # (0: one block, a 1x1 conv
            run = with_bias(_conv_direct(blk, mode))            # at two threads, measured)
            out.append(("reassociation", "direct conv: (kh, kw, channel) taps with fma, "
                                         + (f"{blk}-channel blocks" if blk else "one block")
                                         + f", {says} (oneDNN)", run,
                        _screen(run, _conv_image)))
    # (after the direct orders: the one-block and 16-channel ones name themselves first)
    out.append(("reassociation", "oneDNN's 1x1 convolution (jit_1x1): the input channels in "
                                 "reduce blocks of one size and a shorter last one, the first "
                                 "block's fma chain starting from the bias, each other's from "
                                 "zero and added in order", _Fits(_onednn_1x1_fwd)))
    return out


def _onednn_1x1_fwd(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """oneDNN's 1x1 convolution forward (``jit_1x1:avx512_core``, ONEDNN_VERBOSE): per output,
    the input channels in reduce blocks of one size with a shorter last one (oneDNN's
    ``nb_reduce_blocking``, picked from the cache sizes: measured on a Zen 4 with 1 MiB of L2,
    80 channels of 96-384 at 12x12-16x16 pixels, 256 of 512-1024 at 7x7, one block of up to
    64, and of 192 at 28x28), the first block's fma chain starting from the bias (from zero
    without one), each other block's from zero, added to the sum in order. Fitted: the block
    (a multiple of 16) on a sample of the first image's outputs; ValueError where none fits."""
    x, w, b = np.asarray(args[0]), np.asarray(args[1]), args[2]
    st, pad, _, transposed, _, groups = args[3:9]
    if x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != 4 or w.ndim != 4 or \
            w.shape[2:] != (1, 1) or transposed or int(groups) != 1 or \
            any(int(v) for v in pad) or len(st) != 2 or min(int(v) for v in st) < 1:
        raise ValueError("written for a float32 1x1 convolution of one group, no padding")
    bias = None if b is None else np.asarray(b, np.float32)
    xs = np.ascontiguousarray(x[:, :, ::int(st[0]), ::int(st[1])])
    n, c = xs.shape[:2]
    m = w.shape[0]
    if recorded.shape != (n, m) + xs.shape[2:] or n * c * m * xs.shape[2] * xs.shape[3] > \
            _budget()[0]:
        raise ValueError("not this geometry, or past the search's budget")
    wm = np.ascontiguousarray(w.reshape(m, c), np.float32)
    sx = xs[0].reshape(c, -1)[:, :32]  # the sample: 16 output channels x 32 pixels
    want = np.ascontiguousarray(recorded[0].reshape(m, -1)[:16, :32]).view(np.uint32)
    start = np.zeros(want.shape, np.float32)
    if bias is not None:
        start += bias[:16].reshape(-1, 1)
    blk = _reduce_blocks_fit(wm[:16], sx, start, want)
    if blk is None:
        raise ValueError("no block size reproduces the sample")
    pixels = xs.shape[2] * xs.shape[3]
    first = np.zeros((m, pixels), np.float32)
    if bias is not None:
        first += bias.reshape(-1, 1)
    y = np.stack([_blocked_chains(wm, xs[i].reshape(c, -1), first, blk) for i in range(n)])
    return y.reshape(recorded.shape), (f"{blk}-channel reduce blocks" if blk < c
                                       else "one block")


# the written-out convolution gradients run their fma chains in numpy (~15 array passes an
# fma): searched up to _CONV_TERMS multiply-adds (~3 CPU s here) and, a weight gradient's
# chain being one numpy step per pixel of the batch, up to _WGRAD_STEPS pixels (the zoo's
# convolutions: 128-512 pixels, up to 1.2 M terms; cnn-64's: 16 x 64 x 64 x 32 x 3 x 9 and
# more, not searched: `unknown`)
_CONV_TERMS = 3 * 10 ** 8
_WGRAD_STEPS = 4096
# with the native fma step (core.native.fma_into: one C pass a step), ~10x the terms in the
# same time, and a chain's step costs a call, not ~15 array passes
_CONV_TERMS_NATIVE = 3 * 10 ** 9
_WGRAD_STEPS_NATIVE = 1 << 17


def _budget() -> tuple[int, int]:
    """(multiply-adds, weight chain pixels) searched: the native step's, or numpy's."""
    if native.library() is not None:
        return _CONV_TERMS_NATIVE, _WGRAD_STEPS_NATIVE
    return _CONV_TERMS, _WGRAD_STEPS


def _depthwise(x: np.ndarray, w: np.ndarray, st: Any, pad: Any, dil: Any, transposed: Any,
               groups: Any) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """((kh, kw), (sh, sw), (ph, pw)) of a 2-D float32 depthwise convolution (one filter a
    channel: groups = channels, dilation 1, not transposed, padding below the kernel; a 1-D
    one arrives as 2-D of height 1); ValueError for any other."""
    if (x.ndim != 4 or w.ndim != 4 or transposed or int(groups) != x.shape[1] or int(groups) < 2
            or w.shape[0] != x.shape[1] or w.shape[1] != 1 or x.dtype != np.float32
            or w.dtype != x.dtype or [int(v) for v in dil] != [1, 1] or len(st) != 2
            or len(pad) != 2):
        raise ValueError("written for 2-D float32 depthwise convolutions")
    k, s, p = (tuple(int(v) for v in t) for t in (w.shape[2:], st, pad))
    if min(s) < 1 or not (0 <= p[0] < k[0] and 0 <= p[1] < k[1]):
        raise ValueError("written for padding below the kernel")
    return k, s, p


def _dw_taps(x: np.ndarray, k: tuple, s: tuple, p: tuple, oh: int, ow: int):
    """(kh, kw, x's pixels under that tap for every output pixel) in (kh, kw) order."""
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    for i in range(k[0]):
        for j in range(k[1]):
            yield i, j, xp[:, :, i:i + s[0] * (oh - 1) + 1:s[0], j:j + s[1] * (ow - 1) + 1:s[1]]


def _conv_depthwise(args: list, kw: dict, bias_after: bool = False) -> np.ndarray:
    """A depthwise convolution as oneDNN computes it (measured with random operands at 1-2
    threads, 3x3, 5x5 and 7x7, stride 1 and 2): per output pixel one fma chain over the taps
    in (kh, kw) order, from the bias (or zero); ``bias_after``: from zero, the bias added
    after (its kernel for a channels-last input, a ConvNeXt block's: the recorded values do
    not say which layout the input had)."""
    x, w, b = np.asarray(args[0]), np.asarray(args[1]), args[2]
    k, s, p = _depthwise(x, w, *args[3:6], args[6], args[8])
    n, c, h, wd = x.shape
    oh, ow = (h + 2 * p[0] - k[0]) // s[0] + 1, (wd + 2 * p[1] - k[1]) // s[1] + 1
    if n * c * oh * ow * k[0] * k[1] > _budget()[0]:
        raise ValueError("too many terms to search")
    acc = np.zeros((n, c, oh, ow), np.float32)
    if b is not None and not bias_after:
        acc[...] = np.asarray(b, np.float32).reshape(1, -1, 1, 1)
    for i, j, t in _dw_taps(x, k, s, p, oh, ow):
        acc = _fma_acc(acc, np.ascontiguousarray(t), w[None, :, 0, i, j, None, None])
    if b is not None and bias_after:
        acc = (acc + np.asarray(b, np.float32).reshape(1, -1, 1, 1)).astype(np.float32)
    return acc


def _conv_depthwise_nhwc(args: list, kw: dict) -> np.ndarray:
    return _conv_depthwise(args, kw, bias_after=True)


def _dw_input_grad(args: list, kw: dict) -> tuple:
    """A depthwise convolution's input gradient as oneDNN computes it: per input pixel one fma
    chain over the weight's taps in (kh, kw) order, each channel its own (a strided one's dy
    spread over the stride's grid, zeros between)."""
    g, x, w = (np.asarray(a) for a in args[:3])
    mask = list(args[10])
    k, s, p = _depthwise(x, w, *args[4:7], args[7], args[9])
    if not mask[0] or g.dtype != np.float32:
        raise ValueError("no float32 input gradient asked")
    n, c, h, wd = x.shape
    if x.size * k[0] * k[1] > _budget()[0]:
        raise ValueError("too many terms to search")
    sp = np.zeros((n, c, h + 2 * p[0] - k[0] + 1, wd + 2 * p[1] - k[1] + 1), np.float32)
    sp[:, :, ::s[0], ::s[1]] = g
    q = (k[0] - 1 - p[0], k[1] - 1 - p[1])
    spp = np.pad(sp, ((0, 0), (0, 0), (q[0], q[0]), (q[1], q[1])))
    acc = np.zeros(x.shape, np.float32)
    for i in range(k[0]):
        for j in range(k[1]):
            a, b = k[0] - 1 - i, k[1] - 1 - j
            acc = _fma_acc(acc, np.ascontiguousarray(spp[:, :, a:a + h, b:b + wd]),
                           w[None, :, 0, i, j, None, None])
    return _masked((acc, None, None), mask)


def _dw_weight_grad_args(args: list, chunks: int, by_rows: bool) -> tuple:
    """(g, mask, kernel, windows) of a depthwise weight gradient within the search's budget:
    ``windows[n, c, oh, ow]`` the input pixels under each output pixel's taps; ValueError for
    another op, an unasked gradient or more runs than images (rows, ``by_rows``)."""
    g, x, w = (np.asarray(a) for a in args[:3])
    mask = list(args[10])
    k, s, p = _depthwise(x, w, *args[4:7], args[7], args[9])
    n, _, oh, ow = g.shape
    terms, steps = _budget()
    if not mask[1] or g.dtype != np.float32 or chunks > (n * oh if by_rows else n) \
            or (ow if by_rows else n * oh * ow) > steps or n * oh * ow * w.size > terms:
        raise ValueError("a float32 weight gradient within the search's budget, asked for")
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
    return g, mask, k, win


def _dw_weight_grad(chunks: int) -> Callable:
    """A depthwise convolution's weight gradient as oneDNN computes it: the images in
    ``chunks`` runs (one per thread), each run one fma chain a weight tap over its images'
    output pixels in order, the runs added in order."""
    def run(args: list, kw: dict) -> tuple:
        g, mask, k, win = _dw_weight_grad_args(args, chunks, by_rows=False)
        n, c, oh, ow = g.shape
        total = None
        for r in np.array_split(np.arange(n), chunks):
            acc = np.zeros((c, *k), np.float32)
            for i in r:
                for a in range(oh):
                    for b in range(ow):
                        acc = _fma_acc(acc, win[i, :, a, b], g[i, :, a, b][:, None, None])
            total = acc if total is None else (total + acc).astype(np.float32)
        return _masked((None, total[:, None], None), mask)
    return run


def _dw_weight_grad_rows(chunks: int) -> Callable:
    """A depthwise convolution's weight gradient as oneDNN computes it for a channels-last
    input (measured 3x3 to 7x7 at 1-2 threads): per weight tap each output row one fma chain
    over its pixels from zero, the rows (images in order) in ``chunks`` runs, each run's row
    sums added in order, the runs added in order."""
    def run(args: list, kw: dict) -> tuple:
        g, mask, k, win = _dw_weight_grad_args(args, chunks, by_rows=True)
        n, c, oh, ow = g.shape
        rows = np.zeros((n, oh, c, *k), np.float32)  # each output row's chain, all at once
        for b in range(ow):
            rows = _fma_acc(rows, np.moveaxis(win[:, :, :, b], 2, 1),
                            np.moveaxis(g[:, :, :, b], 2, 1)[..., None, None])
        rows = rows.reshape(n * oh, c, *k)
        total = None
        for r in np.array_split(np.arange(n * oh), chunks):
            acc = np.zeros((c, *k), np.float32)
            for i in r:
                acc = (acc + rows[i]).astype(np.float32)
            total = acc if total is None else (total + acc).astype(np.float32)
        return _masked((None, total[:, None], None), mask)
    return run


def _gemv_pieces_sum(a: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y`` plus each column of ``a`` [K, ...] dotted with ``x`` [K, ...] (broadcast against a)
    as oneDNN's jit gemv ("T", ``jit_avx_gemv_t_f32_kern``, the AVX2 build) sums it: 8 lanes,
    16 terms a step (lane l takes term 16c + l, then 16c + 8 + l, one fma each); the lanes
    added ((0 + 1) + (4 + 5)) + ((2 + 3) + (6 + 7)) and the result added to y; then the 8, 4,
    2 and 1 terms left, each piece alike (its own zeroed lanes, reduced, added to y)."""
    f32 = np.float32

    def lanes_sum(acc: np.ndarray) -> np.ndarray:
        return (((acc[0] + acc[1]).astype(f32) + (acc[4] + acc[5]).astype(f32)).astype(f32)
                + ((acc[2] + acc[3]).astype(f32)
                   + (acc[6] + acc[7]).astype(f32)).astype(f32)).astype(f32)

    k = a.shape[0]
    x = np.broadcast_to(x, a.shape)
    main = k // 16 * 16
    if main:
        acc = np.zeros((8, *a.shape[1:]), f32)
        for c in range(0, main, 8):  # (16c .. 16c + 7, then 16c + 8 ..: the same lanes)
            acc = _fma_acc(acc, np.ascontiguousarray(a[c:c + 8]), np.ascontiguousarray(x[c:c + 8]))
        y = (y + lanes_sum(acc)).astype(f32)
    at = main
    for piece in (8, 4, 2, 1):
        if (k - main) & piece:
            acc = np.zeros((8, *a.shape[1:]), f32)
            acc[:piece] = _fma_acc(acc[:piece].copy(), np.ascontiguousarray(a[at:at + piece]),
                                   np.ascontiguousarray(x[at:at + piece]))
            y = (y + lanes_sum(acc)).astype(f32)
            at += piece
    return y


def _smalln_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``bᵀ · a`` (a [K, M], b [K, N]) as oneDNN's small-n sgemm (``jit_avx512_core_gemm_smalln_tn
    _f32_kern``) sums it: 16 lanes over k (lane j the terms k = j mod 16, an fma chain each;
    the last block's missing terms zeros), the lanes then added pairwise at strides 8, 4, 2,
    1."""
    k = a.shape[0]
    pad = -k % 16
    a = np.concatenate([a, np.zeros((pad, a.shape[1]), np.float32)]) if pad else a
    b = np.concatenate([b, np.zeros((pad, b.shape[1]), np.float32)]) if pad else b
    acc = np.zeros((16, b.shape[1], a.shape[1]), np.float32)
    for c in range(0, k + pad, 16):
        acc = _fma_acc(acc, np.ascontiguousarray(b[c:c + 16, :, None]),
                       np.ascontiguousarray(np.broadcast_to(a[c:c + 16, None, :], acc.shape)))
    return _fold_lanes(np.moveaxis(acc, 0, -1), 16, True).astype(np.float32)


def _gemm_conv_grads(weight: bool) -> Callable:
    """convolution_backward's weight (or bias) gradient as oneDNN's gemm convolution computes
    it where its jit kernel does not take it (groups of few channels; ``ONEDNN_VERBOSE``:
    ``gemm:jit``), float32, 2-D: per group and image, im2col, then the weight gradient
    ``dyᵀ · col`` by its small-n sgemm (``_smalln_dot``, k the image's pixels), each image's
    added to the sum so far; the bias gradient per output row a sum in order from zero, each
    row's added to the channel's total (images and rows in order)."""
    def run(args: list, kw: dict) -> tuple:
        g, x, w = (np.asarray(a) for a in args[:3])
        mask = list(args[10]) if len(args) > 10 else []
        groups = int(args[9])
        if len(mask) != 3 or not mask[1 if weight else 2] or g.ndim != 4 or \
                x.dtype != np.float32 or g.dtype != x.dtype or w.dtype != x.dtype or args[7] \
                or [int(v) for v in args[6]] != [1, 1] or x.shape[1] % groups or \
                w.shape[0] % groups:
            raise ValueError("a float32 2-D convolution's parameter gradient, not dilated")
        n, oc, oh, ow = g.shape
        if n * oh * ow * w.size > _budget()[0]:
            raise ValueError("past the search's budget")
        if not weight:
            rows = np.zeros((n, oh, oc), np.float32)  # (every output row's sum at once)
            for c in range(ow):
                rows = (rows + np.moveaxis(g[:, :, :, c], 1, 2)).astype(np.float32)
            gb = np.zeros(oc, np.float32)
            for row in rows.reshape(n * oh, oc):
                gb = (gb + row).astype(np.float32)
            return _masked((None, None, gb), mask)
        k, st, pd = w.shape[2:], [int(v) for v in args[4]], [int(v) for v in args[5]]
        icg, ocg = x.shape[1] // groups, oc // groups
        xp = np.pad(x, ((0, 0), (0, 0), (pd[0], pd[0]), (pd[1], pd[1])))
        win = np.lib.stride_tricks.sliding_window_view(xp, tuple(k), axis=(2, 3))
        win = win[:, :, ::st[0], ::st[1]][:, :, :oh, :ow]
        gw = np.zeros(w.shape, np.float32)
        for gi in range(groups):
            ci, co = slice(gi * icg, (gi + 1) * icg), slice(gi * ocg, (gi + 1) * ocg)
            acc = None
            for i in range(n):
                col = np.ascontiguousarray(win[i, ci].transpose(1, 2, 0, 3, 4)
                                           .reshape(oh * ow, icg * k[0] * k[1]))
                part = _smalln_dot(col, np.ascontiguousarray(g[i, co].reshape(ocg, -1).T))
                acc = part if acc is None else (part + acc).astype(np.float32)
            gw[co] = acc.reshape(ocg, icg, *k)
        return _masked((None, gw, None), mask)
    return run


def onednn_k_blocks(k: int, bk: int) -> list[int]:
    """The bounds oneDNN's jit sgemm (its ``gemm_driver``) cuts ``k`` terms into: blocks of
    ``bk`` while at least two remain, then what is left in one block, or in two halves (the
    first one longer) where it is more than one. Measured on its convolution's weight gradient:
    981 pixels are 384 + 299 + 298 with AVX-512, 256 + 256 + 235 + 234 with AVX2."""
    bounds = [0]
    while bounds[-1] < k:
        left = k - bounds[-1]
        step = bk if left >= 2 * bk else ((left + 1) // 2 if left > bk else left)
        bounds.append(bounds[-1] + step)
    return bounds


# oneDNN's jit sgemm's k-block by the kernels it runs (measured: AVX-512, AVX2)
_ONEDNN_K_BLOCKS = ((384, "AVX-512"), (256, "AVX2"))


def _gemm_conv_weight_grad(runs: tuple[int, ...]) -> _Fits:
    """convolution_backward's weight gradient as oneDNN's gemm convolution computes it where its
    jit kernels do not take it (``ONEDNN_VERBOSE``: ``gemm:jit``; a conv1d's kernel of 16 taps
    or more, e.g. an audio model's first layer; PyTorch takes oneDNN from two images up),
    float32, one group, any stride, padding and dilation: per image im2col (rows the (channel,
    kh, kw) taps, columns the output pixels), then ``dW += dy · colᵀ`` by its jit sgemm: the
    pixels in ``onednn_k_blocks(pixels, bk)``, each block one fma chain from zero per weight,
    added to the running sum (beta = 1); the images in runs (one per thread, the first ones
    one longer), a run's images in order, the runs' sums added in order. The block size (of
    ``_ONEDNN_K_BLOCKS``) and the run count are fitted: the chains are made once per distinct
    cut of the pixels, each of ``runs`` (at most one run per image) tried on them. Measured
    every bit against torch (conv1d from 1 and 2 channels to 8-32, kernels of 16-400 taps,
    strides 1-160, padding, dilation; 2, 3 and 8 images of 75-1,500 pixels; 1-8 threads;
    oneDNN's AVX-512 and AVX2 kernels: blocks of 384 and 256)."""
    def fit(args: list, kw: dict, recorded: np.ndarray) -> tuple:
        try:
            g, x, w, mask, (ph, pw), transposed, (sh, sw) = _conv_bwd_geometry(args, dilated=True)
        except ValueError as e:
            raise ValueError(f"not the measured geometry: {e}") from None
        n, oc, oh, ow = g.shape
        if not mask[1] or transposed or recorded.shape != w.shape:
            raise ValueError("written for the weight gradient of a convolution, not transposed")
        pixels = oh * ow
        terms, steps = _budget()
        if n * pixels > steps or n * pixels * w.size > terms:
            raise ValueError("too many terms to search")
        cols, outs = im2col(x, w.shape[2:], (sh, sw), tuple(int(v) for v in args[6]),
                            ((ph, ph), (pw, pw)), 1)
        if list(outs) != [oh, ow]:
            raise ValueError("not the measured geometry")
        cols = cols[:, 0].transpose(0, 2, 1)  # (n, pixels, channel * kh * kw), for the chains
        dys = np.ascontiguousarray(g).reshape(n, oc, pixels)
        want = np.ascontiguousarray(recorded).reshape(oc, -1).view(np.uint32)
        tried = set()
        for bk, isa in _ONEDNN_K_BLOCKS:
            bounds = tuple(onednn_k_blocks(pixels, bk))
            if bounds in tried:
                continue  # (fewer pixels than both blocks: one cut, already tried)
            tried.add(bounds)
            chains = [[_fma_chain(dys[i][:, k0:k1], cols[i][k0:k1]) for k0, k1 in
                       pairwise(bounds)] for i in range(n)]
            for t in (r for r in runs if r <= n):
                total = None
                for part in np.array_split(np.arange(n), t):
                    acc = None
                    for p in (p for i in part for p in chains[i]):
                        acc = p if acc is None else (acc + p).astype(np.float32)
                    total = acc if total is None else (total + acc).astype(np.float32)
                if np.array_equal(total.view(np.uint32), want):
                    return (_masked((None, total.reshape(w.shape), None), mask),
                            f"blocks of {bk} ({isa}), the images in {t} "
                            f"run{'s' if t > 1 else ''}")
        raise ValueError("no block size and run count give the recorded bits")
    return _Fits(fit)


def _dw_weight_grad_gemv(args: list, kw: dict) -> tuple:
    """A depthwise convolution's weight gradient as oneDNN computes it where its jit depthwise
    kernel does not take it (kernels of 5x5 and 7x7, measured; ``ONEDNN_VERBOSE`` names it
    ``gemm:jit``): per image im2col, each tap one dot over the image's pixels (row-major) by
    oneDNN's jit gemv (``_gemv_pieces_sum``), added into the tap's sum, the images in order.
    Held to torch's bits on 5x5 and 7x7 kernels, stride 1 and 2, 1 and 2 threads."""
    g, mask, k, win = _dw_weight_grad_args(args, 1, by_rows=False)
    n, c, oh, ow = g.shape
    y = np.zeros((c, k[0] * k[1]), np.float32)
    for i in range(n):
        a = np.moveaxis(win[i].reshape(c, oh * ow, k[0] * k[1]), 1, 0)  # (pixels, c, taps)
        y = _gemv_pieces_sum(a, g[i].reshape(c, oh * ow).T[:, :, None], y)
    return _masked((None, y.reshape(c, 1, *k), None), mask)


def _lstm_within_budget(x: np.ndarray, w_ih: np.ndarray, hidden: int) -> None:
    """The LSTM forms' multiply-adds (every step's gates from x and h) within the search's."""
    t, b = x.shape[0], x.shape[1]
    if t * b * 4 * hidden * (w_ih.shape[1] + hidden) > _budget()[0]:
        raise ValueError("an LSTM layer past the search's budget")


def _onednn_lstm_backward(args: list, kw: dict) -> tuple:
    """``mkldnn_rnn_layer_backward``'s (dx, dW_ih, dW_hh, db_ih, db_hh, dhx, dcx) as oneDNN
    computes them on float32 (``core.explain_onednn.lstm_layer_backward``)."""
    from tapescope.core.capture.aten_ref_layers import _lstm_args

    x = np.asarray(args[0])
    if len(args) < 22 or x.dtype != np.float32:
        raise ValueError("oneDNN's LSTM layer backward on float32")
    (x0, w_ih, w_hh, b_ih, b_hh, hx, cx, _o, _hy, _cy, gy, ghy, gcy, reverse, mode, hidden,
     _layers, has_biases) = args[:18]
    *_, steps, hid = _lstm_args(x0, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, args[20], mode,
                                hidden, has_biases)
    _lstm_within_budget(x, np.asarray(w_ih), hid)
    bias = (np.asarray(b_ih), np.asarray(b_hh)) if has_biases else None
    return lstm_layer_backward(x0, w_ih, w_hh, bias, hx, cx, gy, ghy, gcy, steps, hid,
                               bool(reverse))


def _onednn_lstm(args: list, kw: dict) -> tuple:
    """``mkldnn_rnn_layer``'s (output, hy, cy) as oneDNN computes them on float32
    (``core.explain_onednn.lstm_layer_forward``); the workspace is not among them."""
    from tapescope.core.capture.aten_ref_layers import _lstm_args

    x = np.asarray(args[0])
    if len(args) < 13 or x.dtype != np.float32:
        raise ValueError("oneDNN's LSTM layer on float32")
    _, w_ih, _, bias, _, _, steps, hidden = _lstm_args(*args[:11], args[12])
    _lstm_within_budget(x, w_ih, hidden)
    b = (np.asarray(args[3]), np.asarray(args[4])) if bias is not None else None
    ys, h, c = lstm_layer_forward(x, args[1], args[2], b, args[5], args[6], steps, hidden)
    return ys, h, c


def _lift(a: Any) -> Any:
    """A 1-D convolution's array as 2-D of height 1 (a 3-D array gains axis 2)."""
    return a[:, :, None] if isinstance(a, np.ndarray) and a.ndim == 3 else a


def _per_group(variant: tuple, backward: bool) -> tuple:
    """A grouped convolution (not depthwise, not transposed) as ``variant`` of a one-group
    convolution run on each group's channels, the groups' outputs side by side (oneDNN's jit
    kernel runs a group as that convolution: measured on groups of 4 to 16 channels, the
    forward and the input gradient; a weight gradient where the kernel is the same); a
    backward's output one of its groups leaves None is None."""
    cause, label, run, *_ = variant
    g_at, arrays = (9, (0, 1, 2)) if backward else (8, (0, 1))

    def go(args: list, kw: dict) -> Any:
        groups = int(args[g_at])
        x, w = np.asarray(args[arrays[-2]]), np.asarray(args[arrays[-1]])
        if groups < 2 or args[g_at - 2] or (w.shape[1] == 1 and groups == x.shape[1]) or \
                x.shape[1] % groups or w.shape[0] % groups:
            raise ValueError("a grouped convolution, neither depthwise nor transposed")
        cin, cout = x.shape[1] // groups, w.shape[0] // groups
        parts = []
        for g in range(groups):
            a = list(args)
            ci, co = slice(g * cin, (g + 1) * cin), slice(g * cout, (g + 1) * cout)
            a[arrays[-2]], a[arrays[-1]] = x[:, ci], w[co]
            if backward:
                a[0] = np.asarray(args[0])[:, co]
                a[3] = [cout] if args[3] else args[3]
            elif args[2] is not None:
                a[2] = np.asarray(args[2])[co]
            a[g_at] = 1
            parts.append(run(a, kw))
        if not backward:
            return np.concatenate(parts, axis=1)
        kinds = [k for k, m in enumerate(args[10]) if m]  # dx (channels on axis 1), dw, db
        outs = []
        for j, k in enumerate(kinds):
            got = [p[j] if isinstance(p, tuple) else (p if j == 0 else None) for p in parts]
            outs.append(None if any(v is None for v in got) else
                        np.concatenate(got, axis=1 if k == 0 else 0))
        return tuple(outs)
    return cause, f"per group, as a one-group convolution: {label}", go


def _as_2d(variant: tuple, backward: bool) -> tuple:
    """A 2-D convolution variant that also takes a 1-D convolution (conv1d: oneDNN runs it as
    2-D of height 1, measured): its arrays gain a height of 1, its strides, paddings,
    dilations and output paddings a first 1 / 0 / 1 / 0; the outputs lose the height again."""
    cause, label, run, *screen = variant
    at = (4, 5, 6, 8) if backward else (3, 4, 5, 7)
    arrays = (0, 1, 2) if backward else (0, 1)

    def lift(args: list) -> tuple[list, bool]:
        if np.asarray(args[arrays[1]]).ndim != 3:
            return args, False
        out = list(args)
        for i in arrays:
            out[i] = _lift(np.asarray(out[i]))
        for i, first in zip(at, (1, 0, 1, 0), strict=True):
            out[i] = [first, *[int(v) for v in out[i]]]
        return out, True

    def drop(y: Any) -> Any:
        if isinstance(y, tuple):
            return tuple(drop(v) for v in y)
        return y[:, :, 0] if isinstance(y, np.ndarray) and y.ndim == 4 else y

    def plain(args: list, kw: dict) -> Any:
        args2, lifted = lift(args)
        y = run(args2, kw)
        return drop(y) if lifted else y

    def fitted(args: list, kw: dict, recorded: np.ndarray) -> tuple:
        args2, lifted = lift(args)
        y, words = run(args2, kw, _lift(recorded) if lifted else recorded)
        return (drop(y) if lifted else y), words

    run2 = _Fits(fitted) if getattr(run, "fits", False) else plain  # (a fitted one stays one)

    if not screen:
        return (cause, label, run2)

    def screen2(args: list, kw: dict, recorded: np.ndarray) -> bool:
        args2, lifted = lift(args)
        return screen[0](args2, kw, _lift(recorded) if lifted else recorded)
    return (cause, label, run2, screen2)


def _conv_bwd_geometry(args: list, dilated: bool = False) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, list, tuple[int, int], bool, tuple[int, int]]:
    """(dy, x, w, mask, (pad_h, pad_w), transposed, (stride_h, stride_w)) of a 2-D float32
    convolution_backward of one group and dilation 1 (what the written-out orders below are
    measured on; a 1-D one arrives as 2-D of height 1; ``dilated``: any dilation, the caller
    reading it): any strides, padding below the (dilated) kernel; or transposed with a square
    kernel, the stride the kernel's, no padding (the upsampling kind, whose windows do not
    overlap)."""
    g, x, w = (np.asarray(a) for a in args[:3])
    st, pad, dil, transposed, out_pad, groups, mask = args[4:11]
    mask = list(mask)
    if (g.ndim != 4 or x.ndim != 4 or w.ndim != 4 or int(groups) != 1 or len(dil) != 2
            or ([int(v) for v in dil] != [1, 1] and not dilated) or min(int(v) for v in dil) < 1
            or len(mask) != 3 or len(st) != 2 or len(pad) != 2 or g.dtype != np.float32
            or x.dtype != g.dtype or w.dtype != g.dtype):
        raise ValueError("written for 2-D float32 convolutions of one group")
    (kh, kw), (sh, sw), (ph, pw) = w.shape[2:], (int(v) for v in st), (int(v) for v in pad)
    if transposed and [int(v) for v in dil] != [1, 1]:
        raise ValueError("a dilated transposed convolution")
    kh, kw = (int(dil[0]) * (kh - 1) + 1, int(dil[1]) * (kw - 1) + 1)  # (the dilated extent)
    if transposed:  # (an input of one pixel along an axis: any stride there, no overlap)
        sh, sw = (kh if x.shape[2] == 1 else sh), (kw if x.shape[3] == 1 else sw)
        if kh != kw or (sh, sw) != (kh, kh) or (ph, pw) != (0, 0) or \
                any(int(v) for v in out_pad):
            raise ValueError("a transposed convolution written for stride = kernel, no padding")
    elif min(sh, sw) < 1 or not (0 <= ph < kh and 0 <= pw < kw):
        raise ValueError("written for padding below the kernel")
    return g, x, w, mask, (ph, pw), bool(transposed), (sh, sw)


def _masked(outs: tuple, mask: list) -> tuple:
    return tuple(o for o, m in zip(outs, mask, strict=True) if m)


# oneDNN's input-gradient orders (measured with the FPRev method; which one runs depends on the
# shape): each a list of chains over (tap, output channel) terms, the chains' sums added in order
_INPUT_GRAD_ORDERS = {
    "blocks": "the weight's taps in (kh, kw) order, its channels inner, fma, in 16-channel "
              "blocks added in order",
    "chain": "the weight's taps in (kh, kw) order, its channels inner, one fma chain",
    "columns": "per kernel column kw one fma chain over the rows kh, the channels inner, the "
               "columns' chains added in order",
}


def _conv_input_grad(order: str) -> Callable:
    """convolution_backward's input gradient as oneDNN computes it, per input pixel (a
    strided convolution's dy spread over the stride's grid, zeros between: a tap that misses
    a pixel adds ``fma(w, 0, acc) = acc``), in the order ``order`` of
    ``_INPUT_GRAD_ORDERS``, every multiply-add an ``fma``."""
    def run(args: list, kw: dict) -> tuple:
        g, x, w, mask, (ph, pw), transposed, (sh, sw) = _conv_bwd_geometry(args, order == "blocks")
        if not mask[0]:
            raise ValueError("no input gradient asked")
        from tapescope.core.ops.nn import im2col

        oc, ic, kh, kw_ = w.shape
        dh, dw = (int(v) for v in args[6])
        if (dh, dw) != (1, 1) and (sh, sw) != (1, 1):
            raise ValueError("a strided dilated convolution (not measured)")
        if x.size * g.shape[1] * kh * kw_ > _budget()[0]:
            raise ValueError("too many terms to search")
        if transposed:  # (a forward convolution of dy: oneDNN's direct order)
            if order != "blocks":
                raise ValueError("a transposed convolution's input gradient: the direct order")
            at = {"strides": [kh, kh], "dilations": [1, 1], "group": 1, "pads": [0, 0, 0, 0]}
            gi = np.asarray(_conv_direct(16)([g, w], at)).astype(np.float32)
            return _masked((gi, None, None), mask)
        eh, ew = dh * (kh - 1) + 1, dw * (kw_ - 1) + 1  # (the dilated kernel's extent)
        if (sh, sw) != (1, 1):  # (the rows and columns no window reaches end in zeros)
            sp = np.zeros(g.shape[:2] + (x.shape[2] + 2 * ph - eh + 1,
                                         x.shape[3] + 2 * pw - ew + 1), np.float32)
            sp[:, :, ::sh, ::sw] = g
            g = sp
        qh, qw = eh - 1 - ph, ew - 1 - pw
        cols = im2col(g, (kh, kw_), (1, 1), (dh, dw), [(qh, qh), (qw, qw)], 1)[0][:, 0]
        wm = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]).reshape(ic, -1)
        idx = np.arange(oc * kh * kw_).reshape(oc, kh, kw_)[:, ::-1, ::-1]  # (oc, kh, kw) ->
        if order == "blocks":                                                # its column
            chains = [idx[c:c + 16].transpose(1, 2, 0).reshape(-1) for c in range(0, oc, 16)]
        elif order == "chain":
            chains = [idx.transpose(1, 2, 0).reshape(-1)]
        else:
            chains = [idx[:, :, c].T.reshape(-1) for c in range(kw_)]
        total = None
        for chain in chains:
            acc = np.zeros((g.shape[0], ic, cols.shape[2]), np.float32)
            for r in chain:
                acc = _fma_acc(acc, wm[:, r][None, :, None], cols[:, r][:, None, :])
            total = acc if total is None else total + acc
        return _masked((total.reshape(x.shape), None, None), mask)
    return run


def _conv_input_grad_forward(args: list, kw: dict) -> tuple:
    """convolution_backward's input gradient as oneDNN's brgemm convolution of a channels-last
    input computes it (``brg_conv_bwd:avx512_core+brg_conv_fwd``: its forward kernel run on
    dy): the forward direct convolution of dy by the weight with its channels swapped and its
    taps flipped, padded ``k - 1 - p``, every output pixel one ``fma`` chain in (kh, kw,
    channel) order over all of dy's channels. Measured in session 38 (torch 2.13, an AMD
    EPYC, 8 input channels): batches of 2 to 8 at 1 and 2 threads, 8 to 64 output channels,
    4x4 to 16x16 images, 3x3 kernels (a 1x1's one tap is the ``chain`` order's; at one thread
    it adds rounded products in order, the reference's own); a batch of one image runs
    another order, not written out."""
    g, x, w, mask, (ph, pw), transposed, (sh, sw) = _conv_bwd_geometry(args)
    if not mask[0]:
        raise ValueError("no input gradient asked")
    if transposed or (sh, sw) != (1, 1):
        raise ValueError("written for a stride-1 convolution, not transposed")
    oc, ic, kh, kw_ = w.shape
    if x.size * oc * kh * kw_ > _budget()[0]:
        raise ValueError("too many terms to search")
    wf = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    qh, qw = kh - 1 - ph, kw_ - 1 - pw
    at = {"strides": [1, 1], "dilations": [1, 1], "group": 1, "pads": [qh, qw, qh, qw]}
    gi = np.asarray(_conv_direct(0)([g, wf], at)).astype(np.float32)
    if gi.shape != x.shape:
        raise ValueError("the forward of dy is not the input's shape")
    return _masked((gi, None, None), mask)


def _conv_input_grad_taps(args: list, kw: dict) -> tuple:
    """A strided convolution's input gradient as PyTorch's CPU computes it for small problems
    (measured with the FPRev method): per weight tap (kh, kw) a product over the output
    channels (MKL's sgemm: one fma chain an element, k panels past 384 channels), then the
    taps added into the zeroed input gradient in (kh, kw) order where they land (col2im's
    order)."""
    g, x, w, mask, (ph, pw), transposed, (sh, sw) = _conv_bwd_geometry(args)
    if not mask[0]:
        raise ValueError("no input gradient asked")
    if transposed or (sh, sw) == (1, 1):
        raise ValueError("written for a strided convolution")
    oc, ic, kh, kw_ = w.shape
    n, _, oh, ow = g.shape
    if x.size * oc * kh * kw_ > _budget()[0]:
        raise ValueError("too many terms to search")
    dyf = np.ascontiguousarray(g.transpose(1, 0, 2, 3)).reshape(oc, -1)

    def tap(i: int, j: int) -> np.ndarray:  # ic x (n oh ow), by MKL's sgemm
        t = _sgemm(np.ascontiguousarray(w[:, :, i, j].T), dyf)
        return t.reshape(ic, n, oh, ow).transpose(1, 0, 2, 3)
    return _masked((_col2im(x.shape, (kh, kw_), tap, (ph, pw), (sh, sw), (1, 1)), None, None),
                   mask)


def _col2im(shape: tuple, taps: tuple[int, int], tap: Callable, pads: tuple, strides: tuple,
            dils: tuple) -> np.ndarray:
    """An input gradient of ``shape`` from its taps' columns: ``tap(i, j)`` (n, ic, oh, ow)
    added into zeros in (kh, kw) order where each lands (col2im; positions past the padding
    dropped)."""
    (ph, pw), (sh, sw), (dh, dw) = pads, strides, dils
    gx = np.zeros(shape, np.float32)
    n, ic, h, wd = shape
    for i in range(taps[0]):
        for j in range(taps[1]):
            t = tap(i, j)
            rows = np.arange(t.shape[2]) * sh + i * dh - ph
            cols = np.arange(t.shape[3]) * sw + j * dw - pw
            ra, ca = (rows >= 0) & (rows < h), (cols >= 0) & (cols < wd)
            at = np.ix_(np.arange(n), np.arange(ic), rows[ra], cols[ca])
            gx[at] = gx[at] + t[:, :, ra][:, :, :, ca]
    return gx


def _conv_input_grad_gemm(args: list, kw: dict) -> tuple:
    """oneDNN's gemm convolution's input gradient (``x64:gemm:jit``, ONEDNN_VERBOSE: what it
    runs for a large dilation, a WaveNet's conv1d of dilation 16 and 32 on an AMD EPYC): per
    image the columns ``wᵀ · dy`` by its jit sgemm (``_chain_product``: each element one fma
    chain over the output channels from zero, in ``_k_blocks``), then col2im: each (kh, kw)
    tap's columns added into the zeroed input gradient in (kh, kw) order where they land."""
    g, x, w, mask, (ph, pw), transposed, (sh, sw) = _conv_bwd_geometry(args, dilated=True)
    if not mask[0] or transposed:
        raise ValueError("written for a convolution's input gradient")
    if w.shape[2:] == (1, 1):  # (oneDNN runs jit_1x1 there: ``_onednn_1x1_dgrad`` names it;
        raise ValueError("a 1x1 convolution is jit_1x1's")  # one block gives these bits too)
    dh, dw = (int(v) for v in args[6])
    oc, ic, kh, kw_ = w.shape
    n, _, oh, ow = g.shape
    if n * ic * kh * kw_ * oc * oh * ow > _budget()[0]:
        raise ValueError("too many terms to search")
    wt = np.ascontiguousarray(w.reshape(oc, -1).T)  # (ic kh kw, oc)
    col = np.stack([_chain_product(wt, np.ascontiguousarray(g[b].reshape(oc, -1).T))
                    for b in range(n)]).reshape(n, ic, kh, kw_, oh, ow)
    return _masked((_col2im(x.shape, (kh, kw_), lambda i, j: col[:, :, i, j], (ph, pw),
                            (sh, sw), (dh, dw)), None, None), mask)


def _first_image(args: list, recorded: np.ndarray) -> tuple[list, np.ndarray] | None:
    """An input gradient's first image (each image's is computed on its own)."""
    g, x = np.asarray(args[0]), np.asarray(args[1])
    if g.ndim != 4 or g.shape[0] < 2 or recorded.shape != x.shape:
        return None
    return [g[:1], x[:1], *args[2:]], recorded[:1]


def _first_filter(args: list, recorded: np.ndarray) -> tuple[list, np.ndarray] | None:
    """A weight gradient's first filter (each filter's chains are its own): the first output
    channel of dy, or of a transposed convolution's input."""
    g, x, w = (np.asarray(a) for a in args[:3])
    if g.ndim != 4 or x.ndim != 4 or w.ndim != 4 or w.shape[0] < 2 or recorded.shape != w.shape:
        return None
    if len(args) > 7 and args[7] is True:
        return [g, x[:, :1], w[:1], *args[3:]], recorded[:1]
    return [g[:, :1], x, w[:1], *args[3:]], recorded[:1]


def _bias_after(y: np.ndarray, b: Any) -> np.ndarray:
    """``y`` (n, c, h, w) with a convolution's bias ``b`` (or None) added after its sums."""
    return y if b is None else (y + np.asarray(b, np.float32).reshape(1, -1, 1, 1)).astype(
        np.float32)


def _conv_transposed(args: list, kw: dict, block: int = 0) -> np.ndarray:
    """A transposed convolution whose windows do not overlap (no padding; the stride the
    kernel, or an input of one pixel along that axis: a DCGAN's first layer from a 1x1 code)
    as oneDNN computes it: each output pixel one ``fma`` chain over the input channels in
    order (``block``: one chain per ``block`` channels, the chains added in order: measured on
    one-pixel inputs of more than 16 channels), the bias added after."""
    x, w, b = np.asarray(args[0]), np.asarray(args[1]), args[2]
    st, pad, dil, transposed, out_pad, groups = args[3:9]
    k = w.shape[-1] if w.ndim == 4 else 0
    if (not transposed or x.ndim != 4 or w.ndim != 4 or x.dtype != np.float32
            or w.dtype != x.dtype or int(groups) != 1 or w.shape[2] != k
            or len(st) != 2
            or not all(int(v) == k or n == 1 for v, n in zip(st, x.shape[2:], strict=True))
            or any(int(v) for v in pad)
            or any(int(v) for v in out_pad) or [int(v) for v in dil] != [1, 1]
            or x.size * w.shape[1] * k * k > _budget()[0]):
        raise ValueError("written for a transposed convolution of stride = kernel")
    n, ic, h, wd = x.shape
    oc = w.shape[1]
    y = np.empty((n, oc, h * k, wd * k), np.float32)
    for p in range(k):
        for q in range(k):
            acc = None
            for c0 in range(0, ic, block or ic):
                part = np.zeros((n, oc, h, wd), np.float32)
                for c in range(c0, min(ic, c0 + (block or ic))):
                    part = _fma_acc(part, x[:, c][:, None], w[c, :, p, q][None, :, None, None])
                acc = part if acc is None else (acc + part).astype(np.float32)
            y[:, :, p::k, q::k] = _bias_after(acc, b)
    return y


def _tconv_args(args: list, backward: bool) -> tuple:
    """(x, w, stride, pad, dil, out_pad) of a 2-D float32 transposed convolution of one
    group and dilation 1 (the forward's arguments, or convolution_backward's), checked. An
    output padding (below the stride) adds rows and columns at the output's end that the
    convolution it transposes reads no further than its last window: the same orders."""
    x, w = np.asarray(args[1 if backward else 0]), np.asarray(args[2 if backward else 1])
    st, pad, dil, transposed, out_pad, groups = args[4:10] if backward else args[3:9]
    if (transposed is not True or x.ndim != 4 or w.ndim != 4 or x.dtype != np.float32
            or w.dtype != x.dtype or int(groups) != 1 or len(st) != 2 or len(pad) != 2
            or [int(v) for v in dil] != [1, 1] or len(out_pad) != 2
            or not all(0 <= int(o) < max(int(t), 1) for o, t in zip(out_pad, st, strict=True))
            or x.shape[1] != w.shape[0]):
        raise ValueError("written for a 2-D float32 transposed convolution of one group")
    return x, w, [int(v) for v in st], [int(v) for v in pad], dil, [int(v) for v in out_pad]


def _tconv_forward(order: str) -> Callable:
    """A transposed convolution (windows overlapping or not) as oneDNN computes it: the input
    gradient of the convolution it transposes (its input the transposed one's output, its
    output gradient the transposed one's input), in ``_INPUT_GRAD_ORDERS``' ``order``, the
    bias added after (measured: DCGAN's stride-2 kernel-4 layers, the "columns" order)."""
    def run(args: list, kw: dict) -> np.ndarray:
        x, w, st, pad, dil, op = _tconv_args(args, False)
        oh, ow = ((x.shape[2 + i] - 1) * st[i] - 2 * pad[i] + w.shape[2 + i] + op[i]
                  for i in (0, 1))
        if min(oh, ow) < 1:
            raise ValueError("no output")
        y = _conv_input_grad(order)([x, np.zeros((x.shape[0], w.shape[1], oh, ow), np.float32),
                                     w, [0], st, pad, dil, False, [0, 0], 1,
                                     [True, False, False]], kw)[0]
        return _bias_after(y, args[2])
    return run


def _tconv_backward(inner: Callable, weight: bool) -> Callable:
    """A transposed convolution's input gradient (``weight`` False: the convolution it
    transposes run forward on dy, ``inner`` a ``convolution`` variant) or weight gradient
    (that convolution's weight gradient, its output gradient the transposed one's input and
    its input dy, ``inner`` a ``convolution_backward`` variant), in the mask's positions."""
    def run(args: list, kw: dict) -> tuple:
        x, w, st, pad, dil, _ = _tconv_args(args, True)
        g, mask = np.asarray(args[0]), list(args[10])
        if len(mask) != 3 or not mask[1 if weight else 0] or g.ndim != 4 \
                or g.dtype != np.float32:
            raise ValueError("not this gradient")
        if weight:
            gw = inner([x, g, w, [0], st, pad, dil, False, [0, 0], 1, [False, True, False]],
                       kw)[0]
            return _masked((None, np.asarray(gw, np.float32), None), mask)
        gi = inner([g, w, None, st, pad, dil, False, [0, 0], 1], kw)
        return _masked((np.asarray(gi, np.float32), None, None), mask)
    return run


def _conv_param_grads(chunks: int | None, weight: bool = False, rows: bool = False) -> Callable:
    """convolution_backward's bias (or, ``weight``, weight) gradient as PyTorch's CPU kernels
    sum it, the outputs as the reference form gives them (the mask's; the others None).
    ``chunks`` T: oneDNN's, the images split into T runs (the first ones one longer where T
    does not divide them: one run per thread); in each run the bias gradient is a sum in
    order over its images' pixels, the weight gradient one fma chain over them; the runs'
    results added in order. None: the bias gradient by ATen's sum kernel, where the reduced
    axes are one contiguous run per channel (one image, or one channel: the path PyTorch
    takes there). ``rows`` (the weight gradient of a channels-last convolution of 16 input
    channels or more: oneDNN's brgemm kernel): each output row of an image one fma chain from
    zero, a run's rows' sums added in order."""
    def run(args: list, kw: dict) -> tuple:
        g, mask = np.asarray(args[0]), list(args[10])
        if g.ndim < 3 or g.dtype not in (np.float32, np.float64) or len(mask) != 3 \
                or not mask[1 if weight else 2]:
            raise ValueError("a float gradient of a 1-3 d convolution, asked for")
        n, c = g.shape[:2]
        if chunks is None:
            if n != 1 and c != 1:
                raise ValueError("ATen's sum runs where the reduction is contiguous")
            gb = aten_sum(np.ascontiguousarray(g).reshape(c, -1) if n == 1 else g.reshape(1, -1),
                          1).reshape(c)
            return _masked((None, None, np.asarray(gb, g.dtype)), mask)
        if chunks > n:
            raise ValueError("more runs than images: the same split as one per image")
        runs = np.array_split(np.arange(n), chunks)
        if weight:
            gw = _weight_grad_runs(args, runs, rows)
            if gw is None:
                raise ValueError("not the measured geometry, or too long a chain to search")
            return _masked((None, gw, None), mask)
        parts = [serial_sum(g[r], (0,) + tuple(range(2, g.ndim))) for r in runs]
        gb = parts[0]
        for p in parts[1:]:
            gb = gb + p
        return _masked((None, None, np.asarray(gb, g.dtype)), mask)
    return run


def _windows3d(x: np.ndarray, ext: list, st: list, pad: list, dil: list) -> np.ndarray:
    """A 3-D convolution's windows of ``x`` (N, C, D, H, W), zero padded: (N, C, OD, OH, OW,
    KD, KH, KW), the dilated extents ``ext`` taken at the strides and dilations (a view)."""
    xp = np.pad(x, ((0, 0), (0, 0), *((p, p) for p in pad)))
    return np.lib.stride_tricks.sliding_window_view(xp, ext, axis=(2, 3, 4))[
        :, :, ::st[0], ::st[1], ::st[2], ::dil[0], ::dil[1], ::dil[2]]


def _conv3d_direct(args: list, kw: dict) -> np.ndarray:
    """oneDNN's direct 3-D convolution (``jit:avx512_core`` forward, ONEDNN_VERBOSE says; one
    group, not transposed, float32): per output element the input channels in blocks of 16,
    each block one fma chain from zero over its taps in (kd, kh, kw, channel) order (padding
    taps included: a zero changes no sum), the sum starting from the bias (+0.0 without one)
    and each block's partial added to it in order. Measured at 1 and 2 threads: 1-40 input
    channels, 3x3x3, 2x2x2 and 1x1x1 kernels (a 1x1x1 one of 8 channels at two threads runs
    another order: not written out)."""
    x, w, b = np.asarray(args[0]), np.asarray(args[1]), args[2]
    st, pad, dil, transposed, _, groups = args[3:9]
    if x.ndim != 5 or w.ndim != 5 or transposed or int(groups) != 1 or x.dtype != np.float32 \
            or w.dtype != np.float32 or len(st) != 3 or len(pad) != 3 or len(dil) != 3:
        raise ValueError("written for float32 3-D convolutions of one group")
    n, ci = x.shape[:2]
    co, _, kd, kh, kw = w.shape
    st, pad, dil = ([int(v) for v in a] for a in (st, pad, dil))
    if min(st + dil) < 1 or min(pad) < 0 or w.shape[1] != ci:
        raise ValueError("a geometry the variant does not take")
    terms, _ = _budget()
    ext = [d * (k - 1) + 1 for d, k in zip(dil, (kd, kh, kw), strict=True)]
    outs = [(s + 2 * p - e) // t + 1 for s, p, e, t in zip(x.shape[2:], pad, ext, st,
                                                          strict=True)]
    if min(outs) < 1 or n * co * math.prod(outs) * ci * kd * kh * kw > terms:
        raise ValueError("an empty output, or too many terms to search")
    win = _windows3d(x, ext, st, pad, dil)
    shape = (n, co, *outs)
    total = np.zeros(shape, np.float32)
    if b is not None:
        total += np.asarray(b, np.float32).reshape(1, co, 1, 1, 1)
    for c0 in range(0, ci, 16):
        acc = np.zeros(shape, np.float32)
        for a in range(kd):
            for bh in range(kh):
                for c in range(kw):
                    for ch in range(c0, min(ci, c0 + 16)):
                        acc = fma(np.broadcast_to(win[:, ch, :, :, :, a, bh, c][:, None], shape),
                                  np.broadcast_to(w[:, ch, a, bh, c].reshape(1, co, 1, 1, 1),
                                                  shape), acc)
        total = (total + acc).astype(np.float32)
    return total


def _conv3d_planes(args: list) -> tuple:
    """(dy, planes, w, mask): a float32 3-D convolution_backward's output gradient and, per
    image and output depth, its (pixels, channel * kd * kh * kw) window rows, in the order
    oneDNN walks them; ValueError for another geometry or past the search's budget."""
    g, x, w = (np.asarray(a) for a in args[:3])
    st, pad, dil, transposed, _, groups, mask = args[4:11]
    mask = list(mask)
    if g.ndim != 5 or x.ndim != 5 or w.ndim != 5 or transposed or int(groups) != 1 or \
            g.dtype != np.float32 or x.dtype != np.float32 or len(mask) != 3 or \
            len(st) != 3 or len(pad) != 3 or len(dil) != 3:
        raise ValueError("written for float32 3-D convolutions of one group")
    st, pad, dil = ([int(v) for v in a] for a in (st, pad, dil))
    if min(st + dil) < 1 or min(pad) < 0:
        raise ValueError("a geometry the variant does not take")
    n, co = g.shape[:2]
    pixels = math.prod(g.shape[2:])
    terms, steps = _budget()
    if n * pixels > steps or n * pixels * w.size > terms:
        raise ValueError("too many terms to search")
    ext = [d * (k - 1) + 1 for d, k in zip(dil, w.shape[2:], strict=True)]
    win = _windows3d(x, ext, st, pad, dil)
    if win.shape[2:5] != g.shape[2:]:
        raise ValueError("not the measured geometry")
    # (n, od, oh * ow, ci * kd * kh * kw): each plane's pixels as rows of its window's taps
    planes = np.ascontiguousarray(np.moveaxis(win, 1, 4)).reshape(
        n, g.shape[2], g.shape[3] * g.shape[4], -1)
    return g, planes, w, mask


def _chain_onto(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``acc`` continued by the fma chain of ``a @ b`` (each step rounded once)."""
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    acc = np.array(acc, np.float32, order="C")
    if not native.fma_chain(a, b, acc):
        for k in range(a.shape[1]):
            acc = fma(a[:, k:k + 1], b[k:k + 1, :], acc)
    return acc


def _conv3d_param_grads(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """A 3-D convolution's weight (or bias) gradient as oneDNN computes it (ONEDNN_VERBOSE;
    measured at 1 and 2 threads): with few input channels (``jit:avx512_core``, 1 and 3
    measured) the (image, output depth) planes cut among the threads by ``balance211``, each
    thread one fma chain over its planes' pixels (one sum for the bias), the threads' added
    in order; otherwise (``gemm:jit``, 8 measured) per plane one fma chain from zero over its
    pixels (in ``onednn_k_blocks``), added to its run's sum, the images in runs (one per
    thread), the runs added in order, and the bias each (image, depth, row) line's sum from
    zero, added in order. Fitted: which, the thread or run count, the block size."""
    g, planes, w, mask = _conv3d_planes(args)
    n, co, od = g.shape[:3]
    weight = recorded.shape == w.shape
    if not (weight and mask[1]) and not (recorded.shape == (co,) and mask[2]):
        raise ValueError("written for the weight and bias gradients")
    want = np.ascontiguousarray(recorded).reshape(-1).view(np.uint32)
    dys = np.ascontiguousarray(g).reshape(n, co, od, -1)  # (n, co, od, oh * ow)
    known = _RECORDED_THREADS.get()
    counts = list(dict.fromkeys([known, 1, 2, 3, 4, 6, 8] if known else [1, 2, 3, 4, 6, 8]))

    def done(y: np.ndarray, words: str) -> tuple:
        outs = (None, y.reshape(w.shape), None) if weight else (None, None, y)
        return _masked(outs, mask), words
    units = [(i, d) for i in range(n) for d in range(od)]
    for t in (c for c in counts if c <= len(units)):  # the jit kernel's plane split
        total = None
        for tid in range(t):
            b, e = _balance211(len(units), t, tid)
            if b >= e:
                continue
            if weight:
                acc = np.zeros((co, planes.shape[-1]), np.float32)
                for i, d in units[b:e]:
                    acc = _chain_onto(acc, dys[i, :, d], planes[i, d])
            else:
                acc = serial_sum(np.concatenate([dys[i, :, d] for i, d in units[b:e]], 1), 1)
            total = acc if total is None else (total + acc).astype(np.float32)
        if np.array_equal(total.reshape(-1).view(np.uint32), want):
            return done(total, f"oneDNN's jit kernel: the planes cut among {t} thread"
                               f"{'s' if t > 1 else ''}")
    if not weight:  # the gemm path's bias: each line's sum from zero, added in order
        lines = dys.reshape(n, co, -1, g.shape[4])
        total = np.zeros(co, np.float32)
        for i in range(n):
            for r in range(lines.shape[2]):
                total = (total + serial_sum(lines[i, :, r], 1)).astype(np.float32)
        if np.array_equal(total.view(np.uint32), want):
            return done(total, "oneDNN's gemm path: each (image, depth, row) line's sum, added")
        raise ValueError("no split gives these bits")
    for bk, isa in _ONEDNN_K_BLOCKS:
        chains = [[[_fma_chain(dys[i, :, d][:, k0:k1], planes[i, d][k0:k1])
                    for k0, k1 in pairwise(onednn_k_blocks(planes.shape[2], bk))]
                   for d in range(od)] for i in range(n)]
        for t in (c for c in counts if c <= n):
            total = None
            for part in np.array_split(np.arange(n), t):
                acc = None
                for q in (q for i in part for d in range(od) for q in chains[i][d]):
                    acc = q if acc is None else (acc + q).astype(np.float32)
                total = acc if total is None else (total + acc).astype(np.float32)
            if np.array_equal(total.reshape(-1).view(np.uint32), want):
                return done(total, f"oneDNN's gemm path: each plane's chain from zero (blocks "
                                   f"of {bk}, {isa}), the images in {t} run"
                                   f"{'s' if t > 1 else ''}")
    raise ValueError("no split, run count or block size gives these bits")


def _conv3d_input_grad(args: list, kw: dict) -> tuple:
    """A 3-D convolution's input gradient as oneDNN's ``jit:avx512_core`` backward-data kernel
    computes it (stride and dilation 1): per input element the output channels in blocks of
    16, each block one fma chain from zero over the weight's taps in (kd, kh, kw) order, the
    channels inner (dy's taps read through the padding: zeros change no sum), the blocks'
    sums added in order. Measured: 8-16 input channels, 16-32 output channels, 1 and 2
    threads, every bit."""
    g, x, w = (np.asarray(a) for a in args[:3])
    st, pad, dil, transposed, _, groups, mask = args[4:11]
    mask = list(mask)
    if g.ndim != 5 or w.ndim != 5 or transposed or int(groups) != 1 or g.dtype != np.float32 \
            or w.dtype != np.float32 or len(mask) != 3 or not mask[0] or \
            [int(v) for v in st] != [1, 1, 1] or [int(v) for v in dil] != [1, 1, 1]:
        raise ValueError("written for float32 3-D convolutions of stride and dilation 1")
    ks = w.shape[2:]
    pad = [int(v) for v in pad]
    if len(pad) != 3 or any(not 0 <= p < k for p, k in zip(pad, ks, strict=True)):
        raise ValueError("padding below the kernel")
    n, co = g.shape[:2]
    terms, _ = _budget()
    if x.size * co * math.prod(ks) > terms:
        raise ValueError("too many terms to search")
    gp = np.pad(g, ((0, 0), (0, 0), *((k - 1 - p, k - 1 - p) for p, k in zip(pad, ks,
                                                                           strict=True))))
    size = x.shape[2:]
    total = None
    for o0 in range(0, co, 16):
        acc = np.zeros(x.shape, np.float32)
        for a in range(ks[0]):
            for b in range(ks[1]):
                for c in range(ks[2]):
                    s0, s1, s2 = ks[0] - 1 - a, ks[1] - 1 - b, ks[2] - 1 - c
                    for oc in range(o0, min(co, o0 + 16)):
                        gv = gp[:, oc, s0:s0 + size[0], s1:s1 + size[1], s2:s2 + size[2]]
                        acc = fma(np.broadcast_to(gv[:, None], x.shape),
                                  np.broadcast_to(w[oc, :, a, b, c].reshape(1, -1, 1, 1, 1),
                                                  x.shape), acc)
        total = acc if total is None else (total + acc).astype(np.float32)
    return _masked((total, None, None), mask)


def _conv_line_split(threads: int) -> Callable:
    """oneDNN's direct backward weights of an input of one channel (``jit:avx512_core``,
    ONEDNN_VERBOSE says; a first layer's 5x5 conv): the (image, output row) lines cut among
    the threads by ``balance211``; per thread the weight gradient one fma chain over its
    lines' pixels in order and the bias gradient one sum in order over them; the threads'
    results added in order."""
    def run(args: list, kw: dict) -> tuple:
        g, x, mask = np.asarray(args[0]), np.asarray(args[1]), list(args[10])
        if g.ndim != 4 or x.shape[1] != 1 or g.dtype != np.float32 or len(mask) != 3 or \
                int(args[9]) != 1 or not (mask[1] or mask[2]):
            raise ValueError("written for a float32 2-D convolution of one input channel")
        n, c, oh, _ = g.shape
        if threads > n * oh:
            raise ValueError("more threads than lines")
        gw = _weight_grad_runs(args, [], split=threads) if mask[1] else None
        if mask[1] and gw is None:
            raise ValueError("not the measured geometry, or too long a chain to search")
        gb = None
        if mask[2]:
            every = np.moveaxis(g, 1, -1).reshape(n * oh, -1, c)  # lines x pixels x channels
            for t in range(threads):
                b, e = _balance211(n * oh, threads, t)
                if b < e:
                    part = serial_sum(every[b:e].reshape(-1, c), 0)
                    gb = part if gb is None else (gb + part).astype(g.dtype)
        return _masked((None, gw, gb), mask)
    return run


def _conv_1x1_weight_grad(chunks: int) -> Callable:
    """A 1x1 convolution's weight gradient as PyTorch's CPU computes it (measured with the
    FPRev method): per image one MKL sgemm ``dy @ xᵀ`` over its pixels (``_sgemm``: k panels,
    each an fma chain from zero added into the running sum in turn, beta = 1), the images in
    ``chunks`` runs (one per thread: the first ones one longer), a run's images accumulated in
    order, the runs' sums added in order."""
    def run(args: list, kw: dict) -> tuple:
        try:
            g, x, w, mask, pad, transposed, (sh, sw) = _conv_bwd_geometry(args)
        except ValueError as e:
            raise ValueError(f"not the measured geometry: {e}") from None
        n, oc = g.shape[:2]
        if not mask[1] or transposed or w.shape[2:] != (1, 1) or any(pad) or chunks > n:
            raise ValueError("written for the weight gradient of a 1x1 convolution, no "
                             "padding, at most a run per image")
        pixels = g.shape[2] * g.shape[3]
        terms, steps = _budget()
        if n * pixels > steps or n * pixels * w.size > terms:
            raise ValueError("too many terms to search")
        dys = np.ascontiguousarray(g).reshape(n, oc, pixels)
        xs = np.ascontiguousarray(x[:, :, ::sh, ::sw]).reshape(n, x.shape[1], pixels)
        if xs.shape[2] != pixels:
            raise ValueError("not the measured geometry")
        total = None
        for r in np.array_split(np.arange(n), chunks):
            acc = None
            for i in r:
                acc = _sgemm(dys[i], np.ascontiguousarray(xs[i].T), acc)
            total = acc if total is None else (total + acc).astype(np.float32)
        return _masked((None, total.reshape(w.shape), None), mask)
    return run


def _best_divider(value: int, lo: int, hi: int, find_max: bool) -> int:
    """oneDNN's ``best_divider``: from ``hi`` down to ``lo``, the divider whose rounding up
    of ``value`` wastes the least (ties: the first met where ``find_max``, else the last)."""
    hi = max(1, min(hi, value))
    lo = max(1, min(lo, hi))
    best, pick = math.inf, hi
    for d in range(hi, lo - 1, -1):
        up = -(-value // d) * d
        loss = (up - value) / up
        if loss < best or (not find_max and loss <= best):
            best, pick = loss, d
    return pick


def _balance211(n: int, team: int, tid: int) -> tuple[int, int]:
    """oneDNN's ``balance211``: thread ``tid``'s part [start, end) of ``n`` items."""
    n1 = -(-n // team)
    n2, t1 = n1 - 1, n - (n1 - 1) * team
    start = n1 * tid if tid < t1 else n1 * t1 + (tid - t1) * n2
    return start, start + (n1 if tid < t1 else n2)


def _onednn_1x1_wgrad(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """oneDNN's 1x1 convolution backward weights (``jit_1x1:avx512_core``, measured with
    ONEDNN_VERBOSE): the pixels of the images cut in blocks of ``best_divider(pixels, 7, 16)``
    (the ``reduce_block``), the (image, block) list split among the threads of the minibatch
    (``balance211``); each kernel call one fma chain from zero over up to ``step`` blocks of
    one image, added to its thread's sum; the threads' sums added in order. Fitted: the
    thread count (the recorded one first) and the step (oneDNN's ``nb_reduce_blocking``,
    which follows the cache sizes)."""
    try:
        g, x, w, mask, pad, transposed, (sh, sw) = _conv_bwd_geometry(args)
    except ValueError as e:
        raise ValueError(f"not the measured geometry: {e}") from None
    n, oc = g.shape[:2]
    if not mask[1] or transposed or w.shape[2:] != (1, 1) or any(pad):
        raise ValueError("written for the weight gradient of a 1x1 convolution, no padding")
    pixels, ow = g.shape[2] * g.shape[3], g.shape[3]
    terms, steps = _budget()
    if n * pixels > steps or n * pixels * w.size > terms:
        raise ValueError("too many terms to search")
    dys = np.ascontiguousarray(g).reshape(n, oc, 1, pixels)
    xs = np.ascontiguousarray(x[:, :, ::sh, ::sw]).reshape(n, x.shape[1], 1, -1)
    if xs.shape[3] != pixels:
        raise ValueError("not the measured geometry")
    blk = _best_divider(pixels, 7, 16, True)
    if pixels % blk:
        blk = _best_divider(ow, 4, ow, False)
    nb = -(-pixels // blk)
    want = np.asarray(recorded).reshape(oc, -1).view(np.uint32)
    known = _RECORDED_THREADS.get()
    threads = [known, *range(1, 9)] if known else list(range(1, 9))
    pieces: dict = {}

    def piece(i: int, p0: int, p1: int) -> np.ndarray:
        if (i, p0, p1) not in pieces:
            pieces[(i, p0, p1)] = _chain_onto(np.zeros((oc, x.shape[1]), np.float32),
                                              dys[i, :, 0, p0:p1], xs[i, :, 0, p0:p1].T)
        return pieces[(i, p0, p1)]
    seen = set()
    for t in dict.fromkeys(min(t, n * nb) for t in threads):
        for step in dict.fromkeys((nb, 1, 2, 3, 4, 6, 8)):
            total = None
            cuts = []
            for tid in range(t):
                s, e = _balance211(n * nb, t, tid)
                run = None
                while s < e:
                    i, b = divmod(s, nb)
                    k = min(step, nb - b, e - s)
                    cuts.append((i, b * blk, min(pixels, (b + k) * blk)))
                    y = piece(*cuts[-1])
                    run = y if run is None else (run + y).astype(np.float32)
                    s += k
                if run is not None:
                    total = run if total is None else (total + run).astype(np.float32)
            if tuple(cuts) in seen:
                continue
            seen.add(tuple(cuts))
            if np.array_equal(total.view(np.uint32), want):
                return (_masked((None, total.reshape(w.shape), None), mask),
                        f"blocks of {blk} pixels, {t} thread{'s' if t > 1 else ''}, "
                        f"{step} block{'s' if step > 1 else ''} a call")
    raise ValueError("no thread count or step gives these bits")


def _blocked_chains(wm: np.ndarray, xs: np.ndarray, start: np.ndarray, blk: int
                    ) -> np.ndarray:
    """``wm @ xs`` as oneDNN's jit_1x1 kernels sum it: k in blocks of ``blk``, the first
    block's fma chain from ``start``, each other's from zero, added in order."""
    acc = None
    for k0 in range(0, wm.shape[1], blk):
        part = _chain_onto(start if k0 == 0 else np.zeros_like(start), wm[:, k0:k0 + blk],
                           xs[k0:k0 + blk])
        acc = part if acc is None else (acc + part).astype(np.float32)
    return acc


def _reduce_blocks_fit(wm: np.ndarray, xs: np.ndarray, start: np.ndarray,
                       want: np.ndarray) -> int | None:
    """The reduce block (a multiple of 16, or the whole) whose ``_blocked_chains`` give
    ``want`` (a sample, float32 bits); None where none does."""
    k = wm.shape[1]
    for blk in dict.fromkeys([k, 80, 256, 128, *range(16, k, 16)]):
        if blk <= k and np.array_equal(_blocked_chains(wm, xs, start, blk).view(np.uint32),
                                       want):
            return blk
    return None


def _onednn_1x1_dgrad(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """oneDNN's 1x1 convolution backward input gradient (``jit_1x1:avx512_core``, measured on a
    Zen 4): per input element, the output channels in reduce blocks of one size with a shorter
    last one (as the forward's, ``_onednn_1x1_fwd``), each block's fma chain from zero, the
    blocks added in order; a strided one's gradient zero between its strided pixels. Fitted:
    the block on a sample of the first image's elements."""
    try:
        g, x, w, mask, pad, transposed, (sh, sw) = _conv_bwd_geometry(args)
    except ValueError as e:
        raise ValueError(f"not the measured geometry: {e}") from None
    if not mask[0] or transposed or w.shape[2:] != (1, 1) or any(pad) or \
            recorded.shape != x.shape:
        raise ValueError("written for the input gradient of a 1x1 convolution, no padding")
    n, o = g.shape[:2]
    c = x.shape[1]
    if g.shape[2:] != x[:, :, ::sh, ::sw].shape[2:] or g.size * c > _budget()[0]:
        raise ValueError("not this geometry, or past the search's budget")
    wt = np.ascontiguousarray(w.reshape(o, c).T)  # (c, o)
    gm = np.ascontiguousarray(g).reshape(n, o, -1)
    want = np.ascontiguousarray(recorded[0][:16, ::sh, ::sw].reshape(min(16, c), -1)[:, :32])
    blk = _reduce_blocks_fit(wt[:16], gm[0][:, :32], np.zeros(want.shape, np.float32),
                             want.view(np.uint32))
    if blk is None:
        raise ValueError("no block size reproduces the sample")
    dx = np.zeros(x.shape, np.float32)
    zero = np.zeros((c, gm.shape[2]), np.float32)
    for i in range(n):
        dx[i][:, ::sh, ::sw] = _blocked_chains(wt, gm[i], zero, blk).reshape((c,) + g.shape[2:])
    return (_masked((dx, None, None), mask),
            f"{blk}-channel reduce blocks" if blk < o else "one block")


def _pixel_chain(acc: np.ndarray, a_: np.ndarray, b_: np.ndarray, chain: list) -> bool:
    """``acc[o, ...] = fma(a_[i, o, a, b], b_[i, :, a, b], acc[o, ...])`` over the chain's
    lines (image i, row a) and each line's pixels b in order, in one native call (the product
    of a_'s pixels as columns by b_'s as rows, an fma chain over them); False where it does
    not run (not float32, no native code): the caller's loop then, the same bits."""
    if a_.dtype != np.float32 or b_.dtype != np.float32 or not chain:
        return False
    cols = np.concatenate([a_[i, :, a, :] for i, a in chain], axis=1)  # (oc, pixels)
    rows = np.concatenate([np.moveaxis(b_[i, :, a], 1, 0).reshape(b_.shape[3], -1)
                           for i, a in chain], axis=0)  # (pixels, ic * kh * kw)
    return native.fma_chain(np.ascontiguousarray(cols), np.ascontiguousarray(rows),
                            acc.reshape(acc.shape[0], -1))


def _weight_grad_runs(args: list, runs: list, rows: bool = False,
                      split: int | None = None) -> np.ndarray | None:
    """The weight gradient of ``_conv_param_grads`` (None where the geometry is not the one
    measured, or its chains are longer than ``_WGRAD_STEPS`` pixels); ``rows``: each output
    row its own chain, a run's rows added in order; ``split``: the runs are the (image, output
    row) lines cut among ``split`` threads by ``balance211`` (``runs`` unread)."""
    try:
        g, x, w, _, (ph, pw), transposed, (sh, sw) = _conv_bwd_geometry(args, dilated=True)
    except ValueError:
        return None
    kh, kw = w.shape[2:]
    dh, dw = (int(v) for v in args[6])
    if transposed:
        # the chains run over x's pixels: each meets its k x k block of dy (stride k)
        win = np.lib.stride_tricks.sliding_window_view(g, (kh, kh), axis=(2, 3))[:, :, ::kh,
                                                                                 ::kh]
        a_, b_ = x, win
    else:
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        a_ = g
        b_ = np.lib.stride_tricks.sliding_window_view(
            xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))[
            :, :, ::sh, ::sw, ::dh, ::dw]  # n ic oh ow kh kw (the dilated taps)
    n, _, oh, ow = a_.shape
    terms, steps = _budget()
    if n * oh * ow > steps or n * oh * ow * w.size > terms or b_.shape[2:4] != (oh, ow):
        return None
    if rows and transposed:
        return None
    if split:
        every = [(i, a) for i in range(n) for a in range(oh)]
        cuts = [_balance211(len(every), split, t) for t in range(split)]
        runs = [every[b:e] for b, e in cuts if b < e]
    total = None
    for r in runs:
        # a run: its chains' sums added in order; a chain: the run's pixels, or one row's
        lines = list(r) if split else [(i, a) for i in r for a in range(oh)]
        part = None
        for chain in ([[ln] for ln in lines] if rows and lines else [lines]):
            acc = np.zeros(w.shape, np.float32)
            if not _pixel_chain(acc, a_, b_, chain):
                for i, a in chain:
                    for b in range(ow):
                        acc = _fma_acc(acc, a_[i, :, a, b][:, None, None, None],
                                       b_[i, :, a, b][None])
            part = acc if part is None else part + acc
        total = part if total is None else total + part
    return total


_FLASH_ISA = ((16, "AVX-512"), (8, "AVX2"))


def _flash_args(args: list, kw: dict, first: int) -> tuple:
    """(q, k, v, causal, scale) of a flash attention op whose q is args[first] (its dropout
    and causal flags after its tensors); ValueError for what the kernels written out do not
    take (dropout)."""
    q, k, v = (np.asarray(a) for a in args[first:first + 3])
    n = first + 3 + (2 if first else 0)  # (the backward's out and logsumexp first)
    if _arg(args, kw, n, "dropout_p", 0.0):
        raise ValueError("dropout: not written out")
    # the written-out products' multiply-adds (the backward's five: 2.5x the forward's two),
    # within the convolutions' budget: a long sequence's are past it (skipped, not run)
    terms = q.size * k.shape[-2] * (5 if first else 2)
    if terms > _budget()[0]:
        raise ValueError(f"{terms:,} multiply-adds: past the search's budget")
    scale = kw.get("scale")
    # sdp::calculate_scale: 1 / sqrt(E) in double (or the given scale), then a float
    sc = np.float32(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    return q, k, v, bool(_arg(args, kw, n + 1, "is_causal", False)), sc


def _mkl_kind(kind: str) -> Any:
    """The context of MKL's products as ``kind`` runs them: "" (an Intel CPU with AMX, the
    default), "amd" (``mkl_amd``), "no-amx" (``mkl_no_amx``)."""
    return mkl_amd() if kind == "amd" else mkl_no_amx() if kind == "no-amx" else nullcontext()


def _flash(lanes: int, kind: str = "") -> Callable:
    def run(args: list, kw: dict) -> tuple:
        q, k, v, causal, sc = _flash_args(args, kw, 0)
        with _mkl_kind(kind):
            return flash_attention(q, k, v, causal, sc, lanes, _flash_mask(kw, q, k, causal),
                                   reduced=q.dtype in (_BF16, np.float16))
    return run


def _flash_mask(kw: dict, q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray | None:
    """The flash op's ``attn_mask`` (None without one): float32, of the scores' rank and
    broadcasting to them, never with ``is_causal``; else a ValueError."""
    mask = kw.get("attn_mask")
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype == q.dtype and q.dtype in (_BF16, np.float16):  # (a reduced kernel's:
        # widened exactly)
        mask = mask.astype(np.float32)
    if causal or mask.dtype != np.float32 or mask.ndim != q.ndim:
        raise ValueError("a float32 (or, in bfloat16, bfloat16) mask of the scores' rank, "
                         "not causal")
    try:
        np.broadcast_shapes(mask.shape, q.shape[:-1] + (k.shape[-2],))
    except ValueError:
        raise ValueError("a mask that does not broadcast to the scores") from None
    return mask


def _flash_backward(lanes: int, key_scaled: bool, kind: str = "", reduced: bool = False
                    ) -> Callable:
    def run(args: list, kw: dict) -> tuple:
        q, k, v, causal, sc = _flash_args(args, kw, 1)
        g, out, lse = (np.asarray(args[i]) for i in (0, 4, 5))
        with _mkl_kind(kind):
            return flash_attention_backward(g, q, k, v, out, lse, causal, sc, lanes,
                                            key_scaled, _flash_mask(kw, q, k, causal),
                                            reduced)
    return run


#: the words of a flash variant whose products are MKL's on an AMD CPU (VENDOR_WORDS'):
#: k in panels of at most 192 terms, alpha into the second operand, its one-row kernels
_ON_AMD = "; MKL's products as on an AMD CPU"
#: ... on an Intel CPU without AMX (``mkl_no_amx``: wide outputs past 768 terms in 384-term
#: panels)
_NO_AMX = "; MKL's products as on an Intel CPU without AMX"
_KIND_WORDS = {"": "", "amd": _ON_AMD, "no-amx": _NO_AMX}


def _flash_variants(base: str, dt: np.dtype) -> list[_Variant]:
    """PyTorch's CPU flash attention (FlashAttentionKernel.cpp), its AVX-512 and AVX2 builds:
    core.explain_aten's ``flash_attention`` and its backward; in bfloat16 (``dt``), the
    forward's reduced kernel (its AVX-512 build)."""
    if base.endswith("_backward") and dt == np.float16:
        return [("reassociation", "PyTorch's CPU flash attention backward in float16 (AVX-512 "
                                  "FP16; MKL's float16 gemm for the scores and g @ vᵀ, oneDNN's "
                                  "float16 matmul into the gradients: exact products in chains, "
                                  "k split at a power of two), the probabilities recomputed from "
                                  "the logsumexp (SLEEF's exp), the scale taken "
                                  + ("into k before the scores' product" if key else
                                     "after the scores' sums")
                                  + ", the probabilities and the softmax's gradient rounded to "
                                  "float16 for their products, each gradient kept in float16",
                 _flash_backward(16, key, reduced=True)) for key in (False, True)]
    if base.endswith("_backward") and dt == _BF16:
        return [("reassociation", "PyTorch's CPU flash attention backward in bfloat16 (AVX-512; "
                                  "MKL's bfloat16 gemm as on a CPU with AMX): the probabilities "
                                  "recomputed from the logsumexp (SLEEF's exp), every product "
                                  "exact in 32-term blocks of two chains and scaled after, the "
                                  "probabilities and the softmax's gradient rounded to "
                                  "bfloat16 for their products, each gradient kept in "
                                  "bfloat16 (every block's product added and rounded back)",
                 _flash_backward(16, False, reduced=True))]
    if base.endswith("_backward"):
        return [("reassociation", f"PyTorch's CPU flash attention backward ({isa}): the "
                                  "probabilities recomputed from the logsumexp (SLEEF's exp), "
                                  "every product an fma chain, the softmax's row sums "
                                  f"{lanes}-lane, the scale taken "
                                  + ("into k before the scores' product" if key else
                                     "after the scores' sums")
                                  + ", the key and value gradients added query block by block"
                                  + _KIND_WORDS[kind], _flash_backward(lanes, key, kind))
                for kind in ("", "no-amx") for lanes, isa in _FLASH_ISA
                for key in (False, True)] + [
            ("reassociation", f"PyTorch's CPU flash attention backward ({isa}): the "
                              "probabilities recomputed from the logsumexp (SLEEF's exp), every "
                              f"product an fma chain, the softmax's row sums {lanes}-lane, each "
                              "scale taken into the product's second operand, the key and value "
                              "gradients added query block by block" + _ON_AMD,
             _flash_backward(lanes, False, "amd")) for lanes, isa in _FLASH_ISA]
    if dt == np.float16:
        return [("reassociation", "PyTorch's CPU flash attention in float16 (AVX-512; MKL's "
                                  "float16 gemm: exact products in its sgemm's chains, a last "
                                  "query block of few rows by its dots kernel), exp by "
                                  "fexp_u20 summed in two accumulators, the probabilities "
                                  "rounded to float16 for p @ v, the product normalised after, "
                                  "by 1 / sum, and rounded to float16", _flash(16))]
    if dt == _BF16:
        return [("reassociation", "PyTorch's CPU flash attention in bfloat16 (AVX-512; MKL's "
                                  "bfloat16 gemm as on a CPU with AMX): q @ kᵀ and p @ v with "
                                  "exact products in 32-term blocks of two chains (a one-row "
                                  "block: MKL's one-row kernels), exp by fexp_u20 summed in two "
                                  "accumulators, the probabilities rounded to bfloat16 for "
                                  "p @ v, the product normalised after, by 1 / sum, and rounded "
                                  "to bfloat16", _flash(16))]
    return [("reassociation", f"PyTorch's CPU flash attention ({isa}): q @ kᵀ and p @ v as "
                              "fma chains, exp_u20 on whole vectors and summed per lane "
                              f"({lanes} lanes), the product normalised after, by 1 / sum"
                              + _KIND_WORDS[kind],
             _flash(lanes, kind)) for kind in ("", "amd", "no-amx") for lanes, isa in _FLASH_ISA]


def _in_turn(keys: np.ndarray) -> list[np.ndarray]:
    """Positions 0..n-1 of ``keys`` (in the order a loop visits them) grouped by how many
    equal keys came before: within a group the keys differ, so one vectorised step per group
    does what the loop does, each key's visits in turn."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    start = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1] if k.size else k[:0]
    rank = np.empty(k.size, np.int64)
    rank[order] = np.arange(k.size) - np.repeat(start, np.diff(np.r_[start, k.size]))
    return [np.flatnonzero(rank == r) for r in range(int(rank.max(initial=-1)) + 1)]


def _fma_in_turn(acc: np.ndarray, rows: np.ndarray, scale: np.ndarray,
                 keys: np.ndarray) -> None:
    """``acc[keys[i]] = fma(scale[i], rows[i], acc[keys[i]])`` for i in order."""
    for sel in _in_turn(keys):
        acc[keys[sel]] = fma(scale[sel][:, None], rows[sel], acc[keys[sel]])


def _bag_fbgemm(args: list, kw: dict) -> tuple:
    """PyTorch's CPU embedding bag with per-sample weights (fbgemm's EmbeddingSpMDM): each
    bag's rows fma'd in index order, fma(weight, row, sum), from zero."""
    def weigh(out, rows, psw, bags):
        if psw is None:
            raise ValueError("no per-sample weights: the reference's sum")
        _fma_in_turn(out, rows, psw, bags)
    return tuple(bag_forward(args, kw, True, weigh))


def _bag_backward_aten(dense: bool) -> Callable:
    """PyTorch's CPU embedding bag backward (sum and mean): the indices sorted by
    ``torch.sort`` (libstdc++'s unstable std::sort; fbgemm's stable radix sort from 32,768),
    then per index its occurrences in that order, each ``axpy``'d into its row by MKL:
    fma(scale, g[bag], row), the scale float64 1 / bag size (mean) or the sample's weight,
    rounded to the gradient's type."""
    def run(args: list, kw: dict) -> np.ndarray:
        p = bag_grad_args(args, kw, dense)
        if p["mode"] == 2:
            raise ValueError("max: the reference's index_add")

        def add(gw: np.ndarray, p: dict) -> None:
            every, keep = p["all"], p["keep"]
            order = (std_sort_order(every) if every.size < 32768
                     else np.argsort(every, kind="stable"))
            pos = np.cumsum(keep) - 1  # (an index's place among the kept ones)
            order = pos[order[keep[order]]]
            t = gw.dtype.type
            if p["n"] is not None:
                n = p["n"]
                scale = np.where(n != 0, 1.0 / np.maximum(n, 1), 1.0).astype(t)
            elif p["psw"] is not None:
                scale = np.asarray(p["psw"]).astype(np.float64).astype(t)
            else:
                scale = np.ones(p["idx"].size, t)
            rows = np.asarray(p["g"]).astype(t)[p["bag"][order]]
            _fma_in_turn(gw, rows, scale[order], p["idx"][order])
        return bag_backward(p, add)[0]
    return run


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _rsqrt_in_type(args: list, kw: dict) -> np.ndarray:
    """ATen's rsqrt (Vectorized::rsqrt and the scalar loop): ``1 / sqrt(x)`` in the compute
    type, two roundings there (a half input widened to float32 first), then the output's."""
    x = np.asarray(args[0])
    t = np.float64 if x.dtype == np.float64 else np.float32
    w = x.astype(t)
    return (t(1) / np.sqrt(w)).astype(x.dtype)


def _pow_tensor(op: str) -> list[_Variant]:
    """A tensor's pow: the exponents ATen hands to its sqrt and rsqrt kernels (0.5: VML's sqrt,
    the optimizer's variants; -0.5: 1 / sqrt in the type), then SLEEF's powf."""
    def at_exponent(e: float, run: Callable) -> Callable:
        def only(args: list, kw: dict) -> np.ndarray:
            if not op.endswith(".Tensor_Scalar") or len(args) < 2 or args[1] != e:
                raise ValueError(f"written for a scalar exponent {e}")
            return run(args, kw)
        return only
    return [(c, label + " (pow(x, 0.5): ATen's sqrt kernel)", at_exponent(0.5, run))
            for c, label, run in _sqrt(op)] + [
        ("libm", "PyTorch's CPU pow(x, -0.5): its rsqrt kernel, 1 / sqrt(x), each rounded in "
                 "float32 (float64 for float64)", at_exponent(-0.5, _rsqrt_in_type)),
        ("libm", "PyTorch's CPU pow (ATen's cpu_kernel_vec: SLEEF's powf on whole register "
                 "pairs, the C library's powf on the rest, in each thread's chunk; float32)",
         _Fits(_sleef_pow_fit))]


def _sleef_pow_fit(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """ATen's float32 ``pow`` of a tensor base (a focal loss's ``(1 - p) ** 1.5``, GeM
    pooling's learned exponent): ``cpu_kernel_vec`` with ``Sleef_powf16_u10`` and the C
    library's ``powf`` on each chunk's tail (``_vec_map``); the chunks of each thread count
    (the recorded one first). The exponents ATen takes elsewhere (0.5, -0.5, -1, 2, 3, -2)
    are the table's own forms."""
    from tapescope.core.explain_aten import _vec_map, sleef_powf

    x = np.asarray(args[0])
    y = np.asarray(args[1])
    if x.dtype != np.float32 or y.dtype.kind != "f" or x.size > 1 << 22 or (
            y.ndim and y.shape != x.shape and y.size != 1):
        raise ValueError("written for a float32 base and a scalar or same-shape exponent")
    if y.size == 1 and float(y.reshape(-1)[0]) in (0.5, -0.5, -1.0, 2.0, 3.0, -2.0):
        raise ValueError("ATen's specialised exponents: the table's forms")
    fn = _libc_pow(False)
    yf = np.broadcast_to(y.astype(np.float32), x.shape).reshape(-1)
    flat = x.reshape(-1)

    def tail(v: np.ndarray, e: np.ndarray) -> np.ndarray:
        return np.array([fn(float(a), float(b)) for a, b in zip(v, e, strict=True)],
                        np.float32)
    rec = np.asarray(recorded).reshape(-1)
    want, nan = rec.view(np.uint32), np.isnan(rec)
    known = _RECORDED_THREADS.get()
    with np.errstate(all="ignore"):
        for t in ([known, 1] if known else range(1, max(1, -(-x.size // GRAIN_SIZE)) + 1)):
            out = _vec_map(flat, sleef_powf, tail, t, yf)
            # (NaNs by the NaN policy: any payload)
            if np.all((out.view(np.uint32) == want) | (np.isnan(out) & nan)):
                return out.reshape(x.shape), f"{t} threads' chunks" if t > 1 else "one chunk"
    raise ValueError("no chunking gives these bits")


def _libc_pow(f64: bool) -> Callable:
    """The C library's ``pow`` (float64) or ``powf`` (float32), typed for ctypes."""
    import ctypes

    fn = libm().pow if f64 else libm().powf
    ct = ctypes.c_double if f64 else ctypes.c_float
    fn.restype, fn.argtypes = ct, [ct, ct]
    return fn


def _libc_pow_scalar(args: list, kw: dict) -> np.ndarray:
    """``base ** e`` element by element by the C library's powf (float32 and half: in
    float32, then rounded) or pow (float64)."""
    base, e = args[0], np.asarray(args[1])
    if not isinstance(base, int | float) or isinstance(base, bool) or e.size > 1 << 20 \
            or not (e.dtype.kind == "f" or e.dtype == _BF16):
        raise ValueError("a float exponent (at most 2**20 elements) and a number base")
    f64 = e.dtype == np.float64
    fn = _libc_pow(f64)
    t = np.float64 if f64 else np.float32
    b = t(base)
    y = np.frompyfunc(lambda v: fn(b, v), 1, 1)(e.astype(t)).astype(t)
    return y.astype(e.dtype)


def _f32_only(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError("written for float32")
    return x


def _elu_coefs(args: list, kw: dict, at: int) -> tuple:
    f = np.float32
    alpha, scale, inscale = (f(_arg(args, kw, at + i, n, 1.0))
                             for i, n in enumerate(("alpha", "scale", "input_scale")))
    return f(alpha * scale), scale, inscale  # (negcoef: the product in float)


def _aten_elu(args: list, kw: dict) -> np.ndarray:
    """ATen's elu (Elu.h), float32: ``x > 0 ? x * scale : expm1(x * input_scale) * negcoef``
    (negcoef = alpha * scale), SLEEF's expm1f on whole register pairs, glibc's on the rest."""
    x = _f32_only(args[0])
    neg, pos, ins = _elu_coefs(args, kw, 1)
    e = _vec_map((x * ins).astype(np.float32), sleef_expm1f, _LIBC_MATH.expm1)
    return np.where(x > 0, (x * pos).astype(np.float32), (e * neg).astype(np.float32))


def _aten_elu_backward(args: list, kw: dict) -> np.ndarray:
    """ATen's elu backward (is_result False), float32: ``b <= 0 ? ((g * input_scale) *
    negcoef) * exp(b * input_scale) : g * scale``, SLEEF's expf on whole register pairs."""
    g, b = _f32_only(args[0]), _f32_only(args[5] if len(args) > 5 else kw.get("self_or_result"))
    if _arg(args, kw, 4, "is_result", False) or g.shape != b.shape:
        raise ValueError("written for the input's form")
    neg, pos, ins = _elu_coefs(args, kw, 1)
    f = np.float32
    e = _vec_map((b * ins).astype(f), sleef_exp, _LIBC_MATH.exp)
    return np.where(b <= 0, ((((g * ins).astype(f) * neg).astype(f)) * e).astype(f),
                    (g * pos).astype(f))


def _bce_libc(total: Callable | None) -> Callable:
    """ATen's binary_cross_entropy (Loss.cpp, a scalar loop): per element ``(t - 1) *
    max(log1p(-x), -100) - t * max(log(x), -100)`` with the C library's log1p and log, times
    the weight, then the reduction: ``total`` (sum), over the count for mean; ``total`` None:
    the reduction none's alone."""
    def run(args: list, kw: dict) -> np.ndarray:
        x, t = np.asarray(args[0]), np.asarray(args[1])
        w = args[2] if len(args) > 2 else kw.get("weight")
        red = args[3] if len(args) > 3 else kw.get("reduction", 1)
        if x.dtype not in (np.float32, np.float64) or t.dtype != x.dtype:
            raise ValueError("float32 or float64 operands")
        T = x.dtype.type
        with np.errstate(all="ignore"):
            a = np.maximum(_LIBC_MATH.log1p(-x), T(-100))
            b = np.maximum(_LIBC_MATH.log(x), T(-100))
            loss = ((t - T(1)) * a).astype(x.dtype) - (t * b).astype(x.dtype)
            if w is not None:
                loss = loss * np.asarray(w, x.dtype)
            if (red == 0) != (total is None):
                raise ValueError("another reduction's variant")
            if red == 0:
                return loss.astype(x.dtype)
            s = np.asarray(total(loss.astype(x.dtype), None, False)).astype(x.dtype)
            return (s / T(x.size) if red == 1 else s).astype(x.dtype)
    return run


def _bce_logits(total: Callable | None) -> Callable:
    """ATen's binary_cross_entropy_with_logits (Loss.cpp, a composite of its kernels, float32):
    ``ls = log_sigmoid(x)`` (``min(x, 0) - log1p(exp(-|x|))`` with SLEEF's expf and log1pf on
    every element, a partial last vector included); with ``pos_weight``, ``ls * ((pw - 1) * t
    + 1)``; ``loss = (1 - t) * x - ls``, times the weight; each op rounded; then the reduction:
    ``total`` (sum), over the count for mean; ``total`` None: the reduction none's alone."""

    def run(args: list, kw: dict) -> np.ndarray:
        x, t = np.asarray(args[0]), np.asarray(args[1])
        w = _arg(args, kw, 2, "weight", None)
        pw = _arg(args, kw, 3, "pos_weight", None)
        red = _arg(args, kw, 4, "reduction", 1)
        if x.dtype != np.float32 or t.dtype != x.dtype:
            raise ValueError("float32 operands (SLEEF's float32 exp and log1p)")
        if (red == 0) != (total is None):
            raise ValueError("another reduction's variant")
        f = np.float32
        with np.errstate(all="ignore"):
            ls = _aten_log_sigmoid([x], {})[0]
            if pw is not None:
                lw = ((np.asarray(pw, f) - f(1)).astype(f) * t).astype(f)
                ls = (ls * (lw + f(1)).astype(f)).astype(f)
            loss = (((f(1) - t).astype(f) * x).astype(f) - ls).astype(f)
            if w is not None:
                loss = (loss * np.asarray(w, f)).astype(f)
            if red == 0:
                return loss
            s = np.asarray(total(loss, None, False)).astype(f)
            return (s / f(loss.size) if red == 1 else s).astype(f)
    return run


def _aten_linspace(args: list, kw: dict) -> np.ndarray:
    """ATen's linspace kernel (RangeFactoriesKernel.cpp) for float32 and float64, as this
    build computes it (measured: bit for bit on 480,000 float32 and 300,000 float64 values,
    the two threads' halves of 100,000 included): the step in the output's type, each value
    one fma from the nearer end; one step is ``[start]``."""
    start, end, steps = (list(args) + [None] * 3)[:3]
    dt = as_dtype(kw.get("dtype")) or np.dtype(np.float32)
    if dt not in (np.float32, np.float64) or not isinstance(steps, int) \
            or isinstance(steps, bool) or not 1 <= steps <= 1 << 24 \
            or not all(isinstance(v, int | float) and not isinstance(v, bool)
                       for v in (start, end)):
        raise ValueError("written for float32 / float64, number ends, 1 to 2**24 steps")
    t = dt.type
    if steps == 1:
        return np.asarray([start], dt)
    with np.errstate(all="ignore"):
        a, b = t(start), t(end)
        step = (b - a) / t(steps - 1)
        i = np.arange(steps)
        lo = fma(np.full(steps, step), i.astype(dt), np.full(steps, a))
        hi = fma(np.full(steps, -step), (steps - 1 - i).astype(dt), np.full(steps, b))
        return np.where(i < steps // 2, lo, hi).astype(dt)


def _var_in_double(kind: str) -> Callable:
    """ATen's var / std (and their ``_mean`` forms: the mean second) of a float32 or half input:
    its reduction accumulates in float64 (``WelfordOps`` with a double accumulator), so the
    statistics are float64 ones rounded once to the output's type (computed here in two passes
    in float64: the same float64 statistic to far below the output's rounding; where a
    rounding would tell them apart the bits differ and the op stays ``unknown``)."""
    from tapescope.core.capture.aten_ref_nn import _var_args, axes_of

    def run(args: list, kw: dict) -> tuple | np.ndarray:
        x = np.asarray(args[0])
        if x.dtype not in (np.float32, np.float16, _BF16) or x.size == 0:
            raise ValueError("a non-empty float32 or half input (float64 accumulates in its "
                             "own type: its order matters)")
        _, dim, corr, keep = _var_args([x, *args[1:]], kw)  # (the reference form's reading)
        axes = axes_of(x, dim)
        xd = x.astype(np.float64)
        n = int(np.prod([x.shape[a] for a in axes])) if x.ndim else 1
        mean = xd.mean(axis=axes, keepdims=True)
        with np.errstate(all="ignore"):
            var = ((xd - mean) ** 2).sum(axis=axes, keepdims=True) / max(n - corr, 0)
        stat = np.sqrt(var) if kind.startswith("std") else var
        if not keep:
            stat, mean = (np.squeeze(a, axis=axes) for a in (stat, mean))
        stat, mean = stat.astype(x.dtype), mean.astype(x.dtype)
        return (stat, mean) if kind.endswith("_mean") else stat
    return run


def _cum_in_double(ufunc: Any) -> Callable:
    """ATen's cumsum / cumprod kernel (cpu_cum_base_kernel, acc_type: double for float): a
    float64 running total along the axis, each output rounded to the input's type."""
    def run(args: list, kw: dict) -> np.ndarray:
        x, d = np.asarray(args[0]), args[1]
        if x.ndim == 0 or not (x.dtype.kind == "f" or x.dtype == _BF16):
            raise ValueError("a float array")
        return ufunc.accumulate(x.astype(np.float64), axis=int(d) % x.ndim).astype(x.dtype)
    return run


def _aten_adam_part(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
                    vmax: np.ndarray | None, k: dict, adamw: bool, vector: bool) -> tuple:
    """ATen's fused Adam on a run of elements (FusedAdamKernel.cpp's ``adam_math``, as the
    build contracts it, measured): Adam's weight decay ``fma(w, wd, g)``; exp_avg by lerp's
    ``fma(weight, g - m, m)`` (``fma(weight - 1, g - m, g)`` from 0.5); exp_avg_sq
    ``fma(c2 * g, g, v * beta2)`` in its vector loop (``vector``), ``fma(v, beta2,
    (c2 * g) * g)`` in its scalar one; the rest as written (the reference's)."""
    if k["wd"] != 0:
        if adamw:
            w = w * k["decay"]
        else:
            g = fma(w, k["wd"], g)
    c1, one = k["c1"], k["c1"].dtype.type(1)
    if abs(c1) < 0.5:
        m = fma(c1, g - m, m)
    else:
        m = fma(c1 - one, g - m, g)
    v = fma(k["c2"] * g, g, v * k["b2"]) if vector else fma(v, k["b2"], (k["c2"] * g) * g)
    return adam_step(w, m, v, vmax, k)


def _aten_adam(width: int) -> Callable:
    """``fused_adam``'s per-tensor update as ATen's kernel runs it: the elements up to the
    last multiple of ``width`` in its vector loops (ATen's, then the compiler's own on the
    tail), the rest in its scalar loop (``_aten_adam_part``)."""
    def update(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
               vmax: np.ndarray | None, k: dict, adamw: bool) -> tuple:
        flat = [None if a is None else np.ravel(a) for a in (w, g, m, v, vmax)]
        n = flat[0].size
        cut = n - n % width
        parts = [_aten_adam_part(*(None if a is None else a[lo:hi] for a in flat), k, adamw,
                                 vector) for lo, hi, vector in ((0, cut, True), (cut, n, False))]
        return tuple(None if parts[0][j] is None else
                     np.concatenate([p[j] for p in parts]).reshape(w.shape) for j in range(4))
    return update


def _fused_adams(base: str) -> list[_Variant]:
    adamw = base.startswith("_fused_adamw")
    # (measured on ATen's AVX-512 build: 8 for float32, 4 for float64)
    return [("fma", f"PyTorch's CPU fused {'AdamW' if adamw else 'Adam'} (ATen): exp_avg by "
                    "fma (lerp), exp_avg_sq = fma(c2 * g, g, exp_avg_sq * beta2)"
                    f"{'' if adamw else ', the weight decay fma(param, wd, grad)'}; the last "
                    f"n % {width} elements of a tensor in its scalar loop, fma(exp_avg_sq, "
                    "beta2, (c2 * g) * g)",
             _fused_adam_run(adamw, width)) for width in (8, 4)]


def _fused_adam_run(adamw: bool, width: int) -> Callable:
    update = _aten_adam(width)
    return lambda a, kw: tuple(fused_adam(a, kw, adamw, update=update))


def _polar_libc(args: list, kw: dict) -> np.ndarray:
    """PyTorch's CPU polar: a scalar loop, ``abs * cos(angle)``, ``abs * sin(angle)`` by the
    C library's cosf / sinf (glibc's are not correctly rounded everywhere)."""
    a, t = np.asarray(args[0]), np.asarray(args[1])
    if a.dtype not in (np.float32, np.float64) or t.dtype != a.dtype:
        raise ValueError("polar of another dtype")
    out = np.empty(np.broadcast_shapes(a.shape, t.shape),
                   np.complex64 if a.dtype == np.float32 else np.complex128)
    out.real = a * libc_elementwise("cos")(t)
    out.imag = a * libc_elementwise("sin")(t)
    return out


def _complex_mul_tail(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """PyTorch's CPU complex product (``xc * freqs`` of rotary embeddings; measured on torch
    2.13's AVX-512 and AVX2 builds alike): ATen's vector loop is the reference's order
    (``aten_ref_pointwise.complex_multiply``); the elements after the last whole group of 8
    complex64 (4 complex128) numbers of each row TensorIterator loops over are its scalar loop
    as gcc contracts it, ``re = fma(ar, br, -(ai * bi))``, ``im = fma(ar, bi, ai * br)``: for
    complex64 two at a time, an odd last element in the reference's order; for complex128
    each. The row (a product of the output's trailing dimensions) and the chunks of 1 to
    ``ceil(n / GRAIN_SIZE)`` threads are fitted. A number broadcast along the row (its scalar
    loop then depends on the memory's alignment) is not written."""
    from tapescope.core.capture.aten_ref_pointwise import complex_multiply

    dt = np.asarray(recorded).dtype
    if dt.kind != "c" or len(args) < 2:
        raise ValueError("a complex product only")
    a, b = (np.asarray(x).astype(dt) for x in args[:2])
    shape = np.broadcast_shapes(a.shape, b.shape)
    if any(x.ndim and x.shape[-1] == 1 and shape[-1] > 1 for x in (a, b)):
        raise ValueError("a number broadcast along the row")
    a, b = (np.broadcast_to(x, shape).ravel() for x in (a, b))
    plain = complex_multiply(a, b)
    fused = np.empty_like(plain)
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    fused.real = fma(ar, br, -(ai * bi))
    fused.imag = fma(ar, bi, ai * br)
    group = 8 if dt == np.complex64 else 4
    n = plain.size
    rows = sorted({math.prod(shape[i:]) for i in range(len(shape))} - {0, 1}) or [1]
    want = np.asarray(recorded).ravel().view(np.uint8)
    for row in rows:
        for used in range(1, -(-n // GRAIN_SIZE) + 1):
            y = plain.copy()
            for _, v, hi in vec_segments(n, group, used, row if row < n else None):
                end = v + (hi - v) // 2 * 2 if group == 8 else hi  # (complex64: in pairs)
                y[v:end] = fused[v:end]
            if np.array_equal(y.view(np.uint8), want):
                return y.reshape(shape), (f"rows of {row}" if row < n else "one row") + \
                    (f", {used} threads' chunks" if used > 1 else "")
    raise ValueError("no row or chunking gives these bits")


#: the recorded run's thread count while ``explain_op`` searches (None: not known)
_RECORDED_THREADS: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "tapescope_explain_threads", default=None)


def _merges_reach(start: np.float32, runs: list, want: np.ndarray, cap: int = 50_000) -> bool:
    """Whether some interleaving of ``runs`` (each thread's terms in its own order), added one
    at a time onto ``start`` in float32, gives ``want``'s bits: every interleaving followed,
    the sums each reaches kept per position in each run (a set: orders that round alike
    merge). ValueError past ``cap`` sums held (too many to follow)."""
    f = np.float32
    states: dict = {(0,) * len(runs): {f(start).view(np.uint32).item()}}
    for _ in range(sum(len(r) for r in runs)):
        nxt: dict = {}
        for pos, bits in states.items():
            accs = [np.uint32(b).view(f) for b in bits]
            for t, run in enumerate(runs):
                if pos[t] < len(run):
                    key = pos[:t] + (pos[t] + 1,) + pos[t + 1:]
                    got = nxt.setdefault(key, set())
                    got.update((a + run[pos[t]]).view(np.uint32).item() for a in accs)
        states = nxt
        if sum(len(b) for b in states.values()) > cap:
            raise ValueError("too many interleavings to follow")
    return any(int(want.view(np.uint32)) in b for b in states.values())


def _index_put_race(args: list, kw: dict, recorded: np.ndarray) -> tuple:
    """PyTorch's CPU ``index_put`` with ``accumulate=True`` on float32, 32,768 values or more,
    at 2+ threads with deterministic algorithms off (ATen's IndexKernel.cpp): the values in
    ``parallel_for``'s chunks, each thread adding its own in order by atomic adds
    (``cpu_atomic_add_float``), so the adds of two threads onto one place interleave as the
    threads race. The chunks are one per thread, not bounded by the grain (measured at 2 and 8
    threads): the recorded run's thread count where ``explain_op`` knows it, else fitted (2 to
    16; the more chunks, the more orders an output may have taken). Named where every
    output that is not the serial loop's is what some interleaving of its threads' terms gives
    (each followed; the serial loop is one of them). Nondeterministic: another run may give
    other bits, ``torch.use_deterministic_algorithms(True)`` one serial loop."""
    from tapescope.core.capture.aten_ref_shape import index_put_places
    from tapescope.core.capture.aten_ref_table import fp_quiet

    x = np.asarray(args[0])
    if x.dtype != np.float32 or not bool(_arg(args, kw, 3, "accumulate", False)):
        raise ValueError("float32 with accumulate only")
    places, v = index_put_places(x, list(args[1]), np.asarray(args[2]))
    n = places.size
    if n < GRAIN_SIZE:
        raise ValueError("one thread's serial loop")
    serial = x.astype(np.float32).reshape(-1)
    with fp_quiet():
        np.add.at(serial, places, v)
    want = np.asarray(recorded, np.float32).reshape(-1)
    bad = np.flatnonzero(serial.view(np.uint32) != want.view(np.uint32))
    if not bad.size or want.size != serial.size:
        raise ValueError("the serial loop's bits")
    order = np.argsort(places, kind="stable")  # (each place's terms, in the loop's order)
    lo = np.searchsorted(places[order], bad, "left")
    hi = np.searchsorted(places[order], bad, "right")
    start = x.reshape(-1)
    with fp_quiet():
        known = _RECORDED_THREADS.get()
        for tasks in ([known] if known else range(2, 17)):
            if tasks < 2:
                break
            chunk = -(-n // tasks)
            if all(_merges_reach(start[p], [[v[i] for i in order[a:b] if i // chunk == t]
                                            for t in range(tasks)], want[p])
                   for p, a, b in zip(bad, lo, hi, strict=True)):
                y = serial.copy()
                y[bad] = want[bad]  # (each one an interleaving's sum, followed above)
                return y.reshape(x.shape), f"{tasks} threads, {bad.size} places added in " \
                                           "an order of the race"
    raise ValueError("no interleaving of the threads' adds gives these bits")


def _softplus_variant(backward: bool, threads: int, lanes: int = 16) -> _Variant:
    """PyTorch's CPU softplus (or its backward) at ``threads`` threads (core.explain_aten's
    ``softplus``); past one thread only where the loop is split (more than ATen's grain);
    ``lanes`` 16 floats a register (the AVX-512 build) or 8 (the AVX2 build)."""
    def run(args: list, kw: dict) -> np.ndarray:
        x = _f32_only(args[1] if backward else args[0])
        if threads > 1 and x.size <= GRAIN_SIZE:
            raise ValueError("one thread's loop: the 1-thread variant's")
        beta = float(_arg(args, kw, 2 if backward else 1, "beta", 1))
        th = float(_arg(args, kw, 3 if backward else 2, "threshold", 20))
        return _aten_softplus(x, beta, th, _f32_only(args[0]) if backward else None, threads,
                              lanes)
    return ("libm", f"PyTorch's CPU softplus{' backward' if backward else ''}: SLEEF's expf"
                    f"{'' if backward else ' and log1pf'} on whole register pairs "
                    f"({2 * lanes} floats: the {'AVX-512' if lanes == 16 else 'AVX2'} build), "
                    "the C library's on the rest"
                    f"{f', the loop split over {threads} threads' if threads > 1 else ''}", run)


def _aten_glu(backward: bool, lanes: int | None = None) -> Callable:
    """ATen's CPU glu (``a * (1 / (1 + exp(-b)))``) or its backward (``s = sigmoid(b)`` by
    ATen's sigmoid, then ``(((1 - s) * s) * a) * g`` and ``s * g``): the exp by SLEEF on whole
    register pairs of each row of the halves (the rows TensorIterator loops over: what lies
    before ``dim``, each half's elements from ``dim`` on contiguous), the C library's on the
    rest; one thread's loop (up to ATen's grain)."""
    from tapescope.core.explain_aten import _libc_exp

    def run(args: list, kw: dict) -> np.ndarray:
        x = np.asarray(args[1] if backward else args[0])
        if x.dtype not in (np.float32, np.float64) or x.ndim == 0 or x.size > 2 * GRAIN_SIZE:
            raise ValueError("float32 / float64, one thread's loop")
        d = int(_arg(args, kw, 2 if backward else 1, "dim", -1)) % x.ndim
        a, b = np.split(x, 2, axis=d)
        rows = math.prod(x.shape[:d])
        one = x.dtype.type(1)
        nb = -b.reshape(rows, -1)
        e = np.concatenate([_vec_map(r, sleef_exp, _libc_exp, lanes=lanes) for r in nb]) \
            if rows else nb.reshape(-1)
        s = one / (one + e.reshape(b.shape))
        if not backward:
            return a * s
        g = np.asarray(args[0])
        return np.concatenate([s * g, (((one - s) * s) * a) * g], axis=d)
    return run


def _aten_grid_sample_bilinear(args: list, kw: dict) -> np.ndarray:
    """PyTorch's CPU ``grid_sampler_2d``, bilinear (its vectorised kernel, measured): the
    reference's indices and weights but the unnormalise ``fma(c + 1, size / 2, -0.5)`` (not
    align_corners), and the taps' sum ``fma(v, w, out)`` from the first tap's product."""
    from tapescope.core.capture import aten_ref_sample as S

    x, grid, interp, pad, align = S._sample_args(args, kw, 0)
    if interp != S.BILINEAR:
        raise ValueError("bilinear only")
    n, c, h, w = x.shape
    gx, gy = (grid[..., k].reshape(n, -1) for k in (0, 1))

    def src(v: np.ndarray, size: int) -> np.ndarray:
        if align:
            return S._source(v, size, pad, align)
        t = v.dtype.type
        return S._pad(fma(v + t(1), np.full_like(v, t(size) / t(2)), np.full_like(v, t(-0.5))),
                      size, pad, align)
    taps = S._Taps(x)
    out = None
    for cx, cy, wt in S._bilinear_setup(src(gx, w), src(gy, h))[0]:
        v = taps.read(cx, cy)
        wb = np.broadcast_to(wt[:, None, :], v.shape)
        out = v * wb if out is None else fma(v, wb, out)
    return out.reshape(n, c, grid.shape[1], grid.shape[2])


def _aten_bilinear_cl(args: list, kw: dict) -> np.ndarray:
    """PyTorch's CPU bilinear upsampling by its channels-last kernel
    (``cpu_upsample_linear_channels_last``: what runs for a channels-last input of more than 3
    channels and, whatever the layout, for outputs of ``H + W <= 128``), as gcc contracts it
    (measured): the source index ``fma(s, i + 0.5, -0.5)`` with ATen's guard, the corner weights
    ``lh * lw``; the channels in whole 8-float (4-double) groups ``fma(i00, w00, fma(i01, w01,
    fma(i11, w11, i10 * w10)))``, the rest ``fma(i11, w11, fma(i10, w10, fma(i00, w00, i01 *
    w01)))``."""
    from tapescope.core.capture.aten_ref_conv import _bilinear_args, _linear_src

    x = np.asarray(args[0])
    if x.ndim != 4 or x.dtype not in (np.float32, np.float64):
        raise ValueError("written for 4-d float32 / float64")
    size = _arg(args, kw, 1, "output_size", None)
    align, sh, sw = _bilinear_args(args, kw, x.shape[-2:], size, 2)
    if size is None:
        size = [int(np.floor(x.shape[-2] * sh)), int(np.floor(x.shape[-1] * sw))]
    h0, h1, lh0, lh1 = _linear_src(size[0], x.shape[2], align, sh, x.dtype, True, fma)
    w0, w1, lw0, lw1 = _linear_src(size[1], x.shape[3], align, sw, x.dtype, True, fma)
    weights = [np.multiply.outer(a, b) for a in (lh0, lh1) for b in (lw0, lw1)]
    taps = [x[:, :, hi, :][:, :, :, wi] for hi in (h0, h1) for wi in (w0, w1)]
    (a, wa), (b, wb), (c, wc), (d, wd) = zip(taps, weights, strict=True)
    # (the kernel's vectors, then gcc's own vectorisation of its scalar loop in 8 floats / 4
    # doubles: the same contraction; the last channels short of that, the scalar loop's)
    width = 8 if x.dtype == np.float32 else 4
    v = x.shape[1] - x.shape[1] % width
    out = fma(d, wd, fma(c, wc, fma(a, wa, b * wb)))
    out[:, :v] = fma(a, wa, fma(b, wb, fma(d, wd, c * wc)))[:, :v]
    return out


def _aten_bilinear_backward(args: list, kw: dict) -> np.ndarray:
    """PyTorch's CPU bilinear upsampling backward (``cpu_upsample_linear_backward``, a
    contiguous gradient; measured): the source index with ATen's guard and ``fma(s, i + 0.5,
    -0.5)``, then per output pixel in row-major order its four corners in turn ``acc =
    fma(lh * lw, g, acc)``, vectorised over the planes (up to 65,536 output pixels)."""
    from tapescope.core.capture.aten_ref_conv import _bilinear_args, _linear_src

    g, out_hw, in_size = np.asarray(args[0]), list(args[1]), list(args[2])
    if g.dtype not in (np.float32, np.float64) or len(in_size) != 4 or len(out_hw) != 2 \
            or out_hw[0] * out_hw[1] > 1 << 16 or g.shape != tuple(in_size[:2]) + tuple(out_hw):
        raise ValueError("written for 4-d float32 / float64, up to 65,536 output pixels")
    align, sh, sw = _bilinear_args(args, kw, in_size[-2:], out_hw, 3)
    hs = _linear_src(out_hw[0], in_size[2], align, sh, g.dtype, True, fma)
    ws = _linear_src(out_hw[1], in_size[3], align, sw, g.dtype, True, fma)
    planes = in_size[0] * in_size[1]
    gx = np.zeros((planes, in_size[2], in_size[3]), g.dtype)
    g2 = g.reshape(planes, *out_hw)
    for oh in range(out_hw[0]):
        for ow in range(out_hw[1]):
            gv = g2[:, oh, ow]
            for hi, lh in ((hs[0][oh], hs[2][oh]), (hs[1][oh], hs[3][oh])):
                for wi, lw in ((ws[0][ow], ws[2][ow]), (ws[1][ow], ws[3][ow])):
                    gx[:, hi, wi] = fma(np.full_like(gv, lh * lw), gv, gx[:, hi, wi])
    return gx.reshape(in_size)


def _aten_log_sigmoid(args: list, kw: dict) -> tuple:
    """ATen's ``log_sigmoid_cpu_kernel`` (float32): the buffer ``exp(-|x|)`` and ``min(x, 0) -
    log1p(buffer)``, SLEEF's on whole and partial vectors alike."""
    x = _f32_only(args[0])
    f = np.float32
    z = sleef_exp((-np.abs(x)).astype(f)).astype(f)
    return (np.minimum(x, f(0)) - sleef_log1pf(z)).astype(f), z


def _aten_weight_norm(backward: bool) -> Callable:
    """ATen's CPU weight norm along dim 0 (WeightNormKernel.cpp; its AVX2 build runs,
    measured): per row the sum of squares (of ``gw * v`` for the backward) by
    ``vec::map_reduce_all`` in 8 float / 4 double lanes (folded as a halving tree for float,
    in sequence for double; the partial last vector added, not fused), then ``norm =
    sqrt(s)``, ``w = v * (g / norm)``; backward ``gg = s / norm``, ``a = g / norm``, ``b = (a
    * gg) / norm``, ``gv = fma(-b, v, a * gw)`` (the compiler's contraction, measured)."""
    def run(args: list, kw: dict) -> tuple:
        if backward:
            gw, v, g, norm = (np.asarray(a) for a in args[:4])
            dim = _arg(args, kw, 4, "dim", 0)
        else:
            v, g = np.asarray(args[0]), np.asarray(args[1])
            dim = _arg(args, kw, 2, "dim", 0)
        if v.dtype not in (np.float32, np.float64) or v.ndim < 2 or int(dim) % v.ndim:
            raise ValueError("float32 / float64 weights normalised along dim 0")
        tree = v.dtype == np.float32
        lanes = 8 if tree else 4
        rows = v.reshape(v.shape[0], -1)
        gr = g.reshape(-1, 1)
        if not backward:
            nr = np.sqrt(_lane_sum(rows, rows, lanes, tree, False))[:, None]
            return (rows * (gr / nr)).reshape(v.shape), nr.reshape(g.shape)
        nr, gwr = norm.reshape(-1, 1), gw.reshape(rows.shape)
        gg = _lane_sum(gwr, rows, lanes, tree, False)[:, None] / nr
        a = gr / nr
        b = (a * gg) / nr
        gv = fma(-np.broadcast_to(b, rows.shape), rows, a * gwr)
        return gv.reshape(v.shape), gg.reshape(g.shape)
    return run


def _aten_window(base: str) -> Callable:
    """``hann_window`` / ``hamming_window`` as ATen makes it (``native::hamming_window``): in
    the dtype, ``arange(M)`` times ``2 pi / (M - 1)`` (the double rounded to the dtype), MKL
    VML's cos (``torch.cos``'s), times ``-beta``, plus ``alpha``, each step rounded; the first
    N where ``periodic`` (M = N + 1)."""
    from tapescope.core.capture.aten_ref_special import window_args

    def run(args: list, kw: dict) -> np.ndarray:
        n, periodic, alpha, beta = window_args(base, args, kw)
        dt = as_dtype(kw.get("dtype")) or np.dtype(np.float32)
        if dt not in (np.float32, np.float64) or n <= 1:
            raise ValueError("written for float32 / float64 windows of 2 or more")
        m = n + 1 if periodic else n
        t = dt.type
        x = np.arange(m, dtype=dt) * t(math.pi * 2.0 / (m - 1))
        w = (_vml("Cos", x) * t(-beta)).astype(dt) + t(alpha)
        return np.asarray(w[:n], dt)
    return run


def _aten_prod(args: list, kw: dict) -> np.ndarray:
    x = np.asarray(args[0])
    if x.dtype not in (np.float32, np.float64):
        raise ValueError("written for a float32 / float64 input")
    if len(args) == 1 or isinstance(args[1], str):  # prod.default(x, dtype=)
        dim, keep, dtype = None, False, kw.get("dtype")
    else:
        dim = args[1]
        keep = kw.get("keepdim", args[2] if len(args) > 2 else False)
        dtype = kw.get("dtype", args[3] if len(args) > 3 else None)
    if dtype is not None:
        raise ValueError("a prod with its own dtype")
    if _RECORDED_THREADS.get() != 1 and x.size >= GRAIN_SIZE:
        raise ValueError("a prod of several threads' parts")
    return aten_reduce_vec(x, np.multiply, dim, bool(keep))


_AA_OPS = ("_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa_backward",
           "_upsample_bicubic2d_aa", "_upsample_bicubic2d_aa_backward")


def _variants(op: str, dt: Any = np.float64) -> list[_Variant]:
    dt = np.dtype(dt)
    base = _base(op)
    if base in ("softplus", "softplus_backward"):
        return [_softplus_variant(base == "softplus_backward", t, lanes) for lanes in (16, 8)
                for t in (1, 2, 4)]
    if base in ("_ctc_loss", "_ctc_loss_backward"):
        fn = ctc_loss if base == "_ctc_loss" else ctc_loss_backward
        return [("libm", f"PyTorch's CPU {base.lstrip('_')}: the reference's recursion, by the "
                         "C library's exp / log (a scalar loop)",
                 lambda a, k: tuple(fn(a, k, _LIBC_MATH)))]
    if base in ("_weight_norm_interface", "_weight_norm_interface_backward"):
        back = base.endswith("_backward")
        return [("reassociation", f"PyTorch's CPU weight norm{' backward' if back else ''} "
                                  "along dim 0: each row's sum of "
                                  f"{'gw * v' if back else 'squares'} in 8 float / 4 double "
                                  "lanes (ATen's AVX2 map_reduce_all)"
                                  f"{', gv = fma(-b, v, a * gw)' if back else ''}",
                 _aten_weight_norm(back))]
    if base == "log_sigmoid_forward":
        return [("libm", "PyTorch's CPU log_sigmoid: min(x, 0) - log1p(exp(-|x|)) with SLEEF's "
                         "expf and log1pf on every element (a partial last vector too)",
                 _aten_log_sigmoid)]
    if base in ("upsample_linear1d", "upsample_linear1d_backward", "upsample_trilinear3d",
                "upsample_trilinear3d_backward"):
        back = base.endswith("_backward")
        fn = {"upsample_linear1d": upsample_linear1d,
              "upsample_linear1d_backward": upsample_linear1d_backward,
              "upsample_trilinear3d": upsample_trilinear3d,
              "upsample_trilinear3d_backward": upsample_trilinear3d_backward}[base]
        how = "each contribution acc = fma(w, g, acc) in order" if back else \
            "fma(x[i0], l0, x[i1] * l1) along each axis in turn"
        return [("fma", f"PyTorch's CPU linear interpolation{' backward' if back else ''} as "
                        f"gcc contracts it: the source index fma(s, i + 0.5, -0.5), {how}",
                 lambda a, k: fn(a, k, fma)[0])]
    if base == "affine_grid_generator":
        return [("fma", "PyTorch's CPU affine_grid: its linspace (one fma from the nearer end), "
                        f"then bmm's {words}",
                 lambda a, k, p=p: affine_grid(a, k, _aten_linspace, p)[0])
                for words, p in (("small-product loop (a serial sum)", ref_product),
                                 ("MKL product (an fma chain from zero)",
                                  lambda x, y: _fma_chain(x, y, dtype=np.result_type(x, y))))]
    if base == "upsample_bilinear2d":
        return [("fma", "PyTorch's CPU bilinear upsampling by its channels-last kernel (a "
                        "channels-last input, or an output of H + W <= 128): the corners' fma "
                        "chains as gcc contracts them", _aten_bilinear_cl)]
    if base == "upsample_bilinear2d_backward":
        return [("fma", "PyTorch's CPU bilinear upsampling backward: per output pixel in order "
                        "its four corners acc = fma(lh * lw, g, acc)", _aten_bilinear_backward)]
    if base == "logcumsumexp":
        def in_double(a: list, k: dict) -> np.ndarray:
            x = np.asarray(a[0])
            if x.dtype == np.float64:
                raise ValueError("float64 already")
            from tapescope.core.capture.aten_ref_losses import _logcumsumexp
            return _logcumsumexp([x.astype(np.float64), *a[1:]], k)[0].astype(x.dtype)
        return [("accumulator", "PyTorch's CPU logcumsumexp: the running value in float64 "
                                "(at::acc_type), each output rounded", in_double)]
    if base == "grid_sampler_2d":
        return [("fma", "PyTorch's CPU grid_sample, bilinear (its vectorised kernel): the "
                        "unnormalise fma(c + 1, size / 2, -0.5), the taps' sum fma(v, w, out)",
                 _aten_grid_sample_bilinear)]
    if base == "upsample_bicubic2d":
        return [("fma", "PyTorch's CPU bicubic upsampling (ATen's generic kernel as gcc "
                        "contracts it): the source index fma(s, i + 0.5, -0.5), the cubic "
                        "coefficients' first steps, each 4-term sum fma(a3, w3, fma(a2, w2, "
                        "fma(a0, w0, a1 * w1)))", lambda a, k: upsample_bicubic(a, k, fma)[0])]
    if base in ("glu", "glu_backward"):
        return [("libm", f"PyTorch's CPU glu{' backward' if base == 'glu_backward' else ''}: "
                         "1 / (1 + exp(-b)) with SLEEF's exp on whole register pairs of each "
                         f"row{build}, the C library's on the rest",
                 _aten_glu(base == "glu_backward", lanes))
                for lanes, build in ((None, ""), (8 if dt == np.float32 else 4,
                                                  " (ATen's AVX2 build)"))]
    if base in ("index_put", "index_put_", "_index_put_impl_"):
        return [("reassociation", "PyTorch's parallel index_put with accumulate (float32, "
                                  "32,768 values or more, several threads, deterministic "
                                  "algorithms off): each thread adds its chunk's values in "
                                  "order by atomic adds, the threads' adds to one place "
                                  "interleaved as they raced (nondeterministic; torch."
                                  "use_deterministic_algorithms(True) makes it one serial "
                                  "loop)", _Fits(_index_put_race))]
    if base == "mul":
        return [("fma", "PyTorch's CPU complex product: its vector loop the reference's order, "
                        "each row's last numbers (past whole groups of 8 complex64 / 4 "
                        "complex128) its scalar loop as gcc contracts it, re = fma(ar, br, "
                        "-(ai * bi)), im = fma(ar, bi, ai * br) (complex64 two at a time)",
                 _Fits(_complex_mul_tail))]
    if base == "polar":
        return [("libm", "PyTorch's CPU polar: the C library's cosf / sinf (a scalar loop), "
                         "each times abs", _polar_libc)]
    if base in ("_fused_adam_", "_fused_adamw_", "_fused_adam", "_fused_adamw"):
        return _fused_adams(base)
    if base in ("mm", "bmm", "addmm", "baddbmm", "mv", "dot", "vdot"):
        return _products(op, dt)
    if base == "_euclidean_dist":
        return _euclidean_dist_variants(dt)
    if base == "linear":  # (recorded whole where autograd is off: inference_mode, no_grad)
        return [_as_linear(v, True) for v in _products("aten.addmm.default", dt)] + \
            [_as_linear(v, False) for v in _products("aten.mm.default", dt)]
    if base.removeprefix("_foreach_").rstrip("_") in ("lerp", "add", "sub", "addcmul",
                                                      "addcdiv"):
        return _pointwise(base)
    if base == "embedding_renorm_":
        return [(c, f"PyTorch's CPU embedding_renorm_ (ATen: each unique row's norm by "
                    f"torch.norm, {label}, read as a double; rows past max_norm scaled by "
                    "T(max_norm / (norm + 1e-7)))", _embedding_renorm(run, run is _norm_lastdim))
                for c, label, run in _norms(dt)]
    if base in ("_foreach_norm", "linalg_vector_norm", "norm"):
        # (torch.norm's norm.ScalarOpt_dim: pairwise_distance's, with linalg_vector_norm's
        # arguments in the same places and the same kernels)
        return _norms(dt)
    if base == "native_layer_norm":
        return _layer_norm()
    if base in ("_scaled_dot_product_flash_attention_for_cpu",
                "_scaled_dot_product_flash_attention_for_cpu_backward"):
        return _flash_variants(base, dt)
    if base in ("_log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
                "nll_loss2d_forward"):
        return _log_softmax_ops(base)
    if base == "embedding_dense_backward":
        from tapescope.core.capture.aten_ref_layers import embedding_backward_by_freq

        def by_freq(a: list, k: dict) -> np.ndarray:
            if not a[4]:
                raise ValueError("written for scale_grad_by_freq")
            return embedding_backward_by_freq(a, fused=fma)
        return [("accumulator", "PyTorch's CPU embedding backward (ATen's add into each "
                                "index's row, in index order): a float16 / bfloat16 row's sum "
                                "rounded to its type at every add", _embedding_backward_narrow),
                ("fma", "PyTorch's CPU embedding backward with scale_grad_by_freq (ATen's "
                        "add with alpha 1 / count into each index's row, in index order, its "
                        "vector path fused: row = fma(g, alpha, row))", by_freq)]
    if base in ("convolution", "_convolution"):  # (_convolution: a traced graph's)
        ones = [_as_2d(v, False) for v in _convs(dt)]
        return ones + [_per_group(v, False) for v in ones] + [
                             ("fma", "oneDNN's direct 3-D convolution: the input channels in "
                                     "blocks of 16, each one fma chain from zero over its taps "
                                     "in (kd, kh, kw, channel) order, the sum from the bias, "
                                     "each block's added in order", _conv3d_direct),
                             ("fma", "oneDNN's transposed convolution (windows apart): each "
                                     "output pixel one fma chain over the input channels in "
                                     "order, the bias added after", _conv_transposed),
                             ("fma", "oneDNN's transposed convolution (windows apart): each "
                                     "output pixel one fma chain per 16 input channels, the "
                                     "chains added in order, the bias after",
                              lambda a, k: _conv_transposed(a, k, 16)),
                             *[_as_2d(("fma", "oneDNN's transposed convolution: the input "
                                              "gradient of the convolution it transposes, "
                                              f"{words}, the bias after", _tconv_forward(order)),
                                      False) for order, words in _INPUT_GRAD_ORDERS.items()],
                             _as_2d(("fma", "oneDNN's depthwise convolution: each output pixel "
                                            "one fma chain over the taps in (kh, kw) order, "
                                            "from the bias", _conv_depthwise,
                                     _screen(_conv_depthwise, _conv_image)), False),
                             _as_2d(("fma", "oneDNN's depthwise convolution of a channels-last "
                                            "input: each output pixel one fma chain over the "
                                            "taps in (kh, kw) order from zero, the bias added "
                                            "after", _conv_depthwise_nhwc,
                                     _screen(_conv_depthwise_nhwc, _conv_image)), False)]
    if base == "convolution_backward":
        runs = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
        # a transposed convolution's gradients: its transposed convolution's forward (input
        # gradient) and weight gradient, tried where one is transposed (_tconv_args), after
        # the rest (where both fit, the stride = kernel kind's own names stay)
        tconv = [("reassociation", "a transposed convolution's input gradient: the "
                                   f"convolution it transposes run on dy, {label}",
                  _tconv_backward(fn, False)) for _, label, fn, *_ in _convs(dt)] + [
                 ("fma", "a transposed convolution's weight gradient: the weight gradient of "
                         "the convolution it transposes (its input dy), the images in "
                         f"{t} run{'s' if t > 1 else ''}, each one fma chain over its "
                         "images' pixels in order, the runs added in order",
                  _tconv_backward(_conv_param_grads(t, weight=True), True)) for t in (1, 2, 4)]
        ones = [_as_2d(v, True) for v in [
                ("fma", f"oneDNN's convolution backward input gradient: {words}",
                 _conv_input_grad(order), _screen(_conv_input_grad(order), _first_image))
                for order, words in _INPUT_GRAD_ORDERS.items()] + [
                ("fma", "oneDNN's convolution backward input gradient of a channels-last input "
                        "(its brgemm forward kernel run on dy by the flipped weight): each "
                        "pixel one fma chain over the taps in (kh, kw) order, the output "
                        "channels inner",
                 _conv_input_grad_forward, _screen(_conv_input_grad_forward, _first_image))] + [
                ("fma", "PyTorch's CPU strided convolution backward input gradient: per "
                        "weight tap a product over the output channels (fma chains), the "
                        "taps added in (kh, kw) order where they land (col2im)",
                 _conv_input_grad_taps, _screen(_conv_input_grad_taps, _first_image)),
                ("fma", "oneDNN's gemm convolution backward input gradient (x64:gemm:jit, a "
                        "large dilation): per image wT . dy by its jit sgemm (one fma chain an "
                        "element over the output channels), the taps' columns added in (kh, kw) "
                        "order where they land (col2im)",
                 _conv_input_grad_gemm, _screen(_conv_input_grad_gemm, _first_image)),
                ("reassociation", "ATen's sum kernel over the pixels (PyTorch's CPU "
                                  "convolution backward's bias gradient, one image or channel)",
                 _conv_param_grads(None))] + [
            ("reassociation", "oneDNN's convolution backward bias gradient: the images in "
                              f"{t} runs (one per thread), each summed in order, the runs' "
                              "sums added in order", _conv_param_grads(t)) for t in runs] + [
            ("fma", "oneDNN's convolution backward weight gradient: the images in "
                    f"{t} run{'s' if t > 1 else ''} (one per thread), each run one fma chain "
                    "over its images' pixels in order, the runs added in order",
             _conv_param_grads(t, weight=True),
             _screen(_conv_param_grads(t, weight=True), _first_filter))
            for t in (1, *runs)] + [
            ("fma", "oneDNN's convolution backward weight gradient of a channels-last input "
                    "(brgemm, 16 input channels or more): each output row of an image one fma "
                    f"chain from zero, the images in {t} run{'s' if t > 1 else ''} (one per "
                    "thread), a run's rows added in order, the runs added in order",
             _conv_param_grads(t, weight=True, rows=True),
             _screen(_conv_param_grads(t, weight=True, rows=True), _first_filter))
            for t in (1, *runs)] + [
            ("fma", "oneDNN's convolution backward weight and bias gradients of an input of one "
                    "channel (jit): the (image, output row) lines cut among "
                    f"{t} thread{'s' if t > 1 else ''}, each thread's one fma chain (one sum) "
                    "over its lines' pixels in order, the threads' added in order",
             _conv_line_split(t)) for t in (2, 3, 4, 6, 8)] + [
            ("fma", "oneDNN's 3-D convolution backward input gradient: the output channels in "
                    "blocks of 16, each one fma chain from zero over the weight's taps in (kd, "
                    "kh, kw) order, the channels inner, the blocks added in order",
             _conv3d_input_grad),
            ("fma", "oneDNN's 3-D convolution backward weight and bias gradients: the (image, "
                    "depth) planes' fma chains (sums) as its jit kernel or its gemm path "
                    "orders them", _Fits(_conv3d_param_grads))] + [
            ("fma", "oneDNN's 1x1 convolution backward weight gradient (jit_1x1): the "
                    "images' pixels in blocks of best_divider(pixels, 7, 16), the (image, "
                    "block) list split among the threads, each call one fma chain from zero "
                    "over one image's blocks added to its thread's sum, the threads' sums "
                    "added in order", _Fits(_onednn_1x1_wgrad)),
            ("reassociation", "oneDNN's 1x1 convolution backward input gradient (jit_1x1): "
                              "the output channels in reduce blocks of one size and a shorter "
                              "last one, each block's fma chain from zero, the blocks added in "
                              "order", _Fits(_onednn_1x1_dgrad))] + [
            ("fma", "PyTorch's CPU 1x1 convolution backward weight gradient: each image one "
                    f"MKL sgemm over its pixels (k panels added in turn), the images in {t} "
                    f"run{'s' if t > 1 else ''} (one per thread) accumulated in order, the "
                    "runs added in order", _conv_1x1_weight_grad(t),
             _screen(_conv_1x1_weight_grad(t), _first_filter))
            for t in (1, 2, 3, 4, 6, 8)]]
        return ones + [_per_group(v, True) for v in ones] + [_as_2d(v, True) for v in [
            ("fma", "oneDNN's depthwise convolution backward input gradient: per input pixel "
                    "one fma chain over the weight's taps in (kh, kw) order, each channel its "
                    "own", _dw_input_grad, _screen(_dw_input_grad, _first_image))] + [
            ("fma", f"oneDNN's depthwise convolution backward weight gradient: the images in "
                    f"{t} run{'s' if t > 1 else ''} (one per thread), each run one fma chain a "
                    "tap over its images' pixels in order, the runs added in order",
             _dw_weight_grad(t)) for t in (1, 2, 3, 4, 6, 8)] + [
            ("fma", "oneDNN's depthwise convolution backward weight gradient, channels-last: "
                    "per tap each output row one fma chain, the rows in "
                    f"{t} run{'s' if t > 1 else ''} (one per thread) added in order",
             _dw_weight_grad_rows(t)) for t in (1, 2, 4)] + [
            ("fma", "oneDNN's gemm convolution backward weight gradient (groups of few "
                    "channels): per group and image its small-n sgemm over the pixels (16 fma "
                    "lanes, added pairwise at strides 8, 4, 2, 1), each image's added to the "
                    "sum", _gemm_conv_grads(True)),
            ("fma", "oneDNN's gemm convolution backward weight gradient: per image its im2col "
                    "and jit sgemm, the pixels in blocks (the last two balanced), each block one "
                    "fma chain from zero added to the sum, the images in runs (one per thread) "
                    "in order, the runs added in order", _gemm_conv_weight_grad((1, *runs))),
            ("reassociation", "oneDNN's gemm convolution backward bias gradient (groups of few "
                              "channels): per output row a sum in order from zero, each row's "
                              "added to the channel's total", _gemm_conv_grads(False)),
            ("fma", "oneDNN's gemm convolution backward weight gradient of a depthwise kernel "
                    "(5x5, 7x7): per image each tap one dot over its pixels by oneDNN's jit "
                    "gemv (8 lanes, fma, 16 pixels a step; the lanes added ((0+1)+(4+5))+"
                    "((2+3)+(6+7)); the 8, 4, 2, 1 pixels left each a piece reduced alike), "
                    "each piece added to the tap's sum, the images in order",
             _dw_weight_grad_gemv)]] + [_as_2d(v, True) for v in tconv]
    if base == "mkldnn_rnn_layer":
        return [("libm", "oneDNN's LSTM layer (ref_rnn, jit postgemm): per step each product one "
                         "fma chain over k, h's added to x's, then the biases' sum; its jit "
                         "logistic and tanh (exp's degree-5 polynomial, tanh's 32 intervals); "
                         "c = fma(i, g, f * c), h = tanh(c) * o", _onednn_lstm)]
    if base == "mkldnn_rnn_layer_backward":
        return [("libm", "oneDNN's LSTM layer backward (ref_rnn, jit postgemm): the forward "
                         "re-run, per step last first its gate gradients with fnma (tanh'(c) "
                         "from its jit tanh), dh = dG · W_hh by its sgemm (fma chains, k in "
                         "blocks of at most 384), the bias gradient a row at a time; then dx, "
                         "and dW_ih and dW_hh as one chain over (step, batch row) each (a "
                         "forward layer's h0 rows summed apart, added last)",
                 _onednn_lstm_backward)]
    if base in ("native_batch_norm", "_native_batch_norm_legit") and op.endswith(".default"):
        return [("reassociation", "PyTorch's CPU batch_norm in evaluation (ATen: invstd = 1 / "
                                  "sqrt(running_var + eps) in T, y = fma(x, a, fma(-mean, a, "
                                  "bias)), a = invstd * weight)", _batch_norm_eval),
                ("reassociation", "PyTorch's CPU batch_norm (ATen: serial float64 sums of x "
                                  "and of (x - mean)^2, y = fma(x, a, fma(-mean, a, bias)))",
                 _batch_norm),
                ("reassociation", "PyTorch's CPU batch_norm of bfloat16 with bfloat16 "
                                  "parameters (ATen's reduced-type kernel: float32 "
                                  "sums in a 16-lane accumulator over vectors of 32, the tails "
                                  "apart; the statistics and the running statistics' terms "
                                  "rounded to the type)", _batch_norm_narrow)] + [
                ("reassociation", "PyTorch's CPU batch_norm of (rows, channels) (ATen's "
                                  f"channels-last kernel: the rows in {t} run"
                                  f"{'s' if t > 1 else ''}, summed in T, the runs in float64)",
                 _batch_norm_rows(t)) for t in _BN_RUNS] + [
                ("reassociation", "PyTorch's CPU batch_norm of a channels-last input (ATen's "
                                  "channels-last kernel: its N x H x W rows of channels in "
                                  f"{t} run{'s' if t > 1 else ''}, summed in T, the runs in "
                                  "float64)", _channels_last(_batch_norm_rows(t), False))
                for t in _BN_RUNS]
    if base == "native_layer_norm_backward":
        return [("reassociation", "PyTorch's CPU layer_norm backward (ATen: 8 / 4 lanes, the "
                                  "tail contracted; dgamma and dbeta summed per thread, in "
                                  "the input's type for float16 / bfloat16, the rows in "
                                  f"{t} chunk{'s' if t > 1 else ''})",
                 _layer_norm_backward(t)) for t in (1, 2, 4, 8, 16, 32, 64)]
    if base == "native_batch_norm_backward":
        return [("reassociation", "PyTorch's CPU batch_norm backward (ATen: per image 8 / 4 "
                                  "lanes, the tail contracted, the images added in float64; "
                                  "dx = fma(-(x - mean), k, dy - grad_mean) * invstd * w)",
                 _batch_norm_backward),
                ("reassociation", "PyTorch's CPU batch_norm backward of bfloat16 with bfloat16 "
                                  "parameters (ATen's reduced-type kernel: float32 sums in a "
                                  "16-lane accumulator over vectors of 32, the tails apart; dx "
                                  "((dy - sum / N) - (x - mean) * k) * invstd * w)",
                 _batch_norm_backward_narrow)] + [
                ("reassociation", "PyTorch's CPU batch_norm backward of (rows, channels) (ATen's "
                                  f"channels-last kernel: the rows in {t} run"
                                  f"{'s' if t > 1 else ''}, dotp by fma, dx's tail "
                                  f"{'' if tf else 'not '}contracted)",
                 _batch_norm_rows_backward(t, tf))
                for tf in (True, False) for t in _BN_RUNS] + [
                ("reassociation", "PyTorch's CPU batch_norm backward of (rows, channels) (ATen's "
                                  f"channels-last kernel, its AVX2 build: the rows in {t} run"
                                  f"{'s' if t > 1 else ''}, dotp by fma, dx by fma on whole "
                                  "vectors of 8 channels, the rest not contracted)",
                 _batch_norm_rows_backward(t, False, 8)) for t in _BN_RUNS] + [
                ("reassociation", "PyTorch's CPU batch_norm backward of a channels-last input "
                                  "(ATen's channels-last kernel: its N x H x W rows of channels "
                                  f"in {t} run{'s' if t > 1 else ''}, dotp by fma, dx's tail "
                                  f"{'' if tf else 'not '}contracted)",
                 _channels_last(_batch_norm_rows_backward(t, tf), True))
                for tf in (True, False) for t in _BN_RUNS] + [
                ("reassociation", "PyTorch's CPU batch_norm backward, its generic path (the "
                                  "gradient laid out otherwise than the input, a BatchNorm1d "
                                  "after a transpose): ATen's sum over the gradient's rows of "
                                  "channels, dotp serial in float64, each step in float32",
                 _batch_norm_backward_generic)]
    if base == "native_group_norm_backward":
        return [("reassociation", "PyTorch's CPU group_norm backward (ATen: per channel lane "
                                  "sums of dy * x and dy, per group their gamma-weighted fma "
                                  "sums; dx = fma(rstd * gamma, dy, c2 * x) + c3)",
                 _group_norm_backward),
                ("reassociation", "PyTorch's CPU group_norm backward, the copy run inline (one "
                                  "thread or one image-group: ATen's per channel lane sums of dy "
                                  "* x and dy, per group their gamma-weighted fma sums, a "
                                  "group's last channels' whole 128-bit groups multiplied "
                                  "apart; dx = fma(rstd * gamma, dy, c2 * x) + c3)",
                 partial(_group_norm_backward, inline=True))]
    if base == "native_group_norm":
        return [("reassociation", "PyTorch's CPU group_norm (ATen: RowwiseMoments' Welford "
                                  "statistics, y = fma(scale, x, fma(-scale, mean, beta)))",
                 _group_norm)]
    if base == "gelu_backward":
        return [("libm", "PyTorch's CPU gelu backward (oneDNN's gelu_erf: Abramowitz and "
                         "Stegun's erf, oneDNN's exp)",
                 _gelu_form("none", 2, lambda a: gelu_backward(np.asarray(a[0]),
                                                               np.asarray(a[1])))),
                ("libm", "PyTorch's CPU gelu backward in bfloat16 (oneDNN's gelu_erf on the "
                         "float32 values, rounded to bfloat16)",
                 _gelu_form("none", 2, lambda a: _onednn_narrow(gelu_backward, a[0], a[1]))),
                ("libm", "PyTorch's CPU gelu backward in float16 on a CPU with AVX-512 FP16 "
                         "(oneDNN's gelu_erf on the float32 values, rounded to float16)",
                 _gelu_form("none", 2, lambda a: _onednn_narrow(gelu_backward, a[0], a[1],
                                                          dt=np.dtype(np.float16)))),
                ("libm", "PyTorch's CPU gelu backward in float16 (fp16 autocast; ATen's "
                         "GeluBackwardKernel: widened to float32, ATen's vectorised erf and "
                         "SLEEF's expf on whole register pairs, the C library's erff and expf "
                         "on each thread's tail, rounded back)",
                 _Fits(partial(_gelu_half_fit, backward=True))),
                ("libm", "PyTorch's CPU gelu backward, tanh form (ATen's GeluKernel: SLEEF's "
                         "tanhf, its derivative's two fmas)",
                 _gelu_form("tanh", 2, lambda a: gelu_tanh(np.asarray(a[1]),
                                                           np.asarray(a[0]))))]
    if base == "silu_backward":
        return [("libm", "PyTorch's CPU silu backward (ATen, AVX-512): SLEEF's exp, (g * s) * "
                         "fma(x, 1 - s, 1)", _silu_backward),
                ("libm", "PyTorch's CPU silu backward (ATen, AVX-512) on rows that lie apart "
                         "in memory (a chunk of a wider tensor): (g * s) * fma(x, 1 - s, 1), "
                         "each row's whole register pairs by SLEEF's exp, its rest by the C "
                         "library's, in each thread's chunk", _Fits(_silu_backward_rows_apart))]
    if base == "sigmoid_backward":  # (BinaryOpsKernel.cpp: the vectorised a * (1 - b) * b)
        return [("reassociation", "PyTorch's CPU sigmoid backward: (g * (1 - y)) * y",
                 _pointwise_pair(lambda a, b, one: ((a * (one - b)).astype(a.dtype) * b)))]
    if base == "tanh_backward":  # (a * (1 - b * b), its 1 - b * b contracted by the compiler)
        return [("fma", "PyTorch's CPU tanh backward: g * fma(-y, y, 1)",
                 _pointwise_pair(lambda a, b, one: a * fma(-b, b, one).astype(a.dtype)))]
    if base == "_embedding_bag":
        return [("fma", "PyTorch's CPU embedding bag with per-sample weights (fbgemm): each "
                        "bag's rows fma'd in index order, fma(weight, row, sum)", _bag_fbgemm)]
    if base in ("_embedding_bag_backward", "_embedding_bag_dense_backward"):
        return [("reassociation", "PyTorch's CPU embedding bag backward: the indices in "
                                  "torch.sort's order (unstable below 32,768), each "
                                  "occurrence fma'd into its row by MKL's axpy, the scale "
                                  "1 / bag size (mean) or the sample's weight",
                 _bag_backward_aten(base.endswith("dense_backward")))]
    if base == "elu":
        return [("libm", "PyTorch's CPU elu: SLEEF's expm1f on whole register pairs (the C "
                         "library's on the rest), expm1(x * input_scale) * (alpha * scale)",
                 _aten_elu)]
    if base == "elu_backward":
        return [("libm", "PyTorch's CPU elu backward: ((g * input_scale) * (alpha * scale)) * "
                         "exp(x * input_scale), SLEEF's expf on whole register pairs (the C "
                         "library's on the rest)", _aten_elu_backward)]
    if base == "mish":
        return [("libm", "PyTorch's CPU mish: x * tanh(log1p(exp(x))) with SLEEF's expf, "
                         "log1pf and tanhf on whole register pairs (the C library's on the "
                         "rest)", lambda args, kw: _aten_mish(_f32_only(args[0])))]
    if base == "mish_backward":
        return [("libm", "PyTorch's CPU mish backward: g * fma(x * sigmoid(x), fma(-t, t, 1), "
                         "t), t = tanh(log1p(exp(x))), SLEEF's functions on whole register "
                         "pairs (the C library's on the rest)",
                 lambda args, kw: _aten_mish(_f32_only(args[1]), _f32_only(args[0])))]
    if base == "log1p":
        return [("libm", "PyTorch's CPU log1p: SLEEF's log1pf on every element (a partial "
                         "register for the tail)",
                 lambda args, kw: sleef_log1pf(_f32_only(args[0])))]
    if base == "expm1":
        return [("libm", "PyTorch's CPU expm1: SLEEF's expm1f on whole register pairs, the C "
                         "library's on the rest",
                 lambda args, kw: _vec_map(_f32_only(args[0]), sleef_expm1f,
                                           _LIBC_MATH.expm1))]
    if base == "binary_cross_entropy":
        return [("libm", "PyTorch's CPU binary_cross_entropy: the C library's log and log1p "
                         "per element (reduction none)", _bce_libc(None))] + [
                ("libm", "PyTorch's CPU binary_cross_entropy: the C library's log and log1p "
                         f"per element, then {v.label}", _bce_libc(v.value))
                for v in variants_for("sum", dt) if v.prim == "sum"]
    if base == "binary_cross_entropy_with_logits":
        return [("libm", "PyTorch's CPU binary_cross_entropy_with_logits: log_sigmoid by SLEEF's "
                         "expf and log1pf, pos_weight's factor and the loss each op rounded "
                         "(reduction none)", _bce_logits(None))] + [
                ("libm", "PyTorch's CPU binary_cross_entropy_with_logits: log_sigmoid by SLEEF's "
                         "expf and log1pf, pos_weight's factor and the loss each op rounded, "
                         f"then {v.label}", _bce_logits(v.value))
                for v in sorted((v for v in variants_for("sum", dt) if v.prim == "sum"),
                                key=lambda v: "ATen SumKernel" not in v.label)]
    if base == "linspace":
        return [("fma", "PyTorch's CPU linspace: in the output's type, step = (end - start) / "
                        "(steps - 1), fma(step, i, start) for the first half, fma(-step, steps "
                        "- 1 - i, end) for the rest", _aten_linspace)]
    if base in ("var", "std", "var_mean", "std_mean"):
        return [("accumulator", f"PyTorch's CPU {base}: Welford's mean and sum of squared "
                                "deviations in a float64 accumulator (float32 and half "
                                "inputs), " + ("the square root taken there, " if "std" in base
                                               else "") + "each output rounded once",
                 _var_in_double(base))]
    if base in ("cumprod", "cumsum"):
        return [("accumulator", f"PyTorch's CPU {base}: a float64 accumulator along the axis, "
                                "each output rounded (float32 and half inputs)",
                 _cum_in_double(np.multiply if base == "cumprod" else np.add))]
    if base == "mse_loss":
        return _mse(dt)
    if base == "smooth_l1_loss_backward":
        return [("reassociation", f"PyTorch's CPU smooth_l1_loss backward ({isa} build): "
                                  "(norm * o) * g on whole register pairs, o = +-1 or (x - y) "
                                  "/ beta; on the rest ((norm * d) * g) / beta with beta the "
                                  "double, divided in double", _smooth_l1_backward(lanes))
                for lanes, isa in ((16, "AVX-512"), (8, "AVX2"))]
    if base == "smooth_l1_loss":
        return _smooth_l1(dt)
    if base == "huber_loss":
        return _huber(dt)
    if base == "avg_pool2d_backward":
        return [("reassociation", "PyTorch's CPU avg_pool2d backward (ATen: each output cell's "
                                  "gradient over its divisor, added to its window's input "
                                  "cells, the cells in row-major order)", _avg_pool2d_backward)]
    if base in ("sum", "mean"):
        return _sums(op, dt)
    if base in ("hann_window", "hamming_window"):
        return [("libm", f"PyTorch's CPU {base} (ATen's steps in the dtype: arange times 2 pi / "
                         "(M - 1), MKL VML's cos, times -beta, plus alpha, each rounded)",
                 _aten_window(base))]
    if base == "prod":
        return [("reassociation", "PyTorch's CPU prod (binary_kernel_reduce_vec, one thread): "
                                  "a contiguous run of 4 vectors of 32 bytes or more multiplied "
                                  "in 4 vector accumulators, folded (a0 a1)(a2 a3), then lane "
                                  "by lane, the rest of the run one by one", _aten_prod)]
    if base in ("_softmax", "_safe_softmax"):  # (_safe_softmax: 0 where a row is all -inf;
        return _softmax(op)                       # its other rows _softmax's)
    if base == "_softmax_backward_data":
        def smx_bwd(tail_fma: bool) -> Callable:
            def run(args: list, kw: dict) -> np.ndarray:
                g = np.asarray(args[0])
                if g.ndim and int(args[2]) % g.ndim != g.ndim - 1:
                    raise ValueError("written for the last axis")
                return softmax_backward(g, np.asarray(args[1]), tail_fma)
            return run

        def smx_bwd_inner(args: list, kw: dict) -> np.ndarray:
            g = np.asarray(args[0])
            if not g.ndim or int(args[2]) % g.ndim == g.ndim - 1:
                raise ValueError("written for a dimension other than the last")
            return softmax_backward_inner(g, np.asarray(args[1]), int(args[2]))
        return [("reassociation", "PyTorch's CPU softmax backward (ATen, AVX-512): (g - sum) * "
                                  "out, sum(g * out) in lanes, the partial vector "
                                  + ("fma'd (one thread)" if f else "added (threads)"),
                 smx_bwd(f)) for f in (True, False)] + [
            ("fma", "PyTorch's CPU softmax backward over another dimension than the last "
                    "(ATen's _vec_softmax_backward): per inner position sum = fma(g, out, sum) "
                    "in order, then out * (g - sum)", smx_bwd_inner)]
    if base.removeprefix("_foreach_").rstrip("_") == "sqrt":  # (foreach: each tensor's)
        return _sqrt(op)
    if base.rstrip("_") in ("sin", "cos"):
        name = base.rstrip("_").capitalize()
        return [("libm", f"MKL VML's {name.lower()} (HA mode: PyTorch's CPU torch."
                         f"{name.lower()}, float32 and float64)",
                 lambda args, kw: _vml(name, np.asarray(args[0])))]
    if base.rstrip("_") == "rsqrt":
        return [("libm", "PyTorch's CPU rsqrt: 1 / sqrt(x), each rounded in float32 (float64 "
                         "for float64), not in float64 and once", _rsqrt_in_type)]
    if base.rstrip("_") == "pow" and op.endswith((".Tensor_Scalar", ".Tensor_Tensor")):
        return _pow_tensor(op)
    if base == "pow" and op.endswith(".Scalar"):
        return [("libm", "the C library's powf / pow of the base to each exponent (PyTorch's "
                         "CPU pow of a scalar base below a vector's width)", _libc_pow_scalar)]
    if base == "linalg_cross":
        from tapescope.core.capture.aten_ref_pointwise import linalg_cross
        return [("fma", "PyTorch's CPU cross product (ATen's cross kernel as gcc contracts it): "
                        "each component fma(a_i, b_j, -(a_k * b_l))",
                 lambda a, k: linalg_cross(a, k, fused=fma))]
    if base in _AA_OPS:  # (antialiased resize: torchvision's, bilinear and bicubic)
        from tapescope.core.capture.aten_ref_conv import upsample_aa, upsample_aa_backward
        cubic, lanes = "bicubic" in base, 4 if dt == np.float32 else 2
        filt = ("its cubic filter's weights contracted (fma), " if cubic else "")
        if base.endswith("_backward"):
            return [("fma", f"PyTorch's CPU antialiased {'bicubic' if cubic else 'bilinear'} "
                            f"backward (ATen's cpu_upsample_genNd_backward_aa): {filt}per "
                            "output pixel in order, each tap gi = fma(wx * wy, g, gi)",
                     lambda a, k: upsample_aa_backward(a, k, fused=fma, cubic=cubic)[0])]
        return [("fma", f"PyTorch's CPU antialiased {'bicubic' if cubic else 'bilinear'} "
                        f"resampling (ATen's separable kernel, the width then the height): "
                        f"{filt}each output's tap products in gcc's vectors of {lanes} added "
                        f"in order, the last (taps - 1) % {lanes} taps contracted (fma)",
                 lambda a, k: upsample_aa(a, k, fused=fma, lanes=lanes, cubic=cubic)[0])]
    if base.rstrip("_") == "digamma":
        return [("libm", "PyTorch's CPU digamma (ATen's calc_digamma, Cephes' psi in the "
                         "input's type: x pushed to 10 or past by result -= 1 / x steps, then "
                         "log(x) - 0.5 / x - z P(z), z = 1 / x^2, with the C library's log; a "
                         "negative x reflected by pi / tan(pi r) in double)", _aten_digamma)]
    if base.rstrip("_") == "polygamma":
        return [("fma", "PyTorch's CPU polygamma(1, x) (ATen's trigamma in the input's type: "
                        "the C library's sin for x < 0.5's reflection, six 1 / x^2 steps, "
                        "then (1 + 1 / (2x) + ixx (1/6 - ixx (1/30 - ixx / 42))) / x as gcc "
                        "contracts it, three fma)", _aten_trigamma)]
    if base == "_pdist_forward":
        return [("reassociation", "PyTorch's CPU pdist (ATen's run_parallel_pdist, its AVX2 "
                                  "build): each pair's terms by vec::map2_reduce_all in 8 "
                                  "float / 4 double lanes, the partial last vector added to "
                                  "its first lanes, the lanes folded (a halving tree for "
                                  "float, in sequence for double), then sqrt for p 2",
                 _aten_pdist)]
    if base == "multilabel_margin_loss_forward":
        return [("accumulator", "PyTorch's CPU multilabel_margin_loss: each row's terms added "
                                "in float64 (at::acc_type), the row's sum rounded to the "
                                "input's type; the rows' sums added in float64, / C (and / N) "
                                "there, rounded once", _aten_multilabel_margin)]
    if base == "multi_margin_loss":
        return [("accumulator", "PyTorch's CPU multi_margin_loss: each row's sum / C in the "
                                "input's type, the rows' results added in float64 "
                                "(at::acc_type), / N there, rounded once", _aten_multi_margin)]
    if base == "logsumexp":
        return [("libm", "PyTorch's CPU logsumexp (ATen's logsumexp_out_impl: m = amax, an "
                         "infinite m taken as 0; sum(exp(x - m)) by sum's kernel, MKL VML's exp "
                         "and ln, then + m)", _aten_logsumexp)]
    if base.rstrip("_") == "xlogy":
        return [("libm", "PyTorch's CPU xlogy (ATen's scalar kernel, kl_div's): x * log(y) "
                         "with the C library's logf / log, +0 where x == 0, NaN where y is",
                 partial(_libc_xlogy, fn="log"))]
    if base == "special_xlog1py":
        return [("libm", "PyTorch's CPU xlog1py (ATen's scalar kernel): x * log1p(y) with the "
                         "C library's log1pf / log1p, +0 where x == 0, NaN where y is",
                 partial(_libc_xlogy, fn="log1p"))]
    if base.rstrip("_") in _LIBM and not base.endswith("_backward"):
        return _libm(op, base.rstrip("_"))
    return []


def _aten_logsumexp(args: list, kw: dict) -> np.ndarray:
    """ATen's ``logsumexp`` (ReduceOps.cpp, float32 and float64; measured every bit on rows of
    10 to 1,000): ``m = amax(x, dims)`` with an infinite m set to 0 (in place, so the
    subtraction sees it too), ``s = sum(exp(x - m), dims)`` (VML's exp, ``sum``'s kernel:
    ``aten_sum``), ``log(s) + m`` (VML's ln)."""
    from tapescope.core.ops.reference import reduced_axes

    x = np.asarray(args[0])
    if x.dtype not in (np.float32, np.float64) or not x.ndim:
        raise ValueError("written for float32 and float64 arrays")
    dims = _arg(args, kw, 1, "dim", None)
    keep = bool(_arg(args, kw, 2, "keepdim", False))
    axes = tuple(sorted(reduced_axes(list(dims) if dims else None, x.ndim)))
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axes, keepdims=True)
        m = np.where(np.abs(m) == np.inf, x.dtype.type(0), m)
        s = aten_sum(_vml("Exp", x - m), axes, keepdims=True)
        y = (_vml("Ln", s) + m).astype(x.dtype)
    return y if keep else y.reshape([n for a, n in enumerate(x.shape) if a not in axes])


_PSI_SERIES = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
               -4.16666666666666666667E-3, 3.96825396825396825397E-3,
               -8.33333333333333333333E-3, 8.33333333333333333333E-2)


def _aten_digamma(args: list, kw: dict) -> np.ndarray:
    """ATen's ``calc_digamma`` (Math.h; ``cpu_kernel_vec``'s vector path maps it too), float32
    and float64, every step rounded to the type: 0 gives ``copysign(inf, -x)``, a negative
    whole number NaN; a negative x is ``digamma(1 - x) - pi / tan(pi r)`` (``r`` the
    fraction of x, in double, the C library's tan, rounded once); for x >= 0: ``result -= 1
    / x; x += 1`` while ``x < 10``; at exactly 10 ``result + psi(10)``; else ``result +
    log(x) - 0.5 / x - y``, ``y = z * polevl(z)`` (``z = 1 / (x x)``, Cephes' 7 terms; 0
    from 1e17). Every bit on 420,000 values of each type (the polynomial's contraction
    changes none)."""
    from tapescope.core.explain_prims import libc_elementwise

    x = np.asarray(args[0])
    if x.dtype not in (np.float32, np.float64):
        raise ValueError("written for float32 and float64")
    T = x.dtype.type
    log, tan = libc_elementwise("log"), libc_elementwise("tan")
    with np.errstate(all="ignore"):
        neg = x < 0
        v = np.where(neg, T(1) - x, x).astype(x.dtype)
        res = np.zeros_like(v)
        for _ in range(12):  # (from +0 up: 10 steps at most, the first maybe from a tiny x)
            m = v < T(10)
            if not m.any():
                break
            res = np.where(m, res - T(1) / v, res)
            v = np.where(m, v + T(1), v)
        z = T(1) / (v * v)
        p = np.full_like(z, T(_PSI_SERIES[0]))
        for a in _PSI_SERIES[1:]:
            p = p * z + T(a)
        y = np.where(v < T(1e17), z * p, T(0))
        out = ((res + log(v)) - T(0.5) / v) - y
        out = np.where(v == T(10), res + T(2.25175258906672110764), out)
        r = np.modf(x.astype(np.float64))[0]
        out = np.where(neg, out - (math.pi / tan(math.pi * r)).astype(x.dtype), out)
        out = np.where(neg & (x == np.trunc(x)), T(np.nan), out)
        out = np.where(x == 0, np.copysign(T(np.inf), -x), out)
    return out.astype(x.dtype)


def _aten_trigamma(args: list, kw: dict) -> np.ndarray:
    """ATen's CPU ``trigamma`` (``polygamma(1, x)``: digamma's derivative, so every digamma a
    loss differentiates), float32 and float64, each step in the type: for ``x < 0.5`` ``r =
    -(pi^2 / sin(pi x)^2)`` (the C library's sin / sinf) and ``x = 1 - x``; six steps ``r +=
    1 / x^2; x += 1``; then ``r += fma(ixx, fma(-ixx, fma(-ixx, 1/42, 1/30), 1/6), 1 + 1 /
    (2x)) / x`` (``ixx = 1 / x^2``, the constants rounded to the type: gcc's contraction,
    measured), negated where reflected. Every bit on 200,000 values of each type."""
    from tapescope.core.explain_prims import fma, libc_elementwise

    if int(args[0]) != 1:
        raise ValueError("written for polygamma(1, x)")
    x = np.asarray(args[1])
    if x.dtype not in (np.float32, np.float64):
        raise ValueError("written for float32 and float64")
    T, dt = x.dtype.type, x.dtype
    pi = T(math.pi)
    full = lambda c: np.full(x.shape, c, dt)  # noqa: E731
    with np.errstate(all="ignore"):
        small = x < T(0.5)
        s = libc_elementwise("sin")((pi * x).astype(dt))
        r = np.where(small, T(0) - (pi * pi) / (s * s), T(0)).astype(dt)
        v = np.where(small, T(1) - x, x).astype(dt)
        for _ in range(6):
            r = (r + T(1) / (v * v)).astype(dt)
            v = (v + T(1)).astype(dt)
        ixx = (T(1) / (v * v)).astype(dt)
        mid = fma(-ixx, fma(-ixx, full(T(1) / T(42)), full(T(1) / T(30))), full(T(1) / T(6)))
        r = (r + (fma(ixx, mid, (T(1) + T(1) / (T(2) * v)).astype(dt)) / v).astype(dt))
        return np.where(small, -r, r).astype(dt)


def _aten_pdist(args: list, kw: dict) -> np.ndarray:
    """ATen's ``pdist`` forward, p 1 and 2 (float32 / float64): per pair ``i < j`` the terms
    ``|x[i] - x[j]|`` (squared for p 2) summed by ``_lane_sum`` (rows shorter than a vector
    lane after lane), ``sqrt`` for p 2. Every bit on 3-9 rows of 3-100 features."""
    from tapescope.core.capture.aten_ref_nn import _pdist_args

    try:
        x, p, i, j = _pdist_args(args[0], _arg(args, kw, 1, "p", 2.0))
    except NoReference as e:
        raise ValueError(str(e)) from e
    if p not in (1.0, 2.0):
        raise ValueError("written for p 1 and 2 (inf's max is the reference's)")
    tree = x.dtype == np.float32
    with np.errstate(all="ignore"):
        d = np.abs(x[i] - x[j])
        s = _lane_sum(d, d if p == 2 else None, 8 if tree else 4, tree, False)
        return (np.sqrt(s) if p == 2 else s).astype(x.dtype)


def _aten_multilabel_margin(args: list, kw: dict) -> tuple:
    """ATen's ``multilabel_margin_loss_forward_out_cpu_template`` (float32; float64's
    accumulator is its own type: the reference's): per row the terms ``z`` (in float32) added
    in a double, rounded to float32 as the row's sum; none: that ``/ C`` in float32; else the
    rows' float32 sums added in a double, ``/ C`` (``/ N`` for mean) there, rounded once.
    Measured every bit on 1-8 rows of 1-11 classes, each reduction."""
    from tapescope.core.capture.aten_ref_losses import _multilabel_args, _multilabel_terms

    x2, shape, t2, valid, ist, red = _multilabel_args(args, 0)
    if x2.dtype != np.float32:
        raise ValueError("written for float32")
    n, c = x2.shape
    with np.errstate(all="ignore"):
        acc = np.zeros(n, np.float64)
        for _, _, z, use in _multilabel_terms(x2, t2, valid, ist):
            for d in range(c):
                acc = np.where(use[:, d], acc + z[:, d].astype(np.float64), acc)
        per = acc.astype(np.float32)
        if red == 0 and len(shape) == 2:
            return per / np.float32(c), ist.reshape(shape)
        tot = 0.0
        for v in per.tolist():
            tot += v
        tot /= c
        if red == 1:
            tot /= n
    return np.asarray(tot, np.float32), ist.reshape(shape)


def _aten_multi_margin(args: list, kw: dict) -> np.ndarray:
    """ATen's ``multi_margin_loss_cpu_kernel`` reduced (float32): each row's sum ``/ C`` in
    float32 (the reference's rows), the rows' results added in a double from 0, ``/ N`` there
    for mean, rounded once. Measured every bit on 1-8 rows, p 1 and 2, with and without a
    weight."""
    from tapescope.core.capture.aten_ref_losses import _margin_args, _multi_margin_loss

    x, x2, t, p, margin, w, red = _margin_args(args, kw, 0)
    if x.dtype != np.float32 or red == 0 and x.ndim == 2:
        raise ValueError("written for float32, reduced")
    per = _multi_margin_loss([x2, t, p, margin, w, 0], {})[0].reshape(-1)
    tot = 0.0
    for v in per.tolist():
        tot += v
    if red == 1:
        tot /= x2.shape[0]
    return np.asarray(tot, np.float32)


def _libc_xlogy(args: list, kw: dict, fn: str) -> np.ndarray:
    """ATen's ``xlogy_kernel`` / ``xlog1py_kernel`` (``cpu_kernel``: no vector path; ``fn``
    the C library's ``log`` or ``log1p``), float32 and float64: measured every bit on 100,000
    pairs with zeros and NaNs, 1 and 2 threads."""
    from tapescope.core.explain_prims import _LIBC_MATH as L

    dt = np.result_type(*args[:2])  # (a Python number weak, as torch's scalar operand)
    a, b = (np.asarray(v) for v in args[:2])
    if dt not in (np.float32, np.float64):
        raise ValueError("written for float32 and float64")
    x, y = np.broadcast_arrays(a.astype(dt, copy=False), b.astype(dt, copy=False))
    with np.errstate(all="ignore"):
        return np.where(np.isnan(y), y, np.where(x == 0, dt.type(0), x * getattr(L, fn)(y)))


# the last variant run that gave every output of its op (a tuple), with the args it ran on:
# the judge asks for an op's outputs one after another on the same args, and a norm's
# variant computes all of them at once (batch_norm's five) -- not once per output
_LAST: list = [None]


def _ftz(op: str) -> _Variant:
    """Any op with its float inputs' and outputs' subnormals flushed to (signed) zero (a
    script's ``torch.set_flush_denormal(True)``: the CPU's FTZ and DAZ modes), the table's
    reference between: tried last, as core.explain's ``ftz`` for tape nodes."""
    from tapescope.core.explain import _flush

    def flush(a: Any) -> Any:
        if isinstance(a, np.ndarray):
            return _flush(a)
        return [flush(v) for v in a] if isinstance(a, list) else a

    def arrays(a: Any) -> list:
        if isinstance(a, np.ndarray):
            return [a]
        return [x for v in a for x in arrays(v)] if isinstance(a, list) else []

    def run(args: list, kw: dict, recorded: np.ndarray) -> tuple:
        from tapescope.core.capture.aten_ref import reference

        ins = [a for a in arrays(list(args)) if a.dtype.kind == "f"]
        if sum(a.size for a in ins) > _FTZ_MAX:
            raise ValueError("past the ftz check's budget")
        # (flushing shows where an input is subnormal or an output flushed to +-0)
        if not np.any(np.asarray(recorded) == 0) and not any(
                np.any((a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny)) for a in ins):
            raise ValueError("no subnormal input and no zero output: not flushed")
        got = tuple(flush(np.asarray(y)) if y is not None else y
                    for y in reference(op, flush(list(args)), kw))
        plain = reference(op, list(args), kw)
        if all(a is None or (np.asarray(a).shape == np.asarray(b).shape
                             and np.asarray(a).tobytes() == np.asarray(b).tobytes())
               for a, b in zip(got, plain, strict=True)):
            raise ValueError("no subnormal in or out: flushing changes nothing here")
        return got, ""
    return ("ftz", "subnormals flushed to zero, the inputs' and the outputs' (a script's "
                   "torch.set_flush_denormal(True))", _Fits(run))


# the most float input elements the ftz check runs the reference on (twice)
_FTZ_MAX = 1 << 24


def _every_output(op: str, label: str, run: Callable, args: list, kwargs: dict) -> Any:
    last = _LAST[0]
    if last is not None and last[0] == (op, label) and last[1] is args and last[2] is kwargs:
        return last[3]
    y = run(args, kwargs)
    _LAST[0] = ((op, label), args, kwargs, y) if type(y) is tuple else None
    return y


#: the words a variant's label carries when it is one CPU vendor's kernel (MKL picks its
#: kernels by vendor): tried first for a capture made on that vendor's CPU, last otherwise
VENDOR_WORDS = {"AuthenticAMD": "on an AMD CPU"}


def _by_vendor(cands: list, vendor: str | None) -> list:
    """``cands`` with the recording CPU vendor's own kernels first and other vendors' last (a
    dot product is one number: two vendors' orders may well agree on it, and the machine that
    ran it says which one did); the rest in their order."""
    def rank(c: tuple) -> int:
        for v, words in VENDOR_WORDS.items():
            if words in c[1]:
                return 0 if v == vendor else 2
        return 1
    return sorted(cands, key=rank)


def explain_op(op: str, args: list, kwargs: dict, recorded: np.ndarray, diff: dict,
               output: int = 0, vendor: str | None = None, threads: int | None = None) -> dict:
    """The cause of op ``op``'s recorded output ``output`` differing from the reference
    (``diff``: the judge's difference), as ``core.explain.Cause.to_json``: ``{"cause",
    "variant"}``, plus ``closest``, ``max_ulp``, ``n_diff`` when unknown. As
    ``core.explain``'s search: the variant that last reproduced this op at these shapes is
    tried first, and a closest variant is named only when strictly closer than the reference
    (``core.explain.closer``). A foreach op's output j is its lists' entry j; other ops'
    variants name output 0, or every output (a tuple). ``vendor``: the recording CPU's
    (the capture's ``settings.cpu_vendor``), whose own kernels are tried first; ``threads``:
    the run's thread count (``settings.threads``), for the variants whose order it decides
    (None: they fit it)."""
    token = _RECORDED_THREADS.set(threads if isinstance(threads, int) and threads > 0 else None)
    try:
        return _explain_op(op, args, kwargs, recorded, diff, output, vendor)
    finally:
        _RECORDED_THREADS.reset(token)


def _explain_op(op: str, args: list, kwargs: dict, recorded: np.ndarray, diff: dict,
                output: int, vendor: str | None) -> dict:
    if diff["n_diff"] and diff.get("n_signed_zero", 0) == diff["n_diff"]:
        return {"cause": "signed-zero", "variant": "equal but for the sign of zero"}
    if _base(op).startswith("_foreach_"):  # (each output its own tensor's: output 0 too)
        args = [a[output] if isinstance(a, list) and len(a) > output else a for a in args]
        output = 0
    raw = SimpleNamespace(n_nan=int(diff.get("n_nan", 0)), n_diff=int(diff["n_diff"]),
                          max_ulp=int(diff["max_ulp"]))
    shapes = tuple(np.shape(a) for a in args if isinstance(a, np.ndarray))
    key = ("capture", op, output, shapes, np.dtype(recorded.dtype).str,
           repr(args[len(shapes):]))
    cands = _by_vendor(_variants(op, _dtype(args)), vendor) + [_ftz(op)]
    hints = _HINTS.get(key, ())
    if hints:
        rank = {lab: i for i, lab in enumerate(hints)}
        cands = sorted(cands, key=lambda c: rank.get(c[1], len(rank)))
    best: tuple | None = None
    for cause, label, run, *screen in cands:
        try:
            with np.errstate(all="ignore"):
                if screen and not screen[0](args, kwargs, recorded):
                    continue  # (its bits already differ on a part of the op)
                found = ""
                if getattr(run, "fits", False):
                    y, found = run(args, kwargs, recorded)
                else:
                    y = _every_output(op, label, run, args, kwargs)
                if type(y) is tuple:
                    y = y[output]
                elif output:
                    continue  # (a variant of output 0 only)
                y = np.asarray(y)
        except Exception:  # noqa: BLE001 — a variant that cannot run these args is skipped
            continue
        if y.shape != recorded.shape or y.dtype != recorded.dtype:
            continue
        d = compare_arrays(complex_parts(y), complex_parts(recorded))
        if d.n_diff == 0:
            remember(key, label)
            return {"cause": cause, "variant": f"{label}: {found}" if found else label}
        if best is None or distance(d) < distance(best[0]):
            best = (d, cause, label)
    note = _UNWRITTEN.get(_base(op))
    if best is None or not closer(best[0], raw):
        got = {"cause": "unknown", "variant": "", "closest": None, "max_ulp": diff["max_ulp"],
               "n_diff": diff["n_diff"]}
    else:
        d, cause, label = best
        got = {"cause": "unknown", "variant": label, "closest": cause,
               "max_ulp": int(d.max_ulp), "n_diff": int(d.n_diff)}
    if note:
        got["note"] = note
    return got
