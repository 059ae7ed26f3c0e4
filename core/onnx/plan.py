"""A session's run plan: the same outputs, bit for bit, with less work per run.

``Session.run`` runs the plan instead of the plain node list when it applies (see
:meth:`Plan.usable`); ``Session(..., plan=False)`` and ``TAPESCOPE_ONNX_PLAN=0`` turn it off, and
the tests hold every planned run to the plain executor byte for byte. Three things:

* **Folding under defaults.** A graph input with a default (an initializer also listed as an
  input) may be overridden by a feed, so ``Session`` never folds what depends on one. The plan
  folds those nodes too, once, with the defaults (the light models build every weight with a
  ``ConstantOfShape`` of such an input: 243 of shufflenet's 446 nodes), and remembers which
  inputs it assumed (``guard``): a run that feeds one of them runs the plain node list.
* **Conv chains in one C pass** (reference mode, native code available): ``Conv`` followed by
  any of ``BatchNormalization`` (inference), a two-input ``Sum``/``Add`` with a same-shape
  tensor, and ``Relu``, each intermediate used only by the next. The product runs as before
  (the batched reference matmul, or the direct one-output-per-group kernel) and each block of
  output rows then takes the following ops in order while it is in cache, every op still its
  own rounding with the operands in the node's order (``core.native.epilogue``). Anything the
  C pass does not cover (a dtype, a broadcast, a shape) runs the nodes one by one instead.
* **Gemm with a constant B and transB=1**: B transposed (copied) once, not every run.

Budget accounting is kept: every original node still passes ``Budget.before`` and a fused
chain charges the bytes its unmaterialised intermediates would have held.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.onnx.errors import OnnxError
from core.onnx.limits import OnnxCancelled

#: ops never folded: their outputs must be fresh per run (or are random)
NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
              "Multinomial", "Bernoulli", "Dropout"}


def enabled() -> bool:
    """Whether sessions plan their runs (``TAPESCOPE_ONNX_PLAN=0`` turns it off)."""
    return os.environ.get("TAPESCOPE_ONNX_PLAN", "1") != "0"


@dataclass
class Plan:
    """What ``Session.run`` runs instead of the plain node list."""

    steps: list  # executor Steps and FusedConv/ConstArgs entries, in graph order
    values: dict[str, np.ndarray] = field(default_factory=dict)  # folded under defaults
    guard: frozenset = frozenset()  # inputs with defaults the folded values assumed
    hidden: frozenset = frozenset()  # names a fused chain never materialises
    bases: dict = field(default_factory=dict)  # id -> base array of the values, as hold() keys
    nbytes: int = 0  # what holding them all costs (hold()'s count)
    largest: int = 0  # the most elements of one value

    def hold(self, budget) -> None:
        """Account for the folded values as ``Budget.hold`` on each would."""
        if self.largest > budget.limits.max_elements:
            for v in self.values.values():
                budget.hold(v)  # raises, naming the value
        budget.hold_static(self.bases, self.nbytes)

    def usable(self, feeds: dict, outputs) -> bool:
        """A run may use the plan unless it feeds a guarded input or asks for a hidden value."""
        if self.guard and any(k in self.guard for k in feeds):
            return False
        return not (outputs and self.hidden and any(o in self.hidden for o in outputs))


# ---- building ---------------------------------------------------------------------------------

def _subgraph_names(sess) -> set[str]:
    """Every name a node inside any subgraph reads (it may be an outer-scope value)."""
    CompiledGraph = type(sess.graph)  # noqa: N806 - the executor's class (it imports us)
    names: set[str] = set()

    def walk(cg):
        for st in cg.steps:
            for v in st.attrs.values():
                if isinstance(v, CompiledGraph):
                    for sub in v.steps:
                        names.update(i for i in sub.node.input if i)
                    walk(v)
    walk(sess.graph)
    return names


def _fold_under_defaults(sess, budget) -> tuple[list, dict, set]:
    """(steps left, folded values, inputs assumed): Session's folding, but an input with a
    default counts as a constant with that value."""
    g = sess.graph
    CompiledGraph = type(g)  # noqa: N806 - the executor's class (it imports us)
    overridable = {i.name for i in sess.model.graph.input} & set(g.inits)
    known = dict(g.inits)
    deps: dict[str, frozenset] = {n: frozenset([n]) for n in overridable}
    outputs = set(g.outputs)
    keep, values, guard = [], {}, set()
    for st in g.steps:
        ins = [i for i in st.node.input if i]
        const = (st.node.op_type not in NOT_FOLDED
                 and not any(isinstance(v, CompiledGraph) for v in st.attrs.values())
                 and all(i in known for i in ins)
                 and not any(o in outputs for o in st.node.output))
        d = frozenset().union(*(deps.get(i, frozenset()) for i in ins)) if const else None
        if const and not d:
            const = False  # Session would have folded it had it been foldable: leave it
        if const:
            env = dict(known)
            try:
                sess._run_steps(CompiledGraph("fold", [st], {}, [], [], g.proto), env, budget)
            except OnnxCancelled:
                raise
            except OnnxError:  # a limit or a kernel error: at run it surfaces as without a plan
                const = False
        if const:
            for o in st.node.output:
                if o:
                    v = env[o]
                    if isinstance(v, np.ndarray):
                        v.flags.writeable = False  # shared by every run: nobody writes it
                    known[o] = values[o] = v
                    deps[o] = d
            guard |= d
        else:
            keep.append(st)
    return keep, values, guard


def _consumers(steps, extra: set[str]) -> dict[str, int]:
    n: dict[str, int] = {}
    for st in steps:
        for i in st.node.input:
            if i:
                n[i] = n.get(i, 0) + 1
    for i in extra:
        n[i] = n.get(i, 0) + 2  # read from a subgraph or a graph output: never fused away
    return n


def _single_output(st) -> bool:
    return len([o for o in st.node.output if o]) == 1 and bool(st.node.output[0])


def _fuse(steps, consumers, constants, convs: bool = True) -> tuple[list, set]:
    """Replace Conv chains by FusedConv entries (``convs``: native code is there), channel
    shuffles by Shuffle entries and constant-B Gemms by ConstArgs."""
    by_input: dict[str, list[int]] = {}
    for j, st in enumerate(steps):
        for i in st.node.input:
            if i:
                by_input.setdefault(i, []).append(j)
    out, hidden, used = [], set(), set()
    place: dict[int, Any] = {}  # a fused chain runs where its last node was
    for j, st in enumerate(steps):
        if j in used:
            if j in place:
                out.append(place[j])
            continue
        op = st.node.op_type
        if op == "Gemm" and st.node.domain in ("", "ai.onnx") and st.attrs.get("transB") \
                and not st.attrs.get("transA") and len(st.node.input) >= 2 \
                and st.node.input[1] in constants:
            b = constants[st.node.input[1]]
            if isinstance(b, np.ndarray) and b.ndim == 2:
                out.append(ConstArgs(st, {1: np.ascontiguousarray(b.T)}, {"transB": 0}))
                continue
        if op == "Reshape" and st.node.domain in ("", "ai.onnx") and _single_output(st):
            chain = _shuffle_chain(steps, j, by_input, consumers, used)
            if chain is not None:
                for nj in chain[1]:
                    used.add(nj)
                for s_ in chain[0][:-1]:
                    hidden.add(s_.node.output[0])
                place[chain[1][-1]] = Shuffle(chain[0])
                continue
        if not convs or op != "Conv" or st.node.domain not in ("", "ai.onnx") \
                or not _single_output(st) or len([i for i in st.node.input if i]) < 2:
            out.append(st)
            continue
        chain = [st]
        cur = st.node.output[0]
        k = j
        stage = 0  # 1: BN taken, 2: Sum taken, 3: Relu taken
        while consumers.get(cur, 0) == 1 and len(by_input.get(cur, [])) == 1:
            nj = by_input[cur][0]
            if nj <= k or nj in used:
                break
            nxt = steps[nj]
            nop = nxt.node.op_type
            if nxt.node.domain not in ("", "ai.onnx") or not _single_output(nxt):
                break
            if nop == "BatchNormalization" and stage < 1 and len(nxt.node.input) == 5 \
                    and nxt.node.input[0] == cur and all(nxt.node.input) \
                    and not nxt.attrs.get("training_mode") and nxt.attrs.get("spatial", 1) \
                    and cur not in nxt.node.input[1:]:
                stage = 1
            elif nop in ("Sum", "Add") and stage < 2 and len(nxt.node.input) == 2 \
                    and all(nxt.node.input) and nxt.node.input[0] != nxt.node.input[1] \
                    and not (nop == "Add" and nxt.attrs.get("broadcast")):
                stage = 2
            elif nop == "Relu" and stage < 3:
                stage = 3
            else:
                break
            chain.append(nxt)
            hidden.add(cur)
            used.add(nj)
            cur = nxt.node.output[0]
            k = nj
            if stage == 3:
                break
        if len(chain) == 1:
            out.append(st)
            continue
        place[k] = FusedConv(chain)
    return out, hidden


def _shuffle_chain(steps, j, by_input, consumers, used):
    """Reshape -> Transpose -> Reshape from step j, each intermediate read once: (the three
    steps, their indices after j), or None."""
    chain, idx = [steps[j]], []
    cur, k = steps[j].node.output[0], j
    for want in ("Transpose", "Reshape"):
        if consumers.get(cur, 0) != 1 or len(by_input.get(cur, [])) != 1:
            return None
        nj = by_input[cur][0]
        nxt = steps[nj]
        if nj <= k or nj in used or nxt.node.op_type != want or not _single_output(nxt) \
                or nxt.node.domain not in ("", "ai.onnx") or nxt.node.input[0] != cur \
                or cur in nxt.node.input[1:]:
            return None
        chain.append(nxt)
        idx.append(nj)
        cur, k = nxt.node.output[0], nj
    return chain, idx


def _merge_shuffles(steps: list, consumers: dict, hidden: set) -> list:
    """A fused chain whose only reader is a channel shuffle writes its rows straight to their
    shuffled places (the pair runs where the shuffle was)."""
    fused = {e.out: e for e in steps if isinstance(e, FusedConv)}
    merged: dict[int, Any] = {}
    for e in steps:
        if isinstance(e, Shuffle) and e.src in fused and consumers.get(e.src, 0) == 1:
            f = fused.pop(e.src)
            f.shuffle = e
            hidden.add(f.out)
            merged[id(f)] = e
    by_shuffle = {id(sh): f for f in steps if isinstance(f, FusedConv) and id(f) in merged
                  for sh in (merged[id(f)],)}
    return [by_shuffle.get(id(e), e) for e in steps if id(e) not in merged]


def build(sess, budget, fold: bool = True) -> Plan:
    """The plan for ``sess``'s main graph (folding runs kernels: limits apply)."""
    if fold:
        steps, values, guard = _fold_under_defaults(sess, budget)
    else:
        steps, values, guard = list(sess.graph.steps), {}, set()
    hidden: set[str] = set()
    if sess.mode == "reference":
        from core import native

        overridable = {i.name for i in sess.model.graph.input}
        constants = {k: v for k, v in sess.graph.inits.items() if k not in overridable}
        constants.update(values)
        convs = native.library() is not None
        consumers = _consumers(steps, _subgraph_names(sess) | set(sess.graph.outputs))
        steps, hidden = _fuse(steps, consumers, constants, convs)
        if convs:
            steps = _merge_shuffles(steps, consumers, hidden)
    bases: dict = {}
    nbytes = largest = 0
    for v in values.values():
        if isinstance(v, np.ndarray):
            largest = max(largest, v.size)
            base = v
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in bases:
                bases[id(base)] = base
                nbytes += base.nbytes if base.flags.owndata else v.nbytes
    return Plan(steps, values, frozenset(guard), frozenset(hidden), bases, nbytes, largest)


