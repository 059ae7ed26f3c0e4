"""Glue between the runs of ``app.runs`` and ``core.provenance`` (no Qt).

``StepProbe`` builds a ``core.provenance.StepState`` from the candidate run of a ``PairRunner``
step (arrays fetched lazily and once, the parameters and optimizer state read before the update,
what the update left read after it) and keeps what the next step needs (each parameter as its
update left it: what the parameter must hold next step). ``parse_inject`` reads the
``--inject NODE[:grad]@STEP`` fault specification; ``flip_lowest_bit`` is the fault.

A run takes part through the ``app.run_sides.Run`` protocol: ``array(i, which)``,
``leaf_value(i)`` and, for the update check, ``optimizer_arrays(after)`` (None: value and
gradient provenance only). The step's arrays come from the pair's one store
(``app.run_sides.StepArrays``), each fetched once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapescope.core.provenance import OptimizerState, ParamUpdate, StepState, same_inputs

__all__ = ["Inject", "StepProbe", "flip_lowest_bit", "kernel_list", "parse_inject"]


@dataclass(frozen=True)
class Inject:
    """A one-bit fault: element 0's lowest mantissa bit of ``node``'s value or gradient, at
    ``step`` (from 1), right after the device computes it."""

    node: int
    which: str  # "value" | "grad"
    step: int

    def label(self) -> str:
        """As the user writes it: ``12@3`` or ``12:grad@3``."""
        return f"{self.node}{':grad' if self.which == 'grad' else ''}@{self.step}"


_SPEC = re.compile(r"^(?P<node>[^@:]+?)(?::(?P<which>value|grad))?@(?P<step>\d+)$")


def parse_inject(spec: str, nodes: tuple, steps: int | None = None) -> Inject:
    """``NODE@STEP`` or ``NODE:grad@STEP`` (NODE a node id or a unique node name; STEP from 1)
    → Inject; a malformed spec, an unknown node or an out-of-range step raises ValueError."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"--inject {spec!r}: expected NODE@STEP or NODE:grad@STEP "
                         "(NODE a node id or name, STEP from 1)")
    key, which, step = m["node"], m["which"] or "value", int(m["step"])
    if key.lstrip("-").isdigit():
        node = int(key)
        if not 0 <= node < len(nodes):
            raise ValueError(f"--inject {spec!r}: no node #{node} (ids 0..{len(nodes) - 1})")
    else:
        hits = [n.id for n in nodes if n.name == key]
        if len(hits) != 1:
            raise ValueError(f"--inject {spec!r}: {len(hits)} nodes are named {key!r} "
                             "(use the node id)")
        node = hits[0]
    if step < 1 or (steps is not None and step > steps):
        run = f"steps 1..{steps}" if steps is not None else "steps are numbered from 1"
        raise ValueError(f"--inject {spec!r}: step {step} is not run ({run})")
    return Inject(node, which, step)


