"""The executor: a plain loop over the graph's nodes in order, one kernel call per node (a
session's run plan, core.onnx.plan, may run some of them together, with the same bits)."""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import AttributeProto, GraphProto, ModelProto, numpy_helper

from tapescope.core import precision
from tapescope.core.onnx import arena as _arena
from tapescope.core.onnx import ops as _ops  # noqa: F401  (registers every kernel)
from tapescope.core.onnx import plan as _plan
from tapescope.core.onnx.errors import OnnxError, node_label
from tapescope.core.onnx.functions import function_kernel
from tapescope.core.onnx.half import in_float32 as half_rule
from tapescope.core.onnx.half import mentions_half
from tapescope.core.onnx.limits import (
    Budget,
    Limits,
    OnnxCancelled,
    OnnxLimitError,
    charge_file_strings,
    check_shape,
    count_inlined_nodes,
    shape_charged,
    shapes_key,
    string_tensor_bytes,
)
from tapescope.core.onnx.loader import LoadedModel, check_inputs, load
from tapescope.core.onnx.reference import kernels
from tapescope.core.onnx.registry import Ctx, kernel_for, node_attrs


@dataclass
class Step:
    """One node, ready to run: its kernel and attributes are looked up once."""

    label: str
    node: Any
    kernel: Any
    attrs: dict
    opset: int
    # the node's names, read from the protobuf once (a protobuf field read costs ~1 us)
    ins: tuple = field(init=False, repr=False, compare=False)
    outs: tuple = field(init=False, repr=False, compare=False)
    op_type: str = field(init=False, repr=False, compare=False)
    # a plan run's last charge of this node: (its inputs' shapes and dtypes, Budget.cost),
    # replayed while they stay (_run_step(..., replay=True); limits.SHAPE_CHARGED ops only)
    charged: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.ins = tuple(self.node.input)
        self.outs = tuple(self.node.output)
        self.op_type = self.node.op_type
        self.replayable = shape_charged(self.op_type, self.attrs)


@dataclass
class CompiledGraph:
    """A graph (the main one or a subgraph) with its steps and initializers."""

    name: str
    steps: list[Step]
    inits: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]
    proto: GraphProto = field(repr=False)


#: ops never folded: their outputs must be fresh per run (or are random)
_NOT_FOLDED = _plan.NOT_FOLDED


def _inline_functions(model: ModelProto) -> ModelProto:
    """Expand model-local functions into plain nodes (they are just macros)."""
    if not model.functions:
        return model
    from onnx import inliner

    return inliner.inline_local_functions(model)


