"""core.capture.aten_ref: the reference forms of aten ops, held to torch's own ops (float64
values; float32 bits where torch's CPU kernel rounds in our order), to the tape's forms (bits,
where a form reuses one), and to a real training step's op list (coverage).

torch is imported here only (core never imports it). Each case builds torch arguments from a
seeded generator; the same call goes to ``torch.ops.aten.<op>`` and, as numpy, to
``reference``; torch's outputs are flattened by the op's schema (written arguments first, then
the returned tensors without alias info: core/capture/__init__.py's convention).
"""

from __future__ import annotations

import collections
import itertools
import math

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import NoReference, has_reference, reference  # noqa: E402

F64, F32, BF16 = torch.float64, torch.float32, torch.bfloat16


# ---- the harness ------------------------------------------------------------------------------
def to_np(a):
    """A recorded argument as the judge hands it to ``reference``."""
    if isinstance(a, torch.Tensor):
        t = a.detach().resolve_conj().resolve_neg()  # (as the recorder reads a tensor)
        x = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == BF16 \
            else t.numpy()
        x = x.copy()
        x.flags.writeable = False
        return x
    if isinstance(a, list | tuple):
        return [to_np(v) for v in a]
    if isinstance(a, dict):
        return {k: to_np(v) for k, v in a.items()}
    if isinstance(a, torch.dtype | torch.device | torch.layout | torch.memory_format):
        return str(a)
    return a


def aten(op: str):
    f = torch.ops
    for part in op.split("."):
        f = getattr(f, part)
    return f


def _flat(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, list | tuple):
        return [t for x in v for t in _flat(x)]
    return []


# the recorder's (app/capture/recorder.py) arguments written without a schema mark
UNMARKED_WRITES = {"aten.native_batch_norm.default": (3, 4),
                   "aten._native_batch_norm_legit.default": (3, 4)}


def outputs_of(func, args, kwargs, res) -> list:
    """A call's outputs as the recorder takes them: the written arguments (schema ``a!``, or
    unmarked running statistics) in argument order, then the returned tensors (without alias
    info when something was written)."""
    schema = func._schema
    written = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
            written.extend(_flat(v))
    rets = res if isinstance(res, tuple | list) and len(schema.returns) > 1 else (res,)
    if not written:
        stats = [args[i] if i < len(args) else None
                 for i in UNMARKED_WRITES.get(str(func), ())]
        if stats and all(isinstance(t, torch.Tensor) for t in stats):
            written = stats
        return written + _flat(rets)
    return written + [t for r, spec in zip(rets, schema.returns, strict=False)
                      if spec.alias_info is None for t in _flat(r)]


def run_torch(op: str, args, kwargs) -> list:
    """torch's outputs in the recorder's convention (``outputs_of``)."""
    func = aten(op)
    args = [a.clone() if isinstance(a, torch.Tensor) else
            [t.clone() for t in a] if isinstance(a, list) and a and
            isinstance(a[0], torch.Tensor) else a for a in args]
    kwargs = dict(kwargs)
    res = func(*args, **kwargs)
    return [to_np(t) for t in outputs_of(func, args, kwargs, res)]


def run_both(op: str, build, dt):
    args, kwargs = build(torch.Generator().manual_seed(7), dt)
    ref = reference(op, to_np(list(args)), to_np(kwargs))
    tor = run_torch(op, args, kwargs)
    assert len(ref) == len(tor), (op, len(ref), len(tor))
    for r, t in zip(ref, tor, strict=True):
        assert r.dtype == t.dtype, (op, r.dtype, t.dtype)
        assert r.shape == t.shape, (op, r.shape, t.shape)
    return ref, tor


def _flat_np(v) -> list:
    if isinstance(v, np.ndarray):
        return [v]
    if isinstance(v, list | tuple):
        return [a for x in v for a in _flat_np(x)]
    return []


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "c":  # (its parts' bits)
        a, b = (np.ascontiguousarray(x).view(x.real.dtype) for x in (a, b))
    if a.dtype.kind in "fV" or a.dtype == ml_dtypes.bfloat16:
        w = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        return np.array_equal(np.ascontiguousarray(a).view(w), np.ascontiguousarray(b).view(w))
    return np.array_equal(a, b)


# ---- the cases --------------------------------------------------------------------------------
def rn(g, dt, *shape, lo=-2.0, hi=2.0):
    return (torch.rand(shape, generator=g, dtype=F64) * (hi - lo) + lo).to(dt)


def pos(g, dt, *shape):
    return rn(g, dt, *shape, lo=0.25, hi=3.0)


def ints(g, hi, *shape):
    return torch.randint(0, hi, shape, generator=g)


def _spd(g, dt, b, n):
    """A batch of symmetric positive definite matrices (X Xᵀ + n I)."""
    x = rn(g, dt, b, n, n)
    return x @ x.transpose(-1, -2) + n * torch.eye(n, dtype=dt)


def _tri(g, dt, b, n, lower):
    t = rn(g, dt, b, n, n) + 3 * torch.eye(n, dtype=dt)
    return t.tril() if lower else t.triu()


def _wellcond(g, dt, b, n):
    return rn(g, dt, b, n, n) + n * torch.eye(n, dtype=dt)


_BAG_IDX = torch.tensor([3, 1, 3, 0, 5, 3, 1])
_BAG_OFF = torch.tensor([0, 0, 3, 5])


def _bag_backward_args(g, dt, mode, pad=-1):
    """``_embedding_bag_backward``'s arguments: torch's own forward's integer outputs."""
    w = rn(g, dt, 6, 4)
    _, o2b, size, mx = torch.ops.aten._embedding_bag(w, _BAG_IDX, _BAG_OFF, False, mode,
                                                     False, None, False, pad)
    return [rn(g, dt, 4, 4), _BAG_IDX, _BAG_OFF, o2b, size, mx, 6, False, mode, False, None,
            pad], {}


def _ln_inputs(g, dt):
    x, w, b = rn(g, dt, 3, 4, 6), rn(g, dt, 6), rn(g, dt, 6)
    _, mu, rs = torch.ops.aten.native_layer_norm(x, [6], w, b, 1e-5)
    return x, w, b, mu, rs


def _bn_inputs(g, dt):
    x = rn(g, dt, 3, 4, 5, 5)
    w, b, rm, rv = rn(g, dt, 4), rn(g, dt, 4), rn(g, dt, 4), pos(g, dt, 4)
    _, sm, si = torch.ops.aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1,
                                                 1e-5)
    return x, w, b, rm, rv, sm, si


def _gn_inputs(g, dt):
    x, w, b = rn(g, dt, 2, 6, 4, 3), rn(g, dt, 6), rn(g, dt, 6)
    _, mu, rs = torch.ops.aten.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5)
    return x, w, b, mu, rs


def _pool_inputs(g, dt):
    x = rn(g, dt, 2, 3, 7, 6)
    _, idx = torch.ops.aten.max_pool2d_with_indices(x, [3, 2], [2, 2], [1, 1], [1, 1], True)
    return x, idx


def _sdpa_inputs(g, dt, causal):
    q, k, v = rn(g, dt, 2, 3, 5, 4), rn(g, dt, 2, 3, 6, 4), rn(g, dt, 2, 3, 6, 4)
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    return q, k, v, o, lse


def _adam(kind, **extra):
    def build(g, dt):
        ps = [rn(g, dt, 5, 3), rn(g, dt, 7)]
        gs = [rn(g, dt, 5, 3), rn(g, dt, 7)]
        ms = [rn(g, dt, 5, 3) * 0.1, rn(g, dt, 7) * 0.1]
        vs = [pos(g, dt, 5, 3) * 0.01, pos(g, dt, 7) * 0.01]
        vm = [v * 1.5 for v in vs] if extra.get("amsgrad") else []
        steps = [torch.tensor(3.0), torch.tensor(3.0)]
        kw = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.05, eps=1e-8, amsgrad=False,
                  maximize=False)
        kw.update(extra)
        return [ps, gs, ms, vs, vm, steps], kw
    return build


def _sgd(**extra):
    def build(g, dt):
        ps, gs, bs = [rn(g, dt, 4, 3), rn(g, dt, 6)], [rn(g, dt, 4, 3), rn(g, dt, 6)], \
            [rn(g, dt, 4, 3), rn(g, dt, 6)]
        kw = dict(weight_decay=1e-2, momentum=0.9, lr=0.1, dampening=0.0, nesterov=True,
                  maximize=False, is_first_step=False)
        kw.update(extra)
        if kw.pop("no_buffers", False):
            bs = []
        return [ps, gs, bs], kw
    return build


E = (5, 37)  # 185 elements: torch's vector loops and their scalar tails
A = [lambda g, d: ([rn(g, d, *E)], {})]


def _re(d):
    """A real dtype of complex numbers (bfloat16 has none: float32)."""
    return F32 if d == BF16 else d


def _cx(g, d, *shape):
    return torch.complex(rn(g, _re(d), *shape), rn(g, _re(d), *shape))


