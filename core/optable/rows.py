"""A row op's ONE C spelling (``OpDef.row``): its loop over a row of W columns, in kernel tokens.

A row op (softmax, rms_norm, rope, cross_entropy, ...) reads a row of its input, reduces it to a
few row values (serial sums from +0.0 in column order, a row max), then writes each column.
``RowForm`` holds exactly that, once; gpu/rowtable.py renders every C target from it (the kernel
library, the fused row segments, the serial loss tail, emitc) and ``doc_row`` the op's row of
docs/reference-order.md. The numpy forward/backward of the ``OpDef`` stay the semantic reference;
tests/core/test_row_forms.py evaluates this form in numpy and holds the two bit for bit.

Expressions use the tokens of gpu/source.py (``ADD``, ``MUL``, ``EXP``, ``(real_t)1``, ...) and
placeholders in braces:

- an input's name (``{x}``, ``{gamma}``): a ``row`` input at the current column, a ``col`` input
  (one value per column, e.g. a [W] weight) at the current column;
- ``{y}`` the output and ``{g}`` its gradient at the current column (a ``total`` op: the loss's
  one gradient value; an ``out="row"`` op: its row's one value);
- a step's or a kept value's name: a row value;
- ``{n}`` the row length T(W), ``{R}`` the row count T(R) (a ``total`` op), and each name of
  ``scalars`` (a host scalar rounded once to T);
- an ``index`` input ``t`` (one integer per row, e.g. class targets): ``{x_t}`` is row input
  ``x`` at column t, ``{is_t}`` tells whether the current column is t;
- a ``pair`` form computes columns c and c + W/2 together: ``{x1}``, ``{x2}`` (and ``{g1}``,
  ``{g2}``) are the two halves, ``out`` has one term per half; each of ``tables`` is a host table
  [P, W/2] (``make_tables``; P = the shape's axis -2) read at (row % P, c);
- ``out="row"``: a reduction with one output per row (log_sum_exp): the output is the input's
  shape without the row axis, the forward's one term is a row value (row values, host scalars,
  ``{x_t}``; no column element), and a backward term reads ``{y}``, ``{g}`` as the row's one
  value.

SECURITY: this text is written in our own table only; generated kernels never carry file text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

STEP_KINDS = ("max", "sum", "let")
IN_KINDS = ("row", "col", "index")
OUT_KINDS = ("elem", "row")  # one output per element of the row, or one per row

_HOLE = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Step:
    """A row value: ``max``/``sum`` of an element term over the row's columns (the serial order:
    ``acc = +0.0; for c: acc = acc + term``; max: NaN propagates), or ``let``, an expression of
    row values."""

    name: str
    kind: str
    expr: str


@dataclass(frozen=True)
class RowPass:
    """One kernel's row loop: row values first (``steps``, in order), then per column: ``lets``
    (element subexpressions bound once) and ``out`` (the output, or the gradient contribution to
    one input before its reduction over rows)."""

    out: tuple[str, ...]
    steps: tuple[Step, ...] = ()
    lets: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RowForm:
    """A row op's loop, forward and backward (one pass per input; None: no gradient)."""

    ins: tuple[tuple[str, str], ...]  # (placeholder, "row" | "col" | "index") per input
    fwd: RowPass
    bwd: tuple[RowPass | None, ...]
    keep: tuple[str, ...] = ()  # forward row values stored once per row for the backward
    scalars: tuple[tuple[str, Callable[[Mapping[str, Any]], float]], ...] = ()
    axis: str | None = None  # the attribute naming the row axis (default -1); None: last axis
    total: bool = False  # fwd.out is one value per row; y = serial_sum(over rows) / T(R)
    pair: bool = False
    tables: tuple[str, ...] = ()
    make_tables: Callable[..., tuple] | None = None  # (shape, attrs, dtype) -> arrays [P, W/2]
    out: str = "elem"  # "row": one output per row, the shape without the row axis (a reduction)

    def names(self, kind: str) -> tuple[str, ...]:
        """The input placeholders of one kind, in input order."""
        return tuple(n for n, k in self.ins if k == kind)

    def passes(self) -> list[tuple[str | int, RowPass]]:
        """("fwd", pass) then (k, pass) for each input with a gradient."""
        return [("fwd", self.fwd)] + [(k, p) for k, p in enumerate(self.bwd) if p is not None]


