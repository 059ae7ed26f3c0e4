"""The exact reference for the aten ops a PyTorch training step runs (issue 42, item 2).

``reference(op, args, kwargs)`` re-runs one recorded aten call in the reference order and returns
its outputs as numpy arrays; ``has_reference(op)`` says whether ``op`` has a form; anything
without one raises ``NoReference`` naming it (never a guess).

- ``op`` is ``str(func)`` of the OpOverload ("aten.addmm.default", "aten._foreach_add_.List");
  ``args``/``kwargs`` the recorded call with every tensor a read-only numpy array (float64,
  float32, float16, bfloat16 via ml_dtypes, int64, bool), tensor lists as lists of arrays,
  dtypes as torch's strings ("torch.float32"), scalars as Python numbers, None as None.
- Returns: a functional op's returned tensors, flattened in order (None skipped; a backward's
  outputs its ``output_mask`` left out are not there); an in-place or ``out=`` op's mutated
  arguments' new values in argument order (for ``_foreach_*_`` every tensor of the mutated list;
  for ``_fused_adam(w)_`` params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, each list in
  full; ``_fused_sgd_`` params, grads, momentum buffers). An op that writes arguments *and*
  returns tensors of its own (``native_batch_norm``, ``_native_batch_norm_legit`` with running
  statistics: written whether or not the schema marks them) gives the written arguments first
  (the new running mean and variance; in eval mode unchanged), then its returned tensors: the
  convention of core/capture/__init__.py and of the recorder (app/capture/recorder.py).
- Random ops (``bernoulli_``, ``native_dropout`` in training) stand on their recorded draws:
  the judge passes the op's recorded outputs as ``kwargs["_recorded"]``; without them they raise
  ``NoReference``.
- Dtypes are torch's (its promotion: dimensioned tensors, then 0-d tensors, then Python scalars);
  inputs are never written.
- Complex operands (rotary embeddings' ``view_as_complex``) reach only the forms written for
  them: the layout forms of ``aten_ref_shape`` (they move elements, or add them part by part),
  ``add``, ``sub``, ``neg``, ``where``, ``_conj``, ``mul`` (``complex_multiply``), ``abs``,
  ``sgn``, ``angle``, ``div`` (Smith's), ``sum`` and ``mean`` (part by part), the products
  (``complex_product``) and ``eq`` / ``ne``; any other op with one raises ``NoReference``
  (its form was written for real numbers).

Each form's order is in docs/reference-order.md, "Captured aten ops". The forms live in
``aten_ref_pointwise`` (elementwise, activations), ``aten_ref_shape`` (copies, casts, views,
factories), ``aten_ref_nn`` (reductions, products, softmax, losses), ``aten_ref_losses`` (the other
losses and activations), ``aten_ref_layers`` (norms,
embedding, attention), ``aten_ref_conv`` (convolutions, pools, upsampling) and
``aten_ref_optim`` (optimizer kernels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tapescope.core.capture import (  # noqa: F401  (each registers its forms)
    aten_ref_conv,
    aten_ref_layers,
    aten_ref_linalg,
    aten_ref_losses,
    aten_ref_nn,
    aten_ref_optim,
    aten_ref_pointwise,
    aten_ref_quant,
    aten_ref_sample,
    aten_ref_shape,
    aten_ref_special,
)
from tapescope.core.capture.aten_ref_nn import vector_norms
from tapescope.core.capture.aten_ref_shape import cast
from tapescope.core.capture.aten_ref_table import FAST, FORMS, NoReference, fp_quiet, opt

__all__ = ["NoReference", "has_reference", "ops", "reference"]

_SEQ = (list, tuple)  # (a tuple of types: ``list | tuple`` builds a union object each test)

_FOREACH_BASE = {  # foreach name.overload -> the per-tensor op when not aten.<name>.<overload>
    "norm": ("aten.linalg_vector_norm.default",),
    "pow.List": ("aten.pow.Tensor_Tensor",),
    "pow.Scalar": ("aten.pow.Tensor_Scalar",),
    "pow.ScalarList": ("aten.pow.Tensor_Scalar",),
    "lerp.List": ("aten.lerp.Tensor",),
    "lerp.ScalarList": ("aten.lerp.Scalar",),
}


# in-place ops whose functional twin has another overload name (``x.pow_(2)`` is
# ``pow_.Scalar``, a Tensor base and a Scalar exponent: ``pow.Scalar`` is a Scalar *base*)
_INPLACE_TWIN = {
    "aten.pow_.Scalar": "aten.pow.Tensor_Scalar", "aten.pow_.Tensor": "aten.pow.Tensor_Tensor",
    "aten.float_power_.Scalar": "aten.float_power.Tensor_Scalar",
    "aten.float_power_.Tensor": "aten.float_power.Tensor_Tensor",
}
# in-place ops whose functional twin takes the same arguments in another order
# (``x.polygamma_(n)`` is ``polygamma_(self, n)``; ``polygamma(n, self)``)
_INPLACE_ARGS = {"aten.polygamma_.default": lambda a: [a[1], a[0], *a[2:]]}


def _split(op: str) -> tuple[str, str]:
    parts = op.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        return op, ""
    return parts[1], parts[2]


def _first(cands: list[str]) -> str | None:
    for c in cands:
        if c in FORMS:
            return c
    return None


def _foreach_base(name: str, ovl: str) -> str | None:
    base = name[len("_foreach_"):].rstrip("_")
    special = _FOREACH_BASE.get(f"{base}.{ovl}") or _FOREACH_BASE.get(base)
    return _first(list(special or ()) + [f"aten.{base}.{ovl}", f"aten.{base}.Tensor",
                                         f"aten.{base}.default", f"aten.{base}.Scalar"])


# op -> _resolve's answer for an op without a form of its own (a foreach, in-place or out=
# twin: several string splits and lookups, once per op name); cleared when a form is added
_RESOLVED: dict[str, tuple[str, str | None]] = {}
_RESOLVED_FORMS = [0]  # len(FORMS) when _RESOLVED was filled


#: the forms besides aten_ref_shape's that take complex operands in the reference order
_COMPLEX_ARITHMETIC = frozenset({
    "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar",
    "aten.neg.default", "aten.mul.Tensor", "aten.mul.Scalar", "aten.where.self",
    "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar",
    "aten.abs.default", "aten.sgn.default", "aten.sum.default", "aten.sum.dim_IntList",
    "aten.mean.default", "aten.mean.dim", "aten.mm.default", "aten.bmm.default",
    "aten.matmul.default", "aten.mv.default", "aten.dot.default", "aten.vdot.default",
    "aten.eq.Tensor", "aten.eq.Scalar", "aten.ne.Tensor", "aten.ne.Scalar",
    "aten.div.Tensor", "aten.div.Scalar", "aten.angle.default"})


def _takes_complex(key: str) -> bool:
    return key in _COMPLEX_ARITHMETIC or FORMS[key].__module__ == aten_ref_shape.__name__


def _complex_operand(args: Iterable) -> bool:
    for a in args:
        if type(a) is np.ndarray:
            if a.dtype.kind == "c":
                return True
        elif type(a) in _SEQ and any(type(b) is np.ndarray and b.dtype.kind == "c" for b in a):
            return True
    return False


def _resolve(op: str) -> tuple[str, str | None]:
    """(how, the form's key): direct, inplace (of a functional twin), foreach, out."""
    if op in FORMS:
        return "direct", op
    if _RESOLVED_FORMS[0] != len(FORMS):
        _RESOLVED.clear()
        _RESOLVED_FORMS[0] = len(FORMS)
    got = _RESOLVED.get(op)
    if got is None:
        got = _RESOLVED[op] = _resolve_twin(op)
    return got


def _resolve_twin(op: str) -> tuple[str, str | None]:
    name, ovl = _split(op)
    if not ovl:
        return "none", None
    if name.startswith("_foreach_"):
        return "foreach", _foreach_base(name, ovl)
    if ovl in ("out", "grad_input") or ovl.endswith("_out"):
        base = ovl[:-4] if ovl.endswith("_out") else ""
        return "out", _first(([f"aten.{name}.{base}"] if base else []) +
                             [f"aten.{name}.default", f"aten.{name}.Tensor"])
    if name.endswith("_"):
        twin = _INPLACE_TWIN.get(op)
        return "inplace", _first([twin] if twin else [f"aten.{name[:-1]}.{ovl}"])
    return "none", None


def has_reference(op: str) -> bool:
    """Whether ``op`` (``str`` of an aten OpOverload) has a reference form. A form may still
    refuse particular arguments (a transposed convolution, attention with dropout) with
    ``NoReference``."""
    return _resolve(op)[1] is not None


def ops() -> list[str]:
    """Every overload with a form of its own (in-place, out= and foreach twins are derived)."""
    return sorted(FORMS)


def _arg_ids(*arg_lists: Iterable) -> set[int]:
    """The ids of the call's arguments and of the entries of its list arguments."""
    ids: set[int] = set()
    for args in arg_lists:
        for a in args:
            ids.add(id(a))
            if isinstance(a, _SEQ):
                ids.update(map(id, a))
    return ids


def _is_arg(v: np.ndarray, arg_lists: tuple) -> bool:
    """Whether ``v`` is one of the call's arguments or an entry of a list argument
    (``_arg_ids``' test for one value, without building the set)."""
    for args in arg_lists:
        for a in args:
            if a is v or (isinstance(a, _SEQ) and any(x is v for x in a)):
                return True
    return False



def _fresh(v: Any, t: np.ndarray) -> bool:
    """Whether ``v`` may be a form's own new array of ``t``'s shape and dtype: owning its
    memory and writeable (``_into`` then checks that it is not one of the call's arguments: a
    chained input is a writeable array too), so that writing it into ``t`` is ``v`` itself,
    without ``cast``'s copy."""
    if type(v) is not np.ndarray or v.dtype != t.dtype or v.shape != t.shape:
        return False
    f = v.flags
    return f.owndata and f.writeable


def _into(values: list, targets: list, *arg_lists: Iterable) -> list:
    """Each value written into its target as torch writes it: cast to the target's dtype,
    broadcast to its shape (a fresh value of that dtype and shape, none of the arguments in
    ``arg_lists`` nor an entry of a list argument, is itself)."""
    if len(values) == 1 and len(targets) == 1:  # an in-place or out= op (the common case)
        v, t = values[0], targets[0]
        if _fresh(v, t) and not _is_arg(v, arg_lists):
            return [v]
        return [cast(np.broadcast_to(v, np.shape(t)), t.dtype)]
    out = []
    ids = _arg_ids(*arg_lists)  # (once: a foreach's n outputs against its n-tensor lists)
    for v, t in zip(values, targets, strict=True):
        out.append(v if _fresh(v, t) and id(v) not in ids
                   else cast(np.broadcast_to(v, np.shape(t)), t.dtype))
    return out


def _per_element(args: list, kwargs: dict, n: int, i: int, scalars_tensor: bool
                 ) -> tuple[list, dict]:
    def pick(a: Any) -> Any:
        if isinstance(a, _SEQ) and len(a) == n:
            return a[i]
        if scalars_tensor and isinstance(a, np.ndarray) and a.ndim == 1 and a.shape[0] == n:
            return float(a[i])  # addcmul/addcdiv's scalars given as a tensor
        return a
    return [pick(a) for a in args], {k: pick(v) for k, v in kwargs.items()}


def _scaled(xs: list, s: Any) -> list | None:
    """``[x * s for x in xs]`` as the ``mul`` form gives each (one rounding a product) for
    float32 or float64 arrays of one dtype and ``s`` a 0-d array of that dtype or a Python
    float or int (rounded to it once, as ``scal``), not NaN: one multiply over the elements
    concatenated (the same products), each output a view of it in its array's shape (new
    memory, none of the arguments); else None (the per-tensor loop)."""
    if not xs or type(xs[0]) is not np.ndarray:
        return None
    dt = xs[0].dtype
    if dt != np.float32 and dt != np.float64:
        return None
    if type(s) is np.ndarray:
        if s.ndim or s.dtype != dt:
            return None
    elif type(s) in (int, float):
        s = np.asarray(s, dtype=dt)
    else:
        return None
    if s != s:
        # NOTE: a NaN operand is left to the loop: NaN * NaN keeps one operand's payload, and
        # which one numpy's loop puts first depends on the length (its SIMD loop's order);
        # with one NaN its payload is the answer either way
        return None
    for x in xs:
        if type(x) is not np.ndarray or x.dtype != dt:
            return None
    with fp_quiet():
        y = np.multiply(np.concatenate([x.reshape(-1) for x in xs]), s)
    out, at = [], 0
    for x in xs:
        out.append(y[at:at + x.size].reshape(x.shape))
        at += x.size
    return out


def _foreach(key: str, op: str, args: list, kwargs: dict) -> list:
    name, ovl = _split(op)
    if name == "_foreach_norm" and len(args) <= 2 and not kwargs.keys() - {"ord"} \
            and key == "aten.linalg_vector_norm.default":
        # the list's norms in one pass where they are small (aten_ref_nn.vector_norms: the
        # bits of the loop below; ord given as this loop would read it)
        o = opt(kwargs, args, 1, "ord", 2)
        got = vector_norms(list(args[0]), float(o)) if type(o) in (int, float) else None
        if got is not None:
            return got
    if name in ("_foreach_mul_", "_foreach_mul") and ovl in ("Tensor", "Scalar") \
            and len(args) == 2 and not kwargs and key in ("aten.mul.Tensor", "aten.mul.Scalar"):
        got = _scaled(list(args[0]), args[1])  # (gradient clipping's coefficient)
        if got is not None:
            return got
    selfs = list(args[0])
    fn: Callable = FORMS[key]
    outs = []
    # only _foreach_addcmul/addcdiv.Tensor take a 1-d tensor of per-tensor scalars; any other
    # tensor argument (_foreach_mul_.Tensor's) is the same operand for every element
    scalars_tensor = ovl == "Tensor" and name.strip("_").split("_")[-1] in ("addcmul",
                                                                            "addcdiv")
    for i in range(len(selfs)):
        a, k = _per_element([selfs] + list(args[1:]), kwargs, len(selfs), i, scalars_tensor)
        outs.extend(fn(a, k))
    if name.endswith("_"):
        return _into(outs, selfs, args, kwargs.values())
    return outs


def reference(op: str, args: list, kwargs: dict) -> list[np.ndarray]:
    """The outputs of aten op ``op`` on ``args``/``kwargs`` in the reference order (see the
    module docstring for the conventions); ``NoReference`` when it has no form."""
    short = FAST.get(op)  # (the common tiny call: the form's own answer, its numpy calls)
    if short is not None:
        got = short(args, kwargs)
        if got is not None:
            return got
    how, key = _resolve(op)
    if key is None:
        raise NoReference(f"{op}: no reference form")
    args, kwargs = list(args), dict(kwargs or {})
    if not _takes_complex(key) and (_complex_operand(args) or _complex_operand(kwargs.values())):
        raise NoReference(f"{op}: a complex operand (its form is written for real numbers)")
    try:
        if how == "direct":
            ys = FORMS[key](args, kwargs)
            if type(ys) is list and len(ys) == 1 and type(ys[0]) is np.ndarray:
                return ys  # (one array, most forms: the comprehension's answer, a new list)
            return [np.asarray(y) for y in ys if y is not None]
        if how == "foreach":
            return _foreach(key, op, args, kwargs)
        if how == "inplace":
            perm = _INPLACE_ARGS.get(op)
            return _into(FORMS[key](perm(args) if perm else args, kwargs)[:1], [args[0]], args,
                         kwargs.values())
        target = kwargs.pop("out") if "out" in kwargs else kwargs.pop("grad_input")
        if not isinstance(target, np.ndarray):
            raise NoReference("an out= op with several outputs")
        return _into(FORMS[key](args, kwargs)[:1], [target], args, [target], kwargs.values())
    except NoReference as e:
        raise NoReference(f"{op}: {e}") from None