class Session:
    """A loaded, checked model ready to run; ``run(feeds)`` may be called many times.

    ``limits`` bounds what one run may take (:class:`core.onnx.limits.Limits`; defaults keep a
    hostile model under ~1 GB); ``cancel`` (a ``threading.Event``) stops constant folding here,
    as ``run(..., cancel=)`` stops a run, between nodes and loop iterations.

    ``plan`` (default: on unless ``TAPESCOPE_ONNX_PLAN=0``): ``run`` executes a plan made on
    the first run (:mod:`core.onnx.plan`: folding under the inputs' defaults, fused Conv
    chains), which gives the plain node loop's outputs bit for bit.
    ``graph.steps`` stays the plain node list.
    """

    def __init__(self, model_or_path: Any, mode: str = "reference", fold: bool = True,
                 check: bool = True, *, limits: Limits | None = None, cancel: Any = None,
                 plan: bool | None = None) -> None:
        self.limits = limits or Limits()
        self.lm: LoadedModel = load(model_or_path, check=check, limits=self.limits)
        self.k = kernels(mode)
        self.mode = mode
        self._folded_names: list[str] = []
        self._string_bytes = 0  # the file's string tensors, charged before they are converted
        count_inlined_nodes(self.lm.model, self.limits, self.lm.label)  # before inlining
        try:
            self.model = _inline_functions(self.lm.model)
        except Exception as exc:  # inliner failures are model errors
            raise OnnxError(f"cannot expand local functions: {exc}", file=self.lm.label) from None
        self._half = mode == "reference" and mentions_half(self.model)
        self.graph = self.compile(self.model.graph, "graph")
        init_names = set(self.graph.inits)
        self.input_names = [i.name for i in self.model.graph.input if i.name not in init_names]
        self.output_names = list(self.graph.outputs)
        self.folded = self._fold_constants(Budget(self.limits, cancel)) if fold else 0
        self._fold = fold
        self._want_plan = _plan.enabled() if plan is None else bool(plan)
        self._plan: _plan.Plan | None = None
        self._arena = _arena.Arena()  # the plan's big buffers, from run to run
        self._checked: tuple | None = None  # the last feeds' spec check_inputs passed

    def _fold_constants(self, budget: Budget) -> int:
        """Run once, now, every node whose inputs are all constants; return how many."""
        overridable = {i.name for i in self.model.graph.input}  # inputs with a default
        known = {k: v for k, v in self.graph.inits.items() if k not in overridable}
        keep, n = [], 0
        outputs = set(self.graph.outputs)
        for st in self.graph.steps:
            const = (st.node.op_type not in _NOT_FOLDED
                     and not any(isinstance(v, CompiledGraph) for v in st.attrs.values())
                     and all(not i or i in known for i in st.node.input)
                     and not any(o in outputs for o in st.node.output))
            if const:
                env = dict(known)
                try:
                    self._run_steps(CompiledGraph("fold", [st], {}, [], [], self.graph.proto),
                                    env, budget)
                except (OnnxLimitError, OnnxCancelled):
                    raise  # it would be the same at run: say so now, before any input is made
                except OnnxError:
                    const = False  # leave it: the error will surface, with context, at run
            if const:
                for o in st.node.output:
                    if o:
                        known[o] = env[o]
                        self.graph.inits[o] = env[o]
                        self._folded_names.append(o)
                n += 1
            else:
                keep.append(st)
        self.graph.steps = keep
        return n

    @property
    def label(self) -> str:
        """How errors name the model."""
        return self.lm.label

    def compile(self, g: GraphProto, where: str, opsets: dict | None = None) -> CompiledGraph:
        """Look up every node's kernel and attributes (subgraphs too); refuse unknown ops."""
        steps = []
        opsets = opsets or self.lm.opsets
        for i, node in enumerate(g.node):
            label = node_label(i, node) if where == "graph" else f"{where}/{node_label(i, node)}"
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            opset = opsets.get(domain)
            if opset is None:
                raise OnnxError(f"the model imports no opset for domain {node.domain!r}",
                                file=self.label, node=label)
            for a in node.attribute:  # a string tensor attribute costs as an initializer
                for t in ([a.t] if a.type == AttributeProto.TENSOR else list(a.tensors)):
                    self._string_bytes = charge_file_strings(
                        self._string_bytes, string_tensor_bytes(t),
                        f"the string tensors of the file (attribute {a.name!r} of {label})",
                        self.limits)
            kernel = kernel_for(node) or function_kernel(self, node, opset)
            if kernel is None:
                dom = f" of domain {node.domain!r}" if node.domain else ""
                raise OnnxError(f"unsupported op {node.op_type}{dom}", file=self.label, node=label)
            if self._half:  # a half node computes in float32 (core.onnx.half)
                kernel = half_rule(kernel, node.op_type, opset, domain)
            try:
                attrs = node_attrs(node, opset)
            except Exception as exc:  # a tensor attribute whose data does not fit its dims...
                raise OnnxError(f"bad attribute: {type(exc).__name__}: {exc}", file=self.label,
                                node=label) from None
            for a in node.attribute:  # subgraphs run as compiled graphs
                if a.type == AttributeProto.GRAPH:
                    attrs[a.name] = self.compile(a.g, f"{label}.{a.name}", opsets)
            steps.append(Step(label, node, kernel, attrs, opset))
        for t in g.initializer:
            self._string_bytes = charge_file_strings(
                self._string_bytes, string_tensor_bytes(t),
                f"the string tensors of the file (initializer {t.name[:80]!r} in {where})",
                self.limits)
        try:
            # copied: to_array may view protobuf bytes, unaligned, and numpy's matmul then
            # skips BLAS (10x slower in fast mode); copies are aligned and ours
            inits = {t.name: np.array(numpy_helper.to_array(t), copy=True)
                     for t in g.initializer}
        except MemoryError:
            raise  # the CLI says which budget to lower or which memory to give
        except Exception as exc:
            reason = str(exc) or type(exc).__name__  # never "bad initializer in graph: "
            raise OnnxError(f"bad initializer in {where}: {reason}", file=self.label) from None
        for sp in g.sparse_initializer:
            raise OnnxError(f"sparse initializer {sp.values.name!r} is not supported",
                            file=self.label)
        return CompiledGraph(g.name, steps, inits, [i.name for i in g.input],
                             [o.name for o in g.output], g)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None, *,
            cancel: Any = None, seed: Any = None) -> dict[str, np.ndarray]:
        """Run the model on ``feeds``; return the graph outputs (or ``outputs``) by name.

        Setting ``cancel`` (a ``threading.Event``) from another thread stops the run between
        nodes or loop iterations with :class:`OnnxCancelled`. ``seed`` draws a training-mode
        Dropout's mask as the tape's import does with ``step_seed=seed``
        (``default_rng((*seed, node index))``, bit for bit); without it such a Dropout is
        refused."""
        feeds = {k: (np.asarray(v) if not isinstance(v, (list, np.ndarray)) and v is not None
                     else v) for k, v in feeds.items()}  # None: an empty optional
        # the check reads the names, types, dtypes and shapes only: one that passed holds
        # for feeds that repeat them
        key = tuple([(k, type(v), getattr(v, "dtype", None), getattr(v, "shape", None))
                     for k, v in feeds.items()])
        if key != self._checked:
            check_inputs(self.lm, feeds)
            self._checked = key
        plan = self.plan(cancel)
        if plan is not None and not plan.usable(feeds, outputs):
            plan = None
        budget = self.budget(cancel)
        budget.seed = seed
        env: dict[str, Any] = dict(self.graph.inits)
        if plan is not None:
            env.update(plan.values)
        env.update(feeds)
        try:
            for v in list(feeds.values()) + [self.graph.inits[n] for n in self._folded_names]:
                budget.hold(v)
            if plan is not None:
                plan.hold(budget)
        except OnnxError as exc:
            raise exc.with_file(self.label) from None
        want = outputs or self.output_names
        if plan is None:
            self._run_steps(self.graph, env, budget)
        else:
            with _arena.use(self._arena):
                self._run_plan(plan, env, budget, set(want))
        missing = [n for n in want if n not in env]
        if missing:
            raise OnnxError(f"output {missing[0]!r} was never computed", file=self.label)
        if plan is not None and plan.values:  # folded once, shared by every run: hand out copies
            return {n: np.array(env[n]) if n in plan.values else env[n] for n in want}
        return {n: env[n] for n in want}

    def plan(self, cancel: Any = None) -> _plan.Plan | None:
        """The run plan (made on first use; ``cancel`` stops that), or None when this session
        runs without one."""
        if self._plan is None and self._want_plan:
            try:
                self._plan = _plan.build(self, self.budget(cancel), fold=self._fold)
            except OnnxCancelled as exc:
                raise exc.with_file(self.label) from None
            except OnnxLimitError:
                self._want_plan = False  # folding would go over the limits: run plainly
        return self._plan

    def budget(self, cancel: Any = None) -> Budget:
        """A fresh account of one run against this session's limits."""
        return Budget(self.limits, cancel)

    def run_graph(self, cg: CompiledGraph, inputs: list, outer: Any,
                  budget: Budget | None = None) -> list:
        """Run a subgraph with positional ``inputs`` seeing the ``outer`` scope's values."""
        budget = budget or self.budget()
        env = ChainMap(dict(cg.inits), outer)
        for name, v in zip(cg.inputs, inputs, strict=False):
            env[name] = v
        self._run_steps(cg, env, budget)
        return [env[n] for n in cg.outputs]

    def _run_steps(self, cg: CompiledGraph, env, budget: Budget) -> None:
        def run_sub(g, inputs, outer):
            return self.run_graph(g, inputs, outer, budget)

        with np.errstate(all="ignore"):  # IEEE results (inf, nan) are ONNX semantics, not errors
            for st in cg.steps:
                self._run_step(st, cg, env, budget, run_sub)

    def _run_plan(self, plan: _plan.Plan, env, budget: Budget, want=()) -> None:
        def run_sub(g, inputs, outer):
            return self.run_graph(g, inputs, outer, budget)

        cg = self.graph
        pin = budget.pin_dropped
        with np.errstate(all="ignore"):
            for st, (dead, hid) in zip(plan.steps, plan.dead_for(want), strict=True):
                if type(st) is Step:
                    self._run_step(st, cg, env, budget, run_sub, replay=True)
                else:
                    st.run(self, env, budget, run_sub)
                if dead:
                    pin(env, dead)
                if hid and not env.keys().isdisjoint(hid):  # (an entry ran its nodes)
                    pin(env, hid)

    def _run_step(self, st: Step, cg: CompiledGraph, env, budget: Budget, run_sub,
                  consts: dict | None = None, replay: bool = False) -> None:
        """Run one node: inputs from ``env`` (``consts``: positions given instead), outputs
        into it. ``replay`` (a plan's run): the budget's charge is the one ``Budget.before``
        made the last time the node had inputs of these shapes and dtypes, replayed (the same
        checks and numbers; :func:`core.onnx.limits.shape_charged`)."""
        ins = []
        for name in st.ins:
            if not name:
                ins.append(None)
            elif name in env:
                ins.append(env[name])
            else:
                raise OnnxError(f"input {name!r} is not defined before this node",
                                file=self.label, node=st.label)
        if consts:
            for i, v in consts.items():
                ins[i] = v
        ctx = Ctx(st.opset, st.node, self.k, run_sub, env, cg,
                  self.lm.opsets.get("", 1), budget, st.label)
        try:
            key = charged = None
            if replay and st.replayable:
                key = shapes_key(ins)
                charged = st.charged
            if key is not None and charged is not None and charged[0] == key:
                budget.replay(*charged[1])
            else:
                budget.before(st.op_type, ins, st.attrs, st.opset)
                if key is not None:  # (before let it in: its cost is what it charged)
                    cost = budget.cost(st.op_type, ins, st.attrs, st.opset)
                    st.charged = None if cost is None else (key, cost)
            out = st.kernel(ctx, *ins, **st.attrs)
            if not isinstance(out, tuple):
                out = (out,)
            for v in out:
                budget.hold(v)
        except OnnxError as exc:
            if exc.node is None:
                exc.node = st.label
            raise exc.with_file(self.label) from None
        except Exception as exc:  # any kernel failure is reported against its node
            raise OnnxError(f"{type(exc).__name__}: {exc}", file=self.label,
                            node=st.label) from None
        for name, v in zip(st.outs, out, strict=False):
            if name:
                env[name] = v if isinstance(v, (list, np.ndarray)) or v is None \
                    else np.asarray(v)


