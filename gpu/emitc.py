"""emitc: a recorded SCALAR tape becomes the C source of one ``grad`` function.

``emit(tape, loss, leaves={"x": "x[i]"})`` walks the tape (every node in the loss's cone must hold
one element) and prints, in tape order, ``const real_t tN = <op mirror>;`` for the forward, then
the backward in decreasing id order seeded with ``1``: ``gI = gI + <contribution>`` for every
input that needs a gradient, exactly the walk of ``Tape.backward``. Parameters are ``p[j]`` (j =
registration order); data leaves are the caller's C expressions; unbound constants are exact
literals. A parameter's gradient is ADDED into ``g[j]`` (so a caller sums per-example gradients);
the function returns the loss value.

Every C expression mirrors docs/reference-order.md operation for operation (``ADD``/``MUL``/...
are spelled ``__dadd_rn``/``__dmul_rn``; transcendentals are refmath's C twins ``ts_*``), so gcc
``-ffp-contract=off`` or NVRTC ``--fmad=false`` reproduces the tape bit for bit. The text is
written with the stock kernels' template tokens and expanded by ``gpu.source.instantiate``, so a
float32 tape and ``math="platform"`` take the same substitution as the kernel library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tapescope.core.optable.registry import REGISTRY, grad_inputs, reached_nodes
from tapescope.core.optable.rows import RowForm, Step, fill
from tapescope.core.tape import Node, Tape, Var
from tapescope.gpu.device import REFMATH_C_DIR
from tapescope.gpu.optable import BINARY, UNARY, cform, render, scalar_of
from tapescope.gpu.rowtable import ROW_OPS, LazyEnv, Target, fwd_steps_for_keep
from tapescope.gpu.source import TRANSCENDENTALS, instantiate, node_comment

__all__ = ["EmitError", "emit", "emit_lines", "needed_math", "C_OPS", "NO_C_RULE"]


class EmitError(ValueError):
    """The tape cannot be emitted: a non-scalar node, an op without a C form, a bad binding."""


# ---- literals -----------------------------------------------------------------------------
def literal(value: Any, dtype: np.dtype) -> str:
    """The exact C spelling of ``value`` rounded once to ``dtype`` (NaN/inf by their bits)."""
    dt = np.dtype(dtype)
    v = dt.type(value)
    if np.isfinite(v):
        # repr of a float is the shortest string that round-trips; a float32 value is exact in
        # double, so (float)(<double literal>) gives back the same float: one rounding, the one
        # dt.type(value) made.
        return f"(({'double' if dt == np.float64 else 'float'})({float(v)!r}))"
    if dt == np.float64:
        return f"__longlong_as_double({int(np.array(v).view(np.int64))}LL)"
    return f"__int_as_float({int(np.array(v).view(np.int32))})"


# ---- per-op rules -------------------------------------------------------------------------
class _Ctx:
    """What a rule sees: operand names, the node, literals, fresh temporaries."""

    def __init__(self, tape: Tape, node: Node, prefix: str = "u") -> None:
        self.node = node
        self.prefix = prefix
        self.dtype = tape.dtype
        self.ins = [f"t{j}" for j in node.inputs]
        self.in_shapes = [tape.nodes[j].shape for j in node.inputs]
        self.y = f"t{node.id}"
        self.g = f"g{node.id}"
        self.lines: list[str] = []
        self._n = 0

    def lit(self, v: Any) -> str:
        """A literal of the tape dtype."""
        return literal(v, self.dtype)

    def let(self, expr: str) -> str:
        """Bind ``expr`` to a fresh temporary and return its name."""
        self._n += 1
        name = f"{self.prefix}{self.node.id}_{self._n}"
        self.lines.append(f"const real_t {name} = {expr};")
        return name

    def unb(self, c: str, k: int) -> str:
        """Contribution ``c`` reduced to input k's shape (serial sum from +0.0 when it differs)."""
        # NOTE: for one element, unbroadcast is the identity when the shapes agree and
        # serial_sum (acc = +0.0 + c) otherwise: the +0.0 turns a -0.0 into +0.0
        return c if self.in_shapes[k] == self.node.shape else f"ADD({c}, {self.lit(0)})"

    def serial1(self, e: str) -> str:
        """serial_sum of one element: acc = +0.0 + e."""
        return f"ADD({e}, {self.lit(0)})"

    def count(self) -> str:
        """T(n) of a one-element reduction (always 1, written out as the reference does)."""
        return self.lit(1)


Fwd = Callable[[_Ctx], str]
Bwd = Callable[[_Ctx], list["str | None"]]


