"""CUDA C generation of fused row kernels (template tokens: real_t, ADD, ..., names ending _T).

Every element is computed by one thread with the same expression, in the same order, as the
stock per-node kernel (gpu/kernels/ops_*.cu), so fused results are bit-identical. Kernels read
every address from one int64 table (see ``Layout``): ``(const long long* tab, long long R)`` is
the signature of every generated kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.ops.registry import grad_inputs
from gpu.emitc import literal
from gpu.fusion.analysis import BINARY, Segment
from gpu.optable import cform, render, scalar_of
from gpu.source import node_comment

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
        """Table slot of a per-node extra buffer (rms_norm's 1/rms, rope's tables)."""
        k = (node, key)
        if k not in self.extras:
            self.extras[k] = 2 * self.n_nodes + len(self.extras)
        return self.extras[k]


@dataclass
class KernelText:
    """One generated kernel: its template-token name and body."""

    name: str
    text: str
    barrier: bool


class _W:
    """Accumulates one kernel: pointer declarations used, body lines."""

    def __init__(self, nodes: tuple, lay: Layout, dtype: np.dtype, vname: str = "v",
                 gname: str = "g") -> None:
        self.nodes, self.lay, self.dt = nodes, lay, dtype
        self.vname, self.gname = vname, gname  # pointer names: v<id> / g<id> by default
        self.decl: dict[str, str] = {}
        self.body: list[str] = []

    def lit(self, x: float) -> str:
        return literal(x, self.dt)

    def _ptr(self, name: str, slot: int) -> str:
        self.decl.setdefault(name, f"real_t* {name} = (real_t*)(unsigned long long)tab[{slot}];")
        return name

    def v(self, i: int) -> str:
        return self._ptr(f"{self.vname}{i}", self.lay.v(i))

    def g(self, i: int) -> str:
        return self._ptr(f"{self.gname}{i}", self.lay.g(i))

    def x(self, i: int, key: str) -> str:
        return self._ptr(f"x{i}_{key}", self.lay.extra(i, key))

    def cols(self, i: int) -> int:
        s = self.nodes[i].shape
        return s[-1] if s else 1

    def kernel(self, name: str, loop: str, barrier: bool) -> KernelText:
        decl = "\n".join("    " + d for d in self.decl.values())
        body = "\n".join("        " + ln for ln in self.body)
        text = (f'extern "C" __global__ void {name}(const long long* tab, long long R) {{\n'
                f"{decl}\n    {loop} {{\n{body}\n    }}\n}}\n")
        return KernelText(name, text, barrier)


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


def _slope(x: str, s: str) -> str:
    """swiglu's silu slope s * (1 + x * (1 - s)) (ops_elementwise.cu ts_silu_slope_T)."""
    return f"MUL({s}, ADD((real_t)1, MUL({x}, SUB((real_t)1, {s}))))"


def _un(w: _W, op: str, term: str | int, x: str, y: str, g: str, node) -> tuple[str, str]:
    """(declarations of the table's lets, the expression) of a unary's term, ts_un*_T's case."""
    lets: list[str] = []

    def bind(name: str, expr: str) -> str:
        lets.append(f"real_t {name} = {expr}; ")
        return name

    s = w.lit(scalar_of(op, node.attrs)) if cform(op).scalar is not None else "(real_t)0"
    expr = render(op, term, {"x": x, "y": y, "g": g, "s": s}, bind)
    return "".join(lets), expr


def _rowmax(src: str, n: int, out: str) -> list[str]:
    """ts_rowmax_T: NaN propagates, exactly as the stock kernel picks."""
    return [f"real_t {out} = {src}[0];",
            f"for (long long l = 1; l < {n}; ++l) {{ real_t q = {src}[l]; "
            f"if (q != q || q > {out}) {out} = ({out} != {out}) ? {out} : q; }}"]


def _cloop(n: int | str) -> str:
    return f"for (long long c = threadIdx.x; c < {n}; c += blockDim.x)"