def run(model_or_path: Any, feeds: dict[str, np.ndarray], *, mode: str = "reference",
        limits: Limits | None = None, cancel: Any = None, seed: Any = None
        ) -> dict[str, np.ndarray]:
    """Load ``model_or_path`` and run it on ``feeds``: ``{name: ndarray} -> {name: ndarray}``
    (``seed``: a training-mode Dropout's, as :meth:`Session.run`)."""
    if isinstance(model_or_path, Session):
        return model_or_path.run(feeds, cancel=cancel, seed=seed)
    return Session(model_or_path, mode=mode, limits=limits, cancel=cancel).run(
        feeds, cancel=cancel, seed=seed)


#: ops whose output holds their (first) input's integers unchanged, moved or repeated: ids
#: reached through them are still the graph input's (Concat: every input's)
_ID_MOVES = frozenset(("Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity",
                       "Expand", "Transpose", "Slice", "Tile", "Concat"))


def index_bounds(sess: Session) -> dict[str, int]:
    """Integer graph input -> the rows of the smallest constant table a Gather indexes with it
    (directly or through :data:`_ID_MOVES`): generated ids are drawn in ``[0, rows)``, so a
    BERT's 2-row token-type table gets 0 or 1 (the workload's import finds the same on the
    tape: ``Imported.index_bounds``)."""
    from tapescope.core.onnx.loader import np_dtype

    inits = sess.graph.inits
    roots: dict[str, set[str]] = {}
    for vi in sess.model.graph.input:
        tt = vi.type.tensor_type
        if vi.name in inits or not vi.type.HasField("tensor_type") or not tt.elem_type:
            continue
        try:
            if np_dtype(tt.elem_type).kind in "iu":
                roots[vi.name] = {vi.name}
        except Exception:  # a type numpy does not know: not ids
            continue
    bounds: dict[str, int] = {}
    for st in sess.graph.steps:
        ins = st.ins
        if st.op_type == "Gather" and len(ins) > 1 and ins[1] in roots \
                and isinstance(inits.get(ins[0]), np.ndarray) and inits[ins[0]].ndim:
            table = inits[ins[0]]
            n = int(table.shape[int(st.attrs.get("axis", 0)) % table.ndim])
            for r in roots[ins[1]]:
                bounds[r] = min(n, bounds.get(r, n))
        elif st.op_type in _ID_MOVES and st.outs and st.outs[0]:
            carried = ins if st.op_type == "Concat" else ins[:1]
            rs = set().union(*(roots.get(i, set()) for i in carried if i))
            if rs:
                roots[st.outs[0]] = rs
    return bounds