def _perm(g, d, *shape):
    """Distinct values (small integers, exact in bfloat16), shuffled: a sort without ties."""
    n = math.prod(shape)
    return (torch.randperm(n, generator=g).to(d) - n // 2).reshape(shape)


def _ties_nan(d):
    """Rows with equal elements, signed zeros, NaN and infinities (a stable sort's order)."""
    nan, inf = float("nan"), float("inf")
    return torch.tensor([[2.0, -0.0, nan, 2.0, 0.0, -inf, 1.0, nan],
                         [1.0, 1.0, inf, -1.0, 1.0, 0.0, -0.0, 3.0]], dtype=d)


def _special(x):
    """``x`` (2, 2, 6, 6) with the pool's rules planted: two NaNs in one window (the last
    wins), a window of -inf only (its first tap's index), a -0.0 among zeros (the first of
    equal maxima)."""
    x = x.clone()
    flat = x.view(-1)
    flat[0], flat[7] = float("nan"), float("nan")
    for i in (4, 5, 10, 11):
        flat[i] = -float("inf")
    flat[40] = -0.0
    return x


def _adaptive_max_backward(g, d):
    x = rn(g, d, 2, 3, 7, 5)
    out, idx = torch.ops.aten.adaptive_max_pool2d(x, [3, 2])
    return [rn(g, d, *out.shape), x, idx], {}
def _weight_norm_backward(dim: int):
    def build(g, d):
        v = rn(g, d, 5, 7)
        gg = rn(g, d, *((5, 1) if dim == 0 else (1, 7)))
        _, norms = torch.ops.aten._weight_norm_interface(v, gg, dim)
        return [rn(g, d, 5, 7), v, gg, norms, dim], {}
    return build


def _cdist_backward(p: float):
    def build(g, d):
        x1, x2 = rn(g, d, 2, 6, 5), rn(g, d, 2, 7, 5)
        x2[:, 2] = x1[:, 1]  # (a zero distance: its term is 0)
        return [rn(g, d, 2, 6, 7), x1, x2, p, torch.ops.aten._cdist_forward(x1, x2, p, None)], {}
    return build


def _shrink_edges(x):
    """``x`` with softshrink's edges (+-0.25), a NaN and a -0.1 (its zero keeps the sign)."""
    x = x.clone()
    x.view(-1)[:4] = torch.tensor([0.25, -0.25, math.nan, -0.1], dtype=torch.float64).to(x.dtype)
    return x


def _at_threes(x):
    """``x`` with its first elements on hardsigmoid's edges (-3, 3: where the gradient is 0)."""
    x = x.clone()
    x.view(-1)[:4] = torch.tensor([-3.0, 3.0, -2.9999, 2.9999], dtype=torch.float64).to(x.dtype)
    return x


def _with_infinities(g, d):
    x = rn(g, d, 4, 6)
    x[1] = -math.inf  # (a row of -inf: its maximum taken as 0, log(0) = -inf)
    x[2, 3] = math.inf
    return [x, [1], False], {}


# (id, op, build(g, dtype) -> (args, kwargs))
CASES = [
    ("add", "aten.add.Tensor", lambda g, d: ([rn(g, d, *E), rn(g, d, E[1])], {})),
    ("add_alpha", "aten.add.Tensor", lambda g, d: ([rn(g, d, *E), rn(g, d, *E)],
                                                   {"alpha": 0.3})),
    ("add_scalar", "aten.add.Tensor", lambda g, d: ([rn(g, d, *E), 0.1], {})),
    ("add_0d_f64", "aten.add.Tensor",
     lambda g, d: ([rn(g, d, *E), torch.tensor(0.1, dtype=F64)], {})),
    ("add_", "aten.add_.Tensor", lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {})),
    ("add_out", "aten.add.out",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {"out": torch.empty(E, dtype=d)})),
    ("mm_out", "aten.mm.out",
     lambda g, d: ([rn(g, d, 5, 6), rn(g, d, 6, 3)], {"out": torch.empty(5, 3, dtype=d)})),
    ("sum_out", "aten.sum.IntList_out",
     lambda g, d: ([rn(g, d, 4, 7), [1]], {"out": torch.empty(4, dtype=d)})),
    ("sub_alpha", "aten.sub.Tensor", lambda g, d: ([rn(g, d, *E), rn(g, d, *E)],
                                                   {"alpha": 2})),
    ("rsub", "aten.rsub.Scalar", lambda g, d: ([rn(g, d, *E), 1.0], {})),
    ("mul", "aten.mul.Tensor", lambda g, d: ([rn(g, d, *E), rn(g, d, E[0], 1)], {})),
    ("mul_scalar", "aten.mul.Tensor", lambda g, d: ([rn(g, d, *E), 0.3], {})),
    ("mul_", "aten.mul_.Tensor", lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {})),
    ("div", "aten.div.Tensor", lambda g, d: ([rn(g, d, *E), pos(g, d, *E)], {})),
    ("div_scalar", "aten.div.Tensor", lambda g, d: ([rn(g, d, *E), 3.0], {})),
    ("div_floor", "aten.div.Tensor_mode",
     lambda g, d: ([rn(g, d, *E) * 5, pos(g, d, *E)], {"rounding_mode": "floor"})),
    ("neg", "aten.neg.default", A[0]),
    ("exp", "aten.exp.default", A[0]),
    ("log", "aten.log.default", lambda g, d: ([pos(g, d, *E)], {})),
    ("tanh", "aten.tanh.default", A[0]),
    ("sigmoid", "aten.sigmoid.default", A[0]),
    ("relu", "aten.relu.default", A[0]),
    ("sqrt", "aten.sqrt.default", lambda g, d: ([pos(g, d, *E)], {})),
    ("rsqrt", "aten.rsqrt.default", lambda g, d: ([pos(g, d, *E)], {})),
    ("reciprocal", "aten.reciprocal.default", lambda g, d: ([pos(g, d, *E)], {})),
    ("abs", "aten.abs.default", A[0]),
    ("erf", "aten.erf.default", A[0]),
    ("pow2", "aten.pow.Tensor_Scalar", lambda g, d: ([rn(g, d, *E), 2], {})),
    ("pow3", "aten.pow.Tensor_Scalar", lambda g, d: ([rn(g, d, *E), 3], {})),
    ("pow_half", "aten.pow.Tensor_Scalar", lambda g, d: ([pos(g, d, *E), 0.5], {})),
    ("pow_frac", "aten.pow.Tensor_Scalar", lambda g, d: ([pos(g, d, *E), 1.7], {})),
    ("gelu", "aten.gelu.default", A[0]),
    ("gelu_tanh", "aten.gelu.default", lambda g, d: ([rn(g, d, *E)], {"approximate": "tanh"})),
    ("gelu_backward", "aten.gelu_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {})),
    ("gelu_backward_tanh", "aten.gelu_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {"approximate": "tanh"})),
    ("silu", "aten.silu.default", A[0]),
    ("silu_backward", "aten.silu_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {})),
    ("sigmoid_backward", "aten.sigmoid_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E, lo=0, hi=1)], {})),
    ("tanh_backward", "aten.tanh_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E, lo=-1, hi=1)], {})),
    ("threshold_backward", "aten.threshold_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E), 0], {})),
    ("threshold", "aten.threshold.default", lambda g, d: ([rn(g, d, *E), 0.5, -1.0], {})),
    ("leaky_relu", "aten.leaky_relu.default", lambda g, d: ([rn(g, d, *E), 0.1], {})),
    ("leaky_relu_backward", "aten.leaky_relu_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E), 0.1, False], {})),
    ("hardtanh", "aten.hardtanh.default", lambda g, d: ([rn(g, d, *E), -0.5, 1.5], {})),
    ("expm1", "aten.expm1.default", A[0]),
    ("log1p", "aten.log1p.default", lambda g, d: ([pos(g, d, *E)], {})),
    ("sign", "aten.sign.default", A[0]),
    ("lerp_tensor", "aten.lerp.Tensor",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E), rn(g, d, *E, lo=0, hi=1)], {})),
    ("hardswish", "aten.hardswish.default", lambda g, d: ([rn(g, d, *E, lo=-5, hi=5)], {})),
    ("hardswish_backward", "aten.hardswish_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E, lo=-5, hi=5)], {})),
    ("softplus", "aten.softplus.default", lambda g, d: ([rn(g, d, *E, lo=-5, hi=5), 2, 4],
                                                         {})),
    ("softplus_backward", "aten.softplus_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E, lo=-5, hi=5), 2, 4], {})),
    ("log_sigmoid", "aten.log_sigmoid_forward.default",
     lambda g, d: ([rn(g, d, *E, lo=-30, hi=30)], {})),
    ("log_sigmoid_backward", "aten.log_sigmoid_backward.default",
     lambda g, d: (lambda x: ([rn(g, d, *E), x, torch.exp(-x.abs())], {}))(rn(g, d, *E))),
    ("bce_logits", "aten.binary_cross_entropy_with_logits.default",
     lambda g, d: ([rn(g, d, 4, 5), rn(g, d, 4, 5, lo=0, hi=1), pos(g, d, 5), pos(g, d, 5),
                    1], {})),
    ("bce", "aten.binary_cross_entropy.default",
     lambda g, d: ([rn(g, d, 4, 5, lo=0.01, hi=0.99), rn(g, d, 4, 5, lo=0, hi=1)], {})),
    ("bce_backward", "aten.binary_cross_entropy_backward.default",
     lambda g, d: ([rn(g, d), rn(g, d, 4, 5, lo=0.01, hi=0.99), rn(g, d, 4, 5, lo=0, hi=1),
                    pos(g, d, 4, 5), 1], {})),
    ("smooth_l1", "aten.smooth_l1_loss.default",
     lambda g, d: ([rn(g, d, 4, 5), rn(g, d, 4, 5), 1, 0.5], {})),
    ("smooth_l1_backward", "aten.smooth_l1_loss_backward.default",
     lambda g, d: ([rn(g, d), rn(g, d, 4, 5), rn(g, d, 4, 5), 1, 0.5], {})),
    ("huber", "aten.huber_loss.default",
     lambda g, d: ([rn(g, d, 4, 5), rn(g, d, 4, 5), 2, 0.7], {})),
    ("huber_backward", "aten.huber_loss_backward.default",
     lambda g, d: ([rn(g, d, 4, 5), rn(g, d, 4, 5), rn(g, d, 4, 5), 0, 0.7], {})),
    ("elu", "aten.elu.default", lambda g, d: ([rn(g, d, *E), 1.3, 1.05, 0.9], {})),
    ("elu_backward", "aten.elu_backward.default",
     lambda g, d: ([rn(g, d, *E), 1.3, 1.05, 0.9, False, rn(g, d, *E)], {})),
    ("elu_backward_result", "aten.elu_backward.default",
     lambda g, d: ([rn(g, d, *E), 1.3, 1.05, 0.9, True, rn(g, d, *E, lo=-1.3, hi=2)], {})),
    ("mish", "aten.mish.default", A[0]),
    ("mish_backward", "aten.mish_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {})),
    ("prelu", "aten._prelu_kernel.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), rn(g, d, 3, 1)], {})),
    ("prelu_backward", "aten._prelu_kernel_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), rn(g, d, 2, 3, 4), rn(g, d, 3, 1)], {})),
    ("xlogy", "aten.xlogy.Tensor",
     lambda g, d: ([torch.where(rn(g, F64, *E) > 0, rn(g, d, *E), 0), pos(g, d, *E)], {})),
    ("cumsum", "aten.cumsum.default", lambda g, d: ([rn(g, d, 4, 9), 1], {})),
    ("flip", "aten.flip.default", lambda g, d: ([rn(g, d, 4, 9), [0, -1]], {})),
    ("roll", "aten.roll.default", lambda g, d: ([rn(g, d, 4, 9), [-1, 11], [1, 0]], {})),
    ("roll_flat", "aten.roll.default", lambda g, d: ([rn(g, d, 3, 5), [7]], {})),
    ("hardtanh_backward", "aten.hardtanh_backward.default",
     lambda g, d: ([rn(g, d, *E), torch.round(rn(g, d, *E, lo=-2, hi=8)), 0.0, 6.0], {})),
    ("tril", "aten.tril.default", lambda g, d: ([rn(g, d, 2, 4, 5), 1], {})),
    ("triu", "aten.triu.default", lambda g, d: ([rn(g, d, 4, 5)], {"diagonal": -1})),
    ("tril_", "aten.tril_.default", lambda g, d: ([rn(g, d, 5, 4)], {})),
    ("transpose_", "aten.transpose_.default", lambda g, d: ([rn(g, d, 2, 3, 4), 0, -1], {})),
    ("t_", "aten.t_.default", lambda g, d: ([rn(g, d, 3, 4)], {})),
    ("grad_input_out", "aten.smooth_l1_loss_backward.grad_input",
     lambda g, d: ([rn(g, d), rn(g, d, 4, 5), rn(g, d, 4, 5), 1, 0.5],
                   {"grad_input": torch.empty(4, 5, dtype=d)})),
    ("where", "aten.where.self",
     lambda g, d: ([rn(g, F64, *E) > 0, rn(g, d, *E), rn(g, d, E[1])], {})),
    # (masks: ``mask |= torch.eye(...)``; integers' bits)
    ("bitwise_or_bool_", "aten.bitwise_or_.Tensor",
     lambda g, d: ([rn(g, F64, *E) > 0, rn(g, F64, E[1]) > 0.5], {})),
    ("bitwise_xor_int", "aten.bitwise_xor.Tensor",
     lambda g, d: ([ints(g, 1000, *E), ints(g, 7, E[1])], {})),
    ("bitwise_or_scalar", "aten.bitwise_or.Scalar", lambda g, d: ([ints(g, 64, *E), 5], {})),
    # (exact: a GNN's / a tokenizer's unique, bucketize, searchsorted, histc, median)
    ("unique2_nan_zero", "aten._unique2.default",
     lambda g, d: ([torch.tensor([3., 1., math.nan, -0., 2., 0., math.nan, 1., 3.], dtype=d),
                    False, True, True], {})),
    ("unique2_zero_first", "aten._unique2.default",
     lambda g, d: ([torch.tensor([0., -0., -0., 1.], dtype=d), True, True, False], {})),
    ("unique2_ints_2d", "aten._unique2.default", lambda g, d: ([ints(g, 9, 6, 7)], {})),
    ("median", "aten.median.default", lambda g, d: ([rn(g, d, 6, 7)], {})),
    ("median_nan", "aten.median.default",
     lambda g, d: ([torch.tensor([3., math.nan, 2.], dtype=d)], {})),
    ("bucketize", "aten.bucketize.Tensor",
     lambda g, d: ([torch.cat([rn(g, d, 30), torch.linspace(-1, 1, 5, dtype=d),
                               torch.tensor([math.nan], dtype=d)]),
                    torch.linspace(-1, 1, 5, dtype=d)], {})),
    ("bucketize_right_i32", "aten.bucketize.Tensor",
     lambda g, d: ([torch.linspace(-1, 1, 9, dtype=d), torch.linspace(-1, 1, 5, dtype=d)],
                   {"right": True, "out_int32": True})),
    ("searchsorted_rows", "aten.searchsorted.Tensor",
     lambda g, d: ([rn(g, d, 3, 8).sort(-1).values, rn(g, d, 3, 5)], {"side": "right"})),
    ("searchsorted_sorter", "aten.searchsorted.Tensor",
     lambda g, d: ([torch.tensor([3., 1., 2., 5.], dtype=d), rn(g, d, 7) * 3],
                   {"sorter": torch.tensor([1, 2, 0, 3])})),
    ("histc", "aten.histc.default",
     lambda g, d: ([torch.cat([rn(g, d, 200), torch.tensor([-2., 2.], dtype=d)]), 8, -2., 2.],
                   {})),
    ("histc_auto", "aten.histc.default", lambda g, d: ([rn(g, d, 50), 5], {})),
    ("masked_scatter", "aten.masked_scatter.default",
     lambda g, d: ([rn(g, d, *E), rn(g, F64, E[1]) > 0, rn(g, d, *E)], {})),
    # (linear algebra: well-conditioned matrices, so LAPACK's orders and the reference's agree
    # to float64's last digits; pivots and info exactly)
    # (the triangle not read perturbed: LAPACK reads only the one it is asked for)
    ("cholesky_ex", "aten.linalg_cholesky_ex.default",
     lambda g, d: ([_spd(g, d, 4, 5) + rn(g, d, 4, 5, 5).triu(1)], {})),
    ("cholesky_ex_upper", "aten.linalg_cholesky_ex.default",
     lambda g, d: ([_spd(g, d, 2, 6) + rn(g, d, 2, 6, 6).tril(-1)], {"upper": True})),
    ("solve_triangular", "aten.linalg_solve_triangular.default",
     lambda g, d: ([_tri(g, d, 4, 5, True), rn(g, d, 4, 5, 3)], {"upper": False})),
    ("solve_triangular_upper_right", "aten.linalg_solve_triangular.default",
     lambda g, d: ([_tri(g, d, 2, 5, False), rn(g, d, 3, 5)],
                   {"upper": True, "left": False})),
    ("solve_triangular_unit", "aten.linalg_solve_triangular.default",
     lambda g, d: ([_tri(g, d, 1, 4, True), rn(g, d, 4, 2)],
                   {"upper": False, "unitriangular": True})),
    ("solve_ex", "aten._linalg_solve_ex.default",
     lambda g, d: ([_wellcond(g, d, 3, 5), rn(g, d, 3, 5, 2)], {})),
    ("solve_ex_vector", "aten._linalg_solve_ex.default",
     lambda g, d: ([_wellcond(g, d, 3, 5), rn(g, d, 3, 5)], {})),
    ("lu_factor_ex", "aten.linalg_lu_factor_ex.default", lambda g, d: ([rn(g, d, 3, 6, 6)], {})),
    ("lu_solve_adjoint", "aten.linalg_lu_solve.default",
     lambda g, d: (list(torch.linalg.lu_factor(_wellcond(g, d, 2, 5))) + [rn(g, d, 2, 5, 3)],
                   {"adjoint": True})),
    ("slogdet", "aten._linalg_slogdet.default", lambda g, d: ([rn(g, d, 3, 5, 5)], {})),
    ("inv_ex", "aten.linalg_inv_ex.default", lambda g, d: ([_wellcond(g, d, 2, 4)], {})),
    # (exact: the dividend's zero sign kept, an infinite divisor as ATen's fmod-based kernel;
    # NaN results' payloads are the NaN policy's, not compared here)
    ("remainder", "aten.remainder.Tensor",
     lambda g, d: ([torch.cat([rn(g, d, 40) * 50, torch.tensor(
         [-0.0, 0.0, -4.0, 4.0, 5.0, -3.0, 1e-30], dtype=d)]),
         torch.cat([rn(g, d, 40) * 3, torch.tensor(
             [2.0, -2.0, 2.0, -2.0, math.inf, -math.inf, -3.0], dtype=d)])], {})),
    ("remainder_scalar_int", "aten.remainder.Scalar", lambda g, d: ([ints(g, 50, *E) - 25, -7],
                                                                    {})),
    ("fmod", "aten.fmod.Tensor",
     lambda g, d: ([rn(g, d, *E) * 50, rn(g, d, *E) * 3], {})),
    # (exact: a Cox loss's running maximum, augmentations' quarter turns, pair indices)
    ("cummax", "aten.cummax.default",
     lambda g, d: ([torch.tensor([[1., 3., 3., 2., math.nan, 5., math.nan, -0., 0.],
                                  [0., -0., 0., -1., 2., 2., -3., 4., 4.]], dtype=d), 1], {})),
    ("cummin", "aten.cummin.default", lambda g, d: ([rn(g, d, 6, 5), 0], {})),
    ("rot90", "aten.rot90.default", lambda g, d: ([rn(g, d, 2, 3, 4), 3, [2, 1]], {})),
    ("tril_indices", "aten.tril_indices.default", lambda g, d: ([5, 4, -1], {})),
    ("triu_indices", "aten.triu_indices.default", lambda g, d: ([3, 6, 2], {})),
    # (special functions: correctly rounded, torch's Cephes-style kernels within 1e-12 in
    # float64 away from lgamma's zeros)
    ("lgamma", "aten.lgamma.default", lambda g, d: ([pos(g, d, *E) * 3 - 0.1], {})),
    ("lgamma_neg", "aten.lgamma.default",
     lambda g, d: ([torch.tensor([-2.5, -0.5, -7.25, 30.5, 1e-3], dtype=d)], {})),
    ("digamma", "aten.digamma.default", lambda g, d: ([pos(g, d, *E)], {})),
    ("polygamma1", "aten.polygamma.default", lambda g, d: ([1, pos(g, d, *E)], {})),
    ("polygamma2", "aten.polygamma.default", lambda g, d: ([2, pos(g, d, *E)], {})),
    ("erfinv", "aten.erfinv.default", lambda g, d: ([rn(g, d, *E) * 0.45], {})),
    ("log_ndtr", "aten.special_log_ndtr.default", lambda g, d: ([rn(g, d, *E) * 4], {})),
    ("diag_embed", "aten.diag_embed.default",
     lambda g, d: ([rn(g, d, 3, 4)], {"offset": 1, "dim1": 0, "dim2": 2})),
    ("diag_embed_neg", "aten.diag_embed.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), -2], {})),
    ("masked_fill", "aten.masked_fill.Scalar",
     lambda g, d: ([rn(g, d, *E), rn(g, F64, *E) > 0, -1e9], {})),
    ("clamp", "aten.clamp.default", lambda g, d: ([rn(g, d, *E), -0.5, 0.5], {})),
    ("clamp_max", "aten.clamp.default", lambda g, d: ([rn(g, d, *E)], {"max": 1.0})),
    ("maximum", "aten.maximum.default", lambda g, d: ([rn(g, d, *E), rn(g, d, *E)], {})),
    ("gt", "aten.gt.Scalar", lambda g, d: ([rn(g, d, *E), 0.1], {})),
    ("fill_", "aten.fill_.Scalar", lambda g, d: ([rn(g, d, *E), 0.1], {})),
    ("zero_", "aten.zero_.default", A[0]),
    ("copy_", "aten.copy_.default", lambda g, d: ([rn(g, d, *E), rn(g, F64, E[1])], {})),
    ("to_copy_bf16", "aten._to_copy.default", lambda g, d: ([rn(g, d, *E)],
                                                            {"dtype": BF16})),
    ("to_copy_f32", "aten._to_copy.default", lambda g, d: ([rn(g, d, *E)], {"dtype": F32})),
    ("clone", "aten.clone.default", A[0]),
    ("detach", "aten.detach.default", A[0]),
    ("zeros_like", "aten.zeros_like.default", A[0]),
    ("ones_like", "aten.ones_like.default", A[0]),
    ("full", "aten.full.default", lambda g, d: ([[2, 3], 0.1], {"dtype": d})),
    ("scalar_tensor", "aten.scalar_tensor.default", lambda g, d: ([0.1], {"dtype": d})),
    ("view", "aten.view.default", lambda g, d: ([rn(g, d, *E), [37, 5]], {})),
    ("_unsafe_view", "aten._unsafe_view.default", lambda g, d: ([rn(g, d, *E), [-1]], {})),
    ("t", "aten.t.default", A[0]),
    ("transpose", "aten.transpose.int", lambda g, d: ([rn(g, d, 2, 3, 4), 0, -1], {})),
    ("permute", "aten.permute.default", lambda g, d: ([rn(g, d, 2, 3, 4), [2, 0, 1]], {})),
    ("expand", "aten.expand.default", lambda g, d: ([rn(g, d, 3, 1), [2, -1, 4]], {})),
    ("slice", "aten.slice.Tensor", lambda g, d: ([rn(g, d, 5, 4), 0, 1, 9223372036854775807,
                                                  2], {})),
    ("select", "aten.select.int", lambda g, d: ([rn(g, d, 5, 4), 1, -1], {})),
    ("unsqueeze", "aten.unsqueeze.default", lambda g, d: ([rn(g, d, 5, 4), -1], {})),
    ("squeeze", "aten.squeeze.dim", lambda g, d: ([rn(g, d, 5, 1), 1], {})),
    ("cat", "aten.cat.default", lambda g, d: ([[rn(g, d, 2, E[1]), rn(g, d, *E)]], {})),
    ("stack", "aten.stack.default", lambda g, d: ([[rn(g, d, 2, 4), rn(g, d, 2, 4)], 1], {})),
    ("split", "aten.split.Tensor", lambda g, d: ([rn(g, d, 5, 4), 2], {})),
    ("split_with_sizes", "aten.split_with_sizes.default",
     lambda g, d: ([rn(g, d, 5, 4), [1, 3], 1], {})),
    ("unbind", "aten.unbind.int", lambda g, d: ([rn(g, d, *E)], {})),
    ("index_select", "aten.index_select.default",
     lambda g, d: ([rn(g, d, 5, 4), 0, torch.tensor([4, 0, 4])], {})),
    ("constant_pad_nd", "aten.constant_pad_nd.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), [1, 2, 0, 1]], {})),
    # GeM pooling's learned exponent (a tensor), on positive and negative bases
    ("pow_tensors", "aten.pow.Tensor_Tensor",
     lambda g, d: ([rn(g, d, 5, 4, lo=-2.0, hi=3.0), torch.tensor([[2.0, 3.0, 0.5, -1.5]] * 5,
                                                                  dtype=d)], {})),
    # a mixture of experts' load-balancing counts, and weighted (serial: torch's bits)
    ("bincount", "aten.bincount.default",
     lambda g, d: ([ints(g, 6, 40), None, 9], {})),
    ("bincount_weights", "aten.bincount.default",
     lambda g, d: ([ints(g, 6, 40), rn(g, d, 40)], {})),
    # a DCG loss's discounts, a count model's terms (correctly rounded; torch's libm is not)
    ("log2", "aten.log2.default", lambda g, d: ([pos(g, d, 5, 4)], {})),
    ("log10", "aten.log10.default", lambda g, d: ([pos(g, d, 5, 4)], {})),
    ("xlog1py", "aten.special_xlog1py.default",
     lambda g, d: ([torch.where(pos(g, d, 5, 4) > 1, pos(g, d, 5, 4), torch.zeros(5, 4, dtype=d)),
                    rn(g, d, 5, 4, lo=-0.5, hi=3.0)], {})),
    # F.pdist (its backward: ATen's column-wise order, the pairs row-major: torch's bits)
    ("pdist", "aten._pdist_forward.default", lambda g, d: ([rn(g, d, 6, 5), 2.0], {})),
    ("pdist_1", "aten._pdist_forward.default", lambda g, d: ([rn(g, d, 6, 5), 1.0], {})),
    ("pdist_backward", "aten._pdist_backward.default",
     lambda g, d: (lambda x: ([rn(g, d, 15), x, 2.0, torch.ops.aten._pdist_forward(x, 2.0)],
                              {}))(rn(g, d, 6, 33))),
    ("pdist_backward_1", "aten._pdist_backward.default",
     lambda g, d: (lambda x: ([rn(g, d, 15), x, 1.0, torch.ops.aten._pdist_forward(x, 1.0)],
                              {}))(rn(g, d, 6, 33))),
    # a pad's backward: negative pads crop (here the last dimension's left, the next's right)
    ("constant_pad_nd_crop", "aten.constant_pad_nd.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), [-1, 2, 1, -2], 0.5], {})),
    # MaxUnpool2d after a pool (one index each), and indices that collide (the later wins)
    ("max_unpool2d", "aten.max_unpool2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 2, 2), torch.tensor([[[[0, 3], [9, 14]]] * 3] * 2),
                    [4, 4]], {})),
    ("max_unpool2d_collide", "aten.max_unpool2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), ints(g, 3, 2, 3, 4), [1, 3]], {})),
    ("max_unpool3d", "aten.max_unpool3d.default",
     lambda g, d: ([rn(g, d, 1, 2, 2, 2, 2), ints(g, 27, 1, 2, 2, 2, 2), [3, 3, 3],
                    [2, 2, 2], [0, 0, 0]], {})),
    ("index", "aten.index.Tensor",
     lambda g, d: ([rn(g, d, 5, 4), [None, torch.tensor([3, 0, 3])]], {})),
    ("gather", "aten.gather.default",
     lambda g, d: ([rn(g, d, 5, 4), 1, torch.tensor([[3, 0], [1, 1], [2, 0], [0, 0], [3, 3]])],
                   {})),
    ("chunk", "aten.chunk.default", lambda g, d: ([rn(g, d, 5, 4), 2], {})),
    # F.one_hot (its range check and its scatter), InstanceNorm's affine weights (repeat)
    ("repeat", "aten.repeat.default", lambda g, d: ([rn(g, d, 3, 4), [2, 1, 3]], {})),
    ("pixel_shuffle", "aten.pixel_shuffle.default", lambda g, d: ([rn(g, d, 2, 8, 3, 5), 2], {})),
    ("pixel_unshuffle", "aten.pixel_unshuffle.default",
     lambda g, d: ([rn(g, d, 2, 2, 6, 9), 3], {})),
    ("eye", "aten.eye.m", lambda g, d: ([3, 5], {"dtype": d})),
    ("aminmax", "aten.aminmax.default", lambda g, d: ([rn(g, d, 5, 4)], {})),
    ("aminmax_dim", "aten.aminmax.default", lambda g, d: ([rn(g, d, 5, 4)],
                                                        {"dim": 1, "keepdim": True})),
    ("scatter_value_", "aten.scatter_.value",
     lambda g, d: ([torch.zeros(5, 6, dtype=d), 1, ints(g, 6, 5, 1), 1.0], {})),
    ("scatter_src", "aten.scatter.src",
     lambda g, d: ([rn(g, d, 3, 5), 0, torch.tensor([[0, 1, 2, 0], [2, 0, 1, 1]]),
                    rn(g, d, 2, 5)], {})),
    ("flatten", "aten.flatten.using_ints", lambda g, d: ([rn(g, d, 2, 3, 4), 1], {})),
    ("narrow", "aten.narrow.default", lambda g, d: ([rn(g, d, 5, 4), 0, 1, 3], {})),
    ("new_zeros", "aten.new_zeros.default", lambda g, d: ([rn(g, d, 5, 4), [2, 3]], {})),
    ("arange", "aten.arange.start_step", lambda g, d: ([1, 20, 3], {"dtype": d})),
    # a diffusion schedule: betas by linspace, the alphas' running product
    ("linspace", "aten.linspace.default", lambda g, d: ([1e-4, 0.02, 100], {"dtype": d})),
    ("linspace_odd", "aten.linspace.default", lambda g, d: ([-3.0, 7.5, 37], {"dtype": d})),
    ("cumprod", "aten.cumprod.default", lambda g, d: ([rn(g, d, 4, 30, lo=0.9, hi=1.1), 1],
                                                      {})),
    ("sum", "aten.sum.default", lambda g, d: ([rn(g, d, 7, 5)], {})),
    ("sum_dim", "aten.sum.dim_IntList", lambda g, d: ([rn(g, d, 4, 7, 5), [0, 2], True], {})),
    ("mean_dim", "aten.mean.dim", lambda g, d: ([rn(g, d, 4, 7, 5), [-1]], {})),
    ("amax", "aten.amax.default", lambda g, d: ([rn(g, d, 4, 7), [1]], {})),
    ("max_dim", "aten.max.dim", lambda g, d: ([rn(g, d, 4, 7), 1], {})),
    ("argmax", "aten.argmax.default", lambda g, d: ([rn(g, d, 4, 7), 1], {})),
    ("amin", "aten.amin.default", lambda g, d: ([rn(g, d, 4, 7), [0, 1], True], {})),
    ("min_dim", "aten.min.dim", lambda g, d: ([rn(g, d, 4, 7), 0, True], {})),
    ("std", "aten.std.correction", lambda g, d: ([rn(g, d, 4, 7), None], {"correction": 0})),
    ("std_mean", "aten.std_mean.correction",
     lambda g, d: ([rn(g, d, 4, 7), [1]], {"keepdim": True})),
    ("baddbmm", "aten.baddbmm.default",
     lambda g, d: ([rn(g, d, 2, 5, 3), rn(g, d, 2, 5, 6), rn(g, d, 2, 6, 3)], {"alpha": 0.5})),
    ("linear", "aten.linear.default",
     lambda g, d: ([rn(g, d, 2, 5, 6), rn(g, d, 3, 6), rn(g, d, 3)], {})),
    ("softmax_int", "aten.softmax.int", lambda g, d: ([rn(g, d, 3, 7), 0], {})),
    ("var", "aten.var.correction", lambda g, d: ([rn(g, d, 4, 7), [1]], {"correction": 1})),
    ("vector_norm", "aten.linalg_vector_norm.default", lambda g, d: ([rn(g, d, 4, 7), 2], {})),
    ("mm", "aten.mm.default", lambda g, d: ([rn(g, d, 5, 6), rn(g, d, 6, 3)], {})),
    ("addmm", "aten.addmm.default",
     lambda g, d: ([rn(g, d, 3), rn(g, d, 5, 6), rn(g, d, 6, 3)], {})),
    ("addmm_scaled", "aten.addmm.default",
     lambda g, d: ([rn(g, d, 5, 3), rn(g, d, 5, 6), rn(g, d, 6, 3)],
                   {"beta": 0.5, "alpha": 2.0})),
    ("bmm", "aten.bmm.default", lambda g, d: ([rn(g, d, 2, 5, 6), rn(g, d, 2, 6, 3)], {})),
    ("_softmax", "aten._softmax.default", lambda g, d: ([rn(g, d, 3, 7), -1, False], {})),
    ("_softmax_backward", "aten._softmax_backward_data.default",
     lambda g, d: ([rn(g, d, 3, 7), torch.softmax(rn(g, d, 3, 7), -1), -1, d], {})),
    ("_log_softmax", "aten._log_softmax.default", lambda g, d: ([rn(g, d, 3, 7), 1, False], {})),
    ("_log_softmax_backward", "aten._log_softmax_backward_data.default",
     lambda g, d: ([rn(g, d, 3, 7), torch.log_softmax(rn(g, d, 3, 7), -1), -1, d], {})),
    ("nll_mean", "aten.nll_loss_forward.default",
     lambda g, d: ([rn(g, d, 6, 5), ints(g, 5, 6), None, 1, -100], {})),
    ("nll_weight_ignore", "aten.nll_loss_forward.default",
     lambda g, d: ([rn(g, d, 6, 5), torch.tensor([0, 1, 4, 2, 1, 3]), pos(g, d, 5), 1, 1], {})),
    ("nll_sum", "aten.nll_loss_forward.default",
     lambda g, d: ([rn(g, d, 6, 5), ints(g, 5, 6), None, 2, -100], {})),
    ("nll_none", "aten.nll_loss_forward.default",
     lambda g, d: ([rn(g, d, 6, 5), ints(g, 5, 6), None, 0, -100], {})),
    ("nll_none_ignore", "aten.nll_loss_forward.default",
     lambda g, d: ([rn(g, d, 6, 5), torch.tensor([0, 1, 4, 2, 1, 3]), None, 0, 1], {})),
    ("nll_backward", "aten.nll_loss_backward.default",
     lambda g, d: ([rn(g, d), rn(g, d, 6, 5), ints(g, 5, 6), None, 1, -100,
                    torch.tensor(6.0, dtype=d)], {})),
    ("nll_backward_weight", "aten.nll_loss_backward.default",
     lambda g, d: ([rn(g, d), rn(g, d, 6, 5), torch.tensor([0, 1, 4, 2, 1, 3]), pos(g, d, 5),
                    1, 1, torch.tensor(2.5, dtype=d)], {})),
    ("mse", "aten.mse_loss.default", lambda g, d: ([rn(g, d, 4, 5), rn(g, d, 4, 5), 1], {})),
    ("mse_backward", "aten.mse_loss_backward.default",
     lambda g, d: ([rn(g, d), rn(g, d, 4, 5), rn(g, d, 4, 5), 1], {})),
    ("layer_norm", "aten.native_layer_norm.default",
     lambda g, d: ([rn(g, d, 3, 4, 6), [6], rn(g, d, 6), rn(g, d, 6), 1e-5], {})),
    ("layer_norm_2d", "aten.native_layer_norm.default",
     lambda g, d: ([rn(g, d, 3, 4, 6), [4, 6], None, None, 1e-5], {})),
    ("layer_norm_backward", "aten.native_layer_norm_backward.default",
     lambda g, d: (lambda x, w, b, mu, rs: ([rn(g, d, 3, 4, 6), x, [6], mu, rs, w, b,
                                             [True, True, True]], {}))(*_ln_inputs(g, d))),
    ("batch_norm_train", "aten.native_batch_norm.default",
     lambda g, d: (lambda x, w, b, rm, rv, sm, si: ([x, w, b, rm, rv, True, 0.1, 1e-5], {}))(
         *_bn_inputs(g, d))),
    ("batch_norm_eval", "aten.native_batch_norm.default",
     lambda g, d: (lambda x, w, b, rm, rv, sm, si: ([x, w, b, rm, rv, False, 0.1, 1e-5], {}))(
         *_bn_inputs(g, d))),
    ("batch_norm_legit", "aten._native_batch_norm_legit.default",
     lambda g, d: (lambda x, w, b, rm, rv, sm, si: ([x, w, b, rm, rv, True, 0.1, 1e-5], {}))(
         *_bn_inputs(g, d))),
    ("batch_norm_functional", "aten._native_batch_norm_legit_functional.default",
     lambda g, d: (lambda x, w, b, rm, rv, sm, si: ([x, w, b, rm, rv, True, 0.1, 1e-5], {}))(
         *_bn_inputs(g, d))),
    ("batch_norm_backward", "aten.native_batch_norm_backward.default",
     lambda g, d: (lambda x, w, b, rm, rv, sm, si: (
         [rn(g, d, *x.shape), x, w, rm, rv, sm, si, True, 1e-5, [True, True, True]], {}))(
         *_bn_inputs(g, d))),
    ("group_norm", "aten.native_group_norm.default",
     lambda g, d: (lambda x, w, b, mu, rs: ([x, w, b, 2, 6, 12, 3, 1e-5], {}))(
         *_gn_inputs(g, d))),
    ("group_norm_backward", "aten.native_group_norm_backward.default",
     lambda g, d: (lambda x, w, b, mu, rs: ([rn(g, d, *x.shape), x, mu, rs, w, 2, 6, 12, 3,
                                             [True, True, True]], {}))(*_gn_inputs(g, d))),
    ("dropout_eval", "aten.native_dropout.default", lambda g, d: ([rn(g, d, *E), 0.2, False],
                                                                  {})),
    ("dropout_backward", "aten.native_dropout_backward.default",
     lambda g, d: ([rn(g, d, *E), rn(g, F64, *E) > 0, 1.25], {})),
    ("conv2d", "aten.convolution.default",
     lambda g, d: ([rn(g, d, 2, 4, 7, 6), rn(g, d, 6, 2, 3, 3), rn(g, d, 6), [2, 1], [1, 1],
                    [1, 1], False, [0, 0], 2], {})),
    ("conv1d", "aten.convolution.default",
     lambda g, d: ([rn(g, d, 2, 3, 9), rn(g, d, 4, 3, 3), None, [1], [1], [2], False, [0], 1],
                   {})),
    ("conv2d_backward", "aten.convolution_backward.default",
     lambda g, d: ([rn(g, d, 2, 6, 4, 6), rn(g, d, 2, 4, 7, 6), rn(g, d, 6, 2, 3, 3), [6],
                    [2, 1], [1, 1], [1, 1], False, [0, 0], 2, [True, True, True]], {})),
    ("conv2d_backward_w_only", "aten.convolution_backward.default",
     lambda g, d: ([rn(g, d, 2, 4, 5, 5), rn(g, d, 2, 3, 5, 5), rn(g, d, 4, 3, 3, 3), [4],
                    [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]], {})),
    ("conv_transpose2d", "aten.convolution.default",
     lambda g, d: ([rn(g, d, 2, 4, 5, 4), rn(g, d, 4, 3, 3, 2), rn(g, d, 6), [2, 1], [1, 0],
                    [1, 1], True, [1, 0], 2], {})),
    ("conv_transpose2d_backward", "aten.convolution_backward.default",
     lambda g, d: ([rn(g, d, 2, 6, 10, 5), rn(g, d, 2, 4, 5, 4), rn(g, d, 4, 3, 3, 2), [6],
                    [2, 1], [1, 0], [1, 1], True, [1, 0], 2, [True, True, True]], {})),
    ("conv3d", "aten.convolution.default",
     lambda g, d: ([rn(g, d, 2, 4, 4, 5, 4), rn(g, d, 6, 2, 2, 3, 2), rn(g, d, 6), [1, 2, 1],
                    [1, 0, 1], [2, 1, 1], False, [0, 0, 0], 2], {})),
    ("conv3d_backward", "aten.convolution_backward.default",
     lambda g, d: ([rn(g, d, 2, 6, 4, 2, 5), rn(g, d, 2, 4, 4, 5, 4), rn(g, d, 6, 2, 2, 3, 2),
                    [6], [1, 2, 1], [1, 0, 1], [2, 1, 1], False, [0, 0, 0], 2,
                    [True, True, True]], {})),
    ("conv_transpose3d", "aten.convolution.default",
     lambda g, d: ([rn(g, d, 2, 4, 3, 4, 3), rn(g, d, 4, 3, 2, 3, 2), rn(g, d, 6), [2, 1, 2],
                    [1, 0, 0], [1, 1, 1], True, [1, 0, 1], 2], {})),
    ("conv_transpose3d_backward", "aten.convolution_backward.default",
     lambda g, d: ([rn(g, d, 2, 6, 5, 6, 7), rn(g, d, 2, 4, 3, 4, 3), rn(g, d, 4, 3, 2, 3, 2),
                    [6], [2, 1, 2], [1, 0, 0], [1, 1, 1], True, [1, 0, 1], 2,
                    [True, True, True]], {})),
    ("conv_transpose1d", "aten.convolution.default",
     lambda g, d: ([rn(g, d, 2, 3, 6), rn(g, d, 3, 2, 2), None, [2], [0], [1], True, [0], 1],
                   {})),
    ("upsample_bilinear", "aten.upsample_bilinear2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 4, 5), [8, 7], False], {})),
    ("upsample_bilinear_align", "aten.upsample_bilinear2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 4, 5), [7, 11], True], {})),
    ("upsample_bilinear_backward", "aten.upsample_bilinear2d_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 8, 7), [8, 7], [2, 3, 4, 5], False], {})),
    ("upsample_bilinear_backward_scales", "aten.upsample_bilinear2d_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 8, 10), [8, 10], [2, 3, 4, 5], False, 2.0, 2.0], {})),
    ("reflection_pad1d", "aten.reflection_pad1d.default",
     lambda g, d: ([rn(g, d, 2, 3, 6), [2, 3]], {})),
    ("reflection_pad2d_backward", "aten.reflection_pad2d_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 7, 9), rn(g, d, 2, 3, 5, 6), [1, 2, 0, 2]], {})),
    ("upsample_nearest", "aten.upsample_nearest2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 4, 5), [8, 7]], {})),
    ("upsample_nearest_backward", "aten.upsample_nearest2d_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 8, 7), [8, 7], [2, 3, 4, 5]], {})),
    ("safe_softmax", "aten._safe_softmax.default",
     lambda g, d: ([torch.where(torch.arange(7) < 3 * (torch.arange(3)[:, None] > 0),
                                rn(g, d, 3, 7), -torch.inf).to(d), -1], {})),
    ("select_backward", "aten.select_backward.default",
     lambda g, d: ([rn(g, d, 5), [3, 5], 0, 1], {})),
    ("slice_backward", "aten.slice_backward.default",
     lambda g, d: ([rn(g, d, 3, 2), [3, 7], 1, 1, 5, 2], {})),
    ("unsafe_split", "aten.unsafe_split.Tensor", lambda g, d: ([rn(g, d, 5, 4), 2, 1], {})),
    ("max_pool", "aten.max_pool2d_with_indices.default",
     lambda g, d: ([_pool_inputs(g, d)[0], [3, 2], [2, 2], [1, 1], [1, 1], True], {})),
    ("max_pool_backward", "aten.max_pool2d_with_indices_backward.default",
     lambda g, d: (lambda x, idx: ([rn(g, d, *idx.shape), x, [3, 2], [2, 2], [1, 1], [1, 1],
                                    True, idx], {}))(*_pool_inputs(g, d))),
    ("avg_pool", "aten.avg_pool2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 7, 6), [3, 3], [2, 2], [1, 1], False, True], {})),
    ("avg_pool_backward", "aten.avg_pool2d_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 4, 3), rn(g, d, 2, 3, 7, 6), [3, 3], [2, 2], [1, 1], False,
                    True, None], {})),
    ("adaptive_avg", "aten._adaptive_avg_pool2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 6, 4), [1, 1]], {})),
    ("adaptive_avg_backward", "aten._adaptive_avg_pool2d_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 1, 1), rn(g, d, 2, 3, 6, 4)], {})),
    ("embedding", "aten.embedding.default",
     lambda g, d: ([rn(g, d, 6, 4), torch.tensor([[0, 5, 2], [2, 2, 1]])], {})),
    ("embedding_backward", "aten.embedding_dense_backward.default",
     lambda g, d: ([rn(g, d, 2, 3, 4), torch.tensor([[0, 5, 2], [2, 2, 1]]), 6, 1, False],
                   {})),
    # EmbeddingBag: an empty first bag, repeated indices, sum / mean / max, a padding index,
    # the offsets with their last (include_last_offset), per-sample weights
    # rotary embeddings: sin and cos (fdlibm's, rounded once), a scalar base to tensor powers
    ("sin", "aten.sin.default", lambda g, d: ([rn(g, d, *E, lo=-20.0, hi=20.0)], {})),
    ("cos", "aten.cos.default", lambda g, d: ([rn(g, d, *E, lo=-20.0, hi=20.0)], {})),
    ("pow_scalar_base", "aten.pow.Scalar", lambda g, d: ([10000.0, rn(g, d, *E)], {})),
    ("pow_negative_base", "aten.pow.Scalar",
     lambda g, d: ([-2.0, torch.tensor([3.0, 2.0, 0.5, 0.0, -1.0, -2.5]).to(d)], {})),
    ("embedding_bag_sum", "aten._embedding_bag.default",
     lambda g, d: ([rn(g, d, 6, 4), _BAG_IDX, _BAG_OFF], {})),
    ("embedding_bag_mean", "aten._embedding_bag.default",
     lambda g, d: ([rn(g, d, 6, 4), _BAG_IDX, _BAG_OFF, False, 1], {})),
    ("embedding_bag_max_pad", "aten._embedding_bag.default",
     lambda g, d: ([rn(g, d, 6, 4), _BAG_IDX, _BAG_OFF, False, 2, False, None, False, 1],
                   {})),
    ("embedding_bag_weighted", "aten._embedding_bag.default",
     lambda g, d: ([rn(g, d, 6, 4), _BAG_IDX, torch.tensor([0, 0, 3, 5, 7]), False, 0,
                    False, rn(g, d, 7), True], {})),
    ("embedding_bag_forward_only", "aten._embedding_bag_forward_only.default",
     lambda g, d: ([rn(g, d, 6, 4), _BAG_IDX, _BAG_OFF, False, 1, False, None, False, 3],
                   {})),
    ("embedding_bag_backward_sum", "aten._embedding_bag_backward.default",
     lambda g, d: _bag_backward_args(g, d, 0)),
    ("embedding_bag_backward_mean", "aten._embedding_bag_backward.default",
     lambda g, d: _bag_backward_args(g, d, 1)),
    ("embedding_bag_backward_max", "aten._embedding_bag_backward.default",
     lambda g, d: _bag_backward_args(g, d, 2)),
    ("embedding_bag_dense_backward", "aten._embedding_bag_dense_backward.default",
     lambda g, d: (lambda a: ([a[0], a[1]] + a[3:9] + [None, 1], {}))(
         _bag_backward_args(g, d, 0, pad=1)[0])),
    ("sdpa_causal", "aten._scaled_dot_product_flash_attention_for_cpu.default",
     lambda g, d: (list(_sdpa_inputs(g, d, True)[:3]) + [0.0, True], {})),
    ("sdpa_mask", "aten._scaled_dot_product_flash_attention_for_cpu.default",
     lambda g, d: (list(_sdpa_inputs(g, d, False)[:3]) + [0.0, False],
                   {"attn_mask": rn(g, d, 5, 6)})),
    ("sdpa_backward", "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
     lambda g, d: (lambda q, k, v, o, lse: ([rn(g, d, *o.shape), q, k, v, o, lse, 0.0, True],
                                            {}))(*_sdpa_inputs(g, d, True))),
    ("sdpa_math", "aten._scaled_dot_product_attention_math.default",
     lambda g, d: (list(_sdpa_inputs(g, d, False)[:3]), {"is_causal": True})),
    ("addcmul_", "aten.addcmul_.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E), rn(g, d, *E)], {"value": 0.001})),
    ("addcdiv_", "aten.addcdiv_.default",
     lambda g, d: ([rn(g, d, *E), rn(g, d, *E), pos(g, d, *E)], {"value": -0.01})),
    ("lerp_small", "aten.lerp_.Scalar", lambda g, d: ([rn(g, d, *E), rn(g, d, *E), 0.1],
                                                      {})),
    ("lerp_large", "aten.lerp.Scalar", lambda g, d: ([rn(g, d, *E), rn(g, d, *E), 0.9],
                                                     {})),
    ("foreach_add_list", "aten._foreach_add_.List",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2, 2)], [rn(g, d, 3), rn(g, d, 2, 2)]],
                   {"alpha": -0.1})),
    ("foreach_add_scalar", "aten._foreach_add_.Scalar",
     lambda g, d: ([[torch.tensor(1.0), torch.tensor(4.0)], 1], {})),
    ("foreach_mul_tensor", "aten._foreach_mul_.Tensor",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2, 2)], rn(g, d)], {})),
    ("foreach_add_tensor", "aten._foreach_add_.Tensor",
     lambda g, d: ([[rn(g, d, 2, 3), rn(g, d, 4, 3)], rn(g, d)], {"alpha": 2})),
    ("foreach_mul_scalar", "aten._foreach_mul.Scalar",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2, 2)], 0.99], {})),
    ("foreach_addcmul", "aten._foreach_addcmul_.Scalar",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2)], [rn(g, d, 3), rn(g, d, 2)],
                    [rn(g, d, 3), rn(g, d, 2)]], {"value": 0.001})),
    ("foreach_addcdiv_scalarlist", "aten._foreach_addcdiv_.ScalarList",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2)], [rn(g, d, 3), rn(g, d, 2)],
                    [pos(g, d, 3), pos(g, d, 2)], [-0.01, -0.02]], {})),
    ("foreach_addcdiv_tensor", "aten._foreach_addcdiv_.Tensor",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2)], [rn(g, d, 3), rn(g, d, 2)],
                    [pos(g, d, 3), pos(g, d, 2)], torch.tensor([-0.01, -0.02])], {})),
    ("foreach_sqrt", "aten._foreach_sqrt.default",
     lambda g, d: ([[pos(g, d, 3), pos(g, d, 2)]], {})),
    ("foreach_lerp", "aten._foreach_lerp_.Scalar",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2)], [rn(g, d, 3), rn(g, d, 2)], 0.1], {})),
    ("foreach_norm", "aten._foreach_norm.Scalar",
     lambda g, d: ([[rn(g, d, 30), rn(g, d, 4, 5)]], {})),
    ("foreach_div_list", "aten._foreach_div.List",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2)], [pos(g, d, 3), pos(g, d, 2)]], {})),
    ("amp_unscale", "aten._amp_foreach_non_finite_check_and_unscale_.default",
     lambda g, d: ([[rn(g, d, 3), rn(g, d, 2, 2)], torch.zeros(()), torch.tensor(2.0 ** -16)],
                   {})),
    ("amp_unscale_inf", "aten._amp_foreach_non_finite_check_and_unscale_.default",
     lambda g, d: ([[rn(g, d, 3), torch.tensor([1.0, torch.inf], dtype=d)], torch.zeros(()),
                    torch.tensor(0.5)], {})),
    ("amp_update_scale", "aten._amp_update_scale_.default",
     lambda g, d: ([torch.tensor(65536.0), torch.tensor(1999, dtype=torch.int32),
                    torch.zeros(()), 2.0, 0.5, 2000], {})),
    ("amp_update_scale_inf", "aten._amp_update_scale_.default",
     lambda g, d: ([torch.tensor(65536.0), torch.tensor(5, dtype=torch.int32), torch.ones(()),
                    2.0, 0.5, 2000], {})),
    ("fused_adamw", "aten._fused_adamw_.default", _adam("adamw")),
    ("fused_adam", "aten._fused_adam_.default", _adam("adam")),
    ("fused_adam_amsgrad_max", "aten._fused_adam_.default",
     _adam("adam", amsgrad=True, maximize=True)),
    ("fused_sgd", "aten._fused_sgd_.default", _sgd()),
    ("fused_sgd_plain", "aten._fused_sgd_.default", _sgd(momentum=0.0, nesterov=False,
                                                         no_buffers=True)),
    # session 29's trial scripts: CELU; rotary embeddings in complex numbers (a Llama);
    # mixture-of-experts routing (top-k, nonzero, indexed writes); adaptive max pooling;
    # packed sequences
    ("celu", "aten.celu.default", lambda g, d: ([rn(g, d, 5, 4), 0.7], {})),
    ("view_as_complex", "aten.view_as_complex.default",
     lambda g, d: ([rn(g, _re(d), 3, 4, 2)], {})),
    ("view_as_real", "aten.view_as_real.default", lambda g, d: ([_cx(g, d, 3, 4)], {})),
    ("conj", "aten._conj.default", lambda g, d: ([_cx(g, d, 3, 4)], {})),
    ("conj_physical", "aten.conj_physical.default", lambda g, d: ([_cx(g, d, 3, 4)], {})),
    ("resolve_conj", "aten.resolve_conj.default", lambda g, d: ([_cx(g, d, 3, 4).conj()], {})),
    ("polar", "aten.polar.default",
     lambda g, d: ([pos(g, _re(d), 5, 4), rn(g, _re(d), 5, 4, lo=-4.0, hi=4.0)], {})),
    # session 35: a graph network's aggregations, in index order (a place hit many times;
    # a 2-d index along either dimension; without self; 40,000 values: ATen's threads)
    ("scatter_add", "aten.scatter_add.default",
     lambda g, d: ([rn(g, d, 5, 6), 0, torch.randint(0, 5, (12, 6), generator=g),
                    rn(g, d, 12, 6)], {})),
    ("scatter_add_", "aten.scatter_add_.default",
     lambda g, d: ([rn(g, d, 5, 6), 1, torch.randint(0, 6, (5, 9), generator=g),
                    rn(g, d, 5, 10)], {})),
    ("scatter_reduce_sum_big", "aten.scatter_reduce.two",
     lambda g, d: ([rn(g, d, 300), 0, torch.randint(0, 300, (40000,), generator=g),
                    rn(g, d, 40000), "sum"], {})),
    ("scatter_reduce_mean", "aten.scatter_reduce.two",
     lambda g, d: ([rn(g, d, 7), 0, torch.randint(0, 7, (30,), generator=g), rn(g, d, 30),
                    "mean"], {"include_self": False})),
    ("scatter_reduce_mean_self", "aten.scatter_reduce.two",
     lambda g, d: ([rn(g, d, 50, 8), 0, torch.randint(0, 50, (300, 8), generator=g),
                    rn(g, d, 300, 8), "mean"], {})),
    ("scatter_reduce_prod", "aten.scatter_reduce.two",
     lambda g, d: ([rn(g, d, 7), 0, torch.randint(0, 7, (30,), generator=g), rn(g, d, 30),
                    "prod"], {})),
    ("scatter_reduce_amax", "aten.scatter_reduce.two",
     lambda g, d: ([rn(g, d, 4, 5, 6), 2, torch.randint(0, 6, (3, 5, 2), generator=g),
                    rn(g, d, 3, 5, 2), "amax"], {"include_self": False})),
    ("scatter_reduce_amin", "aten.scatter_reduce.two",
     lambda g, d: ([rn(g, d, 7), 0, torch.randint(0, 7, (30,), generator=g), rn(g, d, 30),
                    "amin"], {})),
    # session 35: the complex product (rotary embeddings' ``xc * freqs``), rows of 16 complex
    # numbers: torch's whole vectors (its last few elements are contracted: an explain
    # variant); with a real tensor, a Python float, and a row broadcast
    ("mul_complex", "aten.mul.Tensor", lambda g, d: ([_cx(g, d, 3, 16), _cx(g, d, 3, 16)], {})),
    ("mul_complex_real", "aten.mul.Tensor",
     lambda g, d: ([_cx(g, d, 3, 16), rn(g, _re(d), 3, 16)], {})),
    ("mul_complex_scalar", "aten.mul.Tensor", lambda g, d: ([_cx(g, d, 3, 16), 0.37], {})),
    ("mul_complex_row", "aten.mul.Tensor",
     lambda g, d: ([_cx(g, d, 4, 2, 16), _cx(g, d, 1, 2, 16)], {})),
    ("sort", "aten.sort.default", lambda g, d: ([_perm(g, d, 4, 9)], {})),
    ("sort_desc_dim0", "aten.sort.default", lambda g, d: ([_perm(g, d, 5, 3), 0, True], {})),
    ("sort_stable_ties_nan", "aten.sort.stable",
     lambda g, d: ([_ties_nan(d)], {"stable": True, "dim": 1, "descending": True})),
    ("sort_stable_asc", "aten.sort.stable",
     lambda g, d: ([_ties_nan(d)], {"stable": True})),
    ("topk", "aten.topk.default", lambda g, d: ([_perm(g, d, 4, 9), 3], {})),
    ("topk_smallest_dim0", "aten.topk.default",
     lambda g, d: ([_perm(g, d, 6, 3), 2, 0, False], {})),
    ("nonzero", "aten.nonzero.default",
     lambda g, d: ([rn(g, d, 4, 5).clamp(min=0.0)], {})),
    ("masked_select", "aten.masked_select.default",
     lambda g, d: ([rn(g, d, 4, 5), rn(g, F64, 5) > 0], {})),
    ("index_put", "aten.index_put.default",
     lambda g, d: ([rn(g, d, 5, 4), [torch.tensor([4, 0, 2])], rn(g, d, 3, 4)], {})),
    ("index_put_acc_twice", "aten.index_put.default",
     lambda g, d: ([rn(g, d, 5, 4), [torch.tensor([1, 3, 1, 1])], rn(g, d, 4, 4), True], {})),
    ("index_put_mask", "aten.index_put_.default",
     lambda g, d: ([rn(g, d, 5, 4), [rn(g, F64, 5, 4) > 0], torch.tensor(0.5, dtype=d)], {})),
    ("index_put_impl_", "aten._index_put_impl_.default",
     lambda g, d: ([rn(g, d, 5, 4), [None, torch.tensor([3, 0, 3])], rn(g, d, 5, 3), True,
                    False], {})),
    ("index_add", "aten.index_add.default",
     lambda g, d: ([rn(g, d, 5, 4), 0, torch.tensor([1, 3, 1]), rn(g, d, 3, 4)], {})),
    ("index_add_dim1_", "aten.index_add_.default",
     lambda g, d: ([rn(g, d, 3, 5), 1, torch.tensor([0, 4, 0, 2]), rn(g, d, 3, 4)], {})),
    ("index_copy", "aten.index_copy.default",
     lambda g, d: ([rn(g, d, 5, 4), 0, torch.tensor([3, 1]), rn(g, d, 2, 4)], {})),
    ("diagonal", "aten.diagonal.default", lambda g, d: ([rn(g, d, 4, 5, 3), 1, 0, 1], {})),
    ("adaptive_max_pool", "aten.adaptive_max_pool2d.default",
     lambda g, d: ([rn(g, d, 2, 3, 7, 5), [3, 2]], {})),
    ("adaptive_max_pool_ties", "aten.adaptive_max_pool2d.default",
     lambda g, d: ([_special(ints(g, 3, 2, 2, 6, 6).to(d)), [4, 4]], {})),
    ("adaptive_max_pool_3d_input", "aten.adaptive_max_pool2d.default",
     lambda g, d: ([rn(g, d, 3, 9, 4), [2, 3]], {})),
    ("adaptive_max_pool_backward", "aten.adaptive_max_pool2d_backward.default",
     _adaptive_max_backward),
    ("pack_padded", "aten._pack_padded_sequence.default",
     lambda g, d: ([rn(g, d, 4, 6, 3), torch.tensor([6, 5, 3, 1]), True], {})),
    ("pack_padded_time_first", "aten._pack_padded_sequence.default",
     lambda g, d: ([rn(g, d, 6, 4, 3), torch.tensor([6, 6, 2, 1]), False], {})),
    ("pack_padded_backward", "aten._pack_padded_sequence_backward.default",
     lambda g, d: ([rn(g, d, 12, 3), [4, 6, 3], torch.tensor([4, 3, 3, 1, 1]), True], {})),
    # session 30: what three more user scripts met (metric learning, cells, a transformer)
    ("dot", "aten.dot.default", lambda g, d: ([rn(g, d, 37), rn(g, d, 37)], {})),
    ("vdot", "aten.vdot.default", lambda g, d: ([rn(g, d, 16), rn(g, d, 16)], {})),
    ("unsqueeze_", "aten.unsqueeze_.default", lambda g, d: ([rn(g, d, 3, 4), -1], {})),
    ("squeeze_dim_", "aten.squeeze_.dim", lambda g, d: ([rn(g, d, 3, 1, 4), 1], {})),
    ("set_source", "aten.set_.source_Tensor", lambda g, d: ([rn(g, d, 2, 3), rn(g, d, 4)], {})),
    ("diagonal_backward", "aten.diagonal_backward.default",
     lambda g, d: ([rn(g, d, 3, 3), [3, 5, 4], 1, 1, 2], {})),
    ("diagonal_backward_neg", "aten.diagonal_backward.default",
     lambda g, d: ([rn(g, d, 2), [4, 3], -2, -2, -1], {})),
    ("glu", "aten.glu.default", lambda g, d: ([rn(g, d, 4, 6), -1], {})),
    ("glu_dim0", "aten.glu.default", lambda g, d: ([rn(g, d, 4, 3), 0], {})),
    ("glu_backward", "aten.glu_backward.default",
     lambda g, d: ([rn(g, d, 4, 3), rn(g, d, 4, 6), -1], {})),
    ("logsumexp", "aten.logsumexp.default", lambda g, d: ([rn(g, d, 4, 6), [1], False], {})),
    ("logsumexp_all_kept", "aten.logsumexp.default",
     lambda g, d: ([rn(g, d, 3, 4, 5), [0, 2], True], {})),
    ("logsumexp_inf", "aten.logsumexp.default", _with_infinities),
    ("norm_dim", "aten.norm.ScalarOpt_dim", lambda g, d: ([rn(g, d, 4, 6), 2, [1], True], {})),
    ("norm_all", "aten.norm.Scalar", lambda g, d: ([rn(g, d, 4, 6), 2], {})),
    ("weight_norm", "aten._weight_norm_interface.default",
     lambda g, d: ([rn(g, d, 5, 7), rn(g, d, 5, 1), 0], {})),
    ("weight_norm_last", "aten._weight_norm_interface.default",
     lambda g, d: ([rn(g, d, 5, 7), rn(g, d, 1, 7), 1], {})),
    ("weight_norm_backward", "aten._weight_norm_interface_backward.default",
     _weight_norm_backward(0)),
    ("weight_norm_backward_last", "aten._weight_norm_interface_backward.default",
     _weight_norm_backward(1)),
    *[(f"cdist_p{p}", "aten._cdist_forward.default",
       lambda g, d, p=p: ([rn(g, d, 2, 6, 5), rn(g, d, 2, 7, 5), p, None], {}))
      for p in (1.0, 2.0, math.inf)],
    *[(f"cdist_backward_p{p}", "aten._cdist_backward.default", _cdist_backward(p))
      for p in (1.0, 2.0, math.inf)],
    ("all_dim", "aten.all.dim", lambda g, d: ([rn(g, d, 3, 4) > 0, 1, False], {})),
    ("any_dim_kept", "aten.any.dim", lambda g, d: ([rn(g, d, 3, 4) > 1, 0, True], {})),
    ("all_dims", "aten.all.dims", lambda g, d: ([rn(g, d, 2, 3, 4) > -1.5, [0, 2]], {})),
    ("is_all_true", "aten._is_all_true.default",
     lambda g, d: ([torch.tensor(bool(rn(g, d, 1)[0] > 0))], {})),
    ("hardsigmoid", "aten.hardsigmoid.default",
     lambda g, d: ([_at_threes(rn(g, d, 5, 7, lo=-4, hi=4))], {})),
    ("hardsigmoid_backward", "aten.hardsigmoid_backward.default",
     lambda g, d: ([rn(g, d, 5, 7), _at_threes(rn(g, d, 5, 7, lo=-4, hi=4))], {})),
    ("channel_shuffle", "aten.channel_shuffle.default",
     lambda g, d: ([rn(g, d, 2, 12, 3, 3), 3], {})),
    # (32 elements: torch's vector loop, whose zero is +0.0; its scalar tail's x * 0 keeps a
    # negative x's sign, which --explain calls signed-zero)
    ("softshrink", "aten.softshrink.default",
     lambda g, d: ([_shrink_edges(rn(g, d, 4, 8, lo=-1, hi=1)), 0.25], {})),
    ("softshrink_backward", "aten.softshrink_backward.default",
     lambda g, d: ([rn(g, d, 5, 7), _shrink_edges(rn(g, d, 5, 7, lo=-1, hi=1)), 0.25], {})),
    ("rrelu_backward_train", "aten.rrelu_with_noise_backward.default",
     lambda g, d: ([rn(g, d, 5, 7), rn(g, d, 5, 7), rn(g, d, 5, 7, lo=0.1, hi=0.4), 0.125,
                    1 / 3, True, False], {})),
    ("rrelu_backward_eval", "aten.rrelu_with_noise_backward.default",
     lambda g, d: ([rn(g, d, 5, 7), rn(g, d, 5, 7), torch.ones(5, 7, dtype=d), 0.125, 1 / 3,
                    False, False], {})),
    ("trilinear", "aten._trilinear.default",
     lambda g, d: ([rn(g, d, 8, 6), rn(g, d, 4, 6, 5), rn(g, d, 8, 5), [1, 3], [0], [1, 2],
                    [2, 3]], {})),
    ("trilinear_weight_grad", "aten._trilinear.default",
     lambda g, d: ([rn(g, d, 8, 6), rn(g, d, 8, 4), rn(g, d, 8, 5), [1, 3], [2, 3], [1, 2],
                    [0]], {})),
    ("logcumsumexp", "aten.logcumsumexp.default",
     lambda g, d: ([_with_infinities(g, d)[0][0], 1], {})),
    ("logcumsumexp_dim0", "aten.logcumsumexp.default", lambda g, d: ([rn(g, d, 5, 3), 0], {})),
    *[(f"multi_margin_p{p}_r{r}{'_w' if w else ''}", "aten.multi_margin_loss.default",
       lambda g, d, p=p, r=r, w=w: ([rn(g, d, 8, 4), torch.tensor([0, 3, 1, 2, 2, 0, 1, 3]), p,
                                     0.7, rn(g, d, 4, lo=0.5, hi=1.5) if w else None, r], {}))
      for p, r, w in ((1, 1, False), (2, 2, True), (1, 0, True))],
    *[(f"multi_margin_backward_p{p}_r{r}", "aten.multi_margin_loss_backward.default",
       lambda g, d, p=p, r=r: ([rn(g, d, 8) if r == 0 else rn(g, d, 1)[0], rn(g, d, 8, 4),
                                torch.tensor([0, 3, 1, 2, 2, 0, 1, 3]), p, 0.7, None, r], {}))
      for p, r in ((1, 1), (2, 0))],
    ("embedding_renorm_", "aten.embedding_renorm_.default",
     lambda g, d: ([rn(g, d, 10, 6), torch.tensor([[1, 3, 3], [9, 0, 1]]), 1.0, 2.0], {})),
]

