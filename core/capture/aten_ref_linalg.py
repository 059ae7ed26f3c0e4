"""The reference forms of the linear-algebra ops a training step records (session 44: a
least-squares layer, a Gaussian-process or flow loss with ``logdet``): ``linalg_cholesky_ex``,
``linalg_solve_triangular``, ``_linalg_solve_ex``, ``linalg_lu_factor_ex``, ``linalg_lu_solve``,
``_linalg_slogdet``, ``linalg_inv_ex``, ``diag_embed``.

Each is the textbook algorithm written out in a stated order, every operation rounded to the
operands' type (docs/reference-order.md, "Linear algebra"): Cholesky-Banachiewicz column by
column; substitution row by row; LU by right-looking Gaussian elimination with partial pivoting
(the first largest magnitude of the column, as LAPACK's ``getrf`` picks, its pivots 1-based),
each sum over k serial in ascending k. LAPACK's blocked kernels order the same sums otherwise, so
a difference they make is *introduced*; it is never guessed at. float32 and float64 only (the
types these ops take on the CPU besides complex); matrices up to ``_N_MAX`` rows (the loops run in
Python over rows and terms: a bigger one is no reference, said so).
"""

from __future__ import annotations

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    F32,
    F64,
    M,
    NoReference,
    check_elems,
    form,
    fp_quiet,
    opt,
)

I32 = np.dtype(np.int32)
_N_MAX = 512  # rows of a matrix the written-out loops take (n^2 / 2 steps of numpy each)


