"""Every C target of the row ops, rendered from the op table's one row loop (``OpDef.row``).

A row op with a ``RowForm`` (core/optable/rows.py) — a reduction with one output per row
(``out="row"``) too — gets, with no other edit: its library kernels
(spliced into gpu/kernels/ops_rows.cu at build time) and their launches (gpu/library_rows.py), its
fused row-segment code (gpu/fusion/codegen.py), the serial loss tail's code for a ``total`` op
(gpu/fusion/serial.py) and its emitc rule (gpu/emitc.py). Each target only says where an element,
a row value or an output lives (a ``Target``); ``pass_lines`` writes the loop, the same for all:
the row values in step order (a sum: ``acc = +0.0; for l in column order: acc = acc + term``; a
max: NaN propagates), then per column the lets and the terms. So each element is computed with the
same operations in the same order on every target, and fused == unfused == the tape, bit for bit.

SECURITY: the text holds only strings of our own table (core/ops) and numbers, never file text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import tapescope.core.ops  # noqa: F401  (every op registered)
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.optable.rows import RowForm, RowPass, fill
from tapescope.gpu.kernel_facts import LANES, PLAIN, KernelFacts

__all__ = ["ROW_OPS", "MARK", "form", "Target", "LazyEnv", "pass_lines", "step_lines",
           "kernel_names", "library_kernels", "library_facts", "fwd_steps_for_keep"]

MARK = "/* @@ROW_TABLE_KERNELS@@ */"
ROW_OPS = tuple(n for n, d in REGISTRY.items() if d.row is not None)


def form(op: str) -> RowForm:
    """The op's row form; KeyError naming the op when it has none."""
    f = REGISTRY[op].row
    if f is None:
        raise KeyError(f"op {op!r} has no row form in the op table")
    return f


class LazyEnv(dict):
    """Placeholder -> C text; names not bound yet are asked of the target (at one column)."""

    def __init__(self, base: Mapping[str, str], elem: Callable[[str], str]) -> None:
        super().__init__(base)
        self.elem = elem

    def __missing__(self, key: str) -> str:
        return self.elem(key)


class Target:
    """Where one target keeps things. Subclasses say how to read an element at a column, a kept
    row value, a host scalar; how to loop over a row; how to write an output."""

    red_var = "l"  # the column variable of a row value's loop
    col_var = "c"  # the column variable of the output loop

    def elem(self, name: str, col: str) -> str:
        """C text of element placeholder ``name`` at column ``col``."""
        raise NotImplementedError

    def scalar(self, name: str) -> str:
        """C text of a host scalar (n, R, the form's scalars)."""
        raise NotImplementedError

    def kept(self, name: str) -> str:
        """C text of a kept row value, read back in a backward pass."""
        raise NotImplementedError

    def store_kept(self, name: str, value: str) -> list[str]:
        """Lines that store a kept row value in the forward pass."""
        return []

    def width(self) -> str:
        """The row length as C text (the step loops' bound)."""
        raise NotImplementedError

    def red_loop(self, first: int = 0) -> str:
        """The head of a row value's loop over the columns (from ``first``)."""
        return f"for (long long {self.red_var} = {first}; {self.red_var} < {self.width()}; " \
               f"++{self.red_var})"

    def out_loop(self) -> str | None:
        """The output loop's head (None: the element is the thread's own, no loop)."""
        return None

    def write(self, k: int, expr: str, col: str) -> str:
        """The statement that stores output term k at column ``col``."""
        raise NotImplementedError


def _env(t: Target, form_: RowForm, rowvals: Mapping[str, str], col: str) -> LazyEnv:
    scalars = {"n", "R", *(n for n, _ in form_.scalars)}
    return LazyEnv(rowvals, lambda name: t.scalar(name) if name in scalars else t.elem(name, col))


def fwd_steps_for_keep(form_: RowForm) -> tuple:
    """The forward steps a kept value needs (a target without storage recomputes them)."""
    last = max((k for k, s in enumerate(form_.fwd.steps) if s.name in form_.keep), default=-1)
    return form_.fwd.steps[:last + 1]