def _fwd_node(w: _W, info) -> list[str]:
    node = w.nodes[info.id]
    i, op, C = node.id, node.op, info.cols
    y = f"{w.v(i)}[s * {C} + c]"
    if op in BINARY:
        a = _operand(w, node, 0, info.kinds[0], "s", "c")
        b = _operand(w, node, 1, info.kinds[1], "s", "c")
        return [f"{_cloop(C)} {y} = {_bin_fwd(op, a, b)};"]
    if op == "swiglu":
        a, u = (f"{w.v(j)}[s * {C} + c]" for j in node.inputs)
        return [f"{_cloop(C)} {{ real_t a = {a}; {y} = MUL(MUL(a, SIGMOID(a)), {u}); }}"]
    if op == "matmul":
        a, wt = node.inputs
        K = w.nodes[wt].shape[0]
        return [f"{_cloop(C)} {{", "    real_t acc = (real_t)0;",
                f"    for (long long k = 0; k < {K}; ++k) acc = ADD(acc, "
                f"MUL({w.v(a)}[s * {K} + k], {w.v(wt)}[k * {C} + c]));",
                f"    {y} = acc;", "}"]
    if op == "softmax":
        x = w.v(node.inputs[0])
        return ["{", f"    const real_t* xr = {x} + s * {C};",
                *("    " + ln for ln in _rowmax("xr", C, "m")),
                "    real_t sum = (real_t)0;",
                f"    for (long long l = 0; l < {C}; ++l) sum = ADD(sum, EXP(SUB(xr[l], m)));",
                f"    {_cloop(C)} {y} = DIV(EXP(SUB(xr[c], m)), sum);", "}"]
    if op == "rms_norm":
        x, gm = node.inputs
        rs = w.x(i, "r")
        return ["{", f"    const real_t* xr = {w.v(x)} + s * {C};", "    real_t ss = (real_t)0;",
                f"    for (long long d = 0; d < {C}; ++d) ss = ADD(ss, MUL(xr[d], xr[d]));",
                f"    real_t r = DIV((real_t)1, SQRT(ADD(DIV(ss, {w.lit(C)}), "
                f"{w.lit(node.attrs['eps'])})));",
                f"    if (threadIdx.x == 0) {rs}[s] = r;",
                f"    {_cloop(C)} {y} = MUL(MUL(xr[c], r), {w.v(gm)}[c]);", "}"]
    if op == "rope":
        S, h = node.shape[-2], C // 2
        x, cs, sn = w.v(node.inputs[0]), w.x(i, "cos"), w.x(i, "sin")
        yv = w.v(i)
        return [f"{_cloop(h)} {{", f"    long long p = s % {S};",
                f"    real_t cv = {cs}[p * {h} + c], sv = {sn}[p * {h} + c];",
                f"    real_t x1 = {x}[s * {C} + c], x2 = {x}[s * {C} + c + {h}];",
                f"    {yv}[s * {C} + c] = SUB(MUL(x1, cv), MUL(x2, sv));",
                f"    {yv}[s * {C} + c + {h}] = ADD(MUL(x2, cv), MUL(x1, sv));", "}"]
    x = f"{w.v(node.inputs[0])}[s * {C} + c]"
    lets, e = _un(w, op, "fwd", "x", y, "", node)
    return [f"{_cloop(C)} {{ real_t x = {x}; {lets}{y} = {e}; }}"]