def _copy_bwd(c: _Ctx) -> list[str | None]:
    return [c.g] * len(c.ins)


# op -> (forward expression, backward contributions in input order). Each line is the
# reference-order formula of docs/reference-order.md for a one-element operand.
C_OPS: dict[str, tuple[Fwd, Bwd]] = {
    "sum": (lambda c: c.serial1(c.ins[0]), _copy_bwd),
    "mean": (lambda c: f"DIV({c.serial1(c.ins[0])}, {c.count()})",
             lambda c: [f"DIV({c.g}, {c.count()})"]),
    # dot over one k: acc = +0.0 + (a * b); ga = dot over n of g*b; gb = dot over rows of a*g
    "matmul": (lambda c: "ADD({}, MUL({}, {}))".format(c.lit(0), *c.ins),
               lambda c: [f"ADD({c.lit(0)}, MUL({c.g}, {c.ins[1]}))",
                          f"ADD({c.lit(0)}, MUL({c.ins[0]}, {c.g}))"]),
    "transpose": (lambda c: c.ins[0], _copy_bwd),
    "reshape": (lambda c: c.ins[0], _copy_bwd),
    "slice": (lambda c: c.ins[0], _copy_bwd),
    "concat": (lambda c: c.ins[0], _copy_bwd),
}
C_OPS["bmm"] = C_OPS["matmul"]


def _env(c: _Ctx, op: str) -> dict[str, str]:
    if len(c.ins) == 2:
        return {"a": c.ins[0], "b": c.ins[1], "y": c.y, "g": c.g}
    s = c.lit(scalar_of(op, c.node.attrs)) if cform(op).scalar is not None else c.lit(0)
    return {"x": c.ins[0], "y": c.y, "g": c.g, "s": s}


def _table_rule(op: str) -> tuple[Fwd, Bwd]:
    """An op of the table with a C form: its one spelling, a let bound to a temporary."""
    def fwd(c: _Ctx) -> str:
        return render(op, "fwd", _env(c, op), lambda name, expr: c.let(expr))

    def bwd(c: _Ctx) -> list[str | None]:
        env = _env(c, op)
        return [c.unb(render(op, k, env, lambda name, expr: c.let(expr)), k)
                for k in range(len(c.ins))]
    return fwd, bwd


C_OPS.update({op: _table_rule(op) for op in (*BINARY, *UNARY)})


class _Row(Target):
    """A row form over a one-element row: every element is its operand's temporary."""

    def __init__(self, c: _Ctx, f: RowForm) -> None:
        self.c, self.f = c, f
        self.ins = {n: name for (n, _), name in zip(f.ins, c.ins, strict=True)}
        row = c.in_shapes[next(k for k, (_, kind) in enumerate(f.ins) if kind == "row")]
        self.cols = int(row[-1]) if row else 1  # a 0-d operand is a row of one

    def width(self) -> str:
        return "1"

    def elem(self, name: str, col: str) -> str:
        if name in self.ins:
            return self.ins[name]
        if name in ("y", "g"):
            return self.c.y if name == "y" else self.c.g
        if name.startswith("is_"):
            return "1"  # one column: the only valid index is 0, the current one
        return self.ins[name.rpartition("_")[0]]  # x_t: the row input at its only column

    def scalar(self, name: str) -> str:
        if name in ("n", "R"):
            return self.c.lit(1)  # one column, one row
        return self.c.lit(dict(self.f.scalars)[name](self.c.node.attrs))

    def write(self, k: int, expr: str, col: str) -> str:
        return expr


def _row_lines(c: _Ctx, f: RowForm, which: str | int) -> str:
    """The pass's term for one element; its row values and lets bound to temporaries."""
    t = _Row(c, f)
    p = f.fwd if which == "fwd" else f.bwd[int(which)]
    assert p is not None
    scalars = {"n", "R", *dict(f.scalars)}
    env = LazyEnv({}, lambda n: t.scalar(n) if n in scalars else t.elem(n, "0"))
    steps = (*(fwd_steps_for_keep(f) if which != "fwd" else ()), *p.steps,
             *(Step(name, "let", expr) for name, expr in p.lets))
    for s in steps:  # over one element: max is the element, a sum is +0.0 + it
        e = fill(s.expr, env)
        env[s.name] = c.let(c.serial1(e) if s.kind == "sum" else e)
    return fill(p.out[0], env)


