"""A session's run plan: the same outputs, bit for bit, with less work per run.

``Session.run`` runs the plan instead of the plain node list when it applies (see
:meth:`Plan.usable`); ``Session(..., plan=False)`` and ``TAPESCOPE_ONNX_PLAN=0`` turn it off, and
tests/core/onnx/test_plan.py holds every value a planned run makes to the plain executor bit for
bit (NaN's sign and payload aside, as everywhere: docs/reference-order.md). ``graph.steps``
stays the plain node list (the importer and the GUI read it). What the plan does:

* **Folding under defaults.** A graph input with a default (an initializer also listed as an
  input) may be overridden by a feed, so ``Session`` never folds what depends on one. The plan
  folds those nodes too, once, with the defaults (the light models build every weight with a
  ``ConstantOfShape`` of such an input: 243 of shufflenet's 446 nodes), and remembers which
  inputs it assumed (``guard``): a run that feeds one of them runs the plain node list.
* **Conv chains in one C pass** (reference mode, native code available; ``core.onnx.fused``):
  ``Conv`` followed by any of ``BatchNormalization`` (inference), ``Mul`` -> ``Add`` by
  per-channel constants (a BN written out as ops: the epilogue's second per-channel stage), a
  two-input ``Sum``/``Add`` with a same-shape tensor, and ``Relu``, in that order, each
  intermediate read only by the next. The product
  runs as before (the batched reference matmul, or the direct one-output-per-group kernel) and
  each block of output rows then takes the following ops in order while it is in cache, every
  op still its own rounding with the operands in the node's order (``core.native.epilogue``).
  Anything the C pass does not cover (a dtype, a broadcast, a shape) runs the nodes one by one.
* **Channel shuffles** (Reshape -> Transpose -> Reshape) as one copy of whole runs; after a
  fused chain, its rows are written straight to their shuffled places.
* **A lone Conv** runs the same C pass (its bias add as the epilogue).
* **Concat on the channel axis** (``ConcatInto``): the fused chains that make its inputs for it
  alone run where it is and write straight into their slices of its output (one image: its
  channel slice, contiguous; more: each finished row copied to its place by the C pass), the
  other inputs copied; a Concat whose first input is another one's output (densenet's dense
  blocks) grows that output in place when the block it lies in was made with room for the
  chain (one image: the first channels of a buffer are contiguous), instead of copying all the
  earlier features again. Outside a chain, a Relu alone reading the output is taken by each
  slice as it is written (shufflenet's stride-2 units).
* **BatchNormalization [-> Mul -> Add by per-channel constants] [-> Relu]** (densenet's BN
  before each conv) as one C pass: the conv epilogue on a copy of x (``core.native.ep_apply``).
* **Mul -> Add [-> Relu] by per-channel constants** (densenet's and inception_v2's BN written
  out as ops) as one C pass (``core.native.channel_norm`` with mean 0 and den 1, both exact),
  Relu then in place: each element still takes Mul's rounding, then Add's.
* **Gemm with a constant B and transB=1**: B transposed (copied) once, not every run; on one
  or two rows of A (an fc layer on one image) the product streams B once in memory order
  (``core.native.mm_few_rows``: the reference product's chains) instead of packing it.

* **Values dropped once no later step reads them** (``Plan.dead``; a requested or graph output,
  a value a subgraph reads, constants and feeds stay), so the C passes' output buffers, from
  the session's arena (``core.onnx.arena``), go to later steps: a run's working set stays near
  its live values and in cache. The budget still counts a dropped value until the run ends
  (``Budget.pin``): a run is charged what the plain loop, which keeps every value, holds.

* **What a run repeats is kept** (issue 49: the Python around each C call was ~18 us a
  node): a fused entry's geometry, prepared call and charges per input shape (its operands by
  identity); a plain node's charge per input shapes and dtypes, replayed (``Budget.replay``)
  for the ops whose charge reads nothing else (``limits.SHAPE_PREDICTED``); one
  ``Budget.admit`` for a fused chain's nodes, output and unmade intermediates when none is
  refused (else the charges one by one, so that the refusal names its node). A new shape
  prepares afresh (tests/core/onnx/test_plan_overhead.py).

A run may ask for any value: one a fused chain never materialises (``hidden``) makes that run
use the plain node list. Budget accounting is kept: every original node is still charged
(``Budget.replay`` of what ``Budget.before`` would charge) and a fused chain charges the bytes
its unmaterialised intermediates would have held (a Concat's inputs written in place among
them; the outputs of a chain of Concats, views of one block, are each charged their own bytes,
as the plain run holds them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.fused import (
    ChannelAffine,
    ChannelChain,
    ConcatInto,
    ConstArgs,
    FusedConv,
    Shuffle,
    _Affine,
    gemm_few_rows,
)
from tapescope.core.onnx.limits import OnnxCancelled

__all__ = ["NOT_FOLDED", "ChannelAffine", "ChannelChain", "ConcatInto", "ConstArgs",
           "FusedConv", "Plan", "Shuffle", "build", "enabled"]

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
    # per step, the values no later step reads (dropped from the run's env after it, so the
    # arena hands their buffers to later steps: a run's working set stays cache-sized)
    dead: list = field(default_factory=list)
    keep: frozenset = frozenset()  # the names never dropped (the graph's outputs among them)
    _dead_for: dict = field(default_factory=dict, repr=False, compare=False)

    def dead_for(self, want) -> list:
        """Per step, the values to drop after it on a run that asks for ``want`` (those of
        ``dead`` not asked for), as (the values made outside fused entries, the ones a fused
        entry hides: in ``env`` only where it ran its nodes one by one); nothing where
        ``dead`` is not one entry a step."""
        if len(self.dead) != len(self.steps):
            return [((), ())] * len(self.steps)
        key = frozenset(want) if want and not self.keep.issuperset(want) else frozenset()
        got = self._dead_for.get(key)
        if got is None:
            got = [(tuple(n for n in d if n not in key and n not in self.hidden),
                    tuple(n for n in d if n not in key and n in self.hidden))
                   for d in self.dead]
            if len(self._dead_for) > 8:
                self._dead_for.clear()
            self._dead_for[key] = got
        return got

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

    def claim(chain, entry) -> None:
        """A found chain (its steps, their indices, ...) becomes `entry`: its nodes are used,
        the values inside it hidden, and the entry runs where its last node was."""
        used.update(chain[1])
        hidden.update(s_.node.output[0] for s_ in chain[0][:-1])
        place[chain[1][-1]] = entry
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
                from tapescope.core.onnx.ops.math_ops import gemm

                # the few-row product only where the node runs the plain Gemm kernel (not a
                # half-precision wrapper of it)
                out.append(ConstArgs(st, {1: np.ascontiguousarray(b.T)}, {"transB": 0},
                                     gemm_few_rows if st.kernel is gemm else None))
                continue
        if op == "Reshape" and st.node.domain in ("", "ai.onnx") and _single_output(st):
            chain = _shuffle_chain(steps, j, by_input, consumers, used)
            if chain is not None:
                claim(chain, Shuffle(chain[0]))
                continue
        if convs and op == "Mul" and st.node.domain in ("", "ai.onnx") and _single_output(st):
            chain = _affine_chain(steps, j, by_input, consumers, used, constants)
            if chain is not None:
                claim(chain, ChannelAffine(chain[0], chain[2]))
                continue
        if convs and op == "BatchNormalization" and st.node.domain in ("", "ai.onnx"):
            chain = _bn_chain(steps, j, by_input, consumers, used, constants)
            if chain is not None:
                claim(chain, ChannelChain(chain[0], chain[2]))
                continue
        if not convs or op != "Conv" or st.node.domain not in ("", "ai.onnx") \
                or not _single_output(st) or len([i for i in st.node.input if i]) < 2:
            out.append(st)
            continue
        chain = [st]
        cur = st.node.output[0]
        k = j
        affine = None
        stage = 0  # 1: BN taken, 2: Mul -> Add taken, 3: Sum taken, 4: Relu taken
        while consumers.get(cur, 0) == 1 and len(by_input.get(cur, [])) == 1:
            nj = by_input[cur][0]
            if nj <= k or nj in used:
                break
            nxt = steps[nj]
            nop = nxt.node.op_type
            if nxt.node.domain not in ("", "ai.onnx") or not _single_output(nxt):
                break
            if nop == "BatchNormalization" and stage < 1 and _inference_bn(nxt, cur):
                stage = 1
            elif nop == "Mul" and stage < 2:
                pair = _affine_pair(steps, nj, cur, by_input, consumers, used, constants)
                if pair is None:
                    break
                affine, aj = pair
                chain += [nxt, affine.add]
                hidden.update((cur, nxt.node.output[0]))
                used.update((nj, aj))
                cur, k, stage = affine.add.node.output[0], aj, 2
                continue
            elif nop in ("Sum", "Add") and stage < 3 and len(nxt.node.input) == 2 \
                    and all(nxt.node.input) and nxt.node.input[0] != nxt.node.input[1] \
                    and not (nop == "Add" and nxt.attrs.get("broadcast")):
                stage = 3
            elif nop == "Relu" and stage < 4:
                stage = 4
            else:
                break
            chain.append(nxt)
            hidden.add(cur)
            used.add(nj)
            cur = nxt.node.output[0]
            k = nj
            if stage == 4:
                break
        # a lone Conv too: its bias add is the C pass's epilogue and its product skips the
        # plain op's per-call work (densenet's 3x3 convs feed a Concat)
        if len(chain) == 1:
            out.append(FusedConv(chain))
            continue
        place[k] = FusedConv(chain, affine)
    return out, hidden


def _inference_bn(st, cur: str | None = None) -> bool:
    """A BatchNormalization the epilogue computes: inference, five inputs, x (``cur``, when
    given) not among the others."""
    ins = list(st.node.input)
    return len(ins) == 5 and all(ins) and (cur is None or ins[0] == cur) \
        and ins[0] not in ins[1:] and not st.attrs.get("training_mode") \
        and bool(st.attrs.get("spatial", 1))


def _affine_pair(steps, mj, cur, by_input, consumers, used, constants):
    """(the _Affine, the Add's index) when step mj is a Mul of ``cur`` by a constant whose only
    reader is an Add of a constant (a BN written out as ops), else None."""
    mul = steps[mj]
    c = _const_operand(mul, cur, constants)
    if c is None or not _single_output(mul):
        return None
    mo = mul.node.output[0]
    if consumers.get(mo, 0) != 1 or len(by_input.get(mo, [])) != 1:
        return None
    aj = by_input[mo][0]
    add = steps[aj]
    if aj <= mj or aj in used or add.node.op_type != "Add" or not _single_output(add) \
            or add.node.domain not in ("", "ai.onnx"):
        return None
    d = _const_operand(add, mo, constants)
    return None if d is None else (_Affine(mul, add, c, d), aj)


def _const_operand(st, cur, constants):
    """The name of ``st``'s constant operand when its two inputs are ``cur`` and an ndarray
    constant (and no old-style broadcast attribute), else None."""
    ins = list(st.node.input)
    if len(ins) != 2 or not all(ins) or st.attrs.get("broadcast") or cur not in ins:
        return None
    other = ins[1] if ins[0] == cur else ins[0]
    if other == cur or other not in constants or not isinstance(constants[other], np.ndarray):
        return None
    return other


def _bn_chain(steps, j, by_input, consumers, used, constants):
    """BatchNormalization [-> Mul -> Add by constants] [-> Relu] from step j, each
    intermediate read once, with at least one op after the BN: (the steps, their indices after
    j, the _Affine or None), or None."""
    st = steps[j]
    if not _inference_bn(st) or not _single_output(st):
        return None
    chain, idx, affine = [st], [], None
    cur = st.node.output[0]

    def reader():
        if consumers.get(cur, 0) != 1 or len(by_input.get(cur, [])) != 1:
            return None
        nj = by_input[cur][0]
        nxt = steps[nj]
        if nj <= (idx[-1] if idx else j) or nj in used or not _single_output(nxt) \
                or nxt.node.domain not in ("", "ai.onnx"):
            return None
        return nj

    nj = reader()
    if nj is not None and steps[nj].node.op_type == "Mul":
        pair = _affine_pair(steps, nj, cur, by_input, consumers, used, constants)
        if pair is not None:
            affine, aj = pair
            chain += [steps[nj], affine.add]
            idx += [nj, aj]
            cur = affine.add.node.output[0]
            nj = reader()
    if nj is not None and steps[nj].node.op_type == "Relu":
        chain.append(steps[nj])
        idx.append(nj)
    return (chain, idx, affine) if idx else None


def _affine_chain(steps, j, by_input, consumers, used, constants):
    """Mul -> Add [-> Relu] from step j, Mul and Add each with one constant operand and each
    intermediate read once: (the steps, their indices after j, the constants), or None."""
    chain, idx, consts = [steps[j]], [], []
    cur, k = None, j
    for pos, want in enumerate(("Mul", "Add", "Relu")):
        st = chain[-1] if pos == 0 else None
        if pos:
            if consumers.get(cur, 0) != 1 or len(by_input.get(cur, [])) != 1:
                return None if pos < 2 else (chain, idx, consts)
            nj = by_input[cur][0]
            st = steps[nj]
            if nj <= k or nj in used or st.node.op_type != want or not _single_output(st) \
                    or st.node.domain not in ("", "ai.onnx"):
                return None if pos < 2 else (chain, idx, consts)
        ins = list(st.node.input)
        if want != "Relu":
            if len(ins) != 2 or not all(ins) or st.attrs.get("broadcast"):
                return None
            const = [i for i in ins if i in constants and i != cur]
            other = [i for i in ins if i not in constants or i == cur]
            if len(const) != 1 or len(other) != 1 or (pos and other[0] != cur) \
                    or not isinstance(constants[const[0]], np.ndarray):
                return None
            consts.append(const[0])
        if pos:
            chain.append(st)
            idx.append(nj)
            k = nj
        cur = st.node.output[0]
    return chain, idx, consts


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


def _merge_concats(steps: list, consumers: dict, hidden: set) -> list:
    """A Concat on the channel axis takes the fused chains that make its inputs for it alone:
    they run where it is and write straight into their slices of its output. A Concat whose
    first input is another such Concat's output, read as a first input by no other, grows that
    one's output in place (densenet's dense blocks: each Concat adds a conv's output to all the
    features before it, which the plain node copies again); one outside a chain whose output
    only a Relu reads takes the Relu too."""
    from tapescope.core.onnx.ops.elementwise import relu
    from tapescope.core.onnx.ops.shape import concat

    fused = {e.out: e for e in steps if isinstance(e, FusedConv) and e.shuffle is None}
    found: dict[int, ConcatInto] = {}
    for e in steps:
        if getattr(e, "kernel", None) is not concat or e.node.domain not in ("", "ai.onnx") \
                or not _single_output(e):
            continue
        ins = list(e.node.input)
        if e.attrs.get("axis", 1) not in (1, -3) or not ins or not all(ins):
            continue
        found[id(e)] = ConcatInto(e, [fused.get(i) if consumers.get(i, 0) == 1
                                      and ins.count(i) == 1 else None for i in ins])
    by_out = {c.out: c for c in found.values()}
    firsts: dict[str, int] = {}
    for c in found.values():
        firsts[c.names[0]] = firsts.get(c.names[0], 0) + 1
    for c in found.values():
        prev = by_out.get(c.names[0])
        if prev is not None and firsts[c.names[0]] == 1 and c.names.count(c.names[0]) == 1:
            prev.next, c.grows = c, True
    readers: dict[str, list] = {}
    for e in steps:
        for i in (e.node.input if getattr(e, "kernel", None) is not None else ()):
            readers.setdefault(i, []).append(e)
    taken: set[int] = set()
    for k, c in list(found.items()):
        if not (c.grows or c.next is not None or any(c.parts)):
            del found[k]
            continue
        taken.update(id(f) for f in c.parts if f is not None)
        hidden.update(f.out for f in c.parts if f is not None)
        r = readers.get(c.out, [])
        # a Relu alone reading the output (shufflenet's stride-2 units) is taken by each slice;
        # not in a chain, whose outputs are the next one's first channels
        if not c.grows and c.next is None and consumers.get(c.out, 0) == 1 and len(r) == 1 \
                and r[0].kernel is relu and r[0].node.domain in ("", "ai.onnx") \
                and _single_output(r[0]):
            hidden.add(c.out)
            taken.add(id(r[0]))
            c.take_relu(r[0])
    return [found.get(id(e), e) for e in steps if id(e) not in taken]


def build(sess, budget, fold: bool = True) -> Plan:
    """The plan for ``sess``'s main graph (folding runs kernels: limits apply)."""
    if fold:
        steps, values, guard = _fold_under_defaults(sess, budget)
    else:
        steps, values, guard = list(sess.graph.steps), {}, set()
    hidden: set[str] = set()
    if sess.mode == "reference":
        from tapescope.core import native

        overridable = {i.name for i in sess.model.graph.input}
        constants = {k: v for k, v in sess.graph.inits.items() if k not in overridable}
        constants.update(values)
        convs = native.library() is not None
        consumers = _consumers(steps, _subgraph_names(sess) | set(sess.graph.outputs))
        steps, hidden = _fuse(steps, consumers, constants, convs)
        if convs:
            steps = _merge_shuffles(steps, consumers, hidden)
            steps = _merge_concats(steps, consumers, hidden)
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
    keep = _subgraph_names(sess) | set(sess.graph.outputs) | set(values) \
        | set(sess.graph.inits) | set(sess.input_names)
    return Plan(steps, values, frozenset(guard), frozenset(hidden), bases, nbytes, largest,
                _dead(steps, keep), frozenset(keep))


def _entry_nodes(e) -> list:
    """The ONNX nodes a plan entry runs (or may run, when its fused pass does not cover a
    case): what it may read is among their inputs."""
    if hasattr(e, "node") and hasattr(e, "kernel"):  # an executor Step
        return [e.node]
    nodes = []
    if hasattr(e, "orig"):  # ConstArgs
        nodes.append(e.orig.node)
    nodes += [st.node for st in getattr(e, "chain", ())]
    for f in getattr(e, "parts", ()) or ():
        if f is not None:
            nodes += _entry_nodes(f)
    sh = getattr(e, "shuffle", None)
    if sh is not None:
        nodes += _entry_nodes(sh)
    return nodes


def _dead(steps, keep: set) -> list:
    """Per step, the names read there for the last time (none of ``keep``)."""
    last: dict[str, int] = {}
    for i, e in enumerate(steps):
        for nd in _entry_nodes(e):
            for name in nd.input:
                if name:
                    last[name] = i
            for name in nd.output:  # made and never read: dropped where it is made
                if name and name not in last:
                    last[name] = i
    dead: list = [[] for _ in steps]
    for name, i in last.items():
        if name not in keep:
            dead[i].append(name)
    return [tuple(d) for d in dead]
