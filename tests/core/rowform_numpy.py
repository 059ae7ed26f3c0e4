"""A row form (core/optable/rows.py) evaluated in numpy, token by token: the oracle that holds an
op's numpy reference to its one C spelling.

Every token is one numpy operation on arrays of the tape dtype (ADD -> +, EXP -> M.exp, ...), a
sum step is the serial loop ``acc = +0.0; for c: acc = acc + term`` and a max step the C loop
(NaN propagates), so an op whose numpy lines round as its C form does agrees bit for bit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tapescope.core.optable.registry import norm_axis
from tapescope.core.optable.rows import RowForm

_TOKEN = re.compile(r"\s*(\(real_t\)|\{\w+\}|[A-Z][A-Z0-9]+(?=\()|\d+(?:\.\d+)?|==|!=|>=|<=|"
                    r"\|\||[-()?:,<>])")


def _tokens(text: str) -> list[str]:
    out, at = [], 0
    text = text.strip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None:
            raise ValueError(f"cannot read {text[at:]!r} in {text!r}")
        out.append(m.group(1))
        at = m.end()
    return out


class _Eval:
    """Recursive descent over the tokens, evaluating as it goes."""

    def __init__(self, toks: list[str], env: Mapping[str, Any], M: Any, dt: np.dtype) -> None:
        self.t, self.k, self.env, self.M, self.dt = toks, 0, env, M, dt

    def peek(self) -> str | None:
        return self.t[self.k] if self.k < len(self.t) else None

    def take(self, want: str | None = None) -> str:
        tok = self.t[self.k]
        if want is not None and tok != want:
            raise ValueError(f"expected {want!r}, got {tok!r}")
        self.k += 1
        return tok

    def expr(self) -> Any:
        c = self.cmp()
        if self.peek() == "?":
            self.take("?")
            a = self.expr()
            self.take(":")
            b = self.expr()
            return np.where(c, a, b)
        return c

    def cmp(self) -> Any:
        a = self.unary()
        op = self.peek()
        if op in ("==", "!=", ">", "<", ">=", "<="):
            self.take()
            b = self.unary()
            return {"==": np.equal, "!=": np.not_equal, ">": np.greater, "<": np.less,
                    ">=": np.greater_equal, "<=": np.less_equal}[op](a, b)
        return a

    def unary(self) -> Any:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        return self.primary()

    def primary(self) -> Any:
        tok = self.take()
        if tok == "(real_t)":
            return self.dt.type(float(self.take()))
        if tok.startswith("{"):
            return self.env[tok[1:-1]]
        if tok == "(":
            v = self.expr()
            self.take(")")
            return v
        if re.fullmatch(r"\d+(\.\d+)?", tok):
            return self.dt.type(float(tok))
        self.take("(")
        args = [self.expr()]
        while self.peek() == ",":
            self.take(",")
            args.append(self.expr())
        self.take(")")
        return self.call(tok, args)

    def call(self, name: str, args: list) -> Any:
        binary = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide}
        if name in binary:
            return binary[name](*args).astype(self.dt, copy=False)
        if name == "SQRT":
            return np.sqrt(args[0])
        return getattr(self.M, name.lower())(np.asarray(args[0], dtype=self.dt))


def evaluate(text: str, env: Mapping[str, Any], M: Any, dt: np.dtype) -> Any:
    """The value of one form expression over numpy operands."""
    e = _Eval(_tokens(text), env, M, np.dtype(dt))
    v = e.expr()
    if e.peek() is not None:
        raise ValueError(f"trailing {e.t[e.k:]} in {text!r}")
    return v


def _row_steps(steps, env: dict, M, dt, elems: dict) -> None:
    for s in steps:
        if s.kind == "let":
            env[s.name] = evaluate(s.expr, env, M, dt)
            continue
        e = np.broadcast_to(evaluate(s.expr, {**env, **elems}, M, dt), elems["_shape"])
        if s.kind == "sum":  # acc = +0.0; for c: acc = acc + e[c]
            acc = np.zeros(e.shape[0], dtype=dt)
            for c in range(e.shape[1]):
                acc = (acc + e[:, c]).astype(dt)
        else:  # the C loop: NaN propagates
            acc = e[:, 0].copy()
            for c in range(1, e.shape[1]):
                q = e[:, c]
                acc = np.where(np.isnan(q) | (q > acc), np.where(np.isnan(acc), acc, q), acc)
        env[s.name] = acc[:, None]


def run(form: RowForm, xs: list[np.ndarray], attrs: dict, M, g: np.ndarray | None = None,
        y: np.ndarray | None = None) -> tuple[np.ndarray, list]:
    """(forward value, backward contributions per input or None) of the form over ``xs``."""
    dt = np.dtype(next(x.dtype for x, (_, k) in zip(xs, form.ins, strict=True) if k == "row"))
    first = next(x for x, (_, k) in zip(xs, form.ins, strict=True) if k == "row")
    ax = norm_axis(attrs.get(form.axis, -1), first.ndim) if form.axis else first.ndim - 1

    def rows(a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, ax, -1).reshape(-1, a.shape[ax])

    def back(a: np.ndarray) -> np.ndarray:
        moved = np.moveaxis(first, ax, -1).shape
        return np.moveaxis(a.reshape(moved), -1, ax)

    W = first.shape[ax]
    R = first.size // W
    scal = {"n": dt.type(W), "R": dt.type(R)}
    scal.update({n: dt.type(fn(attrs)) for n, fn in form.scalars})
    elems: dict[str, Any] = {"_shape": (R, W)}
    for x, (n, k) in zip(xs, form.ins, strict=True):
        if k == "row":
            elems[n] = rows(x)
        elif k == "col":
            elems[n] = x.reshape(-1)
    for x, (n, k) in zip(xs, form.ins, strict=True):
        if k == "index":
            ti = x.reshape(-1).astype(np.int64)
            elems[f"is_{n}"] = np.arange(W)[None, :] == ti[:, None]
            for r in form.names("row"):
                elems[f"{r}_{n}"] = elems[r][np.arange(R), ti][:, None]
    if form.pair:
        h = W // 2
        for r in form.names("row"):
            elems[f"{r}1"], elems[f"{r}2"] = elems[r][:, :h], elems[r][:, h:]
        tabs = form.make_tables(first.shape, attrs, dt)
        for name, tab in zip(form.tables, tabs, strict=True):
            elems[name] = tab[np.arange(R) % tab.shape[0]]
    fenv: dict[str, Any] = dict(scal)
    _row_steps(form.fwd.steps, fenv, M, dt, elems)
    outs = [evaluate(t, {**fenv, **elems}, M, dt) for t in form.fwd.out]
    if form.total:
        acc = dt.type(0)
        for v in np.asarray(outs[0]).reshape(-1):
            acc = dt.type(acc + v)
        yv = np.asarray(acc / dt.type(R), dtype=dt)
    elif form.out == "row":  # one value per row: the shape without the row axis
        yv = np.broadcast_to(outs[0], (R, 1)).reshape(np.moveaxis(first, ax, -1).shape[:-1])
    else:
        yv = back(np.concatenate(outs, axis=-1) if form.pair else np.broadcast_to(outs[0], (R, W)))
    if g is None:
        return yv, []
    kept = {k: fenv[k] for k in form.keep}
    benv = dict(scal)
    benv.update(kept)
    el = dict(elems)
    y = yv if y is None else y
    if form.total:
        el["g"] = np.asarray(g, dtype=dt).reshape(())
    elif form.out == "row":
        el["g"], el["y"] = np.reshape(g, (R, 1)), np.reshape(y, (R, 1))
    else:
        el["g"], el["y"] = rows(g), rows(y)
        if form.pair:
            el["g1"], el["g2"] = el["g"][:, :W // 2], el["g"][:, W // 2:]
    grads: list = []
    for (_n, kind), p, x in zip(form.ins, form.bwd, xs, strict=True):
        if p is None:
            grads.append(None)
            continue
        env = dict(benv)
        _row_steps(p.steps, env, M, dt, el)
        env.update(el)
        for ln, le in p.lets:
            env[ln] = evaluate(le, env, M, dt)
        terms = [np.broadcast_to(evaluate(t, env, M, dt), (R, W // 2 if form.pair else W))
                 for t in p.out]
        c = np.concatenate(terms, axis=-1) if form.pair else terms[0]
        if kind == "col":  # unb over rows: serial from +0.0 unless the shapes agree
            if first.shape == x.shape:
                grads.append(c.reshape(x.shape))
            else:
                acc = np.zeros(W, dtype=dt)
                for r in range(R):
                    acc = (acc + c[r]).astype(dt)
                grads.append(acc.reshape(x.shape))
        else:
            grads.append(back(np.ascontiguousarray(c)))
    return yv, grads