def _row_rule(op: str) -> tuple[Fwd, Bwd]:
    """An op of the table with a row form, over one element (a total: y = (+0.0 + l) / 1)."""
    f = REGISTRY[op].row

    def fwd(c: _Ctx) -> str:
        e = _row_lines(c, f, "fwd")
        return f"DIV({c.serial1(e)}, {c.lit(1)})" if f.total else e

    def bwd(c: _Ctx) -> list[str | None]:
        out: list[str | None] = []
        for k, ((_, kind), p) in enumerate(zip(f.ins, f.bwd, strict=True)):
            if p is None:
                out.append(None)
                continue
            e = _row_lines(c, f, k)
            # a col input's gradient is unb over rows: a serial sum when the shapes differ
            out.append(c.unb(e, k) if kind == "col" else e)
        return out
    return fwd, bwd


C_OPS.update({op: _row_rule(op) for op in ROW_OPS if not REGISTRY[op].row.pair})

# Ops with no emitc rule, and why (a one-element tape cannot hold them meaningfully).
NO_C_RULE = {op: "pairs columns c and c + W/2: a one-element row has no pair"
             for op in ROW_OPS if REGISTRY[op].row.pair}
NO_C_RULE.update({
    "conv2d": "windows over [N, C, H, W] operands",
    "conv3d": "windows over [N, C, D, H, W] operands",
    "conv_transpose2d": "windows over [N, C, H, W] operands",
    "conv_transpose3d": "windows over [N, C, D, H, W] operands",
    "maxpool2d": "windows over [N, C, H, W] operands",
    "avgpool2d": "windows over [N, C, H, W] operands",
    "maxpool3d": "windows over [N, C, D, H, W] operands",
    "avgpool3d": "windows over [N, C, D, H, W] operands",
    "gather": "an index operand read at run time",
})

_MATH_TOKENS = {t: t.lower() for t in TRANSCENDENTALS}


# ---- the walk -----------------------------------------------------------------------------
def _cone(tape: Tape, li: int) -> list[int]:
    """Ids of the loss's ancestors (and the loss), increasing."""
    seen = {li}
    for i in range(li, -1, -1):
        if i in seen:
            seen.update(tape.nodes[i].inputs)
    return sorted(seen)


def _reached(tape: Tape, li: int) -> set[int]:
    """Nodes the tape's backward gives a gradient to (mirrors Tape._sweep)."""
    return {i for i, r in enumerate(reached_nodes(tape.nodes, li)) if r}


def _bind(tape: Tape, leaves: Mapping[Any, str] | None) -> dict[int, str]:
    out: dict[int, str] = {}
    for key, expr in (leaves or {}).items():
        if isinstance(key, Var):
            ids = [tape._id(key)]
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            ids = [tape._id(int(key))]
        elif isinstance(key, str):
            ids = [n.id for n in tape.nodes if n.name == key and n.op in ("const", "param")]
            if not ids:
                raise EmitError(f"emitc leaves: no leaf named {key!r} on the tape")
            if len(ids) > 1:
                raise EmitError(f"emitc leaves: {len(ids)} leaves are named {key!r} "
                                f"(nodes {ids}); bind them by id")
        else:
            raise EmitError(f"emitc leaves: key {key!r} is not a Var, a node id or a name")
        node = tape.nodes[ids[0]]
        if node.op != "const":
            raise EmitError(f"emitc leaves: node {node.id} ({node.op} {node.name!r}) is not a "
                            "data leaf; parameters are always p[j]")
        if not isinstance(expr, str) or not expr.strip():
            raise EmitError(f"emitc leaves: node {node.id} needs a C expression, got {expr!r}")
        out[node.id] = expr
    return out


def needed_math(tape: Tape, loss: Var | int) -> set[str]:
    """The transcendentals (exp, log, tanh, sigmoid, erf, expm1, log1p) the function calls."""
    fwd, bwd, _ = emit_lines(tape, loss)
    text = "\n".join(fwd + bwd)
    return {v for k, v in _MATH_TOKENS.items() if re.search(rf"\b{k}\(", text)}


def _check_math(tape: Tape, li: int) -> None:
    if tape.math != "refmath":
        return  # platform libm: parity is not expected, the C calls libm by name
    from tapescope.core import refmath

    header = (REFMATH_C_DIR / "refmath.cuh").read_text()
    for name in sorted(needed_math(tape, li)):
        if name not in getattr(refmath, "FUNCTIONS", ()):
            raise EmitError(f"emitc: the tape's refmath has no {name} yet (it falls back to the "
                            "platform libm), so no C twin can match it bit for bit")
        if not re.search(rf"\bts_{name}\s*\(", header):
            raise EmitError(f"emitc: core/refmath/refmath.cuh defines no ts_{name} yet")