def step_lines(t: Target, form_: RowForm, steps: tuple, rowvals: dict[str, str],
               stash: str | None = None) -> list[str]:
    """The row values, in order; each bound to a local ``rv_<name>`` added to ``rowvals``."""
    lines: list[str] = []
    for s in steps:
        v = f"rv_{s.name}"
        if s.kind == "let":
            lines.append(f"real_t {v} = {fill(s.expr, _env(t, form_, rowvals, ''))};")
        elif s.kind == "sum":
            e = fill(s.expr, _env(t, form_, rowvals, t.red_var))
            lines.append(f"real_t {v} = (real_t)0;")
            if stash is not None and s is steps[-1]:
                lines.append(f"{t.red_loop()} {{ real_t e = {e}; {stash} = e; "
                             f"{v} = ADD({v}, e); }}")
            else:
                lines.append(f"{t.red_loop()} {v} = ADD({v}, {e});")
        else:  # max: exact in any order; NaN propagates
            e0 = fill(s.expr, _env(t, form_, rowvals, "0"))
            e = fill(s.expr, _env(t, form_, rowvals, t.red_var))
            lines.append(f"real_t {v} = {e0};")
            lines.append(f"{t.red_loop(1)} {{ real_t q = {e}; "
                         f"if (q != q || q > {v}) {v} = ({v} != {v}) ? {v} : q; }}")
        rowvals[s.name] = v
    return lines


def pass_lines(t: Target, form_: RowForm, which: str | int, p: RowPass | None = None,
               stash: bool = False, recompute: bool = False) -> list[str]:
    """The whole row loop of pass ``which`` ("fwd" or an input index) for target ``t``.

    ``recompute``: the target has no storage for kept values, so a backward pass recomputes the
    forward steps they come from (the same operations: the same bits). ``stash``: a library
    forward keeps its last sum's term in the output when the output's term repeats it.
    """
    p = p if p is not None else (form_.fwd if which == "fwd" else form_.bwd[int(which)])
    assert p is not None
    rowvals: dict[str, str] = {}
    lines: list[str] = []
    if which != "fwd":
        if recompute:
            lines += step_lines(t, form_, fwd_steps_for_keep(form_), rowvals)
        else:
            for k in form_.keep:
                lines.append(f"real_t rv_{k} = {t.kept(k)};")
                rowvals[k] = f"rv_{k}"
    outs = p.out
    st = term = None
    if stash and p.steps and p.steps[-1].kind == "sum" and not p.lets and len(outs) == 1:
        names = {**rowvals, **{s.name: f"rv_{s.name}" for s in p.steps}}
        term = fill(p.steps[-1].expr, _env(t, form_, names, t.red_var))
        if term in fill(outs[0], _env(t, form_, names, t.red_var)):
            st = t.elem("y", t.red_var)
    lines += step_lines(t, form_, p.steps, rowvals, st)
    if which == "fwd":
        for k in form_.keep:
            lines += t.store_kept(k, rowvals[k])
    col = t.col_var if st is None else t.red_var
    env = _env(t, form_, rowvals, col)
    body = []
    for name, expr in p.lets:
        body.append(f"real_t el_{name} = {fill(expr, env)};")
        env[name] = f"el_{name}"
    for k, text in enumerate(outs):
        e = fill(text, env)
        if st is not None and term is not None:
            e = e.replace(term, st)  # the term the sum loop left in the output
        body.append(t.write(k, e, col))
    head = t.red_loop() if st is not None else t.out_loop()
    if head is None:
        return lines + body
    if len(body) == 1:
        return lines + [f"{head} {body[0]}"]
    return lines + [f"{head} {{", *("    " + b for b in body), "}"]


# ---- the kernel library -------------------------------------------------------------------------
def kernel_names(op: str) -> dict[str, str]:
    """Template-token names of the op's library kernels: fwd, bwd<k>, total."""
    f = form(op)
    out = {"fwd": f"{op}_fwd"}
    out.update({f"bwd{k}": f"{op}_bwd{k}" for k, p in enumerate(f.bwd) if p is not None})
    if f.total:
        out["total"] = f"{op}_total"
    return out


