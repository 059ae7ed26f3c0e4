"""CUDA C generation of fused row kernels (template tokens: real_t, ADD, ..., names ending _T).

Every element is computed by one thread with the same expression, in the same order, as the
stock per-node kernel (gpu/kernels/ops_*.cu), so fused results are bit-identical. Kernels read
every address from one int64 table (see ``Layout``): ``(const long long* tab, long long R)`` is
the signature of every generated kernel. Every node's value goes through memory, so a half
episode's values are rounded to storage exactly where the tape rounds them; a contribution
computed in a register is ``RND(...)``-rounded before it is added (gpu/source.py), and kept row
values and tables are ``acc_t`` (float32 scratch, as in the library kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tapescope.core import precision
from tapescope.core.optable.registry import REGISTRY, grad_inputs
from tapescope.core.optable.rows import RowForm, fill
from tapescope.gpu.emitc import literal
from tapescope.gpu.fusion.analysis import BINARY, ROW, Segment
from tapescope.gpu.kernel_facts import KernelFacts
from tapescope.gpu.optable import cform, render, scalar_of
from tapescope.gpu.rowtable import LazyEnv, Target, pass_lines
from tapescope.gpu.source import node_comment

__all__ = ["Layout", "KernelText", "row_forward", "row_backward", "param_grads", "HEADER"]

HEADER = """#include "refmath.cuh"
#define TS_FZ_STRIDE(i, n)                                                            \\
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);     \\
         i += (long long)gridDim.x * blockDim.x)
/* sigmoid under math="platform" (and refmath's fallback): 1 / (1 + exp(-x)) */
static __device__ __forceinline__ real_t ts_psigmoid_T(real_t x) {
    return DIV((real_t)1, ADD((real_t)1, PEXP(-x)));
}
"""


@dataclass
class Layout:
    """The pointer table: [value ptr per node][grad ptr per node][extra buffers]."""

    n_nodes: int
    extras: dict[tuple[int, str], int] = field(default_factory=dict)

    def v(self, i: int) -> int:
        """Table slot of node i's value address."""
        return i

    def g(self, i: int) -> int:
        """Table slot of node i's gradient address (0 when backward never reaches it)."""
        return self.n_nodes + i

    def extra(self, node: int, key: str) -> int:
        """Table slot of a per-node extra buffer: a row form's kept row values ("k_<name>",
        one per row) and host tables ("t_<name>")."""
        k = (node, key)
        if k not in self.extras:
            self.extras[k] = 2 * self.n_nodes + len(self.extras)
        return self.extras[k]


@dataclass
class KernelText:
    """One generated kernel: its template-token name, body, and what the host launcher needs of
    it (gpu.kernel_facts: a row kernel's barriers; no generated kernel here runs as lanes)."""

    name: str
    text: str
    facts: KernelFacts


class _W:
    """Accumulates one kernel: pointer declarations used, body lines."""

    def __init__(self, nodes: tuple, lay: Layout, dtype: np.dtype, vname: str = "v",
                 gname: str = "g") -> None:
        # literals in the compute dtype (float32 in a half episode: the tape's T(s))
        self.nodes, self.lay, self.dt = nodes, lay, precision.compute_dtype(dtype)
        self.vname, self.gname = vname, gname  # pointer names: v<id> / g<id> by default
        self.decl: dict[str, str] = {}
        self.body: list[str] = []
        self.barrier = False  # whether sync() wrote a __syncthreads()

    def sync(self) -> None:
        """A barrier between two nodes' loops: every thread of the block waits here."""
        self.body.append("__syncthreads();")
        self.barrier = True

    def lit(self, x: float) -> str:
        return literal(x, self.dt)

    def _ptr(self, name: str, slot: int, ctype: str = "real_t") -> str:
        self.decl.setdefault(name, f"{ctype}* {name} = ({ctype}*)(unsigned long long)"
                                   f"tab[{slot}];")
        return name

    def v(self, i: int) -> str:
        return self._ptr(f"{self.vname}{i}", self.lay.v(i))

    def g(self, i: int) -> str:
        return self._ptr(f"{self.gname}{i}", self.lay.g(i))

    def x(self, i: int, key: str) -> str:
        return self._ptr(f"x{i}_{key}", self.lay.extra(i, key), "acc_t")  # scratch, tables

    def cols(self, i: int) -> int:
        s = self.nodes[i].shape
        return s[-1] if s else 1

    def kernel(self, name: str, loop: str) -> KernelText:
        """The kernel: ``loop`` around the body. Its threads tell each other apart by
        threadIdx (a row's columns, one thread, TS_FZ_STRIDE), never by a lane loop, so none
        runs as lanes; a barrier where sync() wrote one."""
        decl = "\n".join("    " + d for d in self.decl.values())
        body = "\n".join("        " + ln for ln in self.body)
        text = (f'extern "C" __global__ void {name}(const long long* tab, long long R) {{\n'
                f"{decl}\n    {loop} {{\n{body}\n    }}\n}}\n")
        return KernelText(name, text, KernelFacts(barrier=self.barrier))