# ---- running ----------------------------------------------------------------------------------

class ConstArgs:
    """A node run with some inputs replaced by precomputed constants (and attributes changed)."""

    def __init__(self, st, consts: dict[int, np.ndarray], attrs: dict) -> None:
        self.orig = st
        self.consts = consts
        self.step = dataclasses.replace(st, attrs={**st.attrs, **attrs})

    def run(self, sess, env, budget, run_sub) -> None:
        sess._run_step(self.step, sess.graph, env, budget, run_sub, self.consts)


class FusedConv:
    """Conv [BatchNormalization] [Sum/Add] [Relu] in one C pass (see the module docstring)."""

    def __init__(self, chain: list) -> None:
        self.chain = chain
        self.conv = chain[0]
        self.bn = next((s for s in chain if s.node.op_type == "BatchNormalization"), None)
        self.add = next((s for s in chain if s.node.op_type in ("Sum", "Add")), None)
        self.relu = any(s.node.op_type == "Relu" for s in chain)
        self.out = chain[-1].node.output[0]
        self.inner = {s.node.output[0] for s in chain[:-1]}  # never materialised
        self.res_first, self.res_name = False, None
        if self.add is not None:
            prev = chain[chain.index(self.add) - 1].node.output[0]
            ins = list(self.add.node.input)
            self.res_first = ins[0] != prev
            self.res_name = ins[0] if self.res_first else ins[1]
        cin = list(self.conv.node.input)
        # the operands besides x, fixed per model as a rule: w, bias, scale, beta, mean, var
        self.const_names = [cin[1], cin[2] if len(cin) > 2 and cin[2] else None]
        if self.bn is not None:
            self.const_names += list(self.bn.node.input[1:])
        self.x_name = cin[0]
        self._prep: Any = None  # (x shape, dtype, operands, prepared geometry): see _prepare
        self.shuffle: Shuffle | None = None  # the channel shuffle that reads the output

    def run(self, sess, env, budget, run_sub) -> None:
        if self.shuffle is not None:
            y = self._fused(env, budget, sess, self.shuffle)
            if y is not None:
                env[self.shuffle.out] = y
                return
        y = self._fused(env, budget, sess)
        if y is None:  # not a case the C pass covers: the nodes one by one
            for st in self.chain:
                sess._run_step(st, sess.graph, env, budget, run_sub)
        else:
            env[self.out] = y
        if self.shuffle is not None:
            self.shuffle.run(sess, env, budget, run_sub)

    def _prepare(self, x, ops, env, budget):
        """Everything about this chain that depends on x's shape and the operands only (the
        geometry, the Epilogue, the budget's charges, the weights as the product takes them),
        or None when the C pass does not cover the case."""
        from core import native
        from core.onnx.ops.window import attrs_nd, pads_for
        from core.ops.nn import out_size

        w, b = ops[0], ops[1]
        if not isinstance(x, np.ndarray) or not isinstance(w, np.ndarray) or x.ndim != 4 \
                or w.ndim != 4 or x.dtype not in (np.float32, np.float64) or w.dtype != x.dtype:
            return None
        dt = x.dtype
        at = self.conv.attrs
        group = at.get("group", 1)
        m, c = w.shape[0], x.shape[1]
        if not isinstance(group, int) or group < 1 or c % group or m % group \
                or w.shape[1] * group != c or 0 in x.shape or 0 in w.shape:
            return None
        try:
            k, st, dil = attrs_nd(x, at.get("kernel_shape") or w.shape[2:], at.get("strides"),
                                  at.get("dilations"))
            if list(k) != list(w.shape[2:]) or len(st) != 2 or len(dil) != 2 \
                    or min(st) < 1 or min(dil) < 1:
                return None
            padw = pads_for(x.shape[2:], k, st, dil, at.get("pads"),
                            at.get("auto_pad", "NOTSET"))
            outs = [out_size(x.shape[2 + i], k[i], st[i], dil[i], *padw[i]) for i in range(2)]
        except Exception:  # noqa: BLE001 - the plain Conv kernel says what is wrong
            return None
        if b is not None and (not isinstance(b, np.ndarray) or b.dtype != dt or b.size != m):
            return None
        yshape = (x.shape[0], m, outs[0], outs[1])
        bn = None
        if self.bn is not None:
            scale, beta, mean, var = ops[2:]
            if not all(isinstance(v, np.ndarray) and v.dtype == dt and v.size == m
                       for v in (scale, beta, mean, var)):
                return None
            eps = self.bn.attrs.get("epsilon", 1e-5)
            with np.errstate(all="ignore"):
                den = np.sqrt(var + dt.type(eps))  # as batch_norm computes it
            bn = (mean, den, scale, beta)
        made = native.epilogue(dt, m, bias=b, bn=bn, relu=self.relu)
        if made is None:
            return None
        # the budget's charges for every node of the chain, as the plain run makes them (they
        # depend on shapes and attributes only)
        y_like = np.broadcast_to(np.zeros((), dt), yshape)
        costs = []
        for s in self.chain:
            ins = [None if not n else y_like if n in self.inner else env.get(n, y_like)
                   for n in s.node.input]
            cost = budget.cost(s.node.op_type, ins, s.attrs, s.opset)
            if cost is None:
                return None
            costs.append(cost)
        n = x.shape[0]
        if m == group:
            wprep = np.ascontiguousarray(w)
        else:
            wg = w.reshape(group, m // group, -1)
            if n > 1:
                wg = np.broadcast_to(wg[None], (n,) + wg.shape).reshape((n * group,) +
                                                                         wg.shape[1:])
            wprep = np.ascontiguousarray(wg)
        return dict(st=st, dil=dil, padw=padw, outs=outs, yshape=yshape, m=m, group=group,
                    ep=made[0], keep=made[1], costs=costs, w=wprep, k=tuple(k))

    def _fused(self, env, budget, sess, shuffle=None):
        """The chain's output (with ``shuffle``: the shuffle's output, the rows written to
        their places by the C pass), or None, before any charge, when not covered."""
        from core import native

        try:
            x = env[self.x_name]
            ops = tuple(env[n] if n else None for n in self.const_names)
            res = env[self.res_name] if self.res_name else None
        except KeyError:
            return None
        got = self._prep
        if got is None or got[0] != getattr(x, "shape", None) or got[1] != getattr(x, "dtype",
                                                                                   None) \
                or any(p is not q for p, q in zip(got[2], ops, strict=True)):
            prep = self._prepare(x, ops, env, budget)
            if prep is None:
                return None
            got = self._prep = (x.shape, x.dtype, ops, prep)
        p = got[3]
        # a copy per run: the residual's and destination's addresses are this run's own (two
        # threads may run one session)
        ep = type(p["ep"]).from_buffer_copy(p["ep"])
        lay = None
        if shuffle is not None:
            lay = shuffle.layout(sess, env, p["yshape"], x.dtype)
            if lay is None or lay[4] is None:
                return None
        if res is not None:
            if not isinstance(res, np.ndarray) or res.dtype != x.dtype \
                    or res.shape != p["yshape"]:
                return None
            res = np.ascontiguousarray(res)
            ep.res = res.ctypes.data
            ep.res_first = int(self.res_first)
        else:
            ep.res = None
        steps, costs = self.chain, p["costs"]
        if lay is not None:
            steps, costs = steps + shuffle.chain, costs + lay[3]
            dst = np.empty(lay[0], dtype=x.dtype)
            ep.dst, ep.dst_row, ep.channels = dst.ctypes.data, lay[4].ctypes.data, p["m"]
        for s, c in zip(steps, costs, strict=True):
            try:
                budget.replay(*c)
            except OnnxError as exc:
                if exc.node is None:
                    exc.node = s.label
                raise exc.with_file(sess.label) from None
        if p["m"] == p["group"]:
            y = native.conv2d_one_per_group(x, p["w"], p["st"], p["dil"], p["padw"], p["outs"],
                                            ep)
        else:
            from core.ops.nn import im2col

            group = p["group"]
            cols, _ = im2col(x, p["k"], p["st"], p["dil"], p["padw"], group)
            y = native.bmm_ep(p["w"], cols.reshape((x.shape[0] * group,) + cols.shape[2:]),
                              group, ep)
        del res
        if y is None:
            return None
        y = y.reshape(p["yshape"])
        n_inner = len(self.chain) - 1
        if lay is not None:
            y, n_inner = dst, n_inner + 1  # the chain's own output is an intermediate now
        try:
            budget.hold(y)
            budget.charge(y.nbytes * n_inner)  # the intermediates' share
        except OnnxError as exc:
            if exc.node is None:
                exc.node = self.chain[-1].label
            raise exc.with_file(sess.label) from None
        return y


class Shuffle:
    """Reshape -> Transpose -> Reshape (a channel shuffle) as one copy: the element order is
    found once per input shape by running the three kernels themselves on element indices, and
    the data then moves as whole contiguous runs (``np.take`` of rows): a copy, so exact."""

    def __init__(self, chain: list) -> None:
        self.chain = chain
        self.src = chain[0].node.input[0]
        self.out = chain[-1].node.output[0]
        self.inner = {s.node.output[0] for s in chain[:-1]}
        self._cache: dict = {}

    def layout(self, sess, env, shape, dtype):
        """(output shape, run, source rows, costs, destination row of each source plane or
        None) for an input of ``shape``/``dtype``, or None; cached."""
        names = [list(st.node.input) for st in self.chain]
        if any(n and n not in env for ns in names for n in ns[1:]):
            return None
        consts = [[env[n] if n else None for n in ns[1:]] for ns in names]
        flat = [c for cs in consts for c in cs]
        key = (tuple(shape), np.dtype(dtype).str, tuple(id(c) for c in flat))
        got = self._cache.get(key)
        if got is None or any(a is not b for a, b in zip(got[1], flat, strict=True)):
            lay = self._layout(sess, np.broadcast_to(np.zeros((), dtype), shape), consts)
            if lay is None:
                return None
            out_shape, run, rows, costs = lay
            dst_row = None
            plane = int(np.prod(shape[2:])) if len(shape) == 4 else 0
            if rows is not None and run == plane and rows.size == shape[0] * shape[1] \
                    and np.array_equal(np.sort(rows), np.arange(rows.size)):
                dst_row = np.empty(rows.size, np.int64)
                dst_row[rows] = np.arange(rows.size, dtype=np.int64)
            if len(self._cache) > 8:
                self._cache.clear()
            got = self._cache[key] = ((out_shape, run, rows, costs, dst_row), flat)
        return got[0]

    def run(self, sess, env, budget, run_sub) -> None:
        y = self._shuffled(env, budget, sess)
        if y is None:
            for st in self.chain:
                sess._run_step(st, sess.graph, env, budget, run_sub)
            return
        env[self.out] = y

    def _layout(self, sess, x, consts):
        """(output shape, row length, source rows or None for the identity, costs), or None."""
        from core.onnx.registry import Ctx

        ids = np.arange(x.size, dtype=np.int64).reshape(x.shape)
        shapes = []
        try:
            with np.errstate(all="ignore"):
                v = ids
                for st, c in zip(self.chain, consts, strict=True):
                    ctx = Ctx(st.opset, st.node, sess.k, None, {}, sess.graph,
                              sess.lm.opsets.get("", 1), None)
                    v = st.kernel(ctx, v, *c, **st.attrs)
                    if not isinstance(v, np.ndarray) or v.dtype != np.int64:
                        return None
                    shapes.append(v.shape)
        except Exception:  # noqa: BLE001 - the plain kernels say what is wrong
            return None
        flat = v.reshape(-1)
        if flat.size != x.size:
            return None
        if np.array_equal(flat, np.arange(x.size)):
            rows, run = None, max(x.size, 1)
        else:
            run = 1
            for k in range(1, v.ndim):  # the longest contiguous runs: trailing output dims
                L = int(np.prod(v.shape[k:]))
                if L <= 1 or x.size % L:
                    continue
                r = flat.reshape(-1, L)
                if np.all(r[:, :1] % L == 0) and np.array_equal(
                        r, r[:, :1] + np.arange(L, dtype=np.int64)):
                    run = L
                    break
            rows = np.ascontiguousarray(flat.reshape(-1, run)[:, 0] // run)
        costs = []
        prev = x
        for st, c, shp in zip(self.chain, consts, shapes, strict=True):
            cost = type(sess.budget()).cost(st.node.op_type, [prev, *c], st.attrs, st.opset)
            if cost is None:
                return None
            costs.append(cost)
            prev = np.broadcast_to(np.zeros((), x.dtype), shp)
        return v.shape, run, rows, costs

    def _shuffled(self, env, budget, sess):
        if self.src not in env:
            return None
        x = env[self.src]
        if not isinstance(x, np.ndarray) or x.dtype == object:
            return None
        lay = self.layout(sess, env, x.shape, x.dtype)
        if lay is None:
            return None
        shape, run, rows, costs, _ = lay
        for st, c in zip(self.chain, costs, strict=True):
            try:
                budget.replay(*c)
            except OnnxError as exc:
                if exc.node is None:
                    exc.node = st.label
                raise exc.with_file(sess.label) from None
        if rows is None:
            y = x.reshape(shape)
        else:
            y = np.take(np.ascontiguousarray(x).reshape(-1, run), rows, axis=0).reshape(shape)
        try:
            budget.hold(y)
        except OnnxError as exc:
            if exc.node is None:
                exc.node = self.chain[-1].label
            raise exc.with_file(sess.label) from None
        return y