def flip_lowest_bit(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` with the lowest mantissa bit of element 0 flipped."""
    out = np.array(a, copy=True).reshape(-1)
    out.view(np.uint64 if out.dtype == np.float64 else np.uint32)[0] ^= 1
    return out


def kernel_list(plan: Any) -> list[dict]:
    """A fusion plan's generated kernels as ``StepState.kernels`` entries."""
    if plan is None:
        return []
    out = []
    for s in plan.segments:
        out.append({"kernel": s.forward, "role": "forward", "segment": s.index,
                    "node_ids": list(s.node_ids)})
        if s.backward:
            out.append({"kernel": s.backward, "role": "backward", "segment": s.index,
                        "node_ids": list(s.backward_ids or s.node_ids)})
    return out


class StepProbe:
    """Builds each step's StepState for the candidate of a pair (see the module docstring)."""

    def __init__(self, nodes: tuple, loss: int, cand: Any, plan: Any, hints: bool,
                 ref: Any = None) -> None:
        """``ref``: the reference run when it is core.optim's numpy reference in the
        candidate's dtype and offers ``optimizer_views`` (``CpuRun``): then an update whose
        inputs are its own bits is judged against its own after-update arrays, no rerun."""
        self.nodes, self.loss, self.cand, self.hints = nodes, loss, cand, hints
        self.ref = ref if hints and hasattr(ref, "optimizer_views") else None
        self._same: list[bool] | None = None  # this step's same_inputs, before its update
        self.kernels = kernel_list(plan)
        self.params = [n.id for n in nodes if n.op == "param"]
        # what each parameter must hold at the next step: as capture uploaded it, then as each
        # checked update left it (None: an update went unchecked, the leaf is not judged)
        self.expect: dict[int, np.ndarray | None] = self._uploaded(cand)

    def _uploaded(self, cand: Any) -> dict[int, np.ndarray | None]:
        """Each parameter as the candidate holds it now: the numpy reference's copy where the
        candidate's device judges it the same bits (``same_now``: only summaries cross),
        else downloaded."""
        known: dict = {}
        if self.ref is not None and hasattr(cand, "same_now"):
            mine = {(i, "value"): _own(self.ref.array(i, "value")) for i in self.params}
            known = {k[0]: mine[k] for k in cand.same_now(mine)}
        return {i: known[i] if i in known else _own(cand.array(i, "value"))
                for i in self.params}

    def before_update(self, step: int, record: np.ndarray, f: Any,
                      views: bool = False) -> StepState:
        """The state of this step, read before the optimizer update; ``record`` is the step's
        ``core.step_record``, ``f`` the candidate's side of the step's store (``value(i)``,
        ``grad(i)``: each array fetched once). ``views`` (a state judged this step and not
        kept): the candidate's moments read in place where it offers that, and copied now
        only for the parameters whose inputs are not the reference's (the others are judged
        on the reference's after arrays and never read their moments again: the update
        rewrites them in place)."""
        for i in self.params:  # the update overwrites them: read now
            f.value(i)
            f.grad(i)
        ev = eg = None
        if self.hints:
            ev = (record["v_diff"] == 0).tolist()
            eg = (record["g_diff"] <= 0).tolist()  # (-1: no gradient entry, nothing differs)
        mine = None if self.ref is None else self.ref.optimizer_views(after=False)
        view = views and mine is not None and hasattr(self.cand, "optimizer_views")
        opt = _optimizer_before(self.cand, f, view)
        self._same = None
        if opt is not None and mine is not None:  # before the update rewrites m, v
            eq = getattr(self.cand, "equal_bits", None)  # w, g: the compare read them already
            self._same = same_inputs(opt, _state_of(mine, self.ref),
                                     () if eq is None else eq(self.ref))
        if opt is not None and view:
            for p, same in zip(opt.params, self._same or [False] * len(opt.params),
                               strict=True):
                if not same:  # the rerun's inputs: owned before the update
                    p.m, p.v = _unview(p.m), _unview(p.v)
        expect = dict(self.expect)  # this step's: after_update moves self.expect on

        def leaf(i: int) -> np.ndarray | None:
            if self.nodes[i].op == "param":
                return expect.get(i)
            return self.cand.leaf_value(i)

        return StepState(step, self.nodes, self.loss, f.value, f.grad, leaf, ev, eg, opt,
                         self.kernels)

    def after_update(self, st: StepState, value_after: Any = None, views: bool = False,
                     ref_after: Any = None) -> None:
        """Read what the update left (``value_after(i)``: a parameter's value now, from the
        step's store; else the run's); remember each parameter's new value for the next step.
        ``views``: the moments the update left as the candidate's own memory where it offers
        that (``optimizer_views``: a host device's, no download), valid until its next launch:
        only for a state judged now and not kept (``release`` then drops them).
        ``ref_after(i)``: the reference's parameter value after its update as the step's store
        holds it (the very array a candidate value proven equal is read as, so the judge of
        the two is one identity check); else the reference run's own."""
        done = set()
        if st.update is not None:
            _optimizer_after(self.cand, st.update,
                             value_after or (lambda i: self.cand.array(i, "value")),
                             views and hasattr(self.cand, "optimizer_views"))
            for p in st.update.params:
                self.expect[p.node] = p.w_after
                done.add(p.node)
            if self._same is not None and any(self._same):
                mine = self.ref.optimizer_views(after=True)
                w_ref = ref_after or (lambda i: self.ref.array(i, "value"))
                views = {i: (w_ref(i), m, v) for i, _, m, v in mine["params"]}
                # views of the reference's arrays: valid until its next update (the pair
                # drops them once this step's provenance ran: ``release``)
                st.update.reference = [views.get(p.node) if same else None
                                       for p, same in zip(st.update.params, self._same,
                                                          strict=True)]
            self._same = None
        for i in self.params:
            if i not in done:  # not stepped (never reached), or the update is not checked
                self.expect[i] = st.value(i) if st.update is not None else None

    @staticmethod
    def release(st: StepState) -> None:
        """Drop the reference's views from ``st`` (its next update overwrites them): a kept
        state judged again later reruns the reference update instead (the same verdict).
        (The candidate's moments read with ``after_update(views=True)`` stay: such a state
        is not kept, it is dropped with the step.)"""
        if st.update is not None:
            st.update.reference = None

    def skip(self) -> None:
        """A step without provenance: the parameters' next values are unknown."""
        for i in self.params:
            self.expect[i] = None


def _own(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.array(a, copy=True)


def _readonly(a: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None
    out = a.view()
    out.flags.writeable = False
    return out


def _unview(a: np.ndarray | None) -> np.ndarray | None:
    """A read-only array (a device's memory in place) copied; an owned download as it is."""
    return a if a is None or a.flags.writeable else np.array(a, copy=True)


def _optimizer_before(run: Any, f: Any, views: bool = False) -> OptimizerState | None:
    info = run.optimizer_views(after=False) if views else run.optimizer_arrays(after=False)
    return None if info is None else _state(info, f.value, f.grad)


def _state_of(info: dict, run: Any) -> OptimizerState:
    """An ``optimizer_arrays`` / ``optimizer_views`` dict of ``run`` before its update as an
    OptimizerState (w, g: the run's arrays now)."""
    return _state(info, lambda i: run.array(i, "value"), lambda i: run.array(i, "grad"))


def _state(info: dict, value: Any, grad: Any) -> OptimizerState:
    """``info`` (an ``optimizer_arrays`` dict) as an OptimizerState before the update, each
    parameter's w and g read with ``value(i)``, ``grad(i)``."""
    params = [ParamUpdate(i, l2, value(i), grad(i), None, m, v) for i, l2, m, v in info["params"]]
    return OptimizerState(info["kind"], info["lr"], info["t"], params, info["clip"],
                          info.get("b1", 0.9), info.get("b2", 0.999), info.get("eps", 1e-8),
                          **{k: info[k] for k in TORCH_STEP_SETTINGS if k in info})


# the settings of core.optim's SGDMomentum / AdamW an optimizer_arrays dict carries
TORCH_STEP_SETTINGS = ("momentum", "dampening", "nesterov", "weight_decay")


def optimizer_settings(opt: Any, after: bool) -> dict:
    """An optimizer's (core or device) kind and settings for ``optimizer_arrays``: its lr is
    the one of the update around which it is read (a schedule's), t that update's count."""
    t = opt.t if after else opt.t + 1
    lr_at = getattr(opt, "lr_at", None)
    out: dict = {"kind": opt.kind, "lr": opt.lr if lr_at is None else lr_at(t),
                 "clip": opt.clip, "t": t, "params": []}
    if opt.kind in ("adam", "adamw"):
        out.update(b1=opt.b1, b2=opt.b2, eps=opt.eps)
    out.update({k: getattr(opt, k) for k in TORCH_STEP_SETTINGS if hasattr(opt, k)})
    return out


def _optimizer_after(run: Any, st: OptimizerState, value_after: Any, views: bool) -> None:
    info = run.optimizer_views(after=True) if views else run.optimizer_arrays(after=True)
    by_id = {i: (m, v) for i, _, m, v in info["params"]}
    for p in st.params:
        p.w_after = value_after(p.node)
        p.m_after, p.v_after = by_id.get(p.node, (None, None))


def core_optimizer_arrays(opt: Any, tape: Any, after: bool, copy: bool = True) -> dict:
    """A ``core.optim`` optimizer's settings and per stepped parameter ``(id, l2, m, v)``
    (copies, or with ``copy=False`` read-only views of the optimizer's own arrays, which its
    next update rewrites; m, v None for SGD or before Adam's first step), before or after its
    update."""
    out = optimizer_settings(opt, after)
    for s in opt.slots:
        if tape.grad(s.var) is None:
            continue  # not stepped
        m, v = getattr(s, "m", None), getattr(s, "v", None)
        out["params"].append((s.var.id, s.l2, _own(m), _own(v)) if copy else
                             (s.var.id, s.l2, _readonly(m), _readonly(v)))
    return out


def device_optimizer_arrays(dopt: Any, prog: Any, after: bool, views: bool = False,
                            like: Any = None) -> dict:
    """The same for a device optimizer (``gpu.SGD`` / ``gpu.Adam``) bound to ``prog``; the
    moments are downloaded (``views``: the device's memory itself where it is the host's,
    read-only and valid until the next launch; else downloaded). ``like()``: where the
    device's memory is not the host's, an ``optimizer_arrays`` dict whose moments the device
    probably holds (its feed's, the numpy reference's): a moment judged on the device to be
    exactly those bits is copied from it on the host, not downloaded (only the diff's
    summary crosses)."""
    adam = dopt.kind == "adam"
    out = optimizer_settings(dopt, after)
    moments = getattr(dopt, "moments", None)  # allocated at the first update
    if dopt.kind in ("sgdm", "adamw"):  # the torch.optim steps: their buffers, read back
        _torch_step_moments(dopt, prog, out, moments, views)
        return out
    if moments:
        prog.device.synchronize()
    known = _known_moments(prog, moments, like) if adam and moments else {}
    for i, l2 in dopt.params:
        if prog.grads[i] is None:
            continue
        m = v = None
        if adam and moments:
            shape = prog.nodes[i].shape
            m, v = (known[(i, k)].reshape(shape) if (i, k) in known else
                    _read(prog.device, b, views).reshape(shape)
                    for k, b in enumerate(moments[i]))
        elif adam:
            m, v = dopt.initial_moments.get(i, (None, None))
        out["params"].append((i, l2, m, v))
    return out


def _torch_step_moments(dopt: Any, prog: Any, out: dict, moments: dict | None,
                        views: bool) -> None:
    """sgdm's momentum buffer (None before its first step) / adamw's m and v per stepped
    parameter into ``out`` (downloaded, or the host's own memory with ``views``)."""
    if moments:
        prog.device.synchronize()
    started = dopt.t > 0 or any(m is not None for m, _ in dopt.initial_moments.values())
    for i, l2 in dopt.params:
        if prog.grads[i] is None:
            continue
        m = v = None
        if moments and started:
            shape = prog.nodes[i].shape
            m, v = (None if b is None else _read(prog.device, b, views).reshape(shape)
                    for b in moments[i])
        elif i in dopt.initial_moments:
            m, v = dopt.initial_moments[i]
        out["params"].append((i, l2, m, v))


def _known_moments(prog: Any, moments: dict, like: Any) -> dict:
    """``{(param id, 0 | 1): m | v}``: the moments ``like()`` offers that the device holds bit
    for bit (copies), judged on the device; nothing where its memory is the host's (read in
    place there) or without ``like``."""
    first = next(iter(moments.values()))[0]
    if like is None or prog.device.host_view(first) is not None:
        return {}
    info = like()
    if not info:
        return {}
    from tapescope.gpu.parity import same_bits_of

    keys, pairs = [], []
    for i, _, m, v in info["params"]:
        for k, a in enumerate((m, v)):
            if i in moments and a is not None:
                keys.append((i, k))
                pairs.append((moments[i][k], a))
    return {key: np.array(a, copy=True).reshape(-1)
            for key, (_, a), same in zip(keys, pairs, same_bits_of(prog, pairs), strict=True)
            if same}


def _read(dev: Any, buf: Any, view: bool) -> np.ndarray:
    got = dev.host_view(buf) if view else None
    return buf.download() if got is None else got
