"""The op table is complete: every op has every target, and each target is rendered from it.

One test per promise of the table (core/optable/registry.py ``OpDef``; gpu/optable.py renders the
C targets): a new op that lacks a kernel, a fusion rule, an emitc rule, a reference-order row, a
grad-check sample or its C form fails here by name, before any parity test runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tapescope.core.ops import REGISTRY
from tapescope.gpu import optable
from tapescope.gpu.emitc import C_OPS, NO_C_RULE
from tapescope.gpu.fusion.analysis import BINARY, HAND_FUSED, ROW, UNARY
from tapescope.gpu.library import KERNELS, LEAF
from tapescope.gpu.source import TRANSCENDENTALS, library_source, template

DOCS = Path(__file__).resolve().parents[2] / "docs"
OPS = [n for n, d in REGISTRY.items() if d.kind != "leaf"]


def _doc_ops() -> set[str]:
    """The op names in the first column of the reference-order tables."""
    names: set[str] = set()
    for page in ("reference-order.md", "reference-order-nn.md"):
        for line in (DOCS / page).read_text().splitlines():
            m = re.match(r"\| ([a-z_0-9, ]+?)(\(| \||$)", line)
            if m:
                names.update(w.strip() for w in m.group(1).split(","))
    return names


def test_every_op_has_every_target():
    missing = []
    doc_ops = _doc_ops()
    for name in OPS:
        d = REGISTRY[name]
        want = {
            "shape/forward/backward": d.shape and d.forward and d.backward,
            "grad-check sample": d.sample and d.sample(np.random.default_rng(0),
                                                       np.dtype(np.float64)),
            "kernels (gpu/library*.py)": name in KERNELS and KERNELS[name].fwd != LEAF,
            "fusion rule (C form, row form or analysis.HAND_FUSED)": d.fusion == "none"
            or name in BINARY or name in UNARY or name in ROW or name in HAND_FUSED,
            "emitc rule (C form, C_OPS or emitc.NO_C_RULE)": name in C_OPS or name in NO_C_RULE,
            "a row in docs/reference-order*.md": name in doc_ops,
            "a C form (every unary is one line of C)": d.kind != "unary" or d.c is not None,
        }
        missing += [f"{name}: {what}" for what, ok in want.items() if not ok]
    assert not missing, "ops lacking a target:\n" + "\n".join(missing)


def test_table_ops_reach_every_generated_target():
    src = library_source()
    for name, d in REGISTRY.items():
        if d.c is None:
            continue
        assert name in optable.UNARY_CODES or name in optable.BINARY_CODES, name
        assert len(d.c.bwd) == d.arity, f"{name}: one backward term per input"
        code = optable.UNARY_CODES.get(name, optable.BINARY_CODES.get(name))
        assert f"case {code}:" in src, name
        if d.fusion == "row_local":
            assert name in UNARY or name in BINARY, f"{name}: never fuses"
        assert name in C_OPS, f"{name}: no emitc rule"


def test_row_ops_reach_every_generated_target():
    """An op with a row form gets its library kernels, its fusion, its emitc rule, all rendered."""
    from tapescope.gpu import rowtable
    from tapescope.gpu.fusion.analysis import ROW

    src = library_source()
    gen = rowtable.library_kernels()
    assert gen in template("ops_rows") and rowtable.MARK not in template("ops_rows")
    for name, d in REGISTRY.items():
        if d.row is None:
            continue
        assert name in rowtable.ROW_OPS
        for kernel in rowtable.kernel_names(name).values():
            assert f" {kernel}_f64(" in src and f" {kernel}_f32(" in src, kernel
        if d.fusion == "row_local" and not d.row.total:
            assert name in ROW, f"{name}: never fuses"
        assert (name in C_OPS) != (name in NO_C_RULE), name
        text = " ".join(e for _, p in d.row.passes()
                        for e in (*p.out, *(s.expr for s in p.steps), *(x for _, x in p.lets)))
        calls = {t for t in TRANSCENDENTALS if re.search(rf"\b{t}\(", text)}
        assert bool(calls) == d.transcendental, f"{name}: transcendental={d.transcendental}"


def test_transcendental_flag_matches_the_c_form():
    for name, d in REGISTRY.items():
        if d.c is None:
            continue
        text = " ".join((d.c.fwd, *d.c.bwd, *(e for _, e in d.c.lets)))
        calls = {t for t in TRANSCENDENTALS if re.search(rf"\b{t}\(", text)}
        assert bool(calls) == d.transcendental, f"{name}: transcendental={d.transcendental}, " \
            f"its C form calls {sorted(calls) or 'none'}"


def test_c_forms_use_only_their_placeholders():
    for name, d in REGISTRY.items():
        if d.c is None:
            continue
        allowed = ({"a", "b"} if d.arity == 2 else {"x"}) | {"y", "g"} | {n for n, _ in d.c.lets}
        if d.c.scalar is not None:
            allowed.add("s")
        for text in (d.c.fwd, *d.c.bwd, *(e for _, e in d.c.lets)):
            holes = set(re.findall(r"\{(\w+)\}", text))
            assert holes <= allowed, f"{name}: {text!r} uses {holes - allowed}"
            assert "{" not in re.sub(r"\{\w+\}", "", text), f"{name}: a stray brace in {text!r}"


def test_generated_switches_replace_the_mark_and_hold_only_table_text():
    text = template("ops_elementwise")
    assert optable.MARK not in text
    gen = optable.library_switches()
    assert gen in text
    assert "{" not in re.sub(r"[{}]", "", gen) and not re.search(r"\{[a-z]\w*\}", gen)
    # one case per code, in both switches of each family
    assert gen.count("case ") == 2 * (len(optable.UNARY_CODES) + len(optable.BINARY_CODES))


def test_onnx_mapping_of_the_table_is_what_the_importer_uses():
    from tapescope.core.onnx.importer import CONVERTERS

    for name, d in REGISTRY.items():
        for onnx_op in d.onnx:
            assert onnx_op in CONVERTERS, f"{name}: ONNX {onnx_op} has no converter"


def test_golden_snippets_of_the_rendered_targets():
    """The one spelling, as each target prints it (template tokens; emitc after expansion)."""
    from tapescope.core import Tape, ops
    from tapescope.gpu.emitc import emit

    gen = optable.library_switches()
    k = optable.UNARY_CODES["sigmoid"]
    assert f"case {k}: return MUL(g, MUL(y, SUB((real_t)1, y)));" in gen
    k = optable.UNARY_CODES["silu"]
    assert (f"case {k}: {{ real_t sg = SIGMOID(x); return MUL(g, MUL(sg, ADD((real_t)1, "
            "MUL(x, SUB((real_t)1, sg))))); }") in gen
    k = optable.BINARY_CODES["div"]
    assert f"case {k}: return which == 0 ? DIV(g, b) : (-(DIV(MUL(g, y), b)));" in gen
    t = Tape()
    x = t.param(np.array(0.5))
    src = emit(t, ops.sigmoid(x))
    assert "__dmul_rn(g1, __dmul_rn(t1, __dsub_rn((double)1, t1)))" in src


def test_reference_order_rows_name_what_the_c_form_calls():
    """The contract's row of a table op names every transcendental its one C spelling calls
    (a row that says exp where the kernels call expm1 is a contract the code does not keep)."""
    rows = {}
    for page in ("reference-order.md", "reference-order-nn.md"):
        for line in (DOCS / page).read_text().splitlines():
            m = re.match(r"\| ([a-z_0-9]+)[ (]", line)
            if m:
                rows[m.group(1)] = line
    for name, d in REGISTRY.items():
        if d.c is None:
            continue
        text = " ".join((d.c.fwd, *d.c.bwd, *(e for _, e in d.c.lets)))
        for t in TRANSCENDENTALS:
            if re.search(rf"\b{t}\(", text):
                assert re.search(rf"\b{t.lower()}\b", rows[name]), f"{name}: {t.lower()}"


ROOT = Path(__file__).resolve().parents[2]
# demo data: the synthetic graph the GUI shows without a tape names ops as any tape would
DEMO = {"views/models/synthetic.py"}


def test_no_code_below_the_table_names_a_row_op():
    """Every row op is rendered from the table (core.optable.rows): no file of gpu/, app/ or
    views/ (demo data aside) names one, so adding a row op touches the table, its docs row
    and tests only (issue 24)."""
    from tapescope.gpu.rowtable import ROW_OPS

    # the row ops, and silu (issue 24's list: an elementwise CForm since)
    names = set(ROW_OPS) | {n for n, d in REGISTRY.items() if d.kind == "rowwise"} | {"silu"}
    assert {"softmax", "rms_norm", "layer_norm", "cross_entropy", "swiglu", "rope"} <= names
    word = re.compile(r"\b(" + "|".join(sorted(names)) + r")\b")
    bad = []
    for pkg in ("gpu", "app", "views"):
        for p in sorted((ROOT / pkg).rglob("*")):
            rel = p.relative_to(ROOT).as_posix()
            if p.suffix not in (".py", ".cu", ".cuh", ".h") or rel in DEMO:
                continue
            for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if m := word.search(line):
                    bad.append(f"{rel}:{k}: {m.group(1)}")
    assert not bad, "\n".join(bad)