class _Lib(Target):
    """A library kernel: row inputs in0.., outputs y / gx, kept kp<j>, tables tb<j>."""

    def __init__(self, f: RowForm, which: str | int, mode: str) -> None:
        self.f, self.which, self.mode = f, which, mode  # mode: row | elem | col
        self.ins = {n: f"in{k}" for k, (n, _) in enumerate(f.ins)}
        self.half = f.pair

    def width(self) -> str:
        return "L"

    def _pos(self, col: str) -> str:
        if self.mode == "row" and self.f.axis is not None:
            return f"base + {col} * inner"
        if self.mode == "elem" and not self.f.pair and col == "c":
            return "e"  # the thread's own element: no row/column split needed
        return f"rw * L + {col}"

    def elem(self, name: str, col: str) -> str:
        f = self.f
        if name in self.ins:
            kind = dict(f.ins)[name]
            return f"{self.ins[name]}[{col}]" if kind == "col" else \
                f"{self.ins[name]}[{self._pos(col)}]"
        if name in ("y", "g"):
            if f.total and name == "g":
                return "g[0]"
            if f.out == "row":
                return f"{name}[rw]"  # the row's one value
            return f"{name}[{self._pos(col)}]"
        if f.pair and name[:-1] in (*self.ins, "g") and name[-1] in "12":
            base = "g" if name[:-1] == "g" else self.ins[name[:-1]]
            off = "" if name[-1] == "1" else " + L / 2"
            return f"{base}[{self._pos(col)}{off}]"
        if name in f.tables:
            return f"tb{f.tables.index(name)}[(rw % P) * (L / 2) + {col}]"
        if name.startswith("is_"):
            return f"({col} == (long long){self.ins[name[3:]]}[rw])"
        r, _, t = name.rpartition("_")
        return f"{self.ins[r]}[{self._pos(f'(long long){self.ins[t]}[rw]')}]"

    def scalar(self, name: str) -> str:
        return {"n": "n", "R": "rn"}.get(name, f"sc_{name}")

    def kept(self, name: str) -> str:
        return f"kp{self.f.keep.index(name)}[rw]"

    def store_kept(self, name: str, value: str) -> list[str]:
        return [f"kp{self.f.keep.index(name)}[rw] = {value};"]

    def out_loop(self) -> str | None:
        if self.mode != "row" or (self.which == "fwd" and (self.f.total or self.f.out == "row")):
            return None  # a thread per element, or one value per row
        return "for (long long c = 0; c < L; ++c)"

    def write(self, k: int, expr: str, col: str) -> str:
        off = "" if k == 0 else " + L / 2"
        if self.which == "fwd":
            if self.f.total or self.f.out == "row":
                return f"y[rw] = {expr};"
            return f"y[{self._pos(col)}{off}] = {expr};"
        i = f"{self._pos(col)}{off}"
        return f"gx[{i}] = ADD(gx[{i}], RND({expr}));"


def _params(f: RowForm, which: str | int) -> str:
    # kept row values, tables and a total's per-row values are scratch in the compute type
    # (acc_t: float in a half episode, whose tape keeps them in float32)
    ins = [f"const real_t* in{k}" for k in range(len(f.ins))]
    if which == "fwd":
        outs = ["acc_t* y" if f.total else "real_t* y"] + [
            f"acc_t* kp{j}" for j in range(len(f.keep))]
    else:
        outs = ["const real_t* y", "const real_t* g", "real_t* gx"] + [
            f"const acc_t* kp{j}" for j in range(len(f.keep))]
    tabs = [f"const acc_t* tb{j}" for j in range(len(f.tables))]
    ints = ["long long R", "long long L", "long long inner", "long long P", "long long reduce",
            "real_t n", "real_t rn"] + [f"real_t sc_{s}" for s, _ in f.scalars]
    return ", ".join(ins + outs + tabs + ints)


