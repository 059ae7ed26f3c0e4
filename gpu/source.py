"""Kernel templates: one CUDA C source per family, instantiated per dtype by token substitution.

A template spells the element type `real_t`, names kernels and helpers with a `_T` suffix, and
writes every rounding operation as a macro-like call (`ADD(a, b)`, `MUL`, `DIV`, `SQRT`, ...)
and every transcendental as `EXP(x)`, `LOG(x)`, ... The substitution pass turns them into the
float64 (`__dadd_rn`, `ts_exp`, suffix `_f64`) or float32 (`__fadd_rn`, `ts_expf`, `_f32`)
spelling; under math="platform" the transcendentals become CUDA libm / glibc (`exp`, `expf`).
The expanded text is what both backends compile, so it is also what the tests read.

Half precision (float16 / bfloat16; docs/reference-order.md, "Half precision"): a `real_t` that
is pointed to (`real_t*`: a tensor in memory) becomes the storage type `ts_f16` / `ts_bf16`
(gpu/kernels/half.cuh), every other `real_t` (locals, arguments, returns) becomes `float`, the
operations are the float ones, and `RND(x)` rounds a register value to the storage type where
the tape rounds it (a backward contribution before it is added, a fused node's value); for
float64 / float32 `RND(x)` is `(x)`. `acc_t` is the compute type (float for the half types,
`real_t` otherwise): scratch and scalar buffers (an optimizer's scalars, a row op's kept row
values, per-row tables) that the tape keeps in float32.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from tapescope.core import precision
from tapescope.gpu.device import KERNEL_DIR
from tapescope.gpu.kernel_facts import LANES, PLAIN, Facts, KernelFacts, merge_facts

__all__ = ["instantiate", "instantiate_facts", "template", "template_facts", "library_source",
           "library_facts", "node_comment", "SUFFIX", "MATH_MODES", "LIBRARY", "TEMPLATE_FACTS"]

# SECURITY: generated source never carries text from a file (a node name once closed its comment
# with a backslash-newline splice and ran a shell command). A comment holds only node ids and op
# names from our own registry, and this whitelist is checked when the text is built.
_COMMENT_OK = re.compile(r"[A-Za-z0-9_./ >-]*")


def node_comment(node_id: int, *words: str) -> str:
    """``/* node <id> <words> */`` for generated source; ValueError on any other character."""
    text = " ".join(("node", str(int(node_id)), *words))
    if not _COMMENT_OK.fullmatch(text) or "*/" in text or "/*" in text:
        raise ValueError(f"generated source: refusing comment text {text!r} (node {node_id})")
    return f"/* {text} */"

SUFFIX = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", precision.FLOAT16: "f16",
          precision.BFLOAT16: "bf16"}
# the storage type a half template's `real_t*` becomes (gpu/kernels/half.cuh)
STORAGE = {precision.FLOAT16: "ts_f16", precision.BFLOAT16: "ts_bf16"}
MATH_MODES = ("refmath", "platform")

_COMMON = {
    np.dtype(np.float64): {
        "real_t": "double",
        "ADD": "__dadd_rn",
        "SUB": "__dsub_rn",
        "MUL": "__dmul_rn",
        "DIV": "__ddiv_rn",
        "SQRT": "__dsqrt_rn",
        "FMA_RN": "ts_fma_emul_d",
        "AS_BITS": "__double_as_longlong",
        "BITS_MIN": "(-9223372036854775807LL - 1)",
        "acc_t": "double",
        "RND": "",
    },
    np.dtype(np.float32): {
        "real_t": "float",
        "ADD": "__fadd_rn",
        "SUB": "__fsub_rn",
        "MUL": "__fmul_rn",
        "DIV": "__fdiv_rn",
        "SQRT": "__fsqrt_rn",
        "FMA_RN": "ts_fma_emul_f",
        "AS_BITS": "__float_as_int",
        "BITS_MIN": "(-2147483647LL - 1)",
        "acc_t": "float",
        "RND": "",
    },
}
for _dt, _st in STORAGE.items():  # stored in a half type, computed in float
    _COMMON[_dt] = {**_COMMON[np.dtype(np.float32)], "RND": f"ts_rnd_{SUFFIX[_dt]}"}
    del _COMMON[_dt]["AS_BITS"], _COMMON[_dt]["BITS_MIN"]  # no half bit-level kernels (diff)

# Transcendentals: refmath's C twins (core/refmath/refmath.cuh) or the platform libm. PEXP is
# always the platform exp: it spells core.mathlib's platform sigmoid 1 / (1 + exp(-x)).
TRANSCENDENTALS = ("EXP", "LOG", "TANH", "SIGMOID", "ERF", "EXPM1", "LOG1P")
_PLATFORM = {
    "f64": {"EXP": "exp", "LOG": "log", "TANH": "tanh", "ERF": "erf", "SIGMOID": "ts_psigmoid_T",
            "EXPM1": "expm1", "LOG1P": "log1p"},
    "f32": {"EXP": "expf", "LOG": "logf", "TANH": "tanhf", "ERF": "erff",
            "SIGMOID": "ts_psigmoid_T", "EXPM1": "expm1f", "LOG1P": "log1pf"},
}


def _math_table(math: str, sfx: str) -> dict[str, str]:
    """Spelling of each transcendental; a name core.refmath lacks falls back to the platform,
    exactly as core.mathlib does (so the tape and the kernels always call the same function)."""
    from tapescope.core import refmath

    plat = dict(_PLATFORM[sfx])
    plat["PEXP"] = "exp" if sfx == "f64" else "expf"
    if math == "platform":
        return plat
    out = dict(plat)
    for t in TRANSCENDENTALS:
        if hasattr(refmath, t.lower()):
            out[t] = f"ts_{t.lower()}" + ("" if sfx == "f64" else "f")
    return out


@lru_cache(maxsize=64)
def template(name: str, half: bool = False) -> str:
    """The text of gpu/kernels/<name>.cu, with the op table's generated code spliced in (for a
    half dtype: the row kernels without the stash, gpu.rowtable.library_kernels)."""
    text = (KERNEL_DIR / f"{name}.cu").read_text()
    from tapescope.gpu import optable, rowtable  # lazily: they import every op of core.ops

    if optable.MARK in text:
        text = text.replace(optable.MARK, optable.library_switches())
    if rowtable.MARK in text:
        text = text.replace(rowtable.MARK, rowtable.library_kernels(stash=not half))
    if name == "ops_rows":
        text += _acc_output_twin(text, "mm")
    return text


def _acc_output_twin(text: str, kernel: str) -> str:
    """Kernel ``<kernel>_T`` of ``text`` once more as ``<kernel>_acc_T``, its output ``y`` in
    the compute type (``acc_t*``) and stored unrounded: in a half episode the products the
    reference keeps in float32 (conv2d's per-image weight products before their batch sum, its
    input-gradient columns before col2im: docs/reference-order-nn.md, "Half precision"); for
    float64 / float32 the same kernel under another name. The one text is copied, not written
    twice, so the two cannot drift; ValueError if the text no longer has what is replaced."""
    head = f'extern "C" __global__ void {kernel}_T('
    start = text.find(head)
    if start < 0:
        raise ValueError(f"kernel template: no {kernel}_T to copy")
    depth, end = 0, -1
    for i in range(text.index("{", start), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            end = i + 1
            break
    body = text[start:end]
    swaps = ((f"void {kernel}_T(", f"void {kernel}_acc_T("), ("real_t* y,", "acc_t* y,"),
             ("real_t* yo =", "acc_t* yo ="))
    for old, new in swaps:
        if body.count(old) != 1:
            raise ValueError(f"kernel template {kernel}_T: expected one {old!r}")
        body = body.replace(old, new)
    return f"\n/* {kernel}_acc_T: {kernel}_T with y in the compute type (gpu/source.py) */\n" \
        + body + "\n"


# What each hand-written template's kernels are (gpu.kernel_facts): a lane kernel strides its
# work with TS_GRID_STRIDE / TS_BLOCK_STRIDE only; PLAIN ones tell threads apart otherwise (one
# thread by index, an argmax loop that breaks, the diff's per-thread partials). None has a
# barrier or __shared__ memory. The row ops' kernels of ops_rows.cu state their own
# (gpu.rowtable.library_facts). tests/gpu/test_kernel_facts.py holds this table to the text.
def _lanes(*names: str) -> dict[str, KernelFacts]:
    return {f"{n}_T": LANES for n in names}


TEMPLATE_FACTS: dict[str, dict[str, KernelFacts]] = {
    "ops_elementwise": _lanes("binary_fwd", "binary_bwd", "unary_fwd", "unary_bwd", "gather",
                              "scatter", "copy", "gather_add", "add_into", "take", "take_bwd"),
    "ops_rows": _lanes("reduce_fwd", "reduce_bwd", "mm", "mm_acc"),
    "ops_nn": {**_lanes("maxpool_bwd", "avgpool_fwd", "avgpool_scale", "im2col", "col2im",
                        "batch_sum_add"), "maxpool_fwd_T": PLAIN},
    "optim": {**_lanes("fill", "fill_from", "zero_many", "sgd", "adam", "amp_adam", "amp_sgd",
                       "sgdm", "adamw", "amp_sgdm", "amp_adamw"),
              "clip_norm_T": PLAIN, "amp_check_T": PLAIN},
    "diff": {"diff_partial_T": PLAIN, "diff_combine_T": PLAIN},
}


def template_facts(name: str) -> dict[str, KernelFacts]:
    """The facts of template ``name``'s kernels (template-token names), the generated row
    kernels spliced into it included."""
    from tapescope.gpu import rowtable  # lazily, as template(): it imports every op of core.ops

    parts = [TEMPLATE_FACTS[name]]
    if rowtable.MARK in (KERNEL_DIR / f"{name}.cu").read_text():
        parts.append(rowtable.library_facts())
    return merge_facts(parts)


def instantiate(text: str, dtype: np.dtype | type, math: str = "refmath") -> str:
    """Expand a template for one dtype (float64 / float32 / float16 / bfloat16) and math mode."""
    dt = np.dtype(dtype)
    if dt not in SUFFIX:
        raise TypeError(f"kernel templates support float64, float32, float16 and bfloat16, "
                        f"not {dt}")
    if math not in MATH_MODES:
        raise ValueError(f"math must be one of {MATH_MODES}, not {math!r}")
    sfx = SUFFIX[dt]
    table = dict(_COMMON[dt])
    table.update(_math_table(math, "f32" if dt in STORAGE else sfx))
    if dt in STORAGE:  # a pointed-to real_t is memory: the storage type (module docstring)
        text = re.sub(r"\breal_t(?=\s*\*)", STORAGE[dt], text)
    words = sorted(table, key=len, reverse=True)
    pat = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b")
    out = pat.sub(lambda m: table[m.group(1)], text)
    # Kernel and helper names: foo_T -> foo_f64 / foo_f32.
    return re.sub(r"\b(\w+?)_T\b", rf"\1_{sfx}", out)


def instantiate_facts(facts: Facts, dtype: np.dtype | type) -> dict[str, KernelFacts]:
    """Template-token kernel names (``foo_T``) of ``facts`` as ``instantiate`` spells them for
    ``dtype`` (``foo_f64``)."""
    sfx = SUFFIX[np.dtype(dtype)]
    out = {}
    for name, f in facts.items():
        if not name.endswith("_T"):
            raise ValueError(f"kernel facts: {name!r} is not a template name (foo_T)")
        out[f"{name[:-2]}_{sfx}"] = f
    return out


LIBRARY = ("ops_elementwise", "ops_rows", "ops_nn", "optim")


def library_source(math: str = "refmath", dtypes: tuple = (np.float64, np.float32)) -> str:
    """The whole kernel library (float64 and float32, or the given dtypes) for one math mode,
    as both backends compile it."""
    parts = ['#include "refmath.cuh"\n']
    if any(np.dtype(d) in STORAGE for d in dtypes):
        parts.append('#include "half.cuh"\n')
    for name in LIBRARY:
        for dt in dtypes:
            parts.append(f"/* ---- {name}.cu, {np.dtype(dt).name} ---- */\n")
            parts.append(instantiate(template(name, np.dtype(dt) in STORAGE), dt, math))
    return "\n".join(parts)


def library_facts(dtypes: tuple = (np.float64, np.float32)) -> dict[str, KernelFacts]:
    """The facts of every kernel of library_source for ``dtypes`` (the same names in both math
    modes)."""
    return dict(_library_facts(tuple(np.dtype(d) for d in dtypes)))


@lru_cache(maxsize=8)
def _library_facts(dtypes: tuple) -> dict[str, KernelFacts]:  # read-only: copies go out
    return merge_facts(instantiate_facts(template_facts(name), dt)
                       for name in LIBRARY for dt in dtypes)