def holes(text: str) -> set[str]:
    """The placeholder names an expression uses."""
    return set(_HOLE.findall(text))


def fill(text: str, env: Mapping[str, str]) -> str:
    """Substitute every placeholder (KeyError naming a missing one)."""
    return _HOLE.sub(lambda m: env[m.group(1)], text)


def element_holes(form: RowForm, which: str | int) -> set[str]:
    """The placeholders a term of pass ``which`` may use at a column (not row values)."""
    rows, cols, idx = form.names("row"), form.names("col"), form.names("index")
    out = set(cols) | {"n", "g", *(n for n, _ in form.scalars)}
    if form.pair:
        out |= {f"{r}{h}" for r in rows for h in "12"} | {"g1", "g2"} | set(form.tables)
    else:
        out |= set(rows)
    out |= {f"{r}_{t}" for r in rows for t in idx} | {f"is_{t}" for t in idx}
    if form.total:
        out.add("R")
    if which != "fwd":
        out.add("y")
    return out


def check(name: str, form: RowForm, arity: int | None) -> None:
    """ValueError when the form is not one every renderer can take (checked at registration)."""
    def bad(what: str) -> ValueError:
        return ValueError(f"op {name!r} row form: {what}")

    if arity != len(form.ins) or len(form.bwd) != len(form.ins):
        raise bad("one input kind and one backward pass per input")
    for n, k in form.ins:
        if k not in IN_KINDS or not n.isidentifier():
            raise bad(f"input {n!r} kind {k!r}")
    if not form.names("row"):
        raise bad("needs a row input")
    for k, (n, kind) in enumerate(form.ins):
        if (kind == "index") != (form.bwd[k] is None):
            raise bad(f"input {n!r}: an index input, and only it, has no backward pass")
    if form.pair and (form.keep or form.names("col") or form.total
                      or any(p.steps for _, p in form.passes())):
        raise bad("a pair form is elementwise over half rows: no steps, kept values, col inputs")
    if form.pair != bool(form.tables) or bool(form.tables) != (form.make_tables is not None):
        raise bad("tables come with a pair form and make_tables")
    if form.out not in OUT_KINDS:
        raise bad(f"out {form.out!r} is not one of {OUT_KINDS}")
    if form.out == "row" and (form.pair or form.total or form.names("col")):
        raise bad('a form with one output per row (out="row") has no pair, total or col input')
    if form.axis is not None and (form.names("col") or form.names("index") or form.total
                                  or any(not p.steps for _, p in form.passes()
                                         if form.out == "elem")):
        raise bad("a form over any axis (axis=...) reads row inputs only, each pass with steps "
                  '(out="row": its backward passes may be elementwise)')
    fwd_rows = {s.name for s in form.fwd.steps}
    if not set(form.keep) <= fwd_rows:
        raise bad(f"kept values {form.keep} are not all forward steps")
    for which, p in form.passes():
        want = 2 if form.pair else 1
        if len(p.out) != want:
            raise bad(f"pass {which}: {want} output term(s)")
        elem = element_holes(form, which)
        out_elem = elem
        if which == "fwd" and form.out == "row":  # the row's one value: no column element
            out_elem = {"n", *(n for n, _ in form.scalars),
                        *(f"{r}_{t}" for r in form.names("row") for t in form.names("index"))}
            if p.lets:
                raise bad('an out="row" forward has no per-column lets')
        rowvals = set(form.keep) if which != "fwd" else set()
        if which != "fwd" and form.ins[int(which)][1] == "col" and (p.steps or p.lets):
            raise bad(f"pass {which}: a col input's gradient is a term summed over rows")
        for s in p.steps:
            if s.kind not in STEP_KINDS or not s.name.isidentifier():
                raise bad(f"step {s.name!r} kind {s.kind!r}")
            allowed = rowvals | {"n", "R", *(n for n, _ in form.scalars)}
            if s.kind != "let":
                allowed |= elem - {"y"} if which == "fwd" else elem
            if not holes(s.expr) <= allowed:
                raise bad(f"step {s.name!r} uses {sorted(holes(s.expr) - allowed)}")
            rowvals.add(s.name)
        lets = set()
        for ln, le in p.lets:
            if not holes(le) <= elem | rowvals | lets:
                raise bad(f"let {ln!r} uses {sorted(holes(le) - elem - rowvals - lets)}")
            lets.add(ln)
        for t in p.out:
            extra = holes(t) - out_elem - rowvals - lets
            if extra:
                raise bad(f"pass {which}: {t!r} uses {sorted(extra)}")