def _kernel(op: str, f: RowForm, which: str | int, stash: bool = True) -> str:
    p = f.fwd if which == "fwd" else f.bwd[int(which)]
    assert p is not None
    name = kernel_names(op)["fwd" if which == "fwd" else f"bwd{which}"]
    col_in = which != "fwd" and f.ins[int(which)][1] == "col"
    head = f'extern "C" __global__ void {name}_T({_params(f, which)}) {{'
    if col_in:  # a col input's gradient: per column, serial over rows (unb), or R == 1 as is
        t = _Lib(f, which, "col")
        kp = "".join(f"real_t rv_{k} = kp{j}[rw]; " for j, k in enumerate(f.keep))
        env = _env(t, f, {k: f"rv_{k}" for k in f.keep}, "d")
        term = fill(p.out[0], env)
        return "\n".join([
            head, "    TS_GRID_STRIDE(d, L) {",
            "        if (!reduce) {",
            f"            long long rw = 0; {kp}gx[d] = ADD(gx[d], RND({term}));",
            "        } else {",
            "            real_t acc = (real_t)0;",
            f"            for (long long rw = 0; rw < R; ++rw) {{ {kp}acc = ADD(acc, {term}); }}",
            "            gx[d] = ADD(gx[d], RND(acc));", "        }", "    }", "}"])
    if p.steps or (which == "fwd" and (f.total or f.out == "row")):
        t = _Lib(f, which, "row")
        lines = ["    TS_GRID_STRIDE(rw, R) {"]
        if f.axis is not None:
            lines.append("        long long base = (rw / inner) * L * inner + (rw % inner);")
        body = pass_lines(t, f, which,
                          stash=stash and which == "fwd" and not f.total and f.out == "elem")
        return "\n".join([head, *lines, *("        " + b for b in body), "    }", "}"])
    t = _Lib(f, which, "elem")
    w = "(L / 2)" if f.pair else "L"
    t.col_var = "c"
    body = pass_lines(t, f, which)
    uses = set(re.findall(r"\b(rw|c)\b", "\n".join(body)))
    if f.axis is not None:  # element e of [outer, L, inner]: its row is (outer, inner)
        assert "c" not in uses, "an elementwise pass over any axis reads its own element only"
        split = ["        long long rw = (e / (L * inner)) * inner + e % inner;"] if uses else []
    else:
        split = [f"        long long rw = e / {w}, c = e - rw * {w};"] if uses else []
    return "\n".join([head, f"    TS_GRID_STRIDE(e, R * {w}) {{", *split,
                      *("        " + b for b in body), "    }", "}"])


def _total(op: str) -> str:
    return "\n".join([
        f'extern "C" __global__ void {op}_total_T(const acc_t* rows, real_t* y, long long R, '
        "real_t rn) {",
        "    if (blockIdx.x == 0 && threadIdx.x == 0) {  /* y = serial_sum(rows) / T(R) */",
        "        real_t acc = (real_t)0;",
        "        for (long long r = 0; r < R; ++r) acc = ADD(acc, rows[r]);",
        "        y[0] = DIV(acc, rn);", "    }", "}"])


def library_kernels(stash: bool = True) -> str:
    """The row ops' kernels of ops_rows.cu, every pass of every form of the table.

    ``stash=False`` (half episodes): a forward never keeps its sum's term in the output, which
    would round the term to storage before the output reads it back; it recomputes it."""
    out = ["/* generated from the op table (core/ops, OpDef.row) by gpu/rowtable.py */"]
    for op in ROW_OPS:
        f = form(op)
        out.append(f"/* {op}: forward, then the gradient of each input */")
        for which, _ in f.passes():
            out.append(_kernel(op, f, which, stash))
        if f.total:
            out.append(_total(op))
    return "\n\n".join(out) + "\n"


def library_facts() -> dict[str, KernelFacts]:
    """What the host launcher needs of each kernel library_kernels writes (gpu.kernel_facts),
    by template name: a pass (``_kernel``) is one grid-stride loop over rows, elements or
    columns whose iterations share nothing and nothing outside it tells threads apart (LANES);
    a total (``_total``) is thread 0's serial sum (PLAIN)."""
    out = {}
    for op in ROW_OPS:
        f = form(op)
        names = kernel_names(op)
        for which, _ in f.passes():
            out[f"{names['fwd' if which == 'fwd' else f'bwd{which}']}_T"] = LANES
        if f.total:
            out[f"{names['total']}_T"] = PLAIN
    return out
