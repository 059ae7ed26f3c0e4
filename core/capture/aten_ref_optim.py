"""Reference forms of the optimizer's aten ops: addcmul, addcdiv, lerp (the single-tensor
Adam/AdamW/SGD paths), the fused kernels ``_fused_adam_``, ``_fused_adamw_`` and
``_fused_sgd_`` in their written order (docs/reference-order.md, "Captured aten ops"), and the
``_foreach_*`` family, which is its per-tensor op on each list element (torch's CPU foreach
kernels are that loop), handled generically by ``core.capture.aten_ref``."""

from __future__ import annotations

import math

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    EW_ADDCDIV,
    EW_ADDCMUL,
    EW_LERP,
    F64,
    NoReference,
    arr,
    compute,
    ew,
    ew_c,
    ew_same,
    fast,
    float_operands,
    form,
    fp_quiet,
    opt,
    result_type,
    scal,
)


@form("aten.addcmul.default")
def _addcmul(args: list, kwargs: dict) -> list:
    a, t1, t2 = args[:3]
    value = opt(kwargs, args, 3, "value", 1)
    out = result_type(a, t1, t2)
    v = scal(value, out)
    # a + ((value * t1) * t2), each product rounded; value == 1 makes the first exact
    return [ew(lambda x, y, z: x + ((v * y) * z), a, t1, t2, out=out)]


@form("aten.addcdiv.default")
def _addcdiv(args: list, kwargs: dict) -> list:
    a, t1, t2 = args[:3]
    value = opt(kwargs, args, 3, "value", 1)
    out = result_type(a, t1, t2)
    v = scal(value, out)
    return [ew(lambda x, y, z: x + ((v * y) / z), a, t1, t2, out=out)]


def lerp(a: np.ndarray, b: np.ndarray, w) -> np.ndarray:
    """|w| < 0.5: a + w * (b - a); else b - (b - a) * (1 - w) (torch's two-sided lerp)."""
    one = a.dtype.type(1)
    if np.ndim(w) == 0:  # one weight (lerp.Scalar, Adam's m): its one side, not both
        # |w| < 0.5 in Python floats: exact for a float32/64 weight (NaN: False, as numpy's)
        small = abs(float(w)) < 0.5
        return a + (w * (b - a)) if small else b - ((b - a) * (one - w))
    small = np.abs(w) < a.dtype.type(0.5)
    return np.where(small, a + (w * (b - a)), b - ((b - a) * (one - w)))


@form("aten.lerp.Scalar", "aten.lerp.Tensor")
def _lerp(args: list, kwargs: dict) -> list:
    a, b, w = args[:3]
    return [ew(lerp, a, b, w, out=result_type(a, b))]


# ---- short cuts (aten_ref_table.FAST): the forms above on float32/64 arrays and scalars -----
def _fast_addc(fn, code: int, inplace: bool):
    """addcmul/addcdiv of ``float_operands`` and a Python ``value``: ``ew`` of the form's
    lambda, its ``v`` as ``scal`` makes it; in one native call where it takes them (``ew_c``:
    the same bits)."""
    def run(args: list, kwargs: dict) -> list | None:
        if len(args) == 3:
            if not kwargs:
                value = 1
            elif len(kwargs) == 1 and "value" in kwargs:
                value = kwargs["value"]
            else:
                return None
        elif len(args) == 4 and not kwargs:
            value = args[3]
        else:
            return None
        t = type(value)
        dt = float_operands(args[:3], inplace) if t is float or t is int else None
        if dt is None:
            return None
        v = np.asarray(value, dtype=dt)
        y = ew_c(code, args[0], args[1], args[2], float(v))
        return [y if y is not None else ew_same(fn, dt, args[0], args[1], args[2], v)]
    return run


def _addcmul_of(x, y, z, v):
    return x + ((v * y) * z)  # (the form's order)


def _addcdiv_of(x, y, z, v):
    return x + ((v * y) / z)


fast("aten.addcmul.default")(_fast_addc(_addcmul_of, EW_ADDCMUL, False))
fast("aten.addcmul_.default")(_fast_addc(_addcmul_of, EW_ADDCMUL, True))
fast("aten.addcdiv.default")(_fast_addc(_addcdiv_of, EW_ADDCDIV, False))
fast("aten.addcdiv_.default")(_fast_addc(_addcdiv_of, EW_ADDCDIV, True))


