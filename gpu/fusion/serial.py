"""The scalar loss tail: the nodes from the last non-scalar value to the loss, as ONE serial kernel
forward and ONE backward (which also seeds the loss gradient with 1).

The tail is the maximal run of consecutive nodes ending at the loss whose outputs hold one
element: scalar arithmetic (emitc's expressions, the reference formulas for one element), sum /
mean reductions to one slot (serial, flat row-major order) and cross_entropy (rows in order).
One thread runs it, so every sum keeps the tape's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu.emitc import C_OPS, _Ctx
from gpu.fusion.analysis import LEAVES
from gpu.fusion.codegen import _W, KernelText, Layout, _rowmax, pushes

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
    if n.op in ("sum", "mean", "cross_entropy"):
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


def _ce_rows(w: _W, node) -> tuple[str, str, int, int]:
    x, t = node.inputs
    C = w.nodes[x].shape[-1]
    return w.v(x), w.v(t), w.nodes[x].size // C, C


def tail_forward(name: str, tail: Tail, nodes: tuple, lay: Layout, dt: np.dtype) -> KernelText:
    """Forward of the tail by one thread, in tape order."""
    w = _W(nodes, lay, dt, "pv", "pg")  # emitc's rules own the names t<id>, g<id>
    shim = _Shim(nodes, dt)
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
        elif n.op == "cross_entropy":
            xv, tv, R, C = _ce_rows(w, n)
            w.body += ["{", "    real_t acc = (real_t)0;",
                       f"    for (long long row = 0; row < {R}; ++row) {{",
                       f"        const real_t* xr = {xv} + row * {C};",
                       *("        " + ln for ln in _rowmax("xr", C, "m")),
                       "        real_t s = (real_t)0;",
                       f"        for (long long c = 0; c < {C}; ++c) "
                       "s = ADD(s, EXP(SUB(xr[c], m)));",
                       f"        long long ti = (long long){tv}[row];",
                       "        acc = ADD(acc, SUB(LOG(s), SUB(xr[ti], m)));", "    }",
                       f"    {w.v(i)}[0] = DIV(acc, {w.lit(R)});", "}"]
        else:
            for j in n.inputs:
                w.body += _load(w, done, j)
            c = _Ctx(shim, n)  # type: ignore[arg-type]
            expr = C_OPS[n.op][0](c)
            w.body += c.lines + [f"const real_t t{i} = {expr};", f"{w.v(i)}[0] = t{i};"]
            done.add(i)
            continue
        done.discard(i)
    return w.kernel(name, "if (blockIdx.x == 0 && threadIdx.x == 0)", False)


def tail_backward(name: str, tail: Tail, nodes: tuple, reached: list[bool], lay: Layout,
                  dt: np.dtype) -> KernelText:
    """Seed the loss gradient with 1, then the tail's contributions in decreasing id."""
    w = _W(nodes, lay, dt, "pv", "pg")  # emitc's rules own the names t<id>, g<id>
    shim = _Shim(nodes, dt)
    done: set[int] = set()
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
            w.body.append(f"for (long long e = 0; e < {cnt}; ++e) {gx} = ADD({gx}, {v});")
        elif n.op == "cross_entropy":
            xv, tv, R, C = _ce_rows(w, n)
            gx = w.g(n.inputs[0])
            w.body += [f"for (long long row = 0; row < {R}; ++row) {{",
                       f"    const real_t* xr = {xv} + row * {C};",
                       *("    " + ln for ln in _rowmax("xr", C, "m")),
                       "    real_t s = (real_t)0;",
                       f"    for (long long c = 0; c < {C}; ++c) s = ADD(s, EXP(SUB(xr[c], m)));",
                       f"    for (long long c = 0; c < {C}; ++c) {{",
                       f"        real_t k = DIV({g}, {w.lit(R)});",
                       "        real_t p = DIV(EXP(SUB(xr[c], m)), s);",
                       f"        if (c == (long long){tv}[row]) p = SUB(p, (real_t)1);",
                       f"        {gx}[row * {C} + c] = ADD({gx}[row * {C} + c], MUL(p, k));",
                       "    }", "}"]
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
                w.body.append(f"    {tgt} = ADD({tgt}, {parts[k]});")
            w.body.append("}")
            done.clear()  # locals above are scoped to the block
    return w.kernel(name, "if (blockIdx.x == 0 && threadIdx.x == 0)", False)