def row_forward(name: str, seg: Segment, nodes: tuple, lay: Layout, dt: np.dtype) -> KernelText:
    """Block = row s; threads stride each node's columns in node order; a barrier between."""
    w = _W(nodes, lay, dt)
    for k, info in enumerate(seg.nodes):
        n = nodes[info.id]
        if k:
            w.body.append("__syncthreads();")
        w.body.append(node_comment(n.id, n.op))  # never the node's name: it is file text
        w.body.extend(_fwd_node(w, info))
    return w.kernel(name, "for (long long s = blockIdx.x; s < R; s += gridDim.x)", True)


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
        return [f"{_cloop(C)} {gx} = ADD({gx}, {t});"]
    if op == "swiglu":
        a, u = (f"{w.v(q)}[s * {C} + c]" for q in node.inputs)
        t = f"MUL(MUL({g}, {u}), {_slope('a', 'sg')})" if k == 0 else f"MUL({g}, MUL(a, sg))"
        return [f"{_cloop(C)} {{ real_t a = {a}; real_t sg = SIGMOID(a); "
                f"{gx} = ADD({gx}, {t}); }}"]
    if op == "matmul":
        wt = node.inputs[1]
        K = w.nodes[wt].shape[0]
        return [f"{_cloop(K)} {{", "    real_t acc = (real_t)0;",
                f"    for (long long n = 0; n < {C}; ++n) acc = ADD(acc, "
                f"MUL({w.g(i)}[s * {C} + n], {w.v(wt)}[c * {C} + n]));",
                f"    {gx} = ADD({gx}, acc);", "}"]
    if op == "softmax":
        yv, gv = w.v(i), w.g(i)
        return ["{", "    real_t d = (real_t)0;",
                f"    for (long long l = 0; l < {C}; ++l) d = ADD(d, MUL({gv}[s * {C} + l], "
                f"{yv}[s * {C} + l]));",
                f"    {_cloop(C)} {gx} = ADD({gx}, MUL({yv}[s * {C} + c], SUB({g}, d)));", "}"]
    if op == "rms_norm":
        x, gm = node.inputs
        xv, gmv, gv, rs = w.v(x), w.v(gm), w.g(i), w.x(i, "r")
        return ["{", f"    real_t r = {rs}[s];", "    real_t dot = (real_t)0;",
                f"    for (long long d = 0; d < {C}; ++d) dot = ADD(dot, "
                f"MUL(MUL({gv}[s * {C} + d], {gmv}[d]), {xv}[s * {C} + d]));",
                f"    real_t cc = MUL(DIV(MUL(MUL(r, r), r), {w.lit(C)}), dot);",
                f"    {_cloop(C)} {{ real_t gd = MUL({g}, {gmv}[c]); "
                f"{gx} = ADD({gx}, SUB(MUL(gd, r), MUL({xv}[s * {C} + c], cc))); }}", "}"]
    if op == "rope":
        S, h = node.shape[-2], C // 2
        cs, sn, gv, gxv = w.x(i, "cos"), w.x(i, "sin"), w.g(i), w.g(j)
        return [f"{_cloop(h)} {{", f"    long long p = s % {S};",
                f"    real_t cv = {cs}[p * {h} + c], sv = {sn}[p * {h} + c];",
                f"    real_t x1 = {gv}[s * {C} + c], x2 = {gv}[s * {C} + c + {h}];",
                f"    {gxv}[s * {C} + c] = ADD({gxv}[s * {C} + c], "
                "ADD(MUL(x1, cv), MUL(x2, sv)));",
                f"    {gxv}[s * {C} + c + {h}] = ADD({gxv}[s * {C} + c + {h}], "
                "SUB(MUL(x2, cv), MUL(x1, sv)));", "}"]
    x = f"{w.v(node.inputs[0])}[s * {C} + c]"
    lets, t = _un(w, op, 0, "x", f"{w.v(i)}[s * {C} + c]", g, node)
    return [f"{_cloop(C)} {{ real_t x = {x}; {lets}{gx} = ADD({gx}, {t}); }}"]


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
            w.body.append("__syncthreads();")
        first = False
        w.body.append(node_comment(n.id, n.op))
        for k in ks:
            w.body.extend(_bwd_node(w, info, k))
    if first:
        return None
    return w.kernel(name, "for (long long s = blockIdx.x; s < R; s += gridDim.x)", True)


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
    if op == "rms_norm":  # ggamma[d] = serial over rows of g * (x * r)
        x = node.inputs[0]
        return [f"for (long long r = 0; r < {rows}; ++r) acc = ADD(acc, MUL({w.g(i)}[r * {C} + j], "
                f"MUL({w.v(x)}[r * {C} + j], {w.x(i, 'r')}[r])));"]
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
            lines.append(f"    {w.g(p)}[j] = ADD({w.g(p)}[j], acc);")
            lines.append("}")
        cond = "if" if not branches else "} else if"
        branches.append(f"{cond} (t < {off + size}) {{  /* gradient of node {p} */")
        branches += ["    " + ln for ln in lines]
        off += size
    branches.append("}")
    w.body = branches
    return w.kernel(name, f"TS_FZ_STRIDE(t, {off})", False)