def _fast_lerp(inplace: bool):
    """lerp.Scalar of ``float_operands`` with a Python weight: ``ew(lerp, a, b, w)``, in one
    native call where it takes them (``ew_c``: the same bits)."""
    def run(args: list, kwargs: dict) -> list | None:
        if len(args) != 3 or kwargs:
            return None
        w = args[2]
        t = type(w)
        dt = float_operands(args, inplace) if t is float or t is int else None
        if dt is None:
            return None
        wv = np.asarray(w, dtype=dt)
        y = ew_c(EW_LERP, args[0], args[1], None, float(wv))
        return [y if y is not None else ew_same(lerp, dt, args[0], args[1], wv)]
    return run


fast("aten.lerp.Scalar")(_fast_lerp(False))
fast("aten.lerp_.Scalar")(_fast_lerp(True))


# ---- fused optimizers -------------------------------------------------------------------------
def _steps(step) -> float:
    return float(np.asarray(step, dtype=np.float32))  # torch reads state_step as float


def _lr(kwargs: dict) -> float:
    return float(np.asarray(kwargs["lr"], dtype=F64))


def adam_update(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
                vmax: np.ndarray | None, k: dict, adamw: bool) -> tuple:
    """One tensor's Adam update in the reference order, on arrays of the compute type (``k``:
    the step's scalars, each rounded once to it; ``vmax`` for amsgrad): ``(w, m, v, vmax)``."""
    if k["wd"] != 0:
        if adamw:
            w = w * k["decay"]
        else:
            g = g + (w * k["wd"])
    m = lerp(m, g, k["c1"])
    v = (v * k["b2"]) + ((k["c2"] * g) * g)
    return adam_step(w, m, v, vmax, k)


def adam_step(w: np.ndarray, m: np.ndarray, v: np.ndarray, vmax: np.ndarray | None,
              k: dict) -> tuple:
    """Adam's step from its new moments (amsgrad: ``vmax`` kept as the larger), as the fused
    kernel writes it: ``den = sqrt(v) / bc2_sqrt + eps``; ``w - (step_size * m) / den``:
    ``(w, m, v, vmax)``."""
    if vmax is not None:
        vmax = np.maximum(vmax, v)
        den = (np.sqrt(vmax) / k["bc2_sqrt"]) + k["eps"]
    else:
        den = (np.sqrt(v) / k["bc2_sqrt"]) + k["eps"]
    return w - ((k["step_size"] * m) / den), m, v, vmax


def fused_adam(args: list, kwargs: dict, adamw: bool, update=adam_update) -> list:
    """``_fused_adam(w)_``'s outputs (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs),
    each tensor's update by ``update`` (``adam_update``'s signature: the reference's order, or
    a kernel's, ``core.capture.explain``)."""
    params, grads, m_s, v_s, vmax_s, steps = (list(a) for a in args[:6])
    lr, b1, b2 = _lr(kwargs), float(kwargs["beta1"]), float(kwargs["beta2"])
    wd, eps = float(kwargs["weight_decay"]), float(kwargs["eps"])
    amsgrad, maximize = bool(kwargs.get("amsgrad")), bool(kwargs.get("maximize"))
    gscale, found = kwargs.get("grad_scale"), kwargs.get("found_inf")
    copies = [[arr(x, x.dtype).copy() for x in lst] for lst in (params, grads, m_s, v_s, vmax_s)]
    if found is not None and float(np.asarray(found)) == 1.0:
        return [x for lst in copies for x in lst]  # an inf was found: nothing moves
    out_p, out_g, out_m, out_v, out_vm = copies
    for i, w0 in enumerate(params):
        step = _steps(steps[i])
        # host scalars in float64, each rounded once to the compute type
        bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
        ct = compute(w0.dtype)
        k = {n: ct.type(v) for n, v in (
            ("step_size", lr / bc1), ("bc2_sqrt", math.sqrt(bc2)), ("c1", 1.0 - b1),
            ("b2", b2), ("c2", 1.0 - b2), ("eps", eps), ("wd", wd),
            ("decay", 1.0 - lr * wd))}
        w, g = arr(w0, ct), arr(grads[i], ct)
        m, v = arr(m_s[i], ct), arr(v_s[i], ct)
        with fp_quiet():
            if gscale is not None:
                g = g / ct.type(float(np.asarray(gscale)))
                out_g[i] = g.astype(grads[i].dtype)
            if maximize:
                g = -g
            w, m, v, vm = update(w, g, m, v, arr(vmax_s[i], ct) if amsgrad else None, k, adamw)
            if amsgrad:
                out_vm[i] = vm.astype(vmax_s[i].dtype)
        out_p[i], out_m[i], out_v[i] = (w.astype(w0.dtype), m.astype(m_s[i].dtype),
                                        v.astype(v_s[i].dtype))
    return out_p + out_g + out_m + out_v + out_vm