# float32 bit for bit with torch's CPU kernel (measured, torch 2.13, this machine). The rest
# differ by design (a different written order: BLAS/oneDNN blocking, Welford or cascade
# reductions, softmax's reciprocal, SLEEF transcendentals, FMA in torch's vector loops): their
# float64 values agree and docs/reference-order.md names each order.
BIT_EXACT = {
    "remainder", "remainder_scalar_int", "fmod", "cummax", "cummin", "rot90", "tril_indices",
    "triu_indices",
    "unique2_nan_zero", "unique2_zero_first", "unique2_ints_2d", "median", "median_nan",
    "bucketize", "bucketize_right_i32", "searchsorted_rows", "searchsorted_sorter", "histc",
    "histc_auto", "masked_scatter",
    # one IEEE operation per element, as written (torch's vector loops and scalar tails alike)
    "add", "add_scalar", "add_0d_f64", "add_", "add_out", "sub_alpha", "rsub", "mul",
    "mul_scalar", "mul_", "div", "div_scalar", "div_floor", "neg", "reciprocal", "pow2",
    "pow3", "addcmul_", "addcdiv_", "dropout_eval", "dropout_backward", "nll_none",
    "nll_none_ignore", "nll_backward", "nll_backward_weight", "mse_backward",
    # selections, clamps, copies, casts, fills, views (exact)
    "relu", "abs", "threshold_backward", "threshold", "leaky_relu", "leaky_relu_backward",
    "hardtanh", "hardswish", "hardswish_backward", "sign", "index", "gather", "chunk",
    "flatten", "narrow", "new_zeros", "repeat", "aminmax", "aminmax_dim", "scatter_value_",
    "scatter_src", "pixel_shuffle", "pixel_unshuffle", "eye",
    "arange", "amin", "min_dim", "where", "masked_fill", "clamp", "clamp_max",
    "maximum", "gt", "fill_", "zero_", "copy_", "to_copy_bf16", "to_copy_f32", "clone",
    "detach", "zeros_like", "ones_like", "full", "scalar_tensor", "view", "_unsafe_view", "t",
    "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "cat",
    "stack", "split", "split_with_sizes", "unbind", "index_select", "constant_pad_nd",
    "constant_pad_nd_crop", "max_unpool2d", "max_unpool2d_collide", "max_unpool3d",
    "pdist_backward", "pdist_backward_1", "bincount", "bincount_weights",
    "embedding", "amax", "max_dim", "argmax", "max_pool",
    # serial in the same order: scatter-adds in index order, window sums tap by tap
    "max_pool_backward", "embedding_backward", "avg_pool", "adaptive_avg",
    "adaptive_avg_backward", "upsample_nearest", "upsample_nearest_backward",
    "select_backward", "slice_backward", "unsafe_split",
    # torch's CPU foreach kernels are the per-tensor op in a loop
    "foreach_add_scalar", "foreach_add_tensor", "foreach_mul_tensor", "foreach_mul_scalar",
    "foreach_addcmul",
    "foreach_addcdiv_scalarlist", "foreach_addcdiv_tensor", "foreach_div_list",
    "amp_unscale", "amp_unscale_inf", "amp_update_scale", "amp_update_scale_inf",
    # more selections and gathers, and their scatter-adds in output order
    "prelu", "prelu_backward", "flip", "roll", "roll_flat", "hardtanh_backward", "tril",
    "triu", "tril_",
    # an embedding bag sums in index order (its backward: no index more than 16 times)
    "embedding_bag_sum", "embedding_bag_mean", "embedding_bag_max_pad",
    "embedding_bag_forward_only", "embedding_bag_backward_sum", "embedding_bag_backward_max",
    "embedding_bag_dense_backward",
    "transpose_", "t_", "reflection_pad1d",
    "reflection_pad2d_backward", "smooth_l1_backward", "grad_input_out",
    # session 29's selections, complex views and packed sequences
    "view_as_complex", "view_as_real", "conj", "conj_physical", "resolve_conj", "sort",
    "mul_complex", "mul_complex_real", "mul_complex_scalar", "mul_complex_row",
    "scatter_add", "scatter_add_", "scatter_reduce_sum_big", "scatter_reduce_mean",
    "scatter_reduce_mean_self", "scatter_reduce_prod", "scatter_reduce_amax",
    "scatter_reduce_amin",
    "sort_desc_dim0", "sort_stable_ties_nan", "sort_stable_asc", "topk", "topk_smallest_dim0",
    "nonzero", "masked_select", "index_put", "index_put_acc_twice", "index_put_mask",
    "index_put_impl_", "index_add", "index_add_dim1_", "index_copy", "diagonal",
    "adaptive_max_pool", "adaptive_max_pool_ties", "adaptive_max_pool_3d_input",
    "adaptive_max_pool_backward", "pack_padded", "pack_padded_time_first",
    "pack_padded_backward",
    # session 30's: copies and selections, and cdist's direct kernel (the sums over j in
    # order, as ATen's loop)
    "unsqueeze_", "squeeze_dim_", "set_source", "diagonal_backward", "diagonal_backward_neg",
    "cdist_p1.0", "cdist_pinf", "cdist_backward_p1.0", "cdist_backward_p2.0",
    "cdist_backward_pinf", "all_dim", "any_dim_kept", "all_dims", "is_all_true",
    "hardsigmoid", "hardsigmoid_backward", "channel_shuffle", "softshrink",
    "softshrink_backward", "rrelu_backward_train", "rrelu_backward_eval",
    "multi_margin_backward_p1_r1", "multi_margin_backward_p2_r0",
}

