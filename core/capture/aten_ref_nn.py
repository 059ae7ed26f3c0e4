"""Reference forms of aten's reductions, products, softmax family and losses: the tape's own
forms where they are the same op (``serial_sum``, ``mean``, the reference ``mm``/``bmm``/
``matmul``, ``softmax``, ``log_softmax`` and their backwards), composites in the written order of
docs/reference-order.md, "Captured aten ops", for the rest. Half inputs compute in float32
(products and sums accumulate there, serially) and round once at the op's end."""

from __future__ import annotations

import math

import numpy as np

from tapescope.core import native
from tapescope.core.capture.aten_ref_table import (
    F32,
    F64,
    I64,
    M,
    NoReference,
    arr,
    as_dtype,
    check_elems,
    compute,
    fast,
    form,
    fp_quiet,
    is_float,
    opt,
    result_type,
)
from tapescope.core.ops import REGISTRY
from tapescope.core.ops.reference import matmul as ref_matmul
from tapescope.core.ops.reference import serial_sum


def axes_of(x: np.ndarray, dim) -> tuple[int, ...]:
    """The reduced axes: None or [] means every axis (aten's convention)."""
    if dim is None:
        return tuple(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return tuple(range(x.ndim))
    return tuple(sorted({d % max(x.ndim, 1) for d in dims}))


def _wide(x: np.ndarray, dt: np.dtype | None = None) -> np.ndarray:
    return arr(x, compute(dt if dt is not None else x.dtype))


def _red_dtype(x: np.ndarray, dtype) -> np.dtype:
    d = as_dtype(dtype)
    if d is not None:
        return d
    return x.dtype if is_float(x.dtype) else I64


def _at(x: np.ndarray, dim, keep: bool) -> dict:
    ax = axes_of(x, dim)
    return {"axis": ax if ax else None, "keepdims": bool(keep)}


def _reduce(name: str, x: np.ndarray, dim, keep: bool, dtype) -> np.ndarray:
    out = _red_dtype(x, dtype)
    if x.ndim == 0:
        return arr(x, out).copy()
    if not axes_of(x, dim):
        return arr(x, out).copy()
    y = REGISTRY[name].forward(M, [_wide(x, out)], _at(x, dim, keep))
    return np.asarray(y).astype(out)


def _complex_parts(run, args: list, kwargs: dict, what: str) -> list:
    """``run`` (a real form) of complex ``args[0]``, part by part: a sum (and a mean, the sum
    divided by a real count) of complex numbers is each part's own, so the real and
    imaginary parts are reduced by the real form in its order and put back together. A
    result dtype asked for: no reference."""
    x = args[0]
    if kwargs.get("dtype") is not None or any(isinstance(a, str) for a in args[1:]) or (
            len(args) > 3 and args[3] is not None):
        raise NoReference(f"a complex {what} to a dtype of its own")
    parts = [np.asarray(run([np.ascontiguousarray(getattr(x, c)), *args[1:]], kwargs)[0])
             for c in ("real", "imag")]
    out = np.empty(parts[0].shape, x.dtype)
    out.real, out.imag = parts
    return [out]


@form("aten.sum.default", "aten.sum.dim_IntList")
def _sum(args: list, kwargs: dict) -> list:
    x = args[0]
    if type(x) is np.ndarray and x.dtype.kind == "c":
        return _complex_parts(_sum, args, kwargs, "sum")
    if len(args) == 1 or isinstance(args[1], str):  # sum.default(x, dtype=)
        return [_reduce("sum", x, None, False, kwargs.get("dtype"))]
    return [_reduce("sum", x, args[1], opt(kwargs, args, 2, "keepdim", False),
                    opt(kwargs, args, 3, "dtype"))]


@fast("aten.sum.dim_IntList")
def _fast_column_sum(args: list, kwargs: dict) -> list | None:
    """sum over the first axis of a 2-d float32/64 array (a bias's gradient: ~40 a zoo GPT
    capture), no dtype: ``_reduce``'s ``serial_sum``, whose path for it is ``native.colsum``
    of the rows (each column one chain from +0.0), called directly; None where it does not
    apply or native code is off (then the form)."""
    if not 2 <= len(args) <= 3 or (kwargs and kwargs.keys() - {"keepdim"}):
        return None
    x, dims = args[0], args[1]
    if type(x) is not np.ndarray or x.ndim != 2 or not x.size or type(dims) is not list \
            or len(dims) != 1 or dims[0] not in (0, -2) or type(dims[0]) is not int:
        return None
    dt = x.dtype
    if dt is not F32 and dt is not F64:
        return None
    keep = opt(kwargs, args, 2, "keepdim", False)
    y = native.colsum(x)
    if y is None:
        return None
    return [y.reshape((1, x.shape[1]) if keep else (x.shape[1],))]


@form("aten.mean.default", "aten.mean.dim")
def _mean(args: list, kwargs: dict) -> list:
    x = args[0]
    if type(x) is np.ndarray and x.dtype.kind == "c":
        return _complex_parts(_mean, args, kwargs, "mean")
    if len(args) == 1 or isinstance(args[1], str):
        return [_reduce("mean", x, None, False, kwargs.get("dtype"))]
    return [_reduce("mean", x, args[1], opt(kwargs, args, 2, "keepdim", False),
                    opt(kwargs, args, 3, "dtype"))]


def _extreme(fn):
    def run(args: list, kwargs: dict) -> list:
        x = args[0]
        dim = opt(kwargs, args, 1, "dim")
        keep = opt(kwargs, args, 2, "keepdim", False)
        return [np.asarray(fn(x, axis=axes_of(x, dim), keepdims=keep))]  # exact; NaN wins
    return run


form("aten.amax.default")(_extreme(np.max))
form("aten.amin.default")(_extreme(np.min))


@form("aten.aminmax.default")
def _aminmax(args: list, kwargs: dict) -> list:
    """(min, max) over ``dim`` (every element where None): exact; a NaN wins both, as
    ``amin``/``amax``. (``F.one_hot`` checks its classes' range with it.)"""
    x = args[0]
    keep = opt(kwargs, args, 2, "keepdim", False)
    if x.size == 0:
        raise NoReference("aminmax of an empty tensor (torch raises)")
    ax = axes_of(x, opt(kwargs, args, 1, "dim"))
    return [np.asarray(np.min(x, axis=ax, keepdims=keep)),
            np.asarray(np.max(x, axis=ax, keepdims=keep))]


form("aten.max.default")(lambda args, kwargs: [np.asarray(np.max(args[0]))])
form("aten.min.default")(lambda args, kwargs: [np.asarray(np.min(args[0]))])
form("aten.all.default", "aten._is_all_true.default")(
    lambda args, kwargs: [np.asarray(np.all(args[0]))])
form("aten.any.default", "aten._is_any_true.default")(
    lambda args, kwargs: [np.asarray(np.any(args[0]))])


def _all_any(fn):
    def run(args: list, kwargs: dict) -> list:  # (exact: bools; uint8 stays uint8, as torch)
        x = np.asarray(args[0])
        keep = bool(opt(kwargs, args, 2, "keepdim", False))
        y = fn(x, axis=axes_of(x, opt(kwargs, args, 1, "dim")), keepdims=keep)
        return [np.asarray(y).astype(np.uint8 if x.dtype == np.uint8 else np.bool_)]
    return run


form("aten.all.dim", "aten.all.dims")(_all_any(np.all))
form("aten.any.dim", "aten.any.dims")(_all_any(np.any))


def _arg_extreme(values, index):
    def run(args: list, kwargs: dict) -> list:
        x, d = args[0], args[1] % max(args[0].ndim, 1)
        keep = opt(kwargs, args, 2, "keepdim", False)
        i = np.expand_dims(index(x, axis=d), d)  # the first extreme (first NaN)
        v = np.take_along_axis(x, i, axis=d)
        return [v if keep else np.squeeze(v, d), (i if keep else np.squeeze(i, d)).astype(I64)]
    return run


form("aten.max.dim")(_arg_extreme(np.max, np.argmax))
form("aten.min.dim")(_arg_extreme(np.min, np.argmin))


def _arg_index(fn):
    def run(args: list, kwargs: dict) -> list:
        x, d = args[0], opt(kwargs, args, 1, "dim")
        keep = opt(kwargs, args, 2, "keepdim", False)
        if d is None:
            return [np.asarray(fn(x), I64).reshape((1,) * x.ndim if keep else ())]
        return [np.asarray(fn(x, axis=d, keepdims=keep), I64)]
    return run


form("aten.argmax.default")(_arg_index(np.argmax))
form("aten.argmin.default")(_arg_index(np.argmin))


def _cumulative(ufunc: np.ufunc, what: str):
    def run(args: list, kwargs: dict) -> list:
        x, d = args[0], args[1]
        out = _red_dtype(x, opt(kwargs, args, 2, "dtype"))
        if x.ndim == 0:
            return [arr(x, out).copy()]
        with fp_quiet():
            return [ufunc.accumulate(_wide(x, out), axis=d % x.ndim).astype(out)]
    run.__doc__ = f"acc = x[0]; acc = acc {what} x[i] along ``dim``, serially ({ufunc.__name__}" \
        ".accumulate)."
    return run


form("aten.cumsum.default")(_cumulative(np.add, "+"))
form("aten.cumprod.default")(_cumulative(np.multiply, "*"))


@form("aten.prod.default", "aten.prod.dim_int")
def _prod(args: list, kwargs: dict) -> list:
    """acc = 1; acc = acc * x[i] per output slot, the reduced elements in row-major order,
    in the result's compute type (int64 for integer and bool input, wrapping as ATen's);
    ``np.multiply.accumulate``'s last row, which multiplies serially (``reduce`` may not)."""
    x = args[0]
    if len(args) == 1 or isinstance(args[1], str):  # prod.default(x, dtype=)
        dim, keep, dtype = None, False, kwargs.get("dtype")
    else:
        dim, keep = args[1], opt(kwargs, args, 2, "keepdim", False)
        dtype = opt(kwargs, args, 3, "dtype")
    out = _red_dtype(x, dtype)
    if x.ndim == 0:
        return [arr(x, out).copy()]
    ax = axes_of(x, None if dim is None else [dim])
    keep_ax = [a for a in range(x.ndim) if a not in ax]
    shape = tuple(1 if a in ax else x.shape[a] for a in range(x.ndim)) if keep else \
        tuple(x.shape[a] for a in keep_ax)
    r = math.prod(x.shape[a] for a in ax)
    n = math.prod(x.shape[a] for a in keep_ax)
    check_elems(n, "prod")  # (a 0 x 2**40 input's outputs; accumulate's rows are the input's)
    if r == 0:
        return [np.ones(shape, out)]
    flat = np.ascontiguousarray(np.transpose(_wide(x, out), ax + tuple(keep_ax))).reshape(r, n)
    with fp_quiet():
        y = np.multiply.accumulate(flat, axis=0)[-1]
    return [y.astype(out).reshape(shape)]


def variance(x: np.ndarray, dim, correction: float, keep: bool) -> np.ndarray:
    """mu = serial_sum(x) / n; d = x - mu; var = serial_sum(d * d) / max(0, n - correction)."""
    ax = axes_of(x, dim)
    n = math.prod(x.shape[a] for a in ax)
    t = x.dtype.type
    mu = serial_sum(x, ax, keepdims=True) / t(n)
    d = x - mu
    with fp_quiet():
        return serial_sum(d * d, ax, keepdims=keep) / t(max(0.0, n - correction))


def _var_args(args: list, kwargs: dict) -> tuple:
    x = args[0]
    dim = opt(kwargs, args, 1, "dim")
    corr = kwargs.get("correction", 1)
    if "unbiased" in kwargs:
        corr = 1 if kwargs["unbiased"] else 0
    return x, dim, 1 if corr is None else corr, kwargs.get("keepdim", False)


@form("aten.var.correction", "aten.var.dim")
def _var(args: list, kwargs: dict) -> list:
    x, dim, corr, keep = _var_args(args, kwargs)
    return [variance(_wide(x), dim, corr, keep).astype(x.dtype)]


@form("aten.var_mean.correction", "aten.var_mean.dim")
def _var_mean(args: list, kwargs: dict) -> list:
    """(var, mean): ``variance``'s order; the mean is its mu (serial_sum(x) / n)."""
    x, dim, corr, keep = _var_args(args, kwargs)
    w = _wide(x)
    ax = axes_of(w, dim)
    mu = serial_sum(w, ax, keepdims=keep) / w.dtype.type(math.prod(w.shape[a] for a in ax))
    return [variance(w, dim, corr, keep).astype(x.dtype), np.asarray(mu).astype(x.dtype)]


@form("aten.std.correction", "aten.std.dim")
def _std(args: list, kwargs: dict) -> list:
    x, dim, corr, keep = _var_args(args, kwargs)
    return [np.sqrt(variance(_wide(x), dim, corr, keep)).astype(x.dtype)]


@form("aten.std_mean.correction", "aten.std_mean.dim")
def _std_mean(args: list, kwargs: dict) -> list:
    """(std, mean): ``_std``'s and ``_var_mean``'s mean."""
    return [_std(args, kwargs)[0], _var_mean(args, kwargs)[1]]


def vector_norm(x: np.ndarray, ord_: float = 2, dim=None, keep: bool = False,
                dtype=None) -> np.ndarray:
    """ord 2: sqrt(serial_sum(x * x)); 1: serial_sum(|x|); inf / -inf: max / min |x|."""
    out = as_dtype(dtype) or (x.dtype if is_float(x.dtype) else F32)
    w = _wide(x, out)
    ax = axes_of(x, dim)
    with fp_quiet():
        if ord_ == 2:
            y = np.sqrt(serial_sum(w * w, ax, keepdims=keep))
        elif ord_ == 1:
            y = serial_sum(np.abs(w), ax, keepdims=keep)
        elif ord_ == math.inf:
            y = np.max(np.abs(w), axis=ax, keepdims=keep)
        elif ord_ == -math.inf:
            y = np.min(np.abs(w), axis=ax, keepdims=keep)
        else:
            raise NoReference(f"vector norm of order {ord_}")
    return np.asarray(y).astype(out)


@form("aten.norm.Scalar", "aten.norm.ScalarOpt_dim", "aten.norm.ScalarOpt_dim_dtype",
      "aten.norm.ScalarOpt_dtype")
def _norm(args: list, kwargs: dict) -> list:
    """The older ``norm(x, p, dim, keepdim, dtype=)`` (``torch.norm``, weight_norm's
    decomposition): ``linalg_vector_norm``'s form; p None is 2."""
    x = args[0]
    p = opt(kwargs, args, 1, "p", 2)
    p = 2.0 if p is None else float(p)
    if len(args) > 2 and isinstance(args[2], (list, tuple, int)):
        dim, keep = args[2], opt(kwargs, args, 3, "keepdim", False)
        dtype = opt(kwargs, args, 4, "dtype")
    else:  # (norm.Scalar / norm.ScalarOpt_dtype: every element)
        dim, keep = None, False
        dtype = opt(kwargs, args, 2, "dtype")
    return [vector_norm(x, p, dim, keep, dtype)]


@form("aten.logsumexp.default")
def _logsumexp(args: list, kwargs: dict) -> list:
    """ATen's composite: ``m = amax(x, dim, keepdim=True)``, ``m = 0`` where ``|m|`` is
    infinite; ``log(sum(exp(x - m), dim)) + m`` (exp and log refmath's, the sum serial)."""
    x = np.asarray(args[0])
    if not is_float(x.dtype):
        raise NoReference("logsumexp of integers (torch computes in the default float type)")
    dim, keep = opt(kwargs, args, 1, "dim", []), bool(opt(kwargs, args, 2, "keepdim", False))
    ax = axes_of(x, dim)
    if x.size == 0:
        raise NoReference("logsumexp of an empty tensor")
    w = _wide(x, x.dtype)
    with fp_quiet():
        m = np.max(w, axis=ax, keepdims=True)
        m = np.where(np.abs(m) == np.inf, m.dtype.type(0), m)
        s = serial_sum(np.asarray(M.exp(w - m)), ax, keepdims=True)
        y = np.asarray(M.log(s)) + m
    if not keep:
        y = np.squeeze(y, ax)
    return [np.asarray(y).astype(x.dtype)]


def _cdist_args(x1, x2, p) -> tuple:
    x1, x2, p = np.asarray(x1), np.asarray(x2), float(p)
    if x1.ndim < 2 or x1.ndim != x2.ndim or x1.shape[-1] != x2.shape[-1] \
            or x1.shape[:-2] != x2.shape[:-2] or x1.dtype != x2.dtype \
            or x1.dtype not in (F32, np.dtype(np.float64)):
        raise NoReference("cdist of other than two float (..., n, m) arrays of one batch")
    if p not in (1.0, 2.0, math.inf):
        raise NoReference(f"cdist of order {p} (written for 1, 2 and inf)")
    return x1, x2, p


@form("aten._cdist_forward.default")
def _cdist_forward(args: list, kwargs: dict) -> list:
    """``d[i, j]`` over the last axis of ``x1[i] - x2[j]``: p 2 ``sqrt(serial_sum(diff *
    diff))``, p 1 ``serial_sum(|diff|)``, inf ``max |diff|`` (ATen's direct kernel, which
    ``cdist`` runs below 25 rows or with ``donot_use_mm``; the product form is other ops)."""
    x1, x2, p = _cdist_args(args[0], args[1], args[2])
    with fp_quiet():
        y = _dist_of(x1[..., :, None, :] - x2[..., None, :, :], p)
    return [np.asarray(y).astype(x1.dtype)]


def _dist_of(diff: np.ndarray, p: float) -> np.ndarray:
    """The p-norm over the last axis in order (``cdist``'s and ``pdist``'s forms)."""
    if p == 2:
        return np.sqrt(serial_sum(diff * diff, -1))
    if p == 1:
        return serial_sum(np.abs(diff), -1)
    return np.max(np.abs(diff), -1) if diff.shape[-1] else np.zeros(diff.shape[:-1], diff.dtype)


def _dist_terms(diff: np.ndarray, g: np.ndarray, d: np.ndarray, p: float, t: type
                ) -> np.ndarray:
    """A distance's gradient terms (ATen's backward kernels): p 2 ``(g * diff) / d`` (0 where
    ``d`` is 0), p 1 ``g * sign(diff)``, inf ``g * sign(diff)`` where ``|diff| == d``."""
    if p == 2:
        return np.where(d == 0, t(0), (g * diff) / d)
    if p == 1:
        return g * np.sign(diff)
    return np.where(np.abs(diff) == d, g * np.sign(diff), t(0))


def _pdist_args(x, p) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """(x, p, i, j): the rows' pairs ``i < j`` in row-major order (``pdist``'s outputs')."""
    x = np.asarray(x)
    p = float(p)
    if x.ndim != 2 or x.dtype not in (F32, np.dtype(np.float64)):
        raise NoReference("pdist of other than a float32 / float64 (n, m) array")
    if p not in (1.0, 2.0, math.inf):
        raise NoReference(f"pdist of order {p}: the orders 1, 2 and inf are written out")
    n = x.shape[0]
    if n * n * x.shape[1] > _PDIST_MAX:
        raise NoReference(f"pdist of {n} rows of {x.shape[1]}: past the form's "
                          f"{_PDIST_MAX:,} elements of differences")
    i, j = np.triu_indices(n, 1)
    return x, p, i, j


_PDIST_MAX = 1 << 26  # (the form holds every pair's differences, twice for the backward)


@form("aten._pdist_forward.default")
def _pdist_forward(args: list, kwargs: dict) -> list:
    """``d[k]`` for the k-th pair ``i < j`` (row-major) of ``x``'s rows, over the features
    in order: p 2 ``sqrt(serial_sum(diff * diff))``, p 1 ``serial_sum(|diff|)``, inf ``max
    |diff|`` (``cdist``'s forms)."""
    x, p, i, j = _pdist_args(args[0], opt(kwargs, args, 1, "p", 2.0))
    check_elems(i.size, "_pdist")  # (its output: one per pair; the backward's are g's)
    with fp_quiet():
        y = _dist_of(x[i] - x[j], p)
    return [np.asarray(y).astype(x.dtype, copy=False)]


@form("aten._pdist_backward.default")
def _pdist_backward(args: list, kwargs: dict) -> list:
    """ATen's ``run_backward_parallel_pdist`` (its order: each column apart, so lanes change
    nothing): from +0.0, the pairs in row-major order, ``res[i] = res[i] + t`` and ``res[j] =
    res[j] - t`` with ``t`` p 2 ``(g * diff) / d`` (0 where ``d`` is 0), p 1 ``g *
    sign(diff)``, inf ``g * sign(diff)`` where ``|diff| == d``."""
    g, x, p, d = args[0], args[1], args[2], args[3]
    x, p, i, j = _pdist_args(x, p)
    g, d = np.asarray(g), np.asarray(d)
    if g.shape != (i.size,) or d.shape != (i.size,) or g.dtype != x.dtype \
            or d.dtype != x.dtype:
        raise NoReference("pdist backward: the gradient or distances are not one per pair")
    t = x.dtype.type
    res = np.zeros_like(x)
    with fp_quiet():
        term = _dist_terms(x[i] - x[j], g[:, None], d[:, None], p, t)
        # row r's terms in the pairs' order: -t(i', r) for i' < r, then +t(r, j) for j > r
        # (``res - t`` is ``res + (-t)`` exactly), summed in that order from +0.0
        n = x.shape[0]
        terms = np.zeros((n, max(n - 1, 0), x.shape[1]), x.dtype)
        terms[j, i] = -term  # (pair (i', r): row r's place i')
        terms[i, j - 1] = term  # (pair (r, j): row r's place j - 1)
        if n > 1:
            res = serial_sum(terms, 1)
    return [np.asarray(res).astype(x.dtype, copy=False)]


def euclidean_dist(x1: np.ndarray, x2: np.ndarray, product=None, square_sum=None,
                   root=None) -> np.ndarray:
    """ATen's ``_euclidean_dist`` expansion, each piece by the table's form unless another is
    given (``--explain``'s variants): ``n = square_sum(x^2)`` over the last axis, kept, for
    x1 and x2; ``a = cat(-2 * x1, n1, 1)``, ``b = cat(x2, 1, n2)``; ``d = product(a, bᵀ)``;
    ``root(clamp_min(d, 0))``. (The pieces' forms are the table's: ``core.capture.aten_ref``
    imported, as the judge and ``--explain`` have it.)"""
    from tapescope.core.capture.aten_ref_table import FORMS

    if x1.ndim < 2 or x1.ndim != x2.ndim or x1.shape[-1] != x2.shape[-1] \
            or x1.shape[:-2] != x2.shape[:-2] or x1.dtype != x2.dtype \
            or x1.dtype not in (F32, np.dtype(np.float64)):
        raise NoReference("_euclidean_dist of other than two float (..., n, m) arrays of one "
                          "batch")

    def f(op: str, *a: object) -> np.ndarray:
        return np.asarray(FORMS[f"aten.{op}"](list(a), {})[0])

    pads = []
    for x in (x1, x2):
        sq = f("pow.Tensor_Scalar", x, 2)
        n = f("sum.dim_IntList", sq, [-1], True) if square_sum is None else \
            np.asarray(square_sum(sq)).astype(x.dtype)
        pads.append((n, f("ones_like.default", n)))
    a = f("cat.default", [f("mul.Tensor", x1, -2), *pads[0]], -1)
    b = f("cat.default", [x2, pads[1][1], pads[1][0]], -1)
    bt = np.swapaxes(b, -1, -2)
    d = f("matmul.default", a, bt) if product is None else np.asarray(product(a, bt))
    c = f("clamp_min.default", d, 0)
    return f("sqrt.default", c) if root is None else np.asarray(root(c)).astype(d.dtype)


@form("aten._euclidean_dist.default")
def _euclidean_dist(args: list, kwargs: dict) -> list:
    """``cdist``'s product form (what ``torch.cdist`` runs for p = 2 past 25 rows, or with
    ``use_mm_for_euclid_dist``): the op is ATen's expansion, so its reference is that
    expansion with each piece's own form (the table's order; ``euclidean_dist``,
    docs/reference-order.md). Its gradient is other recorded ops."""
    return [euclidean_dist(np.asarray(args[0]), np.asarray(args[1]))]


@form("aten._cdist_backward.default")
def _cdist_backward(args: list, kwargs: dict) -> list:
    """x1's gradient: per ``(i, m)`` the terms over ``j`` added in order from +0.0: p 2
    ``(g * diff) / d`` (0 where ``d`` is 0), p 1 ``g * sign(diff)``, inf ``g * sign(diff)``
    where ``|diff| == d`` (ATen's ``run_backward_parallel_cdist``)."""
    g, x1, x2, p, d = args[0], args[1], args[2], args[3], args[4]
    x1, x2, p = _cdist_args(x1, x2, p)
    g, d = np.asarray(g), np.asarray(d)
    want = x1.shape[:-1] + (x2.shape[-2],)
    if g.shape != want or d.shape != want or g.dtype != x1.dtype or d.dtype != x1.dtype:
        raise NoReference("cdist backward: the gradient or distances are not (..., n1, n2)")
    t = x1.dtype.type
    with fp_quiet():
        diff = x1[..., :, None, :] - x2[..., None, :, :]  # (..., i, j, m)
        y = serial_sum(_dist_terms(diff, g[..., None], d[..., None], p, t), -2)
    return [np.asarray(y).astype(x1.dtype)]


# a _foreach_norm's tensors squared into the columns of one zero-padded matrix up to this
# many elements (256 KiB of float32): one column sum for the list instead of a vector_norm
# call per tensor (~13 us each at the zoo's sizes, most of it the call's own cost)
_NORMS_PADDED_MAX = 1 << 16


def vector_norms(xs: list, ord_: float) -> list[np.ndarray] | None:
    """``[vector_norm(x, ord_) for x in xs]`` (every axis, no dtype, not kept) for a short
    list of float32 or float64 arrays of one dtype and ord 2, else None (the caller's loop).
    Each row of the matrix is one tensor's squares in C order, then +0.0 padding:
    ``serial_sum``'s chain over a row is that tensor's own (its first add is +0.0 + x0*x0, as
    its chain's; a square is +0.0 or more or NaN, so adding +0.0 to a partial sum is exact, an
    infinity or NaN kept with its bits), so the same bits."""
    if ord_ != 2 or not xs or type(xs[0]) is not np.ndarray:
        return None
    dt = xs[0].dtype
    if dt != np.float32 and dt != np.float64:
        return None
    sizes = []
    for x in xs:
        if type(x) is not np.ndarray or x.dtype != dt:
            return None
        sizes.append(x.size)
    n, most = len(xs), max(sizes)
    if most * n > _NORMS_PADDED_MAX:
        return None
    s = native.square_sums(xs)  # (each row's chain in one native call, no padded matrix)
    if s is not None:
        with fp_quiet():
            y = np.sqrt(s)
        return [np.asarray(v) for v in y]
    flat = np.concatenate([x.reshape(-1) for x in xs])  # (each in C order, one after another)
    sq = np.zeros((n, most), dt)
    with fp_quiet():
        # the boolean mask fills the rows' leading entries in row-major order: the segments
        sq[np.arange(most) < np.array(sizes)[:, None]] = flat * flat
        y = np.sqrt(serial_sum(sq, 1))
    return [np.asarray(v) for v in y]


@form("aten.linalg_vector_norm.default")
def _vector_norm(args: list, kwargs: dict) -> list:
    return [vector_norm(args[0], float(opt(kwargs, args, 1, "ord", 2)),
                        opt(kwargs, args, 2, "dim"), opt(kwargs, args, 3, "keepdim", False),
                        kwargs.get("dtype"))]


# ---- products ---------------------------------------------------------------------------------
def complex_product(a: np.ndarray, b: np.ndarray, out: np.dtype) -> np.ndarray:
    """``a @ b`` of complex operands (``mm``, ``bmm``, ``mv``, ``dot``, a 2-3 d ``matmul``),
    the reference's dot: from +0 in k order ``acc = acc + a[k] * b[k]``, each product
    ``complex_multiply``'s (four rounded real products, then the difference and the sum),
    each sum part by part."""
    from tapescope.core.capture.aten_ref_pointwise import complex_multiply

    a, b = arr(a, out), arr(b, out)
    one_a, one_b = a.ndim == 1, b.ndim == 1
    aw = a[None] if one_a else a
    bw = b[:, None] if one_b else b
    if aw.ndim > 3 or bw.ndim > 3 or aw.shape[-1] != bw.shape[-2]:
        raise NoReference("a complex product of other than 1-3 d operands of matching k")
    lead = np.broadcast_shapes(aw.shape[:-2], bw.shape[:-2])
    check_elems(math.prod(lead) * aw.shape[-2] * bw.shape[-1], "a complex product")
    acc = np.zeros(lead + (aw.shape[-2], bw.shape[-1]), out)
    with fp_quiet():
        for k in range(aw.shape[-1]):
            acc = acc + complex_multiply(aw[..., :, k:k + 1], bw[..., k:k + 1, :])
    if one_a:
        acc = acc[..., 0, :]
    if one_b:
        acc = acc[..., 0]
    return acc.astype(out, copy=False)


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` by the reference matmul (serial in k), in torch's result type."""
    out = result_type(a, b)
    if out.kind == "c":
        return complex_product(a, b, out)
    if not is_float(out):
        return np.matmul(a, b).astype(out)
    aw, bw = _wide(a, out), _wide(b, out)
    one = aw.ndim == 1 == bw.ndim  # (dot: a row by a column, one output)
    if one:
        aw, bw = aw[None], bw[:, None]
    if aw.ndim == 2 == bw.ndim:  # (matmul's own first step for 2-d operands, without its calls)
        y = native.mm(aw, bw)
        if y is not None:
            return y.reshape(()) if one else y
    y = np.asarray(ref_matmul(aw, bw))
    return y.reshape(()) if one else y


def _finish(y: np.ndarray, out: np.dtype) -> np.ndarray:
    return y.astype(out, copy=False)


@form("aten.mm.default", "aten.bmm.default", "aten.matmul.default", "aten.mv.default",
      "aten.dot.default")
def _mm(args: list, kwargs: dict) -> list:
    a, b = args[0], args[1]
    return [_finish(product(a, b), result_type(a, b))]


@form("aten.vdot.default")
def _vdot(args: list, kwargs: dict) -> list:
    """``vdot(a, b)``: ``dot(conj(a), b)`` (a real ``a`` as it is: spectral norm's power
    iteration)."""
    a, b = np.asarray(args[0]), np.asarray(args[1])
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise NoReference("vdot of other than two vectors of one length")
    return _mm([np.conj(a) if a.dtype.kind == "c" else a, b], {})


def _scaled_sum(ab: np.ndarray, bias: np.ndarray | None, beta, alpha) -> np.ndarray:
    """(alpha * ab) + (beta * bias), the scalings only when != 1; beta == 0 drops the bias.
    ``ab`` is a product's new array, which the sum may overwrite."""
    t = ab.dtype.type
    with fp_quiet():
        if alpha != 1:
            ab = t(alpha) * ab
        if bias is None or beta == 0:
            return ab
        bias = arr(bias, ab.dtype)
        bias = bias if beta == 1 else t(beta) * bias
        if ab.flags.writeable and np.broadcast_shapes(ab.shape, bias.shape) == ab.shape:
            # ab is the product's own new array: the sum into it, the same bits without a
            # fresh output (its pages were ~5 % of a GPT judge's products)
            return np.add(ab, bias, out=ab)
        return ab + bias


@form("aten.addmm.default", "aten.baddbmm.default", "aten.addmv.default")
def _addmm(args: list, kwargs: dict) -> list:
    bias, a, b = args[0], args[1], args[2]
    out = result_type(bias, a, b)
    y = _scaled_sum(product(a, b), bias, kwargs.get("beta", 1), kwargs.get("alpha", 1))
    return [_finish(y, out)]


@form("aten.linear.default")
def _linear(args: list, kwargs: dict) -> list:
    x, w = args[0], args[1]
    bias = opt(kwargs, args, 2, "bias")
    out = result_type(x, w) if bias is None else result_type(x, w, bias)
    return [_finish(_scaled_sum(product(x, w.T), bias, 1, 1), out)]


# ---- softmax family (the tape's forms) --------------------------------------------------------
def _row_op(name: str, x: np.ndarray, dim: int, out: np.dtype) -> np.ndarray:
    with fp_quiet():
        return np.asarray(REGISTRY[name].forward(M, [_wide(x)], {"axis": int(dim)})).astype(out)


def _row_bwd(name: str, g: np.ndarray, y: np.ndarray, dim: int, out: np.dtype) -> np.ndarray:
    ct = compute(out)
    with fp_quiet():
        gx = REGISTRY[name].backward(M, arr(g, ct), [None], arr(y, ct), {"axis": int(dim)},
                                     [True])[0]
    return np.asarray(gx).astype(out)


for _n in ("softmax", "log_softmax"):
    def _fwd(args: list, kwargs: dict, _n=_n) -> list:
        x, dim = args[0], args[1]
        half_to_float = opt(kwargs, args, 2, "half_to_float", False)
        return [_row_op(_n, x, dim, F32 if half_to_float else x.dtype)]

    def _bwd(args: list, kwargs: dict, _n=_n) -> list:
        g, y, dim = args[0], args[1], args[2]
        return [_row_bwd(_n, g, y, dim, as_dtype(opt(kwargs, args, 3, "input_dtype")) or g.dtype)]

    def _public(args: list, kwargs: dict, _n=_n) -> list:
        x, dim = args[0], args[1]
        out = as_dtype(opt(kwargs, args, 2, "dtype")) or x.dtype
        return [_row_op(_n, arr(x, out), dim, out)]

    form(f"aten._{_n}.default")(_fwd)
    form(f"aten._{_n}_backward_data.default")(_bwd)
    form(f"aten.{_n}.int")(_public)


@form("aten._safe_softmax.default")
def _safe_softmax(args: list, kwargs: dict) -> list:
    """softmax, with a row that is -inf throughout giving +0.0 (not NaN)."""
    x, dim = args[0], args[1]
    out = as_dtype(opt(kwargs, args, 2, "dtype")) or x.dtype
    y = _row_op("softmax", arr(x, out), dim, out)
    dead = np.all(np.isneginf(_wide(x)), axis=dim, keepdims=True)
    return [np.where(dead, out.type(0), y)]


# ---- losses -----------------------------------------------------------------------------------
def _nll_rows(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classes last, rows flattened: ([R, C], [R])."""
    if x.ndim == 1:
        return x[None, :], np.asarray(t).reshape(1)
    if x.ndim > 2:  # [N, C, d1, ...] (nll_loss2d): classes moved last
        x = np.moveaxis(x, 1, -1)
    return x.reshape(-1, x.shape[-1]), np.asarray(t).reshape(-1)


def _nll_weights(t: np.ndarray, weight, keep: np.ndarray, dt: np.dtype) -> np.ndarray:
    safe = np.where(keep, t, 0).astype(I64)
    w = np.ones(t.shape, dt) if weight is None else arr(weight, dt)[safe]
    return np.where(keep, w, dt.type(0))


@form("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def _nll_forward(args: list, kwargs: dict) -> list:
    x, t, weight, reduction, ignore = args[:5]
    out = x.dtype
    x2, t2 = _nll_rows(_wide(x), t)
    keep = t2 != ignore
    w = _nll_weights(t2, weight, keep, x2.dtype)
    picked = x2[np.arange(len(t2)), np.where(keep, t2, 0)]
    if weight is not None:
        picked = picked * w  # x[t] * w[t]: one rounding (none when there is no weight)
    picked = np.where(keep, picked, x2.dtype.type(0))
    with fp_quiet():
        if reduction == 0:
            lead = x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()
            loss = np.where(keep, -picked, x2.dtype.type(0))  # an ignored row: +0.0
            return [loss.reshape(lead).astype(out), np.zeros((), out)]
        tw = serial_sum(w)
        s = -serial_sum(picked)
        y = s / tw if reduction == 1 else s
    return [np.asarray(y).astype(out), np.asarray(tw).astype(out)]


@form("aten.nll_loss_backward.default", "aten.nll_loss2d_backward.default")
def _nll_backward(args: list, kwargs: dict) -> list:
    g, x, t, weight, reduction, ignore, tw = args[:7]
    out = x.dtype
    xw = _wide(x)
    x2, t2 = _nll_rows(xw, t)
    keep = t2 != ignore
    w = _nll_weights(t2, weight, keep, x2.dtype)
    gw = _wide(np.asarray(g), out)
    with fp_quiet():
        if reduction == 0:
            val = (-w) * gw.reshape(-1)  # -w[t] * g[i]
        else:
            gs = -(gw.reshape(()) / arr(tw, gw.dtype).reshape(())) if reduction == 1 \
                else -gw.reshape(())
            val = gs if weight is None else w * gs
            val = np.broadcast_to(val, t2.shape)
    gx = np.zeros(x2.shape, x2.dtype)
    rows = np.arange(len(t2))[keep]
    gx[rows, t2[keep].astype(I64)] = np.asarray(val)[keep]
    if x.ndim > 2:
        moved = np.moveaxis(xw, 1, -1).shape
        gx = np.moveaxis(gx.reshape(moved), -1, 1)
    return [gx.reshape(x.shape).astype(out)]


@form("aten.mse_loss.default")
def _mse(args: list, kwargs: dict) -> list:
    x, t = args[0], args[1]
    reduction = opt(kwargs, args, 2, "reduction", 1)
    out = result_type(x, t)
    d = _wide(x, out) - _wide(t, out)
    sq = d * d
    if reduction == 0:
        return [sq.astype(out)]
    name = "mean" if reduction == 1 else "sum"
    return [np.asarray(REGISTRY[name].forward(M, [sq], {"axis": None})).astype(out)]


@form("aten.mse_loss_backward.default")
def _mse_backward(args: list, kwargs: dict) -> list:
    g, x, t, reduction = args[:4]
    out = result_type(x, t)
    ct = compute(out)
    norm = 2.0 / x.size if reduction == 1 else 2.0  # float64 on the host, rounded once
    d = _wide(x, out) - _wide(t, out)
    return [((d * ct.type(norm)) * arr(g, ct)).astype(out)]