def whole_index(shape: tuple, out: tuple, s: str, c: str) -> str:
    """C index into a broadcast operand of ``shape`` at output row ``s``, column ``c``."""
    pad = (1,) * (len(out) - len(shape)) + tuple(shape)
    terms, stride = [], 1
    strides = []
    for d in reversed(pad):
        strides.append(stride)
        stride *= d
    strides = strides[::-1]
    if pad[-1] > 1:
        terms.append(c)
    lead = out[:-1]
    div = 1
    for d in range(len(lead) - 1, -1, -1):
        if pad[d] > 1:
            terms.append(f"((({s}) / {div}) % {lead[d]}) * {strides[d]}")
        div *= lead[d]
    return " + ".join(terms) if terms else "0"


def _operand(w: _W, node, k: int, kind: str, s: str, c: str) -> str:
    j = node.inputs[k]
    if kind == "act":
        return f"{w.v(j)}[{s} * {w.cols(node.id)} + {c}]"
    return f"{w.v(j)}[{whole_index(w.nodes[j].shape, node.shape, s, c)}]"


def _inline(name: str, expr: str) -> str:
    return f"({expr})"  # a let used inside a one-line loop: the same pure expression


def _bin_fwd(op: str, a: str, b: str) -> str:
    """ts_bin_T of the op table (gpu/optable.py)."""
    return render(op, "fwd", {"a": a, "b": b}, _inline)


def _bin_term(op: str, k: int, a: str, b: str, y: str, g: str) -> str:
    """ts_bin_term_T of the op table (gpu/optable.py)."""
    return render(op, k, {"a": a, "b": b, "y": y, "g": g}, _inline)


def _un(w: _W, op: str, term: str | int, x: str, y: str, g: str, node) -> tuple[str, str]:
    """(declarations of the table's lets, the expression) of a unary's term, ts_un*_T's case."""
    lets: list[str] = []

    def bind(name: str, expr: str) -> str:
        lets.append(f"real_t {name} = {expr}; ")
        return name

    s = w.lit(scalar_of(op, node.attrs)) if cform(op).scalar is not None else "(real_t)0"
    expr = render(op, term, {"x": x, "y": y, "g": g, "s": s}, bind)
    return "".join(lets), expr


def _cloop(n: int | str) -> str:
    return f"for (long long c = threadIdx.x; c < {n}; c += blockDim.x)"