form("aten._fused_adam_.default", "aten._fused_adam_.tensor_lr",
     "aten._fused_adam.default", "aten._fused_adam.tensor_lr")(
    lambda args, kwargs: fused_adam(args, kwargs, adamw=False))
form("aten._fused_adamw_.default", "aten._fused_adamw_.tensor_lr",
     "aten._fused_adamw.default", "aten._fused_adamw.tensor_lr")(
    lambda args, kwargs: fused_adam(args, kwargs, adamw=True))


@form("aten._fused_sgd_.default", "aten._fused_sgd_.tensor_lr")
def _fused_sgd(args: list, kwargs: dict) -> list:
    params, grads, bufs = (list(a) for a in args[:3])
    lr, wd = _lr(kwargs), float(kwargs["weight_decay"])
    mom, damp = float(kwargs["momentum"]), float(kwargs["dampening"])
    nesterov, maximize = bool(kwargs.get("nesterov")), bool(kwargs.get("maximize"))
    first = bool(kwargs.get("is_first_step"))
    gscale, found = kwargs.get("grad_scale"), kwargs.get("found_inf")
    out_p = [arr(x, x.dtype).copy() for x in params]
    out_g = [arr(x, x.dtype).copy() for x in grads]
    out_b = [arr(x, x.dtype).copy() for x in bufs]
    if found is not None and float(np.asarray(found)) == 1.0:
        return out_p + out_g + out_b
    if mom != 0 and len(bufs) != len(params):
        raise NoReference("_fused_sgd_ with momentum needs a buffer per parameter")
    for i, w0 in enumerate(params):
        ct = compute(w0.dtype)
        t = ct.type
        w, g = arr(w0, ct), arr(grads[i], ct)
        with fp_quiet():
            if gscale is not None:
                g = g / t(float(np.asarray(gscale)))
                out_g[i] = g.astype(grads[i].dtype)
            if maximize:
                g = -g
            if wd != 0:
                g = g + (w * t(wd))
            if mom != 0:
                b = g if first else (arr(bufs[i], ct) * t(mom)) + (t(1.0 - damp) * g)
                out_b[i] = b.astype(bufs[i].dtype)
                g = g + (b * t(mom)) if nesterov else b
            out_p[i] = (w - (t(lr) * g)).astype(w0.dtype)
    return out_p + out_g + out_b


# ---- GradScaler -------------------------------------------------------------------------------
@form("aten._amp_foreach_non_finite_check_and_unscale_.default")
def _amp_unscale(args: list, kwargs: dict) -> list:
    """Each grad ``g * inv_scale`` (in its compute type); ``found_inf`` 1.0 when any input
    element is inf or NaN, else unchanged. Outputs: the grads, then found_inf."""
    grads, found, inv = list(args[0]), args[1], args[2]
    out, bad = [], False
    for g in grads:
        ct = compute(g.dtype)
        w = arr(g, ct)
        bad = bad or not bool(np.all(np.isfinite(w)))
        with fp_quiet():
            out.append((w * arr(inv, ct).reshape(())).astype(g.dtype))
    return out + [np.ones_like(found) if bad else arr(found, found.dtype).copy()]


@form("aten._amp_update_scale_.default")
def _amp_update_scale(args: list, kwargs: dict) -> list:
    """found_inf: ``scale * backoff`` and the tracker 0; else the tracker + 1, and at
    ``growth_interval`` ``scale * growth`` (kept only if finite) and the tracker 0. The products
    in float64, rounded once to the scale's type. Outputs: the scale, the growth tracker."""
    scale, tracker, found, growth, backoff, interval = args[:6]
    s = float(np.asarray(scale, F64))
    n = int(np.asarray(tracker))
    if float(np.asarray(found)) != 0:
        s, n = s * float(backoff), 0
    else:
        n += 1
        if n == int(interval):
            grown = np.asarray(s * float(growth), scale.dtype)
            s, n = (float(grown) if np.isfinite(grown) else s), 0
    return [np.asarray(s, F64).astype(scale.dtype), np.asarray(n, tracker.dtype)]