IDS = [c[0] for c in CASES]
# the forms whose output is a view of their input (the judge compares strided arrays; the
# native product reads a transposed operand in place)
VIEW_FORMS = {"t", "transpose", "permute"}


# torch's float64 kernels that are not accurate to 1e-12: its trigamma (a short series: 5e-10
# from the exact value the reference gives, mpmath's)
LOOSE_F64 = {"polygamma1": 1e-8}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_float64_values_agree_with_torch(case):
    name, op, build = case
    ref, tor = run_both(op, build, F64)
    args, kwargs = build(torch.Generator().manual_seed(7), F64)
    np_args, np_kwargs = to_np(list(args)), to_np(kwargs)
    ins = [a for a in _flat_np(np_args + list(np_kwargs.values()))]
    again = reference(op, np_args, np_kwargs)
    # an output over an input's memory only where the op is a view (read-only: nothing can
    # write through it into the input; the judge's chained inputs are writeable arrays)
    for r in again:
        if any(np.shares_memory(r, a) for a in ins):
            assert name in VIEW_FORMS and not r.flags.writeable, f"{name} aliases"
    for r, t in zip(ref, tor, strict=True):
        if r.dtype.kind == "f":
            rtol = LOOSE_F64.get(name, 1e-12)
            np.testing.assert_allclose(r, t, rtol=rtol, atol=1e-13, err_msg=name)
        else:
            assert np.array_equal(r, t), name


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in BIT_EXACT],
                         ids=[c for c in IDS if c in BIT_EXACT])
