"""The scalar loss tail: the nodes from the last non-scalar value to the loss, as ONE serial kernel
forward and ONE backward (which also seeds the loss gradient with 1).

The tail is the maximal run of consecutive nodes ending at the loss whose outputs hold one
element: scalar arithmetic (emitc's expressions, the reference formulas for one element), sum /
mean reductions to one slot (serial, flat row-major order) and the table's row ops that reduce a
whole tensor to one value (a row form with ``total``, e.g. a loss: rows in order).
One thread runs it, so every sum keeps the tape's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapescope.core import precision
from tapescope.core.optable.registry import REGISTRY
from tapescope.gpu.emitc import C_OPS, _Ctx
from tapescope.gpu.fusion.analysis import LEAVES
from tapescope.gpu.fusion.codegen import _W, KernelText, Layout, pushes
from tapescope.gpu.rowtable import Target, pass_lines
from tapescope.gpu.source import STORAGE

__all__ = ["Tail", "find_tail", "tail_forward", "tail_backward"]


@dataclass(frozen=True)
class Tail:
    """Node ids lo..hi (hi = the loss) computed by the serial kernels."""

    lo: int
    hi: int
    ids: tuple[int, ...]


def _serial_ok(nodes: tuple, i: int) -> bool:
    n = nodes[i]
    if n.size != 1:
        return False
    if n.op in ("sum", "mean") or _total(n.op):
        return True
    return n.op in C_OPS and all(nodes[j].size == 1 for j in n.inputs)


def find_tail(nodes: tuple, loss: int) -> Tail | None:
    """The scalar loss tail, or None when the loss's own op cannot run serially."""
    ids = []
    for i in range(loss, -1, -1):
        if nodes[i].op in LEAVES:
            continue
        if not _serial_ok(nodes, i):
            break
        ids.append(i)
    if not ids:
        return None
    return Tail(ids[-1], loss, tuple(reversed(ids)))


class _Shim:
    """What emitc's rule context reads from a tape: dtype and node shapes."""

    def __init__(self, nodes: tuple, dtype: np.dtype) -> None:
        self.nodes, self.dtype = nodes, dtype


def _load(w: _W, done: set[int], j: int) -> list[str]:
    if j in done:
        return []
    done.add(j)
    return [f"const real_t t{j} = {w.v(j)}[0];"]


def _total(op: str) -> bool:
    f = REGISTRY[op].row
    return f is not None and f.total


class _Rows(Target):
    """A total row form run by the one thread: row ``row`` of R in order, columns serial."""

    def __init__(self, w: _W, node, which: str | int) -> None:
        self.w, self.node, self.which = w, node, which
        self.f = REGISTRY[node.op].row
        self.ins = {n: j for (n, _), j in zip(self.f.ins, node.inputs, strict=True)}
        x = node.inputs[next(k for k, (_, kind) in enumerate(self.f.ins) if kind == "row")]
        self.C = w.nodes[x].shape[-1]
        self.R = w.nodes[x].size // self.C

    def width(self) -> str:
        return str(self.C)

    def elem(self, name: str, col: str) -> str:
        w, C = self.w, self.C
        if name in self.ins:
            j = self.ins[name]
            return f"{w.v(j)}[{col}]" if dict(self.f.ins)[name] == "col" else \
                f"{w.v(j)}[row * {C} + {col}]"
        if name == "g":
            return f"{w.g(self.node.id)}[0]"
        if name.startswith("is_"):
            return f"({col} == (long long){w.v(self.ins[name[3:]])}[row])"
        r, _, t = name.rpartition("_")
        return f"{w.v(self.ins[r])}[row * {C} + (long long){w.v(self.ins[t])}[row]]"

    def scalar(self, name: str) -> str:
        if name in ("n", "R"):
            return self.w.lit(self.C if name == "n" else self.R)
        return self.w.lit(dict(self.f.scalars)[name](self.node.attrs))

    def out_loop(self) -> str | None:
        return None if self.which == "fwd" else f"for (long long c = 0; c < {self.C}; ++c)"

    def write(self, k: int, expr: str, col: str) -> str:
        if self.which == "fwd":
            return f"acc = ADD(acc, {expr});"
        j = self.node.inputs[int(self.which)]
        gx = f"{self.w.g(j)}[row * {self.C} + {col}]"
        return f"{gx} = ADD({gx}, RND({expr}));"