def _square(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in (F32, F64):
        raise NoReference(f"{what}: float32 and float64 only (a {a.dtype} operand)")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise NoReference(f"{what}: a square matrix (or a batch of them), not {list(a.shape)}")
    if a.shape[-1] > _N_MAX:
        raise NoReference(f"{what}: {a.shape[-1]} rows, past the reference's {_N_MAX}")
    return a


def _cholesky_lower(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(L, info) of each matrix's lower triangle: column j's ``s_i = a[i][j] - L[i][0] L[j][0]
    - L[i][1] L[j][1] - ...`` (each product rounded, then the difference), ``L[j][j] =
    sqrt(s_j)``, ``L[i][j] = s_i / L[j][j]``; info the first j + 1 whose ``s_j`` is not
    positive (0: none)."""
    n = a.shape[-1]
    L = np.zeros(a.shape, a.dtype)
    info = np.zeros(a.shape[:-2], I32)
    with fp_quiet():
        for j in range(n):
            s = a[..., j:, j].copy()
            for k in range(j):
                s = s - L[..., j:, k] * L[..., j, k][..., None]
            d = s[..., 0]
            bad = ~(d > 0)
            info = np.where((info == 0) & bad, j + 1, info).astype(I32)
            d = np.sqrt(d)  # (correctly rounded: IEEE)
            L[..., j, j] = d
            L[..., j + 1:, j] = s[..., 1:] / d[..., None]
    return L, info


@form("aten.linalg_cholesky_ex.default")
def _cholesky_ex(args: list, kwargs: dict) -> list:
    """(L, info): ``upper`` reads the upper triangle and gives ``Lᵀ``. A matrix that is not
    positive definite: no reference (the factor's partial content is LAPACK's)."""
    a = _square(args[0], "linalg_cholesky")
    upper = bool(opt(kwargs, args, 1, "upper", False))
    if upper:
        a = np.swapaxes(a, -1, -2)
    L, info = _cholesky_lower(a)
    if info.any():
        raise NoReference("linalg_cholesky of a matrix that is not positive definite (its "
                          "partial factor is LAPACK's)")
    return [np.ascontiguousarray(np.swapaxes(L, -1, -2)) if upper else L, info]


def _substitute(a: np.ndarray, b: np.ndarray, lower: bool, unit: bool) -> np.ndarray:
    """X with ``a X = b`` for triangular ``a`` (batches broadcast): row i's ``t = b[i] - a[i][k]
    X[k] - ...`` over the solved rows k in ascending order (each product rounded, then the
    difference), then ``t / a[i][i]`` (not with ``unit``)."""
    n = a.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    x = np.zeros(b.shape, np.result_type(a.dtype, b.dtype))
    rows = range(n) if lower else range(n - 1, -1, -1)
    with fp_quiet():
        for i in rows:
            t = b[..., i, :].copy()
            ks = range(i) if lower else range(i + 1, n)
            for k in ks:
                t = t - a[..., i, k][..., None] * x[..., k, :]
            x[..., i, :] = t if unit else t / a[..., i, i][..., None]
    return x


@form("aten.linalg_solve_triangular.default")
def _solve_triangular(args: list, kwargs: dict) -> list:
    """X with ``A X = B`` (``left``) or ``X A = B`` (the left solve of the transposes: ``Aᵀ Xᵀ =
    Bᵀ``), by substitution over ``A``'s ``upper`` or lower triangle."""
    a = _square(args[0], "linalg_solve_triangular")
    b = np.asarray(args[1])
    if b.dtype != a.dtype or b.ndim < 2:
        raise NoReference("linalg_solve_triangular: B a matrix of A's type")
    upper = bool(kwargs.get("upper", args[2] if len(args) > 2 else False))
    left = bool(kwargs.get("left", True))
    unit = bool(kwargs.get("unitriangular", False))
    if left:
        return [_substitute(a, b, not upper, unit)]
    x = _substitute(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), upper, unit)
    return [np.ascontiguousarray(np.swapaxes(x, -1, -2))]


def _lu(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(LU, pivots, info) as LAPACK's ``getrf`` returns them, by right-looking elimination:
    for column k the row of its first largest magnitude at or below k is swapped to k (pivot
    ``p + 1``), the column below divided by the pivot (left as it is where the pivot is zero:
    info the first such k + 1), and ``a[i][j] = a[i][j] - l[i][k] u[k][j]`` for the rows and
    columns past k."""
    n = a.shape[-1]
    u = np.array(a, copy=True)
    flat = u.reshape(-1, n, n)
    piv = np.zeros((flat.shape[0], n), I32)
    info = np.zeros(flat.shape[0], I32)
    rows = np.arange(flat.shape[0])
    with fp_quiet():
        for k in range(n):
            col = np.abs(flat[:, k:, k])
            p = k + np.argmax(col, axis=1)  # (the first largest: idamax)
            piv[:, k] = p + 1
            swap = p != k
            if swap.any():
                r = rows[swap]
                top = flat[r, k, :].copy()
                flat[r, k, :] = flat[r, p[swap], :]
                flat[r, p[swap], :] = top
            d = flat[:, k, k]
            zero = d == 0
            info = np.where((info == 0) & zero, k + 1, info).astype(I32)
            nz = ~zero
            if nz.any() and k + 1 < n:
                flat[nz, k + 1:, k] = flat[nz, k + 1:, k] / d[nz][:, None]
            if k + 1 < n:
                flat[:, k + 1:, k + 1:] = flat[:, k + 1:, k + 1:] - \
                    flat[:, k + 1:, k][:, :, None] * flat[:, k, k + 1:][:, None, :]
    return u, piv.reshape(a.shape[:-1]), info.reshape(a.shape[:-2])


def _permute(b: np.ndarray, piv: np.ndarray, reverse: bool = False) -> np.ndarray:
    """``b``'s rows interchanged as the pivots say, row i with row ``piv[i] - 1`` in turn (in
    reverse for ``Pᵀ``)."""
    n = piv.shape[-1]
    batch = np.broadcast_shapes(b.shape[:-2], piv.shape[:-1])
    out = np.array(np.broadcast_to(b, batch + b.shape[-2:]), copy=True)
    p = np.broadcast_to(piv, batch + (n,)).reshape(-1, n).astype(np.int64) - 1
    flat = out.reshape(-1, *out.shape[-2:])
    if p.size and (p.min() < 0 or p.max() >= n):
        raise NoReference("pivots out of range")
    idx = np.arange(flat.shape[0])
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        j = p[:, i]
        top = flat[idx, i, :].copy()
        flat[idx, i, :] = flat[idx, j, :]
        flat[idx, j, :] = top
    return out


def _lu_solve(lu: np.ndarray, piv: np.ndarray, b: np.ndarray, adjoint: bool) -> np.ndarray:
    """X with ``A X = B`` (``P L U``: the rows of B interchanged, then L's unit lower and U's
    upper substitutions) or ``Aᵀ X = B`` (``adjoint``: Uᵀ's, then Lᵀ's, then the
    interchanges in reverse)."""
    if not adjoint:
        y = _substitute(lu, _permute(b, piv), True, True)
        return _substitute(lu, y, False, False)
    t = np.swapaxes(lu, -1, -2)
    y = _substitute(t, b, True, False)
    z = _substitute(t, y, False, True)
    return _permute(z, piv, reverse=True)


def _rhs(a: np.ndarray, b, what: str) -> tuple[np.ndarray, bool]:
    """B as matrices, and whether it was a vector right-hand side (torch's rule: one dimension,
    or A's batch of vectors)."""
    b = np.asarray(b)
    if b.dtype != a.dtype:
        raise NoReference(f"{what}: B of A's type")
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    if vector:
        b = b[..., None]
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise NoReference(f"{what}: B's rows are not A's")
    return b, vector


@form("aten.linalg_lu_factor_ex.default")
def _lu_factor_ex(args: list, kwargs: dict) -> list:
    """(LU, pivots, info)."""
    if not bool(opt(kwargs, args, 1, "pivot", True)):
        raise NoReference("linalg_lu_factor without pivoting")
    return list(_lu(_square(args[0], "linalg_lu_factor")))


@form("aten.linalg_lu_solve.default")
def _linalg_lu_solve(args: list, kwargs: dict) -> list:
    """X from A's LU and pivots: ``A X = B``, ``Aᵀ X = B`` (``adjoint``: a solve's backward)."""
    lu = _square(args[0], "linalg_lu_solve")
    piv = np.asarray(args[1])
    b = np.asarray(args[2])
    if not bool(kwargs.get("left", True)):
        raise NoReference("linalg_lu_solve with left=False")
    if b.dtype != lu.dtype or b.ndim < 2 or b.shape[-2] != lu.shape[-1] or \
            piv.shape[-1:] != lu.shape[-1:]:
        raise NoReference("linalg_lu_solve: B and the pivots do not go with the LU")
    return [_lu_solve(lu, piv, b, bool(kwargs.get("adjoint", False)))]


@form("aten._linalg_solve_ex.default")
def _solve_ex(args: list, kwargs: dict) -> list:
    """(X, LU, pivots, info) of ``A X = B``: A's LU, then the LU solve; a vector B gives a
    vector X. A singular A: no reference (LAPACK's result)."""
    a = _square(args[0], "linalg_solve")
    if not bool(kwargs.get("left", opt(kwargs, args, 2, "left", True))):
        raise NoReference("linalg_solve with left=False")
    b, vector = _rhs(a, args[1], "linalg_solve")
    check_elems(int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))) * b.shape[-2] *
                b.shape[-1], "linalg_solve")
    lu, piv, info = _lu(a)
    if info.any():
        raise NoReference("linalg_solve of a singular matrix")
    x = _lu_solve(lu, piv, b, False)
    return [x[..., 0] if vector else x, lu, piv, info]