def default_inputs(sess: Session, seed: int = 0) -> dict[str, np.ndarray]:
    """A deterministic input per graph input (symbolic dims become 1): floats standard normal,
    integers in ``[0, 10)`` or ``[0, rows)`` of the smaller table they index
    (:func:`index_bounds`), booleans 0/1."""
    from tapescope.core.onnx.loader import np_dtype

    rng = np.random.default_rng(seed)
    out = {}
    total = 0
    init_names = set(sess.graph.inits)
    bounds = index_bounds(sess)
    for vi in sess.model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.elem_type:
            raise OnnxError(f"input {vi.name!r} is not a tensor: give it with --input",
                            file=sess.label)
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
        try:
            dt = np_dtype(tt.elem_type)
            n = check_shape(shape, f"input {vi.name!r}", sess.limits)
        except OnnxError as exc:
            raise exc.with_file(sess.label) from None
        except Exception as exc:  # an element type numpy does not know
            raise OnnxError(f"input {vi.name!r}: element type {tt.elem_type}: {exc}",
                            file=sess.label) from None
        total += n * dt.itemsize
        if total > sess.limits.max_bytes:
            raise OnnxLimitError(f"generated inputs would take {total} bytes, over the limit of "
                                 f"{sess.limits.max_bytes} (raise it with --max-bytes or "
                                 "Limits(max_bytes=...))", file=sess.label)
        if precision.is_float(dt):  # bfloat16 too (numpy's kind "V")
            x = rng.standard_normal(shape).astype(dt)
        elif dt.kind in "iu":
            x = rng.integers(0, max(1, min(10, bounds.get(vi.name, 10))), size=shape).astype(dt)
        elif dt.kind == "b":
            x = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise OnnxError(f"input {vi.name!r}: cannot generate {dt} data; give it with --input",
                            file=sess.label)
        out[vi.name] = x
    return out
