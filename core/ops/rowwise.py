"""Row ops over the last axis: softmax, log_softmax, log_sum_exp, rms_norm, layer_norm, silu,
swiglu, rope, cross_entropy.

Each is the formula of docs/reference-order.md written out step by step; every reduction is the
serial ``serial_sum`` and every transcendental comes from the math namespace ``M`` (refmath).
Beside the numpy reference, each row op holds its ONE C spelling, a ``RowForm``
(core/optable/rows.py): every device target and its docs row are rendered from it, and
tests/core/test_row_forms.py holds it to the numpy lines here bit for bit. silu is elementwise:
a ``CForm``.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.ops.reference import serial_sum, softmax, unbroadcast
from tapescope.core.optable.registry import CForm, OpDef, ShapeError, norm_axis, register
from tapescope.core.optable.rows import RowForm, RowPass, Step


def _r(rng, dtype, *s, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, s).astype(dtype)


def _one(x):
    return x.dtype.type(1)


# ---- softmax -----------------------------------------------------------------------------------
def _softmax_shape(shapes, at):
    norm_axis(at.get("axis", -1), len(shapes[0]))
    return shapes[0]


def _softmax_bwd(M, g, xs, y, at, needs):
    ax = at.get("axis", -1)
    dot = serial_sum(g * y, ax, keepdims=True)
    return [y * (g - dot)]


register(OpDef(
    "softmax", 1, "rowwise", "row_local", _softmax_shape,
    forward=lambda M, xs, at: softmax(xs[0], at.get("axis", -1), M.exp),
    backward=_softmax_bwd, transcendental=True,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 5)], {"axis": -1}),
                            ([_r(rng, dt, 4, 3)], {"axis": 0}),
                            ([_r(rng, dt, 2, 3, 4)], {"axis": -1})],
    doc="m = max; e = exp(x - m); s = serial_sum(e); y = e / s; "
        "ga = y * (g - serial_sum(g * y))",
    row=RowForm(
        ins=(("x", "row"),), axis="axis",
        fwd=RowPass(("DIV(EXP(SUB({x}, {m})), {s})",),
                    steps=(Step("m", "max", "{x}"), Step("s", "sum", "EXP(SUB({x}, {m}))"))),
        bwd=(RowPass(("MUL({y}, SUB({g}, {d}))",), steps=(Step("d", "sum", "MUL({g}, {y})"),)),))))


# ---- log_softmax -------------------------------------------------------------------------------
def _log_softmax_fwd(M, xs, at):
    # the ONNX executor's order: d = x - max; y = d - log(serial_sum(exp(d)))
    x = xs[0]
    ax = at.get("axis", -1)
    d = x - np.max(x, axis=ax, keepdims=True)
    return d - M.log(serial_sum(M.exp(d), ax, keepdims=True))


def _log_softmax_bwd(M, g, xs, y, at, needs):
    return [g - M.exp(y) * serial_sum(g, at.get("axis", -1), keepdims=True)]


register(OpDef(
    "log_softmax", 1, "rowwise", "row_local", _softmax_shape,
    forward=_log_softmax_fwd, backward=_log_softmax_bwd, transcendental=True,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 5)], {"axis": -1}),
                            ([_r(rng, dt, 4, 3)], {"axis": 0}),
                            ([_r(rng, dt, 2, 3, 4)], {"axis": -1})],
    doc="m = max; d = x - m; y = d - log(serial_sum(exp(d))); "
        "ga = g - exp(y) * serial_sum(g)",
    row=RowForm(
        ins=(("x", "row"),), axis="axis",
        fwd=RowPass(("SUB(SUB({x}, {m}), {ls})",),
                    steps=(Step("m", "max", "{x}"), Step("s", "sum", "EXP(SUB({x}, {m}))"),
                           Step("ls", "let", "LOG({s})"))),
        bwd=(RowPass(("SUB({g}, MUL(EXP({y}), {d}))",), steps=(Step("d", "sum", "{g}"),)),))))


# ---- log_sum_exp: a reduction, one output per row (RowForm out="row") -------------------------
def _lse_shape(shapes, at):
    s = shapes[0]
    ax = norm_axis(at.get("axis", -1), len(s)) if s else norm_axis(at.get("axis", -1), 0)
    return s[:ax] + s[ax + 1:]


def _lse_fwd(M, xs, at):
    # m = max; mf = m, or +0.0 where m is not finite (torch.logsumexp's guard: a row of -inf is
    # -inf, a +inf in the row is +inf); y = mf + log(serial_sum(exp(x - mf)))
    x = xs[0]
    ax = at.get("axis", -1)
    m = np.max(x, axis=ax, keepdims=True)
    mf = np.where(np.isfinite(m), m, x.dtype.type(0))  # the C form's m - m == 0
    y = mf + M.log(serial_sum(M.exp(x - mf), ax, keepdims=True))
    return np.squeeze(y, axis=ax)


def _lse_bwd(M, g, xs, y, at, needs):
    ax = at.get("axis", -1)
    return [np.expand_dims(g, ax) * M.exp(xs[0] - np.expand_dims(y, ax))]


register(OpDef(
    "log_sum_exp", 1, "reduce", "none", _lse_shape, forward=_lse_fwd, backward=_lse_bwd,
    transcendental=True,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 5)], {"axis": -1}),
                            ([_r(rng, dt, 4, 3)], {"axis": 0}),
                            ([_r(rng, dt, 2, 3, 4)], {"axis": 1}),
                            ([np.array([[-np.inf, -np.inf], [np.inf, 1.0]], dtype=dt)], {})],
    doc="m = max; mf = m (+0.0 where m is +-inf); y = mf + log(serial_sum(exp(x - mf))) "
        "(the row axis removed); ga = g * exp(x - y)",
    row=RowForm(
        ins=(("x", "row"),), axis="axis", out="row",
        fwd=RowPass(("ADD({mf}, LOG({s}))",),
                    steps=(Step("m", "max", "{x}"),
                           Step("mf", "let", "SUB({m}, {m}) == (real_t)0 ? {m} : (real_t)0"),
                           Step("s", "sum", "EXP(SUB({x}, {mf}))"))),
        bwd=(RowPass(("MUL({g}, EXP(SUB({x}, {y})))",)),))))


# ---- rms_norm ----------------------------------------------------------------------------------
def _rms_shape(shapes, at):
    x, gamma = shapes
    if len(x) < 1 or gamma != (x[-1],):
        raise ShapeError(f"rms_norm needs x [..., D] and gamma [D]; got {x} and {gamma}")
    return x


def _inv_rms(x, eps):
    n = x.dtype.type(x.shape[-1])
    ms = serial_sum(x * x, -1, keepdims=True) / n
    return _one(x) / np.sqrt(ms + x.dtype.type(eps))  # two roundings: 1 / sqrt(.)


def _eps(at):
    return at["eps"]


def _rms_fwd(M, xs, at):
    x, gamma = xs
    return (x * _inv_rms(x, at["eps"])) * gamma


def _rms_bwd(M, g, xs, y, at, needs):
    x, gamma = xs
    r = _inv_rms(x, at["eps"])
    n = x.dtype.type(x.shape[-1])
    gd = g * gamma
    dot = serial_sum(gd * x, -1, keepdims=True)
    c = (((r * r) * r) / n) * dot
    gx = (gd * r) - (x * c) if needs[0] else None
    gg = unbroadcast(g * (x * r), gamma.shape) if needs[1] else None
    return [gx, gg]


register(OpDef(
    "rms_norm", 2, "rowwise", "row_local", _rms_shape, forward=_rms_fwd, backward=_rms_bwd,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 6), _r(rng, dt, 6, lo=0.5, hi=1.5)],
                             {"eps": 1e-6}),
                            ([_r(rng, dt, 2, 2, 4), _r(rng, dt, 4)], {"eps": 1e-5})],
    doc="r = 1/sqrt(serial_sum(x*x)/n + eps); y = (x*r)*gamma",
    row=RowForm(
        ins=(("x", "row"), ("gamma", "col")), keep=("r",), scalars=(("eps", _eps),),
        fwd=RowPass(("MUL(MUL({x}, {r}), {gamma})",),
                    steps=(Step("ss", "sum", "MUL({x}, {x})"),
                           Step("r", "let", "DIV((real_t)1, SQRT(ADD(DIV({ss}, {n}), {eps})))"))),
        bwd=(RowPass(("SUB(MUL({gd}, {r}), MUL({x}, {c}))",),
                     steps=(Step("dot", "sum", "MUL(MUL({g}, {gamma}), {x})"),
                            Step("c", "let", "MUL(DIV(MUL(MUL({r}, {r}), {r}), {n}), {dot})")),
                     lets=(("gd", "MUL({g}, {gamma})"),)),
             RowPass(("MUL({g}, MUL({x}, {r}))",))))))


# ---- layer_norm --------------------------------------------------------------------------------
def _ln_eps(at):
    return at.get("eps", 1e-5)  # ONNX LayerNormalization's default epsilon


def _ln_parts(x, eps):
    n = x.dtype.type(x.shape[-1])
    mu = serial_sum(x, -1, keepdims=True) / n
    d = x - mu
    var = serial_sum(d * d, -1, keepdims=True) / n
    return d, _one(x) / np.sqrt(var + x.dtype.type(eps)), n  # two roundings: 1 / sqrt(.)


def _ln_fwd(M, xs, at):
    x, gamma = xs
    d, r, _ = _ln_parts(x, _ln_eps(at))
    return (d * r) * gamma


def _ln_bwd(M, g, xs, y, at, needs):
    x, gamma = xs
    d, r, n = _ln_parts(x, _ln_eps(at))
    gd, xh = g * gamma, d * r
    ma = serial_sum(gd, -1, keepdims=True) / n
    mb = serial_sum(gd * xh, -1, keepdims=True) / n
    gx = r * ((gd - ma) - (xh * mb)) if needs[0] else None
    gg = unbroadcast(g * xh, gamma.shape) if needs[1] else None
    return [gx, gg]


def _ln_shape(shapes, at):
    x, gamma = shapes
    if len(x) < 1 or gamma != (x[-1],):
        raise ShapeError(f"layer_norm needs x [..., D] and gamma [D]; got {x} and {gamma}")
    return x


register(OpDef(
    "layer_norm", 2, "rowwise", "row_local", _ln_shape, forward=_ln_fwd, backward=_ln_bwd,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 6), _r(rng, dt, 6, lo=0.5, hi=1.5)],
                             {"eps": 1e-5}),
                            ([_r(rng, dt, 2, 2, 4), _r(rng, dt, 4)], {"eps": 1e-3}),
                            ([_r(rng, dt, 5), _r(rng, dt, 5)], {})],
    doc="mu = serial_sum(x)/n; d = x - mu; r = 1/sqrt(serial_sum(d*d)/n + eps); y = (d*r)*gamma",
    row=RowForm(
        ins=(("x", "row"), ("gamma", "col")), keep=("mu", "r"), scalars=(("eps", _ln_eps),),
        fwd=RowPass(("MUL(MUL(SUB({x}, {mu}), {r}), {gamma})",),
                    steps=(Step("sx", "sum", "{x}"), Step("mu", "let", "DIV({sx}, {n})"),
                           Step("sd", "sum", "MUL(SUB({x}, {mu}), SUB({x}, {mu}))"),
                           Step("r", "let", "DIV((real_t)1, SQRT(ADD(DIV({sd}, {n}), {eps})))"))),
        bwd=(RowPass(("MUL({r}, SUB(SUB({gd}, {ma}), MUL({xh}, {mb})))",),
                     steps=(Step("sa", "sum", "MUL({g}, {gamma})"),
                            Step("sb", "sum", "MUL(MUL({g}, {gamma}), MUL(SUB({x}, {mu}), {r}))"),
                            Step("ma", "let", "DIV({sa}, {n})"),
                            Step("mb", "let", "DIV({sb}, {n})")),
                     lets=(("gd", "MUL({g}, {gamma})"), ("xh", "MUL(SUB({x}, {mu}), {r})"))),
             RowPass(("MUL({g}, MUL(SUB({x}, {mu}), {r}))",))))))


# ---- silu / swiglu -----------------------------------------------------------------------------
def _silu_slope(x, s):
    # s * (1 + x * (1 - s)) == d/dx x*sigmoid(x), in this exact order
    return s * (_one(x) + x * (_one(x) - s))


register(OpDef(
    "silu", 1, "unary", "row_local", lambda sh, at: sh[0],
    forward=lambda M, xs, at: xs[0] * M.sigmoid(xs[0]),
    backward=lambda M, g, xs, y, at, needs: [g * _silu_slope(xs[0], M.sigmoid(xs[0]))],
    transcendental=True,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 4)], {}), ([_r(rng, dt, 6)], {})],
    doc="s = sigmoid(x); y = x * s; ga = g * (s * (1 + x * (1 - s)))",
    c=CForm("MUL({x}, SIGMOID({x}))",
            ("MUL({g}, MUL({sg}, ADD((real_t)1, MUL({x}, SUB((real_t)1, {sg})))))",),
            lets=(("sg", "SIGMOID({x})"),))))


def _swiglu_shape(shapes, at):
    if shapes[0] != shapes[1]:
        raise ShapeError(f"swiglu needs equal shapes; got {shapes[0]} and {shapes[1]}")
    return shapes[0]


def _swiglu_bwd(M, g, xs, y, at, needs):
    a, u = xs
    s = M.sigmoid(a)
    ga = (g * u) * _silu_slope(a, s) if needs[0] else None
    gu = g * (a * s) if needs[1] else None
    return [ga, gu]


register(OpDef(
    "swiglu", 2, "elementwise", "row_local", _swiglu_shape,
    forward=lambda M, xs, at: (xs[0] * M.sigmoid(xs[0])) * xs[1], backward=_swiglu_bwd,
    transcendental=True,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 4), _r(rng, dt, 3, 4)], {})],
    doc="y = (a * sigmoid(a)) * u; ga = (g*u) * silu'(a); gu = g * (a*s)",
    # a row form with no row values: its own elementwise kernel (the binary family's switch
    # kernel measured ~7% slower here), fused and emitted like every row op
    row=RowForm(
        ins=(("a", "row"), ("u", "row")),
        fwd=RowPass(("MUL(MUL({a}, SIGMOID({a})), {u})",)),
        bwd=(RowPass(("MUL(MUL({g}, {u}), {slope})",),
                     lets=(("sg", "SIGMOID({a})"),
                           ("slope", "MUL({sg}, ADD((real_t)1, MUL({a}, SUB((real_t)1, {sg}))))"))),
             RowPass(("MUL({g}, MUL({a}, {sg}))",), lets=(("sg", "SIGMOID({a})"),))))))


# ---- rope --------------------------------------------------------------------------------------
def rope_tables(seq: int, dim: int, base: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables [seq, dim/2], computed once on the host and shipped as data.

    theta[p, i] = p * base ** (-(2 i) / dim). Devices never recompute them: they are inputs of
    the rope kernel, so libm differences cannot reach the parity check.
    """
    half = dim // 2
    inv = np.array([float(base) ** (-(2.0 * i) / dim) for i in range(half)], dtype=np.float64)
    theta = np.arange(seq, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def _rope_tables_of(shape, at, dtype):
    return rope_tables(shape[-2], shape[-1], at.get("base", 10000.0), dtype)


def _rope_shape(shapes, at):
    s = shapes[0]
    if len(s) < 2 or s[-1] % 2:
        raise ShapeError(f"rope needs [..., S, D] with D even; got {s}")
    return s


def _rope_fwd(M, xs, at):
    x = xs[0]
    c, s = rope_tables(x.shape[-2], x.shape[-1], at.get("base", 10000.0), x.dtype)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _rope_bwd(M, g, xs, y, at, needs):
    x = xs[0]
    c, s = rope_tables(x.shape[-2], x.shape[-1], at.get("base", 10000.0), x.dtype)
    h = x.shape[-1] // 2
    g1, g2 = g[..., :h], g[..., h:]
    # the rotation is orthogonal: the gradient is rotated back by -theta
    return [np.concatenate([g1 * c + g2 * s, g2 * c - g1 * s], axis=-1)]


register(OpDef(
    "rope", 1, "rowwise", "row_local", _rope_shape, forward=_rope_fwd, backward=_rope_bwd,
    sample=lambda rng, dt: [([_r(rng, dt, 5, 4)], {"base": 10000.0}),
                            ([_r(rng, dt, 2, 3, 6)], {"base": 100.0})],
    doc="y1 = x1*c - x2*s; y2 = x2*c + x1*s (position = index on axis -2)",
    row=RowForm(
        ins=(("x", "row"),), pair=True, tables=("cos", "sin"), make_tables=_rope_tables_of,
        fwd=RowPass(("SUB(MUL({x1}, {cos}), MUL({x2}, {sin}))",
                     "ADD(MUL({x2}, {cos}), MUL({x1}, {sin}))")),
        # the rotation is orthogonal: the gradient is rotated back by -theta
        bwd=(RowPass(("ADD(MUL({g1}, {cos}), MUL({g2}, {sin}))",
                      "SUB(MUL({g2}, {cos}), MUL({g1}, {sin}))")),))))


# ---- cross_entropy -----------------------------------------------------------------------------
def _ce_shape(shapes, at):
    x, t = shapes
    if len(x) < 2 or t != x[:-1]:
        raise ShapeError(f"cross_entropy needs logits [..., C] and targets [...]; got {x} and {t}")
    return ()


def _ce_parts(M, x, t):
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    ti = t.reshape(-1)
    if not np.all((ti >= 0) & (ti < c) & (ti == np.floor(ti))):
        raise ShapeError(f"cross_entropy targets must be integers in [0, {c})")
    ti = ti.astype(np.int64)
    z = x2 - np.max(x2, axis=-1, keepdims=True)
    e = M.exp(z)
    s = serial_sum(e, -1, keepdims=True)
    return z, e, s, ti


def _ce_fwd(M, xs, at):
    z, e, s, ti = _ce_parts(M, xs[0], xs[1])
    nll = M.log(s[:, 0]) - z[np.arange(len(ti)), ti]
    return serial_sum(nll) / z.dtype.type(len(ti))


def _ce_bwd(M, g, xs, y, at, needs):
    z, e, s, ti = _ce_parts(M, xs[0], xs[1])
    p = e / s
    d = p.copy()
    d[np.arange(len(ti)), ti] = p[np.arange(len(ti)), ti] - _one(p)
    scale = g.reshape(()) / z.dtype.type(len(ti))
    return [(d * scale).reshape(xs[0].shape), None]


def _ce_sample(rng, dtype):
    x = _r(rng, dtype, 4, 5)
    t = rng.integers(0, 5, (4,)).astype(dtype)
    x3 = _r(rng, dtype, 2, 3, 4)
    t3 = rng.integers(0, 4, (2, 3)).astype(dtype)
    return [([x, t], {}), ([x3, t3], {})]


register(OpDef(
    "cross_entropy", 2, "loss", "none", _ce_shape, forward=_ce_fwd, backward=_ce_bwd,
    sample=_ce_sample, transcendental=True, nondiff_inputs=(1,),
    doc="z = x - max; e = exp(z); s = serial_sum(e); nll = log(s) - z[t]; "
        "y = serial_sum(nll) / R; ga = (e/s - onehot) * (g / R)",
    row=RowForm(
        ins=(("x", "row"), ("t", "index")), keep=("m", "s"), total=True,
        fwd=RowPass(("SUB(LOG({s}), SUB({x_t}, {m}))",),
                    steps=(Step("m", "max", "{x}"), Step("s", "sum", "EXP(SUB({x}, {m}))"))),
        # NOTE: the one-hot is a branch, not p - 0: p itself where c != t (exact)
        bwd=(RowPass(("MUL(({is_t} ? SUB({p}, (real_t)1) : {p}), DIV({g}, {R}))",),
                     lets=(("p", "DIV(EXP(SUB({x}, {m})), {s})"),)), None))))
