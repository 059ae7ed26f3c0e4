"""Provenance: which nodes *introduced* error and which only *inherited* it (no gpu, no Qt).

The rule (docs/reports.md, "Introduced vs inherited"): a node introduced error at a step when
its numpy reference op (``core.ops``, refmath, the reference order of docs/reference-order.md,
in the candidate's dtype), run on the **candidate's own inputs**, does not reproduce the
candidate's output bit for bit; otherwise whatever error it carries was inherited. Judged:

- ``"value"``: the forward op on the candidate's input values. Leaves: a const must hold the
  data it was given, a param the value its previous update produced (``StepState.leaf``).
- ``"grad"``: the node's gradient recomputed by the reference backward rules from the
  candidate's consumer gradients and values, the consumers' contributions added in the tape's
  order (decreasing consumer id, each consumer's inputs in input order, from ``+0.0``). The
  entry names the node whose gradient is wrong; the backward rules that made it are those of
  its consumers (``Introduced.by``).
- ``"update"``: the reference optimizer step (``core.optim``'s order, clipping and L2
  included) on the candidate's parameters, gradients and moments before the update, against
  the parameters and moments it left. Where those inputs are the reference run's own bits
  (``same_inputs``, read before the update), the reference run's own after-update arrays
  (``OptimizerState.reference``) are that step's result and stand in for the rerun.
- fused kernels (``StepState.kernels``), judged whole: a forward kernel's outputs against its
  segment's reference ops run in order on the kernel's inputs (intermediates recomputed, not
  read back); a backward kernel's gradients against the segment's backward rules run from the
  gradients flowing into it. ``first_node``: the first member that differs in the kernel's
  own order (forward: increasing id; backward: decreasing id, where it first went wrong).

The judge is ``core.parity.compare_arrays(reference-on-candidate-inputs, candidate)``; its
``n_diff``, ``max_ulp`` and ``first_index`` are the introduced error's own size.

Data (``Provenance.to_json``)::

    {"step": 3,
     "introduced": [{"node": 12, "op": "exp", "which": "value" | "grad" | "update",
                     "n_diff": 4, "max_ulp": 1, "max_abs": 2.2e-16, "first_index": 7,
                     "n_nan": 0, "by": [15],          # grad: the consumers whose rules ran
                     "part": "param" | "m" | "v"}],   # update: the first state that differs
     "kernels": [{"kernel": "fused_fwd_s0_...", "role": "forward" | "backward", "segment": 0,
                  "nodes": [3, 4, 5], "introduced": false, "n_diff": 0, "max_ulp": 0,
                  "first_node": null}],
     "checked": 17}                                    # arrays recomputed (the rest skipped)

``introduced`` is in execution order: values in tape order, gradients in backward order
(decreasing id), then updates. ``Provenance.flags(n)`` gives per node
``{"value": bool, "grad": bool, "update": bool}``.

Cost: with ``exact_value``/``exact_grad`` hints (the reference run *is* the numpy reference in
the same dtype) a node whose output and every input agree with the reference cannot have
introduced anything and is skipped, so a bit-identical step costs no recomputation; a step where
everything drifts costs about one reference forward + backward on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tapescope.core import mathlib, precision
from tapescope.core.bits import same_bytes
from tapescope.core.explain_prims import GradParts
from tapescope.core.ops.reference import serial_sum
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.parity import TensorDiff, compare_arrays

__all__ = ["Introduced", "OptimizerState", "ParamUpdate", "Provenance", "StepState",
           "consumers", "provenance", "reference_grad", "reference_update", "reference_value",
           "same_inputs"]

Getter = Callable[[int], "np.ndarray | None"]


@dataclass(frozen=True)
class Introduced:
    """One array a node (or kernel) got wrong on its own at one step."""

    node: int
    op: str
    which: str  # "value" | "grad" | "update"
    diff: TensorDiff  # compare_arrays(reference on the candidate's inputs, candidate)
    by: tuple[int, ...] = ()  # grad: the consumers whose backward rules produce it
    part: str = ""  # update: "param" | "m" | "v"
    cause: Any = None  # core.explain.Cause when provenance ran with explain=True
    # core.bounds.Verdict (valid reordering / outside reordering bound) when classified
    verdict: Any = None

    def to_json(self) -> dict:
        """``{"node", "op", "which", "n_diff", "max_ulp", "max_abs", "first_index", "n_nan"}``
        plus ``"by"`` (grad) or ``"part"`` (update), and ``"cause"`` / ``"explain"`` (the
        cause's name and ``core.explain.Cause.to_json``) when explained, and ``"class"``,
        ``"bound_ratio"``, ``"n_outside"`` (``core.bounds.Verdict``) when classified."""
        d = self.diff
        out = {"node": self.node, "op": self.op, "which": self.which, "n_diff": d.n_diff,
               "max_ulp": d.max_ulp, "max_abs": d.max_abs, "first_index": d.first_index,
               "n_nan": d.n_nan}
        if self.which == "grad":
            out["by"] = list(self.by)
        if self.which == "update":
            out["part"] = self.part
        if self.cause is not None:
            out["cause"] = self.cause.cause
            out["explain"] = self.cause.to_json()
        if self.verdict is not None:
            out.update(self.verdict.to_json())  # "class", "bound_ratio", "n_outside"
        return out


@dataclass
class ParamUpdate:
    """One parameter around one optimizer update (the candidate's arrays)."""

    node: int
    l2: float
    w: np.ndarray  # before the update
    g: np.ndarray
    w_after: np.ndarray
    m: np.ndarray | None = None  # Adam's moments before and after (None: SGD)
    v: np.ndarray | None = None
    m_after: np.ndarray | None = None
    v_after: np.ndarray | None = None


@dataclass
class OptimizerState:
    """The candidate's optimizer around one update: its settings and every stepped parameter
    (those whose gradient backward reached, in the order added)."""

    kind: str  # "sgd" | "adam" | "sgdm" | "adamw" (core.optim's SGDMomentum, AdamW)
    lr: float  # this update's lr (a schedule's at step t)
    t: int  # this update's step count, from 1 (Adam's bias correction)
    params: list[ParamUpdate]
    clip: float | None = None
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    # per parameter, the reference run's own ``(w, m, v)`` after this update, or None (rerun):
    # an entry only where ``same_inputs`` found the update's inputs the reference's bits, the
    # reference being core.optim in the same dtype (then it IS ``reference_update``'s result)
    reference: list | None = None
    # sgdm / adamw (m: sgdm's momentum buffer, None before its first step; v None)
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0


@dataclass
class StepState:
    """What provenance reads about one step of the candidate run.

    ``value(i)`` / ``grad(i)``: the candidate's arrays of node ``i`` as the step computed them
    (before the optimizer update); ``leaf(i)``: what leaf ``i`` should hold (None: not judged);
    ``exact_value`` / ``exact_grad``: per node, equal bit for bit to the numpy reference in the
    same dtype (skip hints; None when the reference run is not that); ``kernels``: the fused
    kernels as ``{"kernel", "role", "segment", "node_ids"}``.
    """

    step: int
    nodes: tuple
    loss: int
    value: Getter
    grad: Getter
    leaf: Getter | None = None
    exact_value: Sequence[bool] | None = None
    exact_grad: Sequence[bool] | None = None
    update: OptimizerState | None = None
    kernels: list[dict] = field(default_factory=list)

    def snapshot(self) -> StepState:
        """A copy holding every array, so it outlives the step (for on-demand provenance)."""
        vals = {n.id: _copy(self.value(n.id)) for n in self.nodes}
        grads = {n.id: _copy(self.grad(n.id)) for n in self.nodes}
        leaves = None
        if self.leaf is not None:
            lv = {n.id: _copy(self.leaf(n.id)) for n in self.nodes if not n.inputs}
            leaves = lv.get
        return StepState(self.step, self.nodes, self.loss, vals.get, grads.get, leaves,
                         None if self.exact_value is None else list(self.exact_value),
                         None if self.exact_grad is None else list(self.exact_grad),
                         self.update, [dict(k) for k in self.kernels])


@dataclass
class Provenance:
    """The introduced arrays of one step, its fused kernels' verdicts, the work it took."""

    step: int
    introduced: list[Introduced]
    kernels: list[dict]
    checked: int

    def flags(self, n_nodes: int) -> list[dict]:
        """Per node ``{"value": bool, "grad": bool, "update": bool}``: what it introduced."""
        out = [{"value": False, "grad": False, "update": False} for _ in range(n_nodes)]
        for e in self.introduced:
            if 0 <= e.node < n_nodes:
                out[e.node][e.which] = True
        return out

    def to_json(self) -> dict:
        """``{"step", "introduced": [...], "kernels": [...], "checked"}`` (module docstring)."""
        return {"step": self.step, "introduced": [e.to_json() for e in self.introduced],
                "kernels": [dict(k) for k in self.kernels], "checked": self.checked}


def _copy(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.array(a, copy=True)


_M = None


def _ref_math() -> Any:
    global _M
    if _M is None:
        _M = mathlib.get("refmath")  # the reference defines the bits, whatever the candidate's
    return _M


def _needs(nodes: tuple, n: Any) -> list[bool]:
    nd = REGISTRY[n.op].nondiff_inputs
    return [nodes[j].requires_grad and k not in nd for k, j in enumerate(n.inputs)]


def consumers(nodes: tuple, loss: int) -> list[list[int]]:
    """Per node, the nodes (ids up to ``loss``) whose backward pushes a contribution to it."""
    out: list[list[int]] = [[] for _ in nodes]
    for n in nodes[: loss + 1]:
        if not n.inputs or not n.requires_grad:
            continue
        for j, need in zip(n.inputs, _needs(nodes, n), strict=True):
            if need and (not out[j] or out[j][-1] != n.id):
                out[j].append(n.id)
    return out


def reference_value(node: Any, xs: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """``node``'s reference forward (refmath) on the input values ``xs``, in ``dtype``."""
    dt = np.dtype(dtype)
    with np.errstate(all="ignore"):  # inf and NaN are data here, as on the tape
        # a half dtype: the float32 op on the widened inputs, rounded once (as the tape)
        y = REGISTRY[node.op].forward(_ref_math(), [precision.widen(np.asarray(x))
                                                    for x in xs], node.attrs)
        if type(y) is not np.ndarray or y.dtype != dt:
            y = np.asarray(y).astype(dt) if dt in precision.HALF else np.asarray(y, dtype=dt)
    return y.reshape(node.shape)


def reference_grad(nodes: tuple, j: int, loss: int, by: Sequence[int], value: Getter,
                   grad: Getter, dtype: Any, memo: dict | None = None,
                   math: Any = None, rules: Callable | None = None) -> np.ndarray | None:
    """Node ``j``'s gradient from its consumers ``by`` (their gradients ``grad(i)`` and the
    values ``value``), added as the tape adds them; None when no consumer was reached.
    ``memo`` keeps each consumer's contributions for its other inputs (same getters only);
    ``math``: another math namespace than refmath (``core.explain``'s libm variant);
    ``rules(op)``: another backward rule than the op table's (``core.explain``'s variants)."""
    dt = np.dtype(dtype)
    shape = nodes[j].shape
    if j == loss:
        return np.ones(shape, dtype=dt)  # the seed
    acc = None
    zero = dt.type(0)
    with np.errstate(all="ignore"):
        for i in sorted(by, reverse=True):  # backward visits nodes in decreasing id
            g = grad(i)
            if g is None:
                continue
            n = nodes[i]
            needs = _needs(nodes, n)
            parts = None if memo is None else memo.get(i)
            if parts is None:
                rule = REGISTRY[n.op].backward if rules is None else rules(n.op)
                w = precision.widen  # a half dtype computes in float32 (as the tape)
                parts = rule(math or _ref_math(), w(np.asarray(g)),
                             [w(np.asarray(value(x))) for x in n.inputs],
                             w(np.asarray(value(i))), n.attrs, needs)
                if memo is not None:
                    memo[i] = parts
            for k, x in enumerate(n.inputs):  # mul(x, x): both contributions, in input order
                if x != j or not needs[k] or parts[k] is None:
                    continue
                # a rule may hand its contribution in parts that autograd adds one by one
                for c in (parts[k] if isinstance(parts[k], GradParts) else (parts[k],)):
                    if type(c) is not np.ndarray or c.shape != shape or c.dtype != dt:
                        c = (np.asarray(c).astype(dt) if dt in precision.HALF
                             else np.asarray(c, dtype=dt)).reshape(shape)
                    acc = np.add(zero if acc is None else acc, c)
    return acc


def reference_update(opt: OptimizerState, sqrt: Callable | None = None
                     ) -> list[tuple[np.ndarray, Any, Any]]:
    """The reference optimizer step (``core.optim``, docs/reference-order.md) on the candidate's
    arrays before the update: per parameter ``(w, m, v)`` after it (m, v None for SGD).
    ``sqrt``: another square root than IEEE's for every one the step takes (the clipping norm,
    Adam's ``sqrt(v)``; ``core.explain.UPDATE_VARIANTS``)."""
    if not opt.params:
        return []
    dt = opt.params[0].w.dtype
    # a half episode's optimizer computes in float32 and rounds m, v, w once (core.optim)
    T = precision.compute_dtype(dt).type
    w_ = precision.widen
    gs = [w_(np.asarray(p.g)) for p in opt.params]  # read only: every use makes new arrays
    if dt in precision.HALF:
        return [tuple(None if a is None else np.asarray(a).astype(dt) for a in r)
                for r in _update_f32(opt, gs, T, sqrt)]
    return _update_f32(opt, gs, T, sqrt)


def _update_f32(opt: OptimizerState, gs: list, T: Any, sqrt: Callable | None = None
                ) -> list[tuple[np.ndarray, Any, Any]]:
    w_ = precision.widen
    root = np.sqrt if sqrt is None else sqrt
    with np.errstate(all="ignore"):
        if opt.clip is not None:
            acc = T(0.0)
            for g in gs:  # written as core.optim.Optimizer.grads writes it
                acc = serial_sum(np.concatenate([[acc], (g * g).ravel()]))
            norm = T(root(np.asarray(acc, dtype=T)))
            if norm > T(opt.clip):
                s = T(opt.clip) / norm
                gs = [g * s for g in gs]
        gs = [g + T(p.l2) * w_(p.w) if p.l2 != 0.0 else g for p, g in zip(opt.params, gs,
                                                                           strict=True)]
        out: list[tuple[np.ndarray, Any, Any]] = []
        if opt.kind in ("sgdm", "adamw"):
            return _torch_steps(opt, gs, T, root)
        if opt.kind == "sgd":
            return [(w_(p.w) - T(opt.lr) * g, None, None) for p, g in zip(opt.params, gs,
                                                                          strict=True)]
        t = opt.t
        # host scalars in python float64 (libm pow), then rounded once, as core.optim.Adam
        lr_t = opt.lr * math.sqrt(1.0 - opt.b2 ** t) / (1.0 - opt.b1 ** t)
        b1, omb1, b2, omb2 = T(opt.b1), T(1.0 - opt.b1), T(opt.b2), T(1.0 - opt.b2)
        eps, lrt = T(opt.eps), T(lr_t)
        from tapescope.core import native

        k = {"b1": b1, "omb1": omb1, "b2": b2, "omb2": omb2, "eps": eps, "lr_t": lrt}
        for p, g in zip(opt.params, gs, strict=True):
            pw = w_(np.asarray(p.w))
            m0 = np.zeros_like(pw) if p.m is None else w_(np.asarray(p.m))
            v0 = np.zeros_like(pw) if p.v is None else w_(np.asarray(p.v))
            # core.optim.Adam's one C pass, the same roundings as the lines below, on copies
            # (m, v updated in place there): ~8 numpy passes fewer per parameter
            m, v = np.array(m0, copy=True, order="C"), np.array(v0, copy=True, order="C")
            w = None if sqrt is not None else native.adam(
                np.ascontiguousarray(pw), np.ascontiguousarray(g), m, v, k)
            if w is not None:
                out.append((w, m, v))
                continue
            m = (b1 * m0) + (omb1 * g)
            v = (b2 * v0) + (omb2 * (g * g))
            w = pw - (lrt * (m / (root(v) + eps)))
            out.append((w, m, v))
    return out


def _torch_steps(opt: OptimizerState, gs: list, T: Any, root: Callable
                 ) -> list[tuple[np.ndarray, Any, Any]]:
    """core.optim.SGDMomentum / AdamW's lines (its ``sgdm_step`` / ``adamw_step``: one form)
    on each parameter after clipping and L2."""
    from tapescope.core import optim

    w_ = precision.widen
    out: list[tuple[np.ndarray, Any, Any]] = []
    if opt.kind == "sgdm":
        for p, g in zip(opt.params, gs, strict=True):
            buf = None if p.m is None else w_(np.asarray(p.m))
            w, buf = optim.sgdm_step(w_(np.asarray(p.w)), g, buf, T, opt.lr, opt.momentum,
                                     opt.dampening, opt.nesterov, opt.weight_decay)
            out.append((w, buf, None))
        return out
    lr, t = opt.lr, float(opt.t)
    bc1, bc2 = 1 - opt.b1 ** t, 1 - opt.b2 ** t  # as core.optim.AdamW.step_scalars
    k = {n: T(x) for n, x in {"decay": 1 - lr * opt.weight_decay, "omb1": 1 - opt.b1,
                              "b2": opt.b2, "omb2": 1 - opt.b2, "bc2s": bc2 ** 0.5,
                              "eps": opt.eps, "nstep": -(lr / bc1)}.items()}
    for p, g in zip(opt.params, gs, strict=True):
        m = None if p.m is None else w_(np.asarray(p.m))
        v = None if p.v is None else w_(np.asarray(p.v))
        out.append(optim.adamw_step(w_(np.asarray(p.w)), g, m, v, k, opt.weight_decay != 0.0,
                                    root))
    return out


def _same_bits(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return (a.dtype in _FLOATS and a.dtype == b.dtype and a.shape == b.shape
            and same_bytes(a, b))


def same_inputs(cand: OptimizerState, ref: OptimizerState,
                known: Collection[tuple[int, str]] = ()) -> list[bool]:
    """Per candidate parameter: its update's inputs are the reference run's own, bit for bit
    (w, g, m, v, its L2, the optimizer's settings, the same parameters stepped in the same
    order), so the reference optimizer's after-update arrays are what ``reference_update``
    would compute from them. Read before the update (an update rewrites its moments in
    place). Clipping scales every gradient by one norm of all of them: all or none.
    ``known``: ``(node, "value")`` / ``(node, "grad")`` where this step's w / g are already
    known to be the reference's bits (the parity compare's, ``gpu.parity.compare(equal=)``,
    of these very arrays before any launch since): not read again."""
    no = [False] * len(cand.params)
    keys = ("kind", "lr", "t", "clip", "b1", "b2", "eps", "momentum", "dampening", "nesterov",
            "weight_decay")
    if (any(getattr(cand, k) != getattr(ref, k) for k in keys)
            or [p.node for p in cand.params] != [p.node for p in ref.params]):
        return no
    out = [p.l2 == r.l2
           and ((p.node, "value") in known or _same_bits(p.w, r.w))
           and ((p.node, "grad") in known or _same_bits(p.g, r.g))
           and _same_bits(p.m, r.m) and _same_bits(p.v, r.v)
           for p, r in zip(cand.params, ref.params, strict=True)]
    return no if cand.clip is not None and not all(out) else out


# the dtypes judged bit for bit by their bytes (``same_bytes``)
_FLOATS = frozenset((np.dtype(np.float64), np.dtype(np.float32), precision.FLOAT16,
                     precision.BFLOAT16))


def _judge(ref: np.ndarray, cand: np.ndarray | None) -> TensorDiff | None:
    if cand is None or ref.shape != cand.shape:
        return None
    if _same_bits(ref, cand):
        return None  # the same bits (the common case, and cheap); else the full NaN policy
    d = compare_arrays(ref, cand)
    return d if d.n_diff else None


def provenance(state: StepState, explain: bool = False,
               classify: bool | None = None) -> Provenance:
    """Split the candidate's error at one step into introduced and inherited (module doc).
    ``explain``: give every introduced value and gradient its ``core.explain`` cause;
    ``classify`` (default: ``explain``): class every introduced array as a valid reordering or
    outside every reordering bound (``core.bounds``)."""
    classify = explain if classify is None else classify
    nodes, loss = state.nodes, state.loss
    ev, eg = state.exact_value, state.exact_grad
    cons = consumers(nodes, loss)
    values: list[Introduced] = []
    grads: list[Introduced] = []
    checked = 0
    for n in nodes:
        i = n.id
        if not n.inputs:
            if state.leaf is None or (ev is not None and ev[i] and n.op != "param"):
                continue  # a const equal to the reference holds the data it was given
            want = state.leaf(i)
            y = None if want is None else state.value(i)
            if y is None:
                continue
            checked += 1
            ref = np.asarray(want, dtype=y.dtype)
            d = _judge(ref, y)
        else:
            if ev is not None and ev[i] and all(ev[j] for j in n.inputs):
                continue  # same inputs as the reference, same output: nothing introduced
            y = state.value(i)
            if y is None:
                continue
            checked += 1
            ref = reference_value(n, [state.value(j) for j in n.inputs], y.dtype)
            d = _judge(ref, y)
        if d is not None:
            cause = None
            if explain and n.inputs:
                from tapescope.core.explain import explain as why
                from tapescope.core.explain import signed_zero

                cause = signed_zero(d) or why(n, [state.value(j) for j in n.inputs], y, d)
            verdict = _value_verdict(n, [state.value(j) for j in n.inputs], ref, y) \
                if classify else None
            values.append(Introduced(i, n.op, "value", d, cause=_classed(cause, verdict),
                                     verdict=verdict))
    memo: dict = {}
    for n in reversed(nodes):
        j = n.id
        by = cons[j]
        if ev is not None and eg is not None and eg[j] and all(
                eg[i] and ev[i] and all(ev[x] for x in nodes[i].inputs) for i in by):
            continue  # the reference's gradients and values in, its gradient out
        g = state.grad(j)
        if g is None:
            continue
        checked += 1
        r = reference_grad(nodes, j, loss, by, state.value, state.grad, g.dtype, memo)
        d = None if r is None else _judge(r, g)
        if d is not None:
            cause = _grad_cause(state, j, by, g, d) if explain else None
            verdict = _grad_verdict(state, j, by, r, g) if classify else None
            grads.append(Introduced(j, n.op, "grad", d, by=tuple(by),
                                    cause=_classed(cause, verdict), verdict=verdict))
    updates = _updates(nodes, state.update, classify)
    if explain and updates:
        updates = _explain_updates(state.update, updates)
    checked += len(state.update.params) if state.update is not None else 0
    made = {(e.node, e.which) for e in values + grads}
    kernels = [_kernel(state, cons, k, made) for k in state.kernels]
    return Provenance(state.step, values + grads + updates, kernels, checked)


# what a bound computation may raise on inputs it cannot read (the array stays unclassed)
_BOUND_ERRORS = (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError)


def _classed(cause: Any, verdict: Any) -> Any:
    """``cause`` carrying its array's class (``Cause.klass``), so every place that prints a
    cause (the summary line, the report, the Inspector's note) prints the class with it."""
    if cause is None or verdict is None:
        return cause
    from dataclasses import replace as _with

    return _with(cause, klass=verdict.klass)


def _value_verdict(n: Any, xs: list, ref: np.ndarray, y: np.ndarray) -> Any:
    from tapescope.core.bounds import judge, value_bound

    try:
        return judge(ref, y, value_bound(n.op, xs, n.attrs, ref, y.dtype))
    except _BOUND_ERRORS:
        return None


def _grad_verdict(state: StepState, j: int, by: Sequence[int], r: np.ndarray,
                  g: np.ndarray) -> Any:
    from tapescope.core.bounds import grad_bound, judge

    try:
        return judge(r, g, grad_bound(state.nodes, j, by, state.value, state.grad, g.dtype))
    except _BOUND_ERRORS:
        return None


def _grad_cause(state: StepState, j: int, by: Sequence[int], g: np.ndarray, d: Any) -> Any:
    from tapescope.core.explain import explain_grad, signed_zero

    if signed_zero(d) is not None:
        return signed_zero(d)
    nodes = state.nodes

    def recompute(math: Any = None, rules: Callable | None = None) -> np.ndarray | None:
        return reference_grad(nodes, j, state.loss, by, state.value, state.grad, g.dtype,
                              None, math, rules)

    return explain_grad(recompute, [nodes[i].op for i in by], g, d)


def _explain_updates(opt: OptimizerState, updates: list[Introduced]) -> list[Introduced]:
    """Every update entry with its cause: ``signed-zero``, or the step rerun under
    ``core.explain.UPDATE_VARIANTS`` (another square root), else ``unknown``."""
    from dataclasses import replace as _with

    from tapescope.core.explain import explain_update, signed_zero

    at = {p.node: i for i, p in enumerate(opt.params)}
    sel = [at[e.node] for e in updates]

    def rerun(sqrt: Callable) -> list:
        outs = reference_update(opt, sqrt)  # every parameter: a clipping norm couples them
        return [outs[i] for i in sel]

    cands = [(opt.params[i].w_after, opt.params[i].m_after, opt.params[i].v_after)
             for i in sel]
    causes = explain_update(rerun, cands, [e.diff for e in updates])
    return [_with(e, cause=_classed(signed_zero(e.diff) or c, e.verdict))
            for e, c in zip(updates, causes, strict=True)]


def _usable(opt: OptimizerState, p: ParamUpdate, r: Any) -> bool:
    """A reference entry stands in for the rerun only whole: every array its judge reads, in
    the parameter's shape and dtype (else the rerun; a missing one would judge nothing)."""
    if r is None:
        return False
    n = {"adam": 3, "adamw": 3, "sgdm": 2 if opt.momentum else 1}.get(opt.kind, 1)
    return all(a is not None and a.shape == p.w.shape and a.dtype == p.w.dtype
               for a in r[:n])


def _update_verdict(opt: OptimizerState, p: ParamUpdate, parts: list) -> Any:
    """The worst class over the parts (param, m, v) of one update that differ (none yet for the
    torch.optim steps: core.bounds writes SGD's and Adam's)."""
    from tapescope.core.bounds import OUTSIDE, VALID, Verdict, judge, update_bounds

    if opt.kind not in ("sgd", "adam"):
        return None

    try:
        bounds = update_bounds(opt, p)
        vs = [judge(ref, cand, bounds[part]) for part, ref, cand in parts if part in bounds]
    except _BOUND_ERRORS:
        return None
    if not vs:
        return None
    bad = [v for v in vs if v.klass == OUTSIDE]
    return Verdict(OUTSIDE if bad else VALID, max(v.ratio for v in vs),
                   sum(v.n_outside for v in vs))


def _updates(nodes: tuple, opt: OptimizerState | None,
             classify: bool = False) -> list[Introduced]:
    if opt is None:
        return []
    refs = [None] * len(opt.params) if opt.reference is None else list(opt.reference)
    ok = [_usable(opt, p, r) for p, r in zip(opt.params, refs, strict=True)]
    if opt.clip is not None and not all(ok):
        ok = [False] * len(ok)  # one norm of every gradient: a rerun is of all of them
    rerun = iter(reference_update(replace(
        opt, params=[p for p, k in zip(opt.params, ok, strict=True) if not k], reference=None)))
    out = []
    for p, r, k in zip(opt.params, refs, ok, strict=True):
        w, m, v = r if k else next(rerun)
        first = None
        differ = []  # every part that differs (the class looks at all of them)
        for part, ref, cand in (("param", w, p.w_after), ("m", m, p.m_after),
                                ("v", v, p.v_after)):
            d = None if ref is None else _judge(ref, cand)
            if d is not None:
                first = first or (part, d)
                differ.append((part, ref, cand))
                if not classify:
                    break
        if first is not None:
            verdict = _update_verdict(opt, p, differ) if classify else None
            out.append(Introduced(p.node, nodes[p.node].op, "update", first[1], part=first[0],
                                  verdict=verdict))
    return out


def _kernel(state: StepState, cons: list[list[int]], k: dict, made: set) -> dict:
    """One fused kernel judged whole: its outputs vs its segment run on its inputs.

    NOTE: by induction over the segment's order, the whole-kernel run reproduces every output
    exactly when no member introduced error on its own (per node, ``made``), and the first
    member that did is where the kernel first differs: only then is the segment rerun, for the
    kernel's own n_diff and max ulp.
    """
    nodes = state.nodes
    ids = sorted(k["node_ids"])
    out = {"kernel": k["kernel"], "role": k["role"], "segment": k.get("segment"),
           "nodes": ids, "introduced": False, "n_diff": 0, "max_ulp": 0, "first_node": None}
    if k["role"] == "forward":
        if not any((i, "value") in made for i in ids):
            return out
        rec: dict[int, np.ndarray] = {}
        for i in ids:
            y = state.value(i)
            xs = [rec[j] if j in rec else state.value(j) for j in nodes[i].inputs]
            rec[i] = reference_value(nodes[i], xs, y.dtype)
        pairs = [(i, rec[i], state.value(i)) for i in ids]
    else:
        targets = sorted({x for i in ids
                          for x, need in zip(nodes[i].inputs, _needs(nodes, nodes[i]),
                                             strict=True) if need}, reverse=True)
        if not any((x, "grad") in made for x in targets):
            return out
        targets = [x for x in targets if state.grad(x) is not None]
        rg: dict[int, np.ndarray] = {}

        def grad(i: int) -> np.ndarray | None:
            return rg[i] if i in rg else state.grad(i)

        for x in targets:  # decreasing id: a recomputed gradient feeds the ones below it
            g = state.grad(x)
            r = reference_grad(nodes, x, state.loss, cons[x], state.value, grad, g.dtype)
            if r is not None:
                rg[x] = r
        # in the kernel's own order (backward: decreasing id), so first_node is where it first
        # went wrong, not the lowest gradient the error reached
        pairs = [(x, rg[x], state.grad(x)) for x in sorted(rg, reverse=True)]
    for i, ref, cand in pairs:
        d = _judge(ref, cand)
        if d is not None:
            out["introduced"] = True
            out["n_diff"] += d.n_diff
            out["max_ulp"] = max(out["max_ulp"], d.max_ulp)
            if out["first_node"] is None:
                out["first_node"] = i
    return out