def test_float32_bits_equal_torch_where_the_order_is_the_same(case, one_thread):
    name, op, build = case
    ref, tor = run_both(op, build, F32)
    for r, t in zip(ref, tor, strict=True):
        assert bits_equal(r, t), name


# what torch's CPU kernels refuse in bfloat16 ("not implemented for 'BFloat16'"); the forms
# refuse it too (float32 and float64 only)
NO_BF16 = {c[0] for c in CASES if c[1].startswith(("aten._cdist_", "aten._pdist_",
                                                    "aten.multi_margin",
                                                    "aten.linalg_", "aten._linalg_",
                                                    "aten.special_log_ndtr"))}


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in NO_BF16],
                         ids=[c for c in IDS if c not in NO_BF16])
def test_bfloat16_types_and_values_follow_torch(case):
    """Half inputs: torch's output dtypes and shapes; values within a few bfloat16 ulps of
    torch's (both compute in float32 and round; the orders differ as in float32). Not
    ``histc``'s counts: its bfloat16 kernel bins by bfloat16 arithmetic (below)."""
    name, op, build = case
    ref, tor = run_both(op, build, BF16)
    if name.startswith("histc"):
        return
    for r, t in zip(ref, tor, strict=True):
        if r.dtype.kind in "fV":
            r64, t64 = r.astype(np.float64), t.astype(np.float64)
            same = (r64 == t64) | (np.isnan(r64) & np.isnan(t64))  # infinities included
            r64, t64 = r64[~same], t64[~same]
            scale = max(1.0, float(np.max(np.abs(t64)))) if t64.size else 1.0
            assert np.max(np.abs(r64 - t64), initial=0) <= 4 * 2.0 ** -8 * scale, name
        else:
            assert np.array_equal(r, t), name