def tail_forward(name: str, tail: Tail, nodes: tuple, lay: Layout, dt: np.dtype) -> KernelText:
    """Forward of the tail by one thread, in tape order."""
    w = _W(nodes, lay, dt, "pv", "pg")  # emitc's rules own the names t<id>, g<id>
    shim = _Shim(nodes, precision.compute_dtype(dt))  # literals: T(s)
    done: set[int] = set()
    for i in tail.ids:
        n = nodes[i]
        w.body.append(f"/* node {i} {n.op} */")
        if n.op in ("sum", "mean"):
            x = n.inputs[0]
            cnt = nodes[x].size
            div = f"DIV(acc, {w.lit(cnt)})" if n.op == "mean" else "acc"
            w.body += ["{", "    real_t acc = (real_t)0;",
                       f"    for (long long e = 0; e < {cnt}; ++e) acc = ADD(acc, {w.v(x)}[e]);",
                       f"    {w.v(i)}[0] = {div};", "}"]
        elif _total(n.op):  # y = serial_sum(the rows' values, in row order) / T(R)
            t = _Rows(w, n, "fwd")
            w.body += ["{", "    real_t acc = (real_t)0;",
                       f"    for (long long row = 0; row < {t.R}; ++row) {{",
                       *("        " + ln for ln in pass_lines(t, t.f, "fwd")), "    }",
                       f"    {w.v(i)}[0] = DIV(acc, {w.lit(t.R)});", "}"]
        else:
            for j in n.inputs:
                w.body += _load(w, done, j)
            c = _Ctx(shim, n)  # type: ignore[arg-type]
            expr = C_OPS[n.op][0](c)
            # RND: later nodes read t<i> as the tape does, rounded to storage (half types)
            w.body += c.lines + [f"const real_t t{i} = RND({expr});", f"{w.v(i)}[0] = t{i};"]
            done.add(i)
            continue
        done.discard(i)
    return w.kernel(name, "if (blockIdx.x == 0 && threadIdx.x == 0)")


def tail_backward(name: str, tail: Tail, nodes: tuple, reached: list[bool], lay: Layout,
                  dt: np.dtype) -> KernelText:
    """Seed the loss gradient with 1, then the tail's contributions in decreasing id."""
    w = _W(nodes, lay, dt, "pv", "pg")  # emitc's rules own the names t<id>, g<id>
    shim = _Shim(nodes, precision.compute_dtype(dt))  # literals: T(s)
    done: set[int] = set()
    if np.dtype(dt) in STORAGE:  # a half episode: the seed buffer (the loss scale, --amp)
        w.body.append(f"{w.g(tail.hi)}[0] = {w.x(tail.hi, 's_seed')}[0];  /* the seed */")
    else:
        w.body.append(f"{w.g(tail.hi)}[0] = (real_t)1;  /* the seed */")
    for i in reversed(tail.ids):
        ks = pushes(nodes, reached, i)
        if not ks:
            continue
        n = nodes[i]
        w.body.append(f"/* node {i} {n.op} */")
        g = f"{w.g(i)}[0]"
        if n.op in ("sum", "mean"):
            x = n.inputs[0]
            cnt = nodes[x].size
            v = f"DIV({g}, {w.lit(cnt)})" if n.op == "mean" else g
            gx = f"{w.g(x)}[e]"
            w.body.append(f"for (long long e = 0; e < {cnt}; ++e) {gx} = ADD({gx}, RND({v}));")
        elif _total(n.op):  # kept row values recomputed: the same operations, the same bits
            for k in ks:
                t = _Rows(w, n, k)
                w.body += [f"for (long long row = 0; row < {t.R}; ++row) {{",
                           *("    " + ln for ln in pass_lines(t, t.f, k, recompute=True)), "}"]
        else:
            w.body.append("{")
            for j in (*n.inputs, i):
                w.body += ["    " + ln for ln in _load(w, done, j)]
            w.body.append(f"    const real_t g{i} = {g};")
            c = _Ctx(shim, n, prefix="b")  # type: ignore[arg-type]
            parts = C_OPS[n.op][1](c)
            w.body += ["    " + ln for ln in c.lines]
            for k in ks:
                tgt = f"{w.g(n.inputs[k])}[0]"
                w.body.append(f"    {tgt} = ADD({tgt}, RND({parts[k]}));")
            w.body.append("}")
            done.clear()  # locals above are scoped to the block
    return w.kernel(name, "if (blockIdx.x == 0 && threadIdx.x == 0)")