def emit_lines(tape: Tape, loss: Var | int, leaves: Mapping[Any, str] | None = None,
               trace: bool = False) -> tuple[list[str], list[str], dict[int, int]]:
    """Template-token body lines (forward, backward) and the param id -> index map."""
    if not tape.ok:
        raise EmitError(f"emitc: the tape is poisoned: {tape.error}")
    li = tape._id(loss)
    bound = _bind(tape, leaves)
    pidx = {v.id: j for j, v in enumerate(tape.params())}
    cone = _cone(tape, li)
    for i in cone:
        n = tape.nodes[i]
        if n.size != 1:
            raise EmitError(f"emitc: node {i} {n.op} {n.name or ''} has shape {n.shape}; "
                            "a scalar tape has one element per node")
        if n.op not in ("param", "const") and n.op not in C_OPS:
            raise EmitError(f"emitc: node {i} op {n.op!r} has no C form")
    fwd: list[str] = []
    for i in cone:
        n = tape.nodes[i]
        if n.op == "param":
            expr = f"p[{pidx[i]}]"
        elif n.op == "const":
            expr = f"@@LEAF{i}@@" if i in bound else literal(tape.value(i).reshape(-1)[0],
                                                               tape.dtype)
        else:
            c = _Ctx(tape, n)
            expr = C_OPS[n.op][0](c)
            fwd.extend(c.lines)
        # never the node's name: it is text from a file (see gpu.source.node_comment)
        fwd.append(f"const real_t t{i} = {expr};  {node_comment(i, n.op)}")
        if trace:
            fwd.append(f"tv[{i}] = t{i};")
    reached = _reached(tape, li)
    grads = [i for i in cone if i in reached]
    bwd = [f"real_t g{i} = {literal(1 if i == li else 0, tape.dtype)};" for i in grads]
    for i in reversed(grads):
        n = tape.nodes[i]
        if not n.inputs or not n.requires_grad:
            continue
        c = _Ctx(tape, n, prefix="v")  # backward temporaries: v<id>_<k>, forward: u<id>_<k>
        parts = C_OPS[n.op][1](c)
        body = list(c.lines)
        push = grad_inputs(tape.nodes, i)
        for k, j in enumerate(n.inputs):
            if k not in push or parts[k] is None:
                continue
            # computed in full, then added: gJ = gJ + c (gJ started at +0.0)
            body.append(f"g{j} = ADD(g{j}, {parts[k]});")
        bwd.append(node_comment(i, n.op))
        bwd.extend(body)
    for i in grads:
        if trace:
            bwd.append(f"tg[{i}] = g{i};")
        if i in pidx:
            bwd.append(f"g[{pidx[i]}] = ADD(g[{pidx[i]}], g{i});")
    bwd.append(f"return t{li};")
    return fwd, bwd, {i: pidx[i] for i in grads if i in pidx}


def emit(tape: Tape, loss: Var | int, leaves: Mapping[Any, str] | None = None, *,
         name: str = "grad", qualifier: str = "__device__", args: str = "",
         trace: bool = False) -> str:
    """C source of ``real_t name(const real_t* p, real_t* g[, trace][, args])`` for a scalar tape.

    ``leaves`` binds data leaves (by name, id or Var) to C expressions over ``args``; ``trace``
    adds ``real_t* tv, real_t* tg`` receiving every node's value and reached gradient by id.
    """
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise EmitError(f"emitc: {name!r} is not a C identifier")
    li = tape._id(loss)
    _check_math(tape, li)
    fwd, bwd, _ = emit_lines(tape, li, leaves, trace)
    bound = _bind(tape, leaves)
    params = ["const real_t* p", "real_t* g"] + (["real_t* tv", "real_t* tg"] if trace else [])
    sig = ", ".join(params) + (", @@ARGS@@" if args.strip() else "")
    n_params = len(tape.params())
    head = (f"/* emitc: scalar tape, {len(tape)} nodes, loss = node {li}, {n_params} params "
            f"(p[0..{n_params - 1}] in registration order); g[j] += dloss/dp[j] */")
    body = "\n".join("    " + ln for ln in ["/* forward */", *fwd, "/* backward */", *bwd])
    text = f"{head}\n{qualifier} real_t {name}({sig}) {{\n{body}\n}}\n".lstrip()
    # protect the function name and the caller's expressions from the token substitution
    text = text.replace(f" {name}(", " @@NAME@@(", 1)
    out = instantiate(text, tape.dtype, tape.math)
    out = out.replace("@@NAME@@", name).replace("@@ARGS@@", args.strip())
    for i, expr in bound.items():
        out = out.replace(f"@@LEAF{i}@@", f"({expr})")
    return out