class _Fused(Target):
    """A row form in a fused kernel: block = row ``s``, threads stride the columns; every thread
    computes the row values itself from the same inputs (the same bits), thread 0 keeps them."""

    def __init__(self, w: _W, node, which: str | int, row: str = "s") -> None:
        self.w, self.node, self.which, self.row = w, node, which, row
        self.f: RowForm = REGISTRY[node.op].row
        self.C = w.cols(node.id)
        self.ins = {n: j for (n, _), j in zip(self.f.ins, node.inputs, strict=True)}

    def width(self) -> str:
        return str(self.C)

    def elem(self, name: str, col: str) -> str:
        w, i, C, s = self.w, self.node.id, self.C, self.row
        if name in self.ins:
            j = self.ins[name]
            return f"{w.v(j)}[{col}]" if dict(self.f.ins)[name] == "col" else \
                f"{w.v(j)}[{s} * {C} + {col}]"
        if name in ("y", "g"):
            return f"{w.v(i) if name == 'y' else w.g(i)}[{s} * {C} + {col}]"
        if name in self.f.tables:
            return f"{w.x(i, 't_' + name)}[({s} % {self.node.shape[-2]}) * {C // 2} + {col}]"
        base = name[:-1]
        ptr = w.g(i) if base == "g" else w.v(self.ins[base])
        return f"{ptr}[{s} * {C} + {col}{'' if name[-1] == '1' else f' + {C // 2}'}]"

    def scalar(self, name: str) -> str:
        if name == "n":
            return self.w.lit(self.C)
        return self.w.lit(dict(self.f.scalars)[name](self.node.attrs))

    def kept(self, name: str) -> str:
        return f"{self.w.x(self.node.id, 'k_' + name)}[{self.row}]"

    def store_kept(self, name: str, value: str) -> list[str]:
        return [f"if (threadIdx.x == 0) {self.kept(name)} = {value};"]

    def out_loop(self) -> str | None:
        return _cloop(self.C // 2 if self.f.pair else self.C)

    def write(self, k: int, expr: str, col: str) -> str:
        off = "" if k == 0 else f" + {self.C // 2}"
        if self.which == "fwd":
            return f"{self.w.v(self.node.id)}[{self.row} * {self.C} + {col}{off}] = {expr};"
        j = self.node.inputs[int(self.which)]
        gx = f"{self.w.g(j)}[{self.row} * {self.w.cols(j)} + {col}{off}]"
        return f"{gx} = ADD({gx}, RND({expr}));"


def _row_block(t: _Fused, which: str | int) -> list[str]:
    return ["{", *("    " + ln for ln in pass_lines(t, t.f, which)), "}"]


def _fwd_node(w: _W, info) -> list[str]:
    node = w.nodes[info.id]
    i, op, C = node.id, node.op, info.cols
    y = f"{w.v(i)}[s * {C} + c]"
    if op in BINARY:
        a = _operand(w, node, 0, info.kinds[0], "s", "c")
        b = _operand(w, node, 1, info.kinds[1], "s", "c")
        return [f"{_cloop(C)} {y} = {_bin_fwd(op, a, b)};"]
    if op == "matmul":
        a, wt = node.inputs
        K = w.nodes[wt].shape[0]
        return [f"{_cloop(C)} {{", "    real_t acc = (real_t)0;",
                f"    for (long long k = 0; k < {K}; ++k) acc = ADD(acc, "
                f"MUL({w.v(a)}[s * {K} + k], {w.v(wt)}[k * {C} + c]));",
                f"    {y} = acc;", "}"]
    if op in ROW:
        return _row_block(_Fused(w, node, "fwd"), "fwd")
    x = f"{w.v(node.inputs[0])}[s * {C} + c]"
    lets, e = _un(w, op, "fwd", "x", y, "", node)
    return [f"{_cloop(C)} {{ real_t x = {x}; {lets}{y} = {e}; }}"]


def row_forward(name: str, seg: Segment, nodes: tuple, lay: Layout, dt: np.dtype) -> KernelText:
    """Block = row s; threads stride each node's columns in node order; a barrier between."""
    w = _W(nodes, lay, dt)
    for k, info in enumerate(seg.nodes):
        n = nodes[info.id]
        if k:
            w.sync()
        w.body.append(node_comment(n.id, n.op))  # never the node's name: it is file text
        w.body.extend(_fwd_node(w, info))
    return w.kernel(name, "for (long long s = blockIdx.x; s < R; s += gridDim.x)")


def _bwd_node(w: _W, info, k: int) -> list[str]:
    """Contribution of node info.id to its activation input k, row s."""
    node = w.nodes[info.id]
    i, op, C = node.id, node.op, info.cols
    j = node.inputs[k]
    gx = f"{w.g(j)}[s * {w.cols(j)} + c]"
    g = f"{w.g(i)}[s * {C} + c]"
    if op in BINARY:
        a = _operand(w, node, 0, info.kinds[0], "s", "c")
        b = _operand(w, node, 1, info.kinds[1], "s", "c")
        t = _bin_term(op, k, a, b, f"{w.v(i)}[s * {C} + c]", g)
        return [f"{_cloop(C)} {gx} = ADD({gx}, RND({t}));"]
    if op == "matmul":
        wt = node.inputs[1]
        K = w.nodes[wt].shape[0]
        return [f"{_cloop(K)} {{", "    real_t acc = (real_t)0;",
                f"    for (long long n = 0; n < {C}; ++n) acc = ADD(acc, "
                f"MUL({w.g(i)}[s * {C} + n], {w.v(wt)}[c * {C} + n]));",
                f"    {gx} = ADD({gx}, RND(acc));", "}"]
    if op in ROW:
        return _row_block(_Fused(w, node, k), k)
    x = f"{w.v(node.inputs[0])}[s * {C} + c]"
    lets, t = _un(w, op, 0, "x", f"{w.v(i)}[s * {C} + c]", g, node)
    return [f"{_cloop(C)} {{ real_t x = {x}; {lets}{gx} = ADD({gx}, RND({t})); }}"]


def pushes(nodes: tuple, reached: list[bool], i: int) -> list[int]:
    """Input positions node i adds a gradient to (the tape's rule), in input order."""
    return grad_inputs(nodes, i) if reached[i] else []


def row_backward(name: str, seg: Segment, nodes: tuple, reached: list[bool], lay: Layout,
                 dt: np.dtype) -> KernelText | None:
    """Activation gradients of a segment, nodes in decreasing id; None when there are none."""
    w = _W(nodes, lay, dt)
    first = True
    for info in reversed(seg.nodes):
        ks = [k for k in pushes(nodes, reached, info.id) if info.kinds[k] == "act"]
        if not ks:
            continue
        n = nodes[info.id]
        if not first:
            w.sync()
        first = False
        w.body.append(node_comment(n.id, n.op))
        for k in ks:
            w.body.extend(_bwd_node(w, info, k))
    if first:
        return None
    return w.kernel(name, "for (long long s = blockIdx.x; s < R; s += gridDim.x)")


def _param_terms(w: _W, info, k: int, rows: int) -> list[str]:
    """acc = serial sum over rows (row-major positions) of node info.id's term for input k."""
    node = w.nodes[info.id]
    i, op, C = node.id, node.op, info.cols
    if op == "matmul":  # gW[kk, n] = dot over rows of a[r, kk] * g[r, n]
        a, wt = node.inputs
        K = w.nodes[wt].shape[0]
        return [f"long long kk = j / {C}, n = j % {C};",
                f"for (long long r = 0; r < {rows}; ++r) acc = ADD(acc, "
                f"MUL({w.v(a)}[r * {K} + kk], {w.g(i)}[r * {C} + n]));"]
    if op in ROW:  # a col input's gradient: its term, serial over rows
        t = _Fused(w, node, k, row="r")
        p = t.f.bwd[k]
        assert p is not None
        env = {n: t.kept(n) for n in t.f.keep}
        env.update({n: t.scalar(n) for n in ("n", *(m for m, _ in t.f.scalars))})
        term = fill(p.out[0], LazyEnv(env, lambda name: t.elem(name, "j")))
        return [f"for (long long r = 0; r < {rows}; ++r) acc = ADD(acc, {term});"]
    j = node.inputs[k]
    per_col = w.nodes[j].shape and w.nodes[j].shape[-1] == C and C > 1
    a = _operand(w, node, 0, info.kinds[0], "r", "c")
    b = _operand(w, node, 1, info.kinds[1], "r", "c")
    t = _bin_term(op, k, a, b, f"{w.v(i)}[r * {C} + c]", f"{w.g(i)}[r * {C} + c]")
    if per_col:
        return ["long long c = j;",
                f"for (long long r = 0; r < {rows}; ++r) acc = ADD(acc, {t});"]
    return [f"for (long long r = 0; r < {rows}; ++r) for (long long c = 0; c < {C}; ++c) "
            f"acc = ADD(acc, {t});"]


def param_grads(name: str, seg: Segment, nodes: tuple, reached: list[bool], lay: Layout,
                dt: np.dtype) -> KernelText | None:
    """Whole-operand gradients: one thread per slot, contributions in decreasing node id."""
    w = _W(nodes, lay, dt)
    order: dict[int, list[tuple]] = {}
    for info in reversed(seg.nodes):
        for k in pushes(nodes, reached, info.id):
            if info.kinds[k] == "whole":
                order.setdefault(nodes[info.id].inputs[k], []).append((info, k))
    if not order:
        return None
    off, branches = 0, []
    for p, contribs in order.items():
        size = nodes[p].size
        lines = [f"long long j = t - {off};"]
        for info, k in contribs:
            lines.append("{ " + node_comment(info.id, nodes[info.id].op, "->", "input", str(k)))
            lines.append("    real_t acc = (real_t)0;")
            lines += ["    " + ln for ln in _param_terms(w, info, k, seg.rows)]
            lines.append(f"    {w.g(p)}[j] = ADD({w.g(p)}[j], RND(acc));")
            lines.append("}")
        cond = "if" if not branches else "} else if"
        branches.append(f"{cond} (t < {off + size}) {{  /* gradient of node {p} */")
        branches += ["    " + ln for ln in lines]
        off += size
    branches.append("}")
    w.body = branches
    return w.kernel(name, f"TS_FZ_STRIDE(t, {off})")