# ---- the docs row: the same form, written as infix ----------------------------------------------
_CALL = re.compile(r"([A-Z][A-Z0-9]+)\(")
_INFIX = {"ADD": "+", "SUB": "-", "MUL": "*", "DIV": "/"}


def _split_args(text: str, start: int) -> tuple[list[str], int]:
    """Comma-separated arguments of the call whose '(' is at ``start``; and the index after ')'."""
    depth, args, cur = 0, [], start + 1
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(text[cur:i].strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(text[cur:i].strip())
            cur = i + 1
    raise ValueError(f"unbalanced parentheses in {text!r}")


def infix(expr: str, names: Mapping[str, str] | None = None, top: bool = True) -> str:
    """``MUL(ADD({x}, (real_t)1), {r})`` as ``(x + 1) * r``: the docs' spelling of a term."""
    names = names or {}
    text = expr.strip()
    m = _CALL.match(text)
    if m and _split_args(text, m.end() - 1)[1] == len(text):
        args, _ = _split_args(text, m.end() - 1)
        op = m.group(1)
        if op in _INFIX:
            out = f"{infix(args[0], names, False)} {_INFIX[op]} {infix(args[1], names, False)}"
            return out if top else f"({out})"
        return f"{op.lower()}({', '.join(infix(a, names) for a in args)})"
    text = re.sub(r"\(real_t\)(\d+)", r"\1", text)
    out = _HOLE.sub(lambda h: names.get(h.group(1), h.group(1)), text)
    calls = list(_CALL.finditer(out))
    for c in reversed(calls):  # calls inside a ternary or a comparison
        args, end = _split_args(out, c.end() - 1)
        out = out[:c.start()] + infix(out[c.start():end], names, top=False) + out[end:]
    simple = re.fullmatch(r"-?[\w.\[\]]+(\([\w.]*\))?", out) or (
        out.startswith("(") and out.endswith(")"))
    return out if top or simple else f"({out})"


def _doc_names(form: RowForm) -> dict[str, str]:
    names = {f"{r}_{t}": f"{r}[{t}]" for r in form.names("row") for t in form.names("index")}
    names.update({f"is_{t}": f"column == {t}" for t in form.names("index")})
    names.update({"n": "T(n)", "R": "T(R)"})
    names.update({s: f"T({s})" for s, _ in form.scalars})
    return names


def _doc_pass(form: RowForm, p: RowPass, targets: tuple[str, ...], reduce_rows: bool) -> str:
    names = _doc_names(form)
    parts = []
    for s in p.steps:
        e = infix(s.expr, names)
        parts.append(f"`{s.name} = {'serial_sum' if s.kind == 'sum' else s.kind}({e})`"
                     if s.kind != "let" else f"`{s.name} = {e}`")
    parts += [f"`{n} = {infix(e, names)}`" for n, e in p.lets]
    for t, e in zip(targets, p.out, strict=True):
        e = infix(e, names)
        parts.append(f"`{t} = unb({e})` (serial over rows)" if reduce_rows else f"`{t} = {e}`")
    return "; ".join(parts)


def doc_row(name: str, form: RowForm) -> tuple[str, str]:
    """The forward and backward cells of the op's row in docs/reference-order*.md."""
    fwd_t = ("y1", "y2") if form.pair else ("l",) if form.total else ("y",)
    fwd = _doc_pass(form, form.fwd, fwd_t, False)
    if form.total:
        fwd = f"per row: {fwd}; `y = serial_sum(l over rows) / T(R)`"
    elif form.out == "row":
        fwd = f"per row (one `y` per row): {fwd}"
    bwd = []
    for (n, kind), p in zip(form.ins, form.bwd, strict=True):
        if p is None:
            continue
        t = (f"g{n}1", f"g{n}2") if form.pair else (f"g{n}",)
        bwd.append(_doc_pass(form, p, t, kind == "col"))
    return fwd, "; ".join(bwd)
