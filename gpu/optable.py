"""Every C target of the elementwise ops, rendered from the op table's one spelling (``OpDef.c``).

An op with a ``CForm`` (core/optable/registry.py) gets, with no other edit: its case in the kernel
library's switches (``ts_bin_T``/``ts_bin_term_T``, ``ts_un_T``/``ts_un_term_T``, spliced into
gpu/kernels/ops_elementwise.cu at build time), its integer code, its kernels (gpu/library.py),
its place in the fusion op sets (gpu/fusion/analysis.py), its fused-kernel expressions
(gpu/fusion/codegen.py) and its emitc rule (gpu/emitc.py). Binaries broadcast (``unb``); unaries
read one operand of the output's shape and an optional host scalar ``{s}``.

SECURITY: the generated text holds only strings written in our own table (core/ops), never text
from a file (no node name, no attribute value: a scalar enters as a literal or a kernel argument).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import tapescope.core.ops  # noqa: F401  (every op registered, so the codes cover the whole table)
from tapescope.core.optable.registry import REGISTRY, CForm

__all__ = ["BINARY", "UNARY", "BINARY_CODES", "UNARY_CODES", "MARK", "cform", "render",
           "scalar_of", "library_switches"]

# the line of ops_elementwise.cu that the generated switches replace
MARK = "/* @@OP_TABLE_SWITCHES@@ */"

BINARY = tuple(n for n, d in REGISTRY.items() if d.c is not None and d.arity == 2)
UNARY = tuple(n for n, d in REGISTRY.items() if d.c is not None and d.arity == 1)
BINARY_CODES = {n: k for k, n in enumerate(BINARY)}
UNARY_CODES = {n: k for k, n in enumerate(UNARY)}

_HOLE = re.compile(r"\{(\w+)\}")
_ATOM = re.compile(r"[\w.]+(\[[^\[\]]*\])?")


def cform(op: str) -> CForm:
    """The op's C spelling; KeyError naming the op when it has none."""
    c = REGISTRY[op].c
    if c is None:
        raise KeyError(f"op {op!r} has no C form in the op table")
    return c


def scalar_of(op: str, attrs: Mapping[str, Any]) -> float:
    """The host scalar ``{s}`` of a node of ``op`` (0.0 when the op has none)."""
    f = cform(op).scalar
    return 0.0 if f is None else float(f(attrs))


def _fill(text: str, env: Mapping[str, str]) -> str:
    return _HOLE.sub(lambda m: env[m.group(1)], text)


def _wrapped(text: str) -> bool:
    """The text is one call, one atom or one parenthesised group: safe as an operand."""
    if _ATOM.fullmatch(text):
        return True
    start = text.find("(")
    if start < 0 or not text.endswith(")") or not re.fullmatch(r"\w*", text[:start]):
        return False
    depth = 0
    for i, ch in enumerate(text[start:], start):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i == len(text) - 1
    return False


def render(op: str, term: str | int, env: Mapping[str, str],
           bind: Callable[[str, str], str]) -> str:
    """C text of ``op``'s forward (``term="fwd"``) or its contribution to input ``term``.

    ``env`` spells the operands (a, b / x, y, g, s); ``bind(name, expr)`` declares a let of the
    table and returns the C name to use for it (a temporary, a local).
    """
    c = cform(op)
    text = c.fwd if term == "fwd" else c.bwd[int(term)]
    need = set(_HOLE.findall(text))
    for name, expr in reversed(c.lets):
        if name in need:
            need |= set(_HOLE.findall(expr))
    env = dict(env)
    for name, expr in c.lets:
        if name in need:
            env[name] = bind(name, _fill(expr, env))
    out = _fill(text, env)
    return out if _wrapped(out) else f"({out})"


def _case(op: str, term: str | int, env: Mapping[str, str]) -> str:
    lets: list[str] = []

    def bind(name: str, expr: str) -> str:
        lets.append(f"real_t {name} = {expr};")
        return name

    expr = render(op, term, env, bind)
    return f"{{ {' '.join(lets)} return {expr}; }}" if lets else f"return {expr};"


def library_switches() -> str:
    """The four switch functions of ops_elementwise.cu, one case per op of the table."""
    out = ["/* generated from the op table (core/ops, OpDef.c) by gpu/optable.py */",
           "/* binary codes: " + " ".join(f"{k} {n}" for n, k in BINARY_CODES.items()) + " */",
           "__device__ __forceinline__ real_t ts_bin_T(long long op, real_t a, real_t b) {",
           "    switch (op) {"]
    ab = {"a": "a", "b": "b", "y": "y", "g": "g"}
    for n, k in BINARY_CODES.items():
        out.append(f"        case {k}: {_case(n, 'fwd', ab)}")
    out += ["        default: return a; /* unreachable: codes come from the same table */",
            "    }", "}", "",
            "/* The contribution of output position (a, b, y, g) to input `which` before unb. */",
            "__device__ __forceinline__ real_t ts_bin_term_T(long long op, long long which, "
            "real_t a,", "                                                 real_t b, real_t y, "
            "real_t g) {", "    switch (op) {"]
    for n, k in BINARY_CODES.items():
        t0, t1 = render(n, 0, ab, _no_let), render(n, 1, ab, _no_let)
        out.append(f"        case {k}: return which == 0 ? {t0} : {t1};")
    out += ["        default: return g;", "    }", "}", "",
            "/* unary codes: " + " ".join(f"{k} {n}" for n, k in UNARY_CODES.items()) + " */",
            "__device__ __forceinline__ real_t ts_un_T(long long op, real_t x, real_t s) {",
            "    switch (op) {"]
    xs = {"x": "x", "y": "y", "g": "g", "s": "s"}
    for n, k in UNARY_CODES.items():
        out.append(f"        case {k}: {_case(n, 'fwd', xs)}")
    out += ["        default: return x;", "    }", "}", "",
            "__device__ __forceinline__ real_t ts_un_term_T(long long op, real_t x, real_t y, "
            "real_t g,", "                                                real_t s) {",
            "    switch (op) {"]
    for n, k in UNARY_CODES.items():
        out.append(f"        case {k}: {_case(n, 0, xs)}")
    out += ["        default: return g;", "    }", "}"]
    return "\n".join(out) + "\n"


def _no_let(name: str, expr: str) -> str:
    return f"({expr})"