# ---- the tape's own forms, bit for bit ----------------------------------------------------------
from tapescope.core import Tape, ops  # noqa: E402
from tapescope.core.optim import SGD  # noqa: E402


def _tape_run(dtype, make, xs, g):
    """Values and gradients of ``make(*params)`` on a tape, the incoming gradient ``g`` exactly
    (loss = sum(y * g): the mul's backward passes 1 * g)."""
    t = Tape(dtype)
    vs = [t.param(x) for x in xs]
    y = make(*vs)
    t.backward(ops.sum(ops.mul(y, t.const(g))))
    return np.asarray(t.value(y)), [np.asarray(t.grad(v)) for v in vs]


def _r(rng, dtype, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_forms_equal_the_tapes_forms_bit_for_bit(dtype):
    rng = np.random.default_rng(3)
    x, g = _r(rng, dtype, 4, 9), _r(rng, dtype, 4, 9)
    tdt = {np.float64: "torch.float64", np.float32: "torch.float32"}[dtype]
    rows = [
        ("softmax", lambda v: ops.softmax(v, -1),
         lambda y: reference("aten._softmax.default", [x, -1, False], {}),
         lambda y: reference("aten._softmax_backward_data.default", [g, y, -1, tdt], {})),
        ("log_softmax", lambda v: ops.log_softmax(v, -1),
         lambda y: reference("aten._log_softmax.default", [x, -1, False], {}),
         lambda y: reference("aten._log_softmax_backward_data.default", [g, y, -1, tdt], {})),
        ("silu", ops.silu, lambda y: reference("aten.silu.default", [x], {}),
         lambda y: reference("aten.silu_backward.default", [g, x], {})),
        ("sigmoid", ops.sigmoid, lambda y: reference("aten.sigmoid.default", [x], {}),
         lambda y: reference("aten.sigmoid_backward.default", [g, y], {})),
        ("tanh", ops.tanh, lambda y: reference("aten.tanh.default", [x], {}),
         lambda y: reference("aten.tanh_backward.default", [g, y], {})),
        ("relu", ops.relu, lambda y: reference("aten.relu.default", [x], {}),
         lambda y: reference("aten.threshold_backward.default", [g, x, 0], {})),
        ("exp", ops.exp, lambda y: reference("aten.exp.default", [x], {}), None),
    ]
    for name, make, fwd, bwd in rows:
        y, (gx,) = _tape_run(dtype, make, [x], g)
        assert bits_equal(fwd(y)[0], y), name
        if bwd is not None:
            assert bits_equal(bwd(y)[0], gx), name
    xp = np.abs(x) + dtype(0.5)
    for name, make, op in (("log", ops.log, "aten.log.default"),
                           ("sqrt", ops.sqrt, "aten.sqrt.default")):
        y, _ = _tape_run(dtype, make, [xp], g)
        assert bits_equal(reference(op, [xp], {})[0], y), name
    s, _ = _tape_run(dtype, lambda v: ops.sum(v, axis=0), [x], g[0])
    assert bits_equal(reference("aten.sum.dim_IntList", [x, [0]], {})[0], s)
    m, _ = _tape_run(dtype, lambda v: ops.mean(v, axis=-1), [x], g[:, 0])
    assert bits_equal(reference("aten.mean.dim", [x, [-1]], {})[0], m)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_products_norms_conv_attention_equal_the_tape(dtype):
    rng = np.random.default_rng(4)
    a, b, g = _r(rng, dtype, 5, 7), _r(rng, dtype, 7, 3), _r(rng, dtype, 5, 3)
    y, (ga, gb) = _tape_run(dtype, ops.matmul, [a, b], g)
    assert bits_equal(reference("aten.mm.default", [a, b], {})[0], y)
    assert bits_equal(reference("aten.mm.default", [g, b.T], {})[0], ga)
    assert bits_equal(reference("aten.mm.default", [a.T, g], {})[0], gb)
    a3, b3 = _r(rng, dtype, 2, 5, 7), _r(rng, dtype, 2, 7, 3)
    y, _ = _tape_run(dtype, ops.bmm, [a3, b3], _r(rng, dtype, 2, 5, 3))
    assert bits_equal(reference("aten.bmm.default", [a3, b3], {})[0], y)
    # layer_norm: forward, and the backward from the forward's own mean and rstd
    x, gam, g = _r(rng, dtype, 6, 8), _r(rng, dtype, 8, lo=0.5, hi=1.5), _r(rng, dtype, 6, 8)
    y, (gx, gg) = _tape_run(dtype, lambda v, w: ops.__getattr__("layer_norm")(v, w, eps=1e-5),
                            [x, gam], g)
    out, mu, rs = reference("aten.native_layer_norm.default", [x, [8], gam, None, 1e-5], {})
    assert bits_equal(out, y)
    rx, rg = reference("aten.native_layer_norm_backward.default",
                       [g, x, [8], mu, rs, gam, None, [True, True, False]], {})
    assert bits_equal(rx, gx) and bits_equal(rg, gg)
    # conv2d forward and backward (the tape's conv2d op, pads 1)
    xc, wc = _r(rng, dtype, 2, 3, 6, 5), _r(rng, dtype, 4, 3, 3, 3)
    gc = _r(rng, dtype, 2, 4, 6, 5)
    t = Tape(dtype)
    xv, wv = t.param(xc), t.param(wc)
    yv = t.record("conv2d", [xv, wv], {"pads": (1, 1, 1, 1)})
    t.backward(ops.sum(ops.mul(yv, t.const(gc))))
    conv = [xc, wc, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1]
    assert bits_equal(reference("aten.convolution.default", conv, {})[0], t.value(yv))
    rgx, rgw = reference("aten.convolution_backward.default",
                         [gc, xc, wc, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                          [True, True, False]], {})
    assert bits_equal(rgx, np.asarray(t.grad(xv))) and bits_equal(rgw, np.asarray(t.grad(wv)))
    # the attention composite (causal) forward and backward
    q, k, v = (_r(rng, dtype, 2, 5, 4) for _ in range(3))
    go = _r(rng, dtype, 2, 5, 4)
    y, (gq, gk, gv) = _tape_run(dtype, lambda a_, b_, c_: ops.attention(a_, b_, c_, True),
                                [q, k, v], go)
    o, _ = reference("aten._scaled_dot_product_flash_attention_for_cpu.default",
                     [q[None], k[None], v[None], 0.0, True], {})
    assert bits_equal(o[0], y)
    rq, rk, rv = reference(
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
        [go[None], q[None], k[None], v[None], o, None, 0.0, True], {})
    assert bits_equal(rq[0], gq) and bits_equal(rk[0], gk) and bits_equal(rv[0], gv)
    # mse = mean((y - t)^2) and SGD's w - lr * g
    p, q2 = _r(rng, dtype, 4, 3), _r(rng, dtype, 4, 3)
    t = Tape(dtype)
    assert bits_equal(reference("aten.mse_loss.default", [p, q2, 1], {})[0],
                      np.asarray(t.value(ops.mse(t.param(p), t.const(q2)))))
    t = Tape(dtype)
    w = t.param(p)
    t.backward(ops.sum(ops.mul(w, t.const(q2))))
    opt = SGD(t, lr=0.05)
    opt.add(w)
    opt.step()
    ref = reference("aten._fused_sgd_.default", [[p], [q2], []],
                    {"weight_decay": 0.0, "momentum": 0.0, "lr": 0.05, "dampening": 0.0,
                     "nesterov": False, "maximize": False, "is_first_step": False})
    assert bits_equal(ref[0], np.asarray(t.value(w)))


# ---- no guesses -------------------------------------------------------------------------------
def test_an_unknown_op_raises_no_reference_naming_it():
    with pytest.raises(NoReference, match=r"aten\.frobnicate\.default"):
        reference("aten.frobnicate.default", [np.zeros(3)], {})
    assert not has_reference("aten.frobnicate.default")
    assert not has_reference("aten.frobnicate_.Tensor")
    assert not has_reference("aten._foreach_frobnicate_.List")
    assert has_reference("aten.add_.Tensor") and has_reference("aten._foreach_addcdiv_.Tensor")
    q = np.zeros((1, 2, 3, 4))
    with pytest.raises(NoReference, match=r"flash_attention_for_cpu\.default: .*random"):
        reference("aten._scaled_dot_product_flash_attention_for_cpu.default",
                  [q, q, q, 0.1, False], {})  # a form refuses what it cannot reproduce


# ---- complex numbers (session 35) --------------------------------------------------------------
_DTS = {F64: np.float64, F32: np.float32, torch.float16: np.float16, BF16: ml_dtypes.bfloat16,
        torch.complex64: np.complex64, torch.complex128: np.complex128, torch.int64: np.int64,
        torch.int32: np.int32, torch.bool: np.bool_, torch.uint8: np.uint8}


def test_complex_types_promote_as_torchs():
    """torch.result_type of every pair of these types, as dimensioned and 0-d tensors, and of
    each with a Python int, float, bool and complex: the reference's type (a complex with a
    float tensor took the float's type before, a Python float made float32 of complex64)."""
    from tapescope.core.capture.aten_ref_table import result_type

    seen = 0
    for (ta, na), (tb, nb) in itertools.product(_DTS.items(), repeat=2):
        for sa, sb in (((3,), (3,)), ((3,), ()), ((), (3,)), ((), ())):
            want = torch.result_type(torch.zeros(sa, dtype=ta), torch.zeros(sb, dtype=tb))
            if want == torch.complex32:  # (float16 and a complex 0-d: a type no capture holds)
                with pytest.raises(NoReference, match="complex32"):
                    result_type(np.zeros(sa, na), np.zeros(sb, nb))
                continue
            got = result_type(np.zeros(sa, na), np.zeros(sb, nb))
            assert got == np.dtype(_DTS[want]), (ta, tb, sa, sb, got)
            seen += want.is_complex
    for (ta, na), v in itertools.product(_DTS.items(), (2, 2.5, True, 1j)):
        want = torch.result_type(torch.zeros(3, dtype=ta), v)
        if want == torch.complex32:  # (float16 with a complex: a type a capture cannot hold)
            with pytest.raises(NoReference, match="complex32"):
                result_type(np.zeros(3, na), v)
            continue
        assert result_type(np.zeros(3, na), v) == np.dtype(_DTS[want]), (ta, v)
    assert seen > 100


@pytest.mark.parametrize("op, args", [
    ("aten.exp.default", ["c"]), ("aten.tanh.default", ["c"]), ("aten.sqrt.default", ["c"]),
    ("aten.addmm.default", ["c", "c", "c"]), ("aten.log.default", ["c"]),
    ("aten.addcmul.default", ["c", "c", "c"]), ("aten._foreach_exp.default", [["c"]]),
])
def test_a_complex_operand_of_a_real_numbers_form_has_no_reference(op, args):
    """A form written for real numbers refuses a complex operand (it dropped the imaginary
    parts, or took numpy's own complex order) rather than answer for it. (``div``, ``sum``,
    ``mean``, the products, ``angle``, ``eq`` and ``ne`` have complex forms since session 47:
    tests/capture/test_refs_session47.py.)"""
    c = np.array([[1 + 2j, 3 - 1j], [0.5j, -2.0]], np.complex64)
    sub = [([c] if a == ["c"] else a) if isinstance(a, list) else c if a == "c" else a
           for a in args]
    with pytest.raises(NoReference, match="complex operand"):
        reference(op, sub, {})


def test_a_complex_product_is_its_parts_products_then_their_sum():
    """(ar br - ai bi) + (ar bi + ai br) i, each product rounded: not numpy's own complex
    multiply, which fuses a product into the sum where the CPU has FMA."""
    rng = np.random.default_rng(35)
    a, b = ((rng.standard_normal(4000) + 1j * rng.standard_normal(4000)).astype(np.complex64)
            for _ in range(2))
    got = reference("aten.mul.Tensor", [a, b], {})[0]
    assert got.dtype == np.complex64
    re = a.real * b.real - a.imag * b.imag
    im = a.real * b.imag + a.imag * b.real
    assert bits_equal(got.real.copy(), re) and bits_equal(got.imag.copy(), im)
    x = (a.real.astype(np.float64) * b.real + (-(a.imag * b.imag))).astype(np.float32)
    assert not bits_equal(re, x)  # (the fused order is another answer: the test can tell)
    # a complex and a Python float: complex64, the float a complex of zero imaginary part
    half = reference("aten.mul.Tensor", [a, 0.5], {})[0]
    assert half.dtype == np.complex64 and bits_equal(half, a * np.complex64(0.5))


@pytest.mark.parametrize("op, args, why", [
    ("aten.scatter_.value", [np.zeros((2, 3)), 1, np.array([[3], [0]]), 1.0], "out of range"),
    ("aten.scatter.src", [np.zeros((2, 3)), 1, np.array([[1, 1]]), np.ones((1, 2))], "twice"),
    ("aten.scatter.value", [np.zeros((2, 3)), 1, np.array([[0], [1], [2]]), 1.0],
     "does not fit"),
    ("aten.repeat.default", [np.zeros((2, 3)), [2]], "fewer sizes"),
    ("aten.aminmax.default", [np.zeros((0, 3))], "empty"),
    ("aten.pixel_shuffle.default", [np.zeros((1, 6, 2, 2)), 2], "multiple"),
    ("aten.eye.default", [-1], "non-negative"),
    ("aten._cdist_forward.default", [np.zeros((2, 3)), np.zeros((4, 3)), 3.0, None],
     "order 3.0"),
    ("aten._cdist_forward.default", [np.zeros((2, 3)), np.zeros((4, 2)), 2.0, None],
     "two float"),
    ("aten.glu.default", [np.zeros((2, 5)), -1], "odd dimension"),
    ("aten.diagonal_backward.default", [np.zeros(3), [4, 4], 0, 0, 1], "a gradient of"),
    ("aten.diagonal_backward.default", [np.zeros(3), [-4, 4], 0, 0, 1], "non-negative"),
    ("aten._weight_norm_interface.default", [np.zeros((5, 7)), np.zeros((1, 7)), 0],
     "the weight wants"),
    ("aten.vdot.default", [np.zeros(3), np.zeros(4)], "two vectors"),
    ("aten.multi_margin_loss.default", [np.zeros((2, 3)), np.array([0, 3]), 1, 1.0, None, 1],
     "outside the classes"),
    ("aten.multi_margin_loss.default", [np.zeros((2, 3)), np.array([0, 1]), 3, 1.0, None, 1],
     "p 1 or 2"),
    ("aten._trilinear.default", [np.zeros((8, 6)), np.zeros((4, 7, 5)), np.zeros((8, 5)),
                                 [1, 3], [0], [1, 2], [2, 3]], "broadcast"),
    ("aten.max_unpool2d.default", [np.zeros((1, 2, 2)), np.array([[[0, 4], [1, 2]]]), [2, 2]],
     "outside its output plane"),
    ("aten.max_unpool2d.default", [np.zeros((1, 2, 2)), np.zeros((1, 2, 2), np.int64),
                                   [-2, 2]], "do not go together"),
    ("aten.max_unpool2d.default", [np.zeros((2, 2)), np.zeros((2, 2), np.int64), [2, 2]],
     "do not go together"),
    ("aten.constant_pad_nd.default", [np.zeros((2, 3)), [-2, -2]], "crop more"),
    ("aten.constant_pad_nd.default", [np.zeros((2, 3)), [1, 1, 1, 1, 1, 1]], "6 pads for 2"),
    ("aten.constant_pad_nd.default", [np.zeros((2, 3)), [1]], "1 pads for 2"),
    ("aten._pdist_forward.default", [np.zeros((3, 2)), 3.0], "order 3.0"),
    ("aten.bincount.default", [np.array([1, -1])], "non-negative"),
    ("aten.bincount.default", [np.array([[1]])], "1-d input"),
    ("aten.bincount.default", [np.array([1, 2]), np.ones(3)], "weights of the input"),
    ("aten._pdist_forward.default", [np.zeros(3), 2.0], "float32 / float64"),
    ("aten._pdist_backward.default", [np.zeros(2), np.zeros((3, 2)), 2.0, np.zeros(3)],
     "one per pair")])
def test_what_torch_refuses_or_orders_has_no_form(op, args, why):
    """What torch raises for (an index out of range, an empty aminmax), or where its answer is
    the loop's order (a src scattered onto one place twice), is no reference, named."""
    with pytest.raises(NoReference, match=why):
        reference(op, args, {})


def test_random_ops_stand_on_their_recorded_draws():
    g = torch.Generator().manual_seed(0)
    x = rn(g, F32, 6, 5)
    torch.manual_seed(1)
    y, mask = torch.ops.aten.native_dropout(x, 0.3, True)
    with pytest.raises(NoReference, match="recorded"):
        reference("aten.native_dropout.default", [to_np(x), 0.3, True], {})
    ry, rm = reference("aten.native_dropout.default", [to_np(x), 0.3, True],
                       {"_recorded": [to_np(y), to_np(mask)]})
    assert bits_equal(ry, to_np(y)) and np.array_equal(rm, to_np(mask))
    draw = to_np(torch.empty(4, 3).bernoulli_(0.5))
    (rd,) = reference("aten.bernoulli_.float", [np.zeros((4, 3), np.float32), 0.5],
                      {"_recorded": [draw]})
    assert bits_equal(rd, draw)


# ---- a real training step ----------------------------------------------------------------------
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class Recorder(TorchDispatchMode):
    """Every aten op of the step: its name, its arguments as the judge sees them (before the
    call) and its outputs in the recorder's convention (after)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if not name.startswith("aten."):
            return func(*args, **kwargs)
        a, k = to_np(list(args)), to_np(kwargs)
        res = func(*args, **kwargs)
        self.calls.append((name, a, k, [to_np(t) for t in outputs_of(func, args, kwargs, res)]))
        return res


def _mlp_adamw_step(dtype, fused):
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Dropout(0.1),
                          nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 4)).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
    x, y = torch.randn(6, 8, dtype=dtype), torch.randint(0, 4, (6,))
    rec = Recorder()
    with rec:
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    return rec.calls


def _cnn_sgd_step(dtype, fused):
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, padding=1), nn.Tanh(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=1e-4, fused=fused)
    x, y = torch.randn(2, 3, 8, 8, dtype=dtype), torch.randint(0, 3, (2,))
    rec = Recorder()
    with rec:
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    return rec.calls


def _attention_adam_step(dtype, fused):
    torch.manual_seed(0)
    nn = torch.nn
    emb, proj = nn.Embedding(11, 8).to(dtype), nn.Linear(8, 24).to(dtype)
    head = nn.Linear(8, 11).to(dtype)
    params = [*emb.parameters(), *proj.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, foreach=not fused, fused=fused or None)
    tok = torch.randint(0, 11, (2, 5))
    rec = Recorder()
    with rec:
        for _ in range(2):
            h = emb(tok)
            q, k, v = proj(h).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            logits = head(a.transpose(1, 2).reshape(2, 5, 8))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), tok.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
    return rec.calls


class _UNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1, self.g1 = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.up, self.out = nn.ConvTranspose2d(8, 8, 2, stride=2), nn.Conv2d(16, 3, 1)

    def forward(self, x):
        f = torch.nn.functional
        h = f.silu(self.g1(self.c1(x)))
        d = self.down(h)
        u = self.up(d) + f.interpolate(d, scale_factor=2, mode="nearest")
        return self.out(torch.cat([h, u], 1))


def _unet_adam_step(dtype, fused):
    torch.manual_seed(0)
    model = _UNet().to(dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
    x = torch.randn(2, 3, 8, 8, dtype=dtype)
    rec = Recorder()
    with rec:
        for _ in range(2):
            ((model(x) - x) ** 2).mean().backward()
            opt.step()
            opt.zero_grad()
    return rec.calls


def _lstm_encoder_adamw_step(dtype, fused):
    torch.manual_seed(0)
    nn = torch.nn
    lstm = nn.LSTM(8, 8, batch_first=True).to(dtype)
    enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True).to(dtype)
    head = nn.Linear(8, 5).to(dtype)
    params = [*lstm.parameters(), *enc.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, fused=fused)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)
    x, y = torch.randn(2, 5, 8, dtype=dtype), torch.randint(0, 5, (2, 5))
    rec = Recorder()
    with rec:
        for _ in range(2):
            logits = head(enc(lstm(x)[0]))
            torch.nn.functional.cross_entropy(logits.reshape(-1, 5), y.reshape(-1)).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
    return rec.calls


STEPS = {"mlp_adamw": _mlp_adamw_step, "cnn_sgd": _cnn_sgd_step,
         "attention_adam": _attention_adam_step, "unet_adam": _unet_adam_step,
         "lstm_encoder_adamw": _lstm_encoder_adamw_step}


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("step", list(STEPS))
def test_a_real_training_step_has_references(step, fused):
    """>= 95 % of the aten calls of two training steps have a reference form; the missing are
    named with their counts. Calls whose output is uninitialised memory (``empty*``: nothing to
    judge, the judge's verdict is "recorded") are not counted."""
    calls = STEPS[step](torch.float32, fused)
    count = collections.Counter(c[0] for c in calls if ".empty" not in c[0])
    missing = {op: n for op, n in count.items() if not has_reference(op)}
    covered = 1 - sum(missing.values()) / sum(count.values())
    assert covered >= 0.95, f"{covered:.1%} covered; no reference: {missing}"


RANDOM = {"aten.bernoulli_.float", "aten.native_dropout.default"}


@pytest.mark.parametrize("step", list(STEPS))
def test_every_op_of_a_float64_step_agrees_with_what_torch_recorded(step):
    """The judge's view: each recorded call re-run by the reference on its recorded inputs
    agrees with torch's recorded outputs in float64 (same count, dtypes, shapes; values to
    1e-12). Random ops get their recorded draws; uninitialised memory is skipped."""
    bad = []
    for fused in (False, True):
        for op, a, k, outs in STEPS[step](torch.float64, fused):
            if not outs or not has_reference(op) or "empty" in op:
                continue
            if op in RANDOM:
                k = dict(k, _recorded=outs)
            try:
                got = reference(op, a, k)
            except NoReference as e:
                bad.append(f"{op}: {e}")
                continue
            if len(got) != len(outs):
                bad.append(f"{op}: {len(got)} outputs, torch {len(outs)}")
                continue
            for r, t in zip(got, outs, strict=True):
                if r.dtype != t.dtype or r.shape != t.shape:
                    bad.append(f"{op}: {r.dtype}{r.shape} vs torch {t.dtype}{t.shape}")
                elif r.dtype.kind == "f" and not np.allclose(r, t, rtol=1e-12, atol=1e-12,
                                                             equal_nan=True):
                    bad.append(f"{op}: max diff {np.max(np.abs(r - t))}")
                elif r.dtype.kind != "f" and not np.array_equal(r, t):
                    bad.append(f"{op}: values differ")
    assert not bad, "\n".join(sorted(set(bad)))


def test_an_autocast_bfloat16_step_with_a_grad_scaler_has_torchs_dtypes():
    """Mixed precision: autocast bfloat16 on float32 weights, GradScaler, clipping, AdamW.
    Every call has a form, and every output has torch's dtype and shape (a half input with
    float32 parameters gives float32 statistics, torch's mixed type)."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 64, 16), nn.GELU(), nn.LayerNorm(16),
                          nn.Linear(16, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 2])
    rec = Recorder()
    with rec:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    bad = []
    for op, a, k, outs in rec.calls:
        if ".empty" in op:
            continue
        if not has_reference(op):
            bad.append(f"{op}: no reference")
            continue
        got = reference(op, a, k) if outs else []
        if [(r.dtype, r.shape) for r in got] != [(t.dtype, t.shape) for t in outs]:
            bad.append(f"{op}: {[(r.dtype, r.shape) for r in got]} vs torch "
                       f"{[(t.dtype, t.shape) for t in outs]}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_histc_bins_an_element_by_its_value_where_bfloat16_arithmetic_does_not():
    """``histc`` of bfloat16: 1.4921875 lies in [1.0, 1.5) of 8 bins over [-2, 2]; torch's
    kernel puts it in [1.5, 2) (its position, (x + 2) * 8 / 4 = 6.984375, rounds to 7 in
    bfloat16). The reference bins by value (the edges' comparison), so the judge calls that
    count introduced; in float32 both agree."""
    x = torch.tensor([1.4921875, -0.3, 1.9], dtype=torch.bfloat16)
    got = reference("aten.histc.default", [x.view(torch.int16).numpy().view(ml_dtypes.bfloat16),
                                           8, -2.0, 2.0], {})[0]
    assert got.astype(np.float64).tolist() == [0, 0, 0, 1, 0, 0, 1, 1]
    assert torch.histc(x, 8, -2.0, 2.0).tolist() == [0, 0, 0, 1, 0, 0, 0, 2]
    f = x.float()
    assert torch.histc(f, 8, -2.0, 2.0).tolist() == got.astype(np.float64).tolist()


@pytest.mark.parametrize("op, args, kwargs, says", [
    ("aten.linalg_cholesky_ex.default", [-np.eye(3)], {}, "not positive definite"),
    ("aten._linalg_solve_ex.default", [np.zeros((3, 3)), np.ones((3, 1))], {}, "singular"),
    ("aten.linalg_inv_ex.default", [np.ones((2, 2))], {}, "singular"),
    ("aten._linalg_slogdet.default", [np.eye(3, dtype=np.complex128)], {}, "complex"),
    ("aten._linalg_slogdet.default", [np.eye(3, dtype=np.float16)], {}, "float32 and"),
    ("aten.linalg_lu_factor_ex.default", [np.zeros((600, 600))], {}, "past the reference"),
    ("aten.linalg_lu_factor_ex.default", [np.zeros((3, 4))], {}, "square"),
    ("aten.linalg_lu_solve.default", [np.eye(3), np.array([1, 9, 3], np.int32),
                                      np.ones((3, 1))], {}, "pivots out of range"),
    ("aten._linalg_solve_ex.default", [np.eye(3), np.ones((4, 1))], {}, "rows are not"),
    ("aten.diag_embed.default", [np.ones(3), 0, 1, 1], {}, "the same"),
])
def test_hostile_linear_algebra_has_no_reference(op, args, kwargs, says):
    """What the written-out algorithms do not take is named, never guessed: a matrix that is
    not positive definite or is singular (LAPACK's partial results), complex operands, a
    matrix past the loops' size, pivots out of range, shapes that do not go together."""
    with pytest.raises(NoReference, match=says):
        reference(op, args, kwargs)


def test_special_functions_are_correctly_rounded_with_their_poles_and_limits():
    """lgamma, digamma, polygamma, erfinv and log_ndtr: each float32 value the float32
    nearest the exact one (mpmath at 300 bits; digamma's root at 1.4616... and log_ndtr's
    tail past 9, where the value is all cancellation, included), and the poles, infinities,
    zeros and NaN as stated (torch's own at most of them)."""
    import mpmath

    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(400) * 4, [1.4616321, 1.4616322, 9.7269, 12.5, 1.0001,
                                                       2.0001]]).astype(np.float32)
    with mpmath.workprec(300):
        for op, fn in (("aten.lgamma.default",
                        lambda v: mpmath.log(abs(mpmath.gamma(v)))),
                       ("aten.digamma.default", mpmath.digamma),
                       ("aten.special_log_ndtr.default",
                        lambda v: mpmath.log1p(-mpmath.ncdf(-v)))):
            got = reference(op, [x], {})[0]
            assert got.dtype == np.float32
            for v, r in zip(x.tolist(), got.tolist(), strict=True):
                exact = fn(mpmath.mpf(v))
                below = np.nextafter(np.float32(r), np.float32(-np.inf))
                above = np.nextafter(np.float32(r), np.float32(np.inf))
                err = abs(mpmath.mpf(r) - exact)
                assert err <= abs(mpmath.mpf(float(below)) - exact), (op, v)
                assert err <= abs(mpmath.mpf(float(above)) - exact), (op, v)
    inf, nan = np.inf, np.nan
    cases = [
        ("aten.lgamma.default", [0.0, -0.0, -3.0, inf, -inf, nan], [inf, inf, inf, inf, inf, nan]),
        ("aten.digamma.default", [0.0, -0.0, -2.0, inf, -inf], [-inf, inf, nan, inf, nan]),
        ("aten.erfinv.default", [1.0, -1.0, -0.0, 1.5, nan], [inf, -inf, -0.0, nan, nan]),
        ("aten.special_log_ndtr.default", [inf, -inf, nan], [-0.0, -inf, nan]),
    ]
    for op, xs, want in cases:
        got = reference(op, [np.array(xs, np.float32)], {})[0]
        assert np.array_equal(got, np.array(want, np.float32), equal_nan=True), (op, got)
        assert np.array_equal(np.signbit(got), np.signbit(np.array(want, np.float32))), op
    got = reference("aten.polygamma.default", [2, np.array([0.0, -1.0, inf], np.float32)], {})[0]
    assert got.tolist() == [-inf, -inf, -0.0] and np.signbit(got[2])
    got = reference("aten.polygamma.default", [1, np.array([0.0, inf], np.float32)], {})[0]
    assert got.tolist() == [inf, 0.0] and not np.signbit(got[1])
    x0 = np.array([0.7, 3.2], np.float32)
    assert reference("aten.polygamma.default", [0, x0], {})[0].tobytes() == \
        reference("aten.digamma.default", [x0], {})[0].tobytes()
    with pytest.raises(NoReference, match="budget"):
        reference("aten.lgamma.default", [np.linspace(1, 2, 20000, dtype=np.float32)], {})


def test_log2_and_log10_are_correctly_rounded():
    """float32 ``log2`` / ``log10`` (numpy's double where its rounding to float32 is certain,
    mpmath for the rest) and float64 (mpmath): each value the float nearest the exact one,
    checked by mpmath at 200 bits on random, power-of-two, subnormal and special arguments.
    Planted (numpy's float32 log2 taken as it is): fails."""
    import mpmath

    rng = np.random.default_rng(3)
    xs = np.concatenate([rng.random(3000) * 1000, 2.0 ** np.arange(-149, 128),
                         [1e-45, 3.4e38, 1.0, 0.1]]).astype(np.float32)
    for op, fn in (("aten.log2.default", lambda v: mpmath.log(v, 2)),
                   ("aten.log10.default", mpmath.log10)):
        for x in (xs, xs[:300].astype(np.float64)):
            y = reference(op, [x], {})[0]
            assert y.dtype == x.dtype
            with mpmath.workprec(200):
                for xi, yi in zip(x.tolist(), y.tolist(), strict=True):
                    v = fn(mpmath.mpf(xi))
                    near = np.asarray(yi, x.dtype)
                    for nb in (np.nextafter(near, x.dtype.type(np.inf)),
                               np.nextafter(near, x.dtype.type(-np.inf))):
                        assert abs(mpmath.mpf(float(near)) - v) <= abs(mpmath.mpf(float(nb)) - v), \
                            (op, xi, yi)
    special = np.array([0.0, -0.0, -1.0, np.inf, np.nan], np.float32)
    y = reference("aten.log2.default", [special], {})[0]
    assert y[0] == -np.inf and y[1] == -np.inf and np.isnan(y[2]) and y[3] == np.inf \
        and np.isnan(y[4])


@pytest.mark.parametrize("op, args", [
    ("aten.zeros.default", [[2, 3]]),
    ("aten.ones.default", [[4]]),
    ("aten.full.default", [[2], 1.5]),
    ("aten.eye.default", [3]),
    ("aten.arange.start_step", [0.0, 1.0, 0.25]),
    ("aten.linspace.default", [0.0, 1.0, 5]),
    ("aten.scalar_tensor.default", [2.5]),
])
def test_a_factory_without_a_dtype_takes_the_runs_default_dtype(op, args):
    """A script under ``torch.set_default_dtype(torch.float64)``: a factory given no dtype
    made float64 (the reference made float32: ``no-reference``, "output float32[1], the
    recorded one float64[1]"). The default dtype is the run's setting, read from the recorded
    output; with none (no capture) float32, and an explicit dtype wins."""
    from tapescope.core.capture.aten_ref_table import OUT_ELEMS

    want = reference(op, args, {})[0]
    assert want.dtype == np.float32
    token = OUT_ELEMS.set([np.zeros(want.shape, np.float64)])
    try:
        got = reference(op, args, {})[0]
        assert got.dtype == np.float64 and got.shape == want.shape
        assert np.array_equal(got, want.astype(np.float64))
        kept = reference(op, args, {"dtype": "torch.float32"})[0]
        assert kept.dtype == np.float32
    finally:
        OUT_ELEMS.reset(token)
    t = getattr(torch.ops.aten, op.split(".")[1]).__getattr__(op.split(".")[2])
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert t(*args).dtype == torch.float64  # (torch's own answer under that setting)
    finally:
        torch.set_default_dtype(before)