@form("aten.linalg_inv_ex.default")
def _inv_ex(args: list, kwargs: dict) -> list:
    """(A⁻¹, info): the LU solve of the identity."""
    a = _square(args[0], "linalg_inv")
    lu, piv, info = _lu(a)
    if info.any():
        raise NoReference("linalg_inv of a singular matrix")
    eye = np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return [_lu_solve(lu, piv, eye, False), info]


@form("aten._linalg_slogdet.default")
def _slogdet(args: list, kwargs: dict) -> list:
    """(sign, log|det|, LU, pivots) from the LU of ``Aᵀ`` (torch factors a contiguous A's
    transpose, LAPACK's column-major view of it without a copy: measured; det Aᵀ = det A):
    ``sign`` the product, in order, of U's diagonal signs and -1 for each interchange;
    ``log|det|`` the serial sum of ``log|U[i][i]|`` (each rounded), -inf where a pivot is zero
    (sign 0)."""
    a = _square(args[0], "slogdet")
    lu, piv, _ = _lu(np.swapaxes(a, -1, -2))
    n = a.shape[-1]
    d = np.diagonal(lu, axis1=-2, axis2=-1)
    t = a.dtype.type
    with fp_quiet():
        sign = np.where((piv != np.arange(1, n + 1, dtype=I32)).sum(-1) % 2 == 1, t(-1), t(1))
        logabs = np.zeros(a.shape[:-2], a.dtype)
        for i in range(n):
            sign = (sign * np.sign(d[..., i])).astype(a.dtype)
            logabs = (logabs + M.log(np.abs(d[..., i]))).astype(a.dtype)
    return [np.asarray(sign), np.asarray(logabs), lu, piv]


@form("aten.diag_embed.default")
def _diag_embed(args: list, kwargs: dict) -> list:
    """The last dimension's elements on the ``offset`` diagonal of new (``dim1``, ``dim2``)
    matrices, zeros elsewhere: exact."""
    x = np.asarray(args[0])
    offset = int(opt(kwargs, args, 1, "offset", 0))
    d1, d2 = int(opt(kwargs, args, 2, "dim1", -2)), int(opt(kwargs, args, 3, "dim2", -1))
    if x.ndim < 1:
        raise NoReference("diag_embed of a 0-d tensor")
    n = x.shape[-1]
    m = n + abs(offset)
    nd = x.ndim + 1
    d1, d2 = d1 % nd, d2 % nd
    if d1 == d2:
        raise NoReference("diag_embed: dim1 and dim2 are the same")
    check_elems(int(np.prod(x.shape[:-1], dtype=np.int64)) * m * m, "diag_embed")
    out = np.zeros(x.shape[:-1] + (m, m), x.dtype)
    i = np.arange(n)
    r, c = (i, i + offset) if offset >= 0 else (i - offset, i)
    out[..., r, c] = x
    return [np.ascontiguousarray(np.moveaxis(out, (-2, -1), (d1, d2)))]
