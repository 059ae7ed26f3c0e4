"""ONNX's backend node tests through the tape import (core.onnx.tape_conformance): forward values
against the suite's expected outputs and bit for bit against the executor, gradients against
finite differences; docs/onnx-coverage.md's tape-import columns and section are this run's.

The whole node suite runs here (about 3 CPU s past the ~5 s the onnx package takes to build its
node tests; ``python -m tapescope.core.onnx.tape_conformance`` prints the same totals and CPU time).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from tapescope.core.onnx import tape_conformance as tc
from tapescope.core.ops import REGISTRY

DOC = Path(__file__).resolve().parents[3] / "docs" / "onnx-coverage.md"

# one worker runs the node suite once (a module fixture is paid by every worker its tests reach)
pytestmark = pytest.mark.xdist_group("tape-conformance")


@pytest.fixture(scope="module")
def outcomes():
    before = set(REGISTRY)
    yield tc.run_tape_suite()
    assert set(REGISTRY) == before  # importing models never changes the op table


def test_the_whole_node_suite_runs_and_hundreds_import(outcomes):
    t = tc.totals(outcomes)
    assert t["node tests"] >= 1800  # every node test, not a sample
    assert t[tc.IMPORTED] >= 300
    assert t["grad_checked"] >= 290


def test_no_error_escapes_the_importer(outcomes):
    # a refusal names the node and says why (outside its tape form); a Python error escaping
    # the import (as MaxPool's requested Indices did: a bare KeyError) is a bug
    bugs = [(o.name, o.reason) for o in outcomes if o.status == tc.FAILED]
    assert not bugs, bugs[:5]
    refused = [o for o in outcomes if o.status == tc.REFUSED]
    assert refused and all("tape form" in o.reason or "tape's" in o.reason for o in refused), \
        [o.reason for o in refused if "tape form" not in o.reason][:5]


def test_every_imported_test_passes_but_the_known_failures(outcomes):
    failing = {o.name: o.reason for o in outcomes if o.status == tc.IMPORTED and not tc.passed(o)}
    new = {k: v for k, v in failing.items() if k not in tc.KNOWN_FAILURES}
    assert not new, new  # forward outside the suite's tolerance or a wrong gradient
    fixed = set(tc.KNOWN_FAILURES) - set(failing)
    assert not fixed, f"these pass now: take them off KNOWN_FAILURES: {sorted(fixed)}"


def test_bit_exact_against_the_executor_where_its_order_is_ours(outcomes):
    inexact = {o.op for o in outcomes if o.status == tc.IMPORTED and o.exact is False}
    assert inexact == set(tc.NOT_OUR_ORDER), (inexact ^ set(tc.NOT_OUR_ORDER))
    exact = [o for o in outcomes if o.status == tc.IMPORTED and o.exact]
    assert len(exact) >= 300
    # the outputs the issue named: LayerNormalization's Mean and InvStdDev are compared too
    ln = [o for o in outcomes if o.op == "LayerNormalization" and o.status == tc.IMPORTED]
    assert len(ln) >= 15 and all(o.forward and o.exact for o in ln)


def test_a_gradient_is_skipped_only_with_a_reason(outcomes):
    unchecked = [o for o in outcomes if o.status == tc.IMPORTED and o.grad is None]
    assert all(o.note for o in unchecked), [o.name for o in unchecked if not o.note]
    # only what folds at import (Shape, Size) goes unchecked; a kink is checked nudged
    assert {o.op for o in unchecked} <= {"Shape", "Size", "ReduceLogSum"}, \
        {(o.name, o.note) for o in unchecked}
    nudged = {o.name for o in outcomes if o.jittered and o.grad}
    assert "test_leakyrelu_example" in nudged  # [-1, 0, 1]: a kink at 0


def test_a_wrong_forward_output_is_caught(monkeypatch):
    # the planted bug: LayerNormalization's InvStdDev off (an unbiased variance)
    from tapescope.core import ops
    from tapescope.core.onnx import importer

    good = importer.CONVERTERS["LayerNormalization"]

    def bad(imp, st, ins, names):
        out = good(imp, st, ins, names)
        return (out[0], out[1], ops.muls(out[2], 0.99)) if isinstance(out, tuple) and \
            len(out) == 3 else out

    monkeypatch.setitem(importer.CONVERTERS, "LayerNormalization", bad)
    got = tc.run_tape_suite(r"^test_layer_normalization_2d_axis0$")
    assert len(got) == 1 and got[0].status == tc.IMPORTED
    assert got[0].forward is False and "InvStdDev" in got[0].reason


def test_a_wrong_gradient_is_caught(monkeypatch):
    # a Relu whose forward is right and whose gradient is lost (its value as a constant)
    from tapescope.core import ops
    from tapescope.core.onnx import importer

    def detached(imp, st, ins, names):
        x = importer._v(imp, ins, names, 0)
        return ops.add(imp.tape.const(np.maximum(x.value, 0)), ops.muls(x, 0.0))

    monkeypatch.setitem(importer.CONVERTERS, "Relu", detached)
    got = tc.run_tape_suite(r"^test_relu$")
    assert len(got) == 1 and got[0].forward is True
    assert got[0].grad is False and "finite differences" in got[0].reason


def _maxpool(indices_read: bool):
    # MaxPool with its Indices output named; read by the graph (a graph output) or by nothing
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])]
    if indices_read:
        outs.append(helper.make_tensor_value_info("i", TensorProto.INT64, [1, 1, 3, 3]))
    g = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_a_requested_output_without_a_tape_form_is_refused_by_name():
    # MaxPool's Indices output read by the graph: refused, naming it (was a bare KeyError)
    from tapescope.core.onnx.errors import OnnxError
    from tapescope.core.onnx.importer import import_to_tape
    from tapescope.core.tape import Tape

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    with pytest.raises(OnnxError, match=r"output 1 of MaxPool \('i'\) has no tape form"):
        import_to_tape(_maxpool(True), Tape(np.float32), {"x": x})
    # named but read by nothing: imports as before
    imp = import_to_tape(_maxpool(False), Tape(np.float32), {"x": x})
    assert imp.outputs["y"].shape == (1, 1, 3, 3)


def _section(text: str) -> str:
    i = text.index("## Node tests through the tape import")
    return text[i:text.index("## Tests not passed", i)].rstrip() + "\n"


def test_the_coverage_page_is_what_the_tape_run_gives(outcomes):
    # the tape-import columns of the per-operator table and the section below it: generated by
    # `python -m tapescope.gpu.onnx_coverage --doc docs/onnx-coverage.md` (test_conformance.py
    # holds the
    # whole page; this holds the tape's part without running the executor's suite)
    import onnx

    doc = DOC.read_text()
    version = re.search(r"with onnx (\S+) \(", doc).group(1)
    if version != onnx.__version__:
        pytest.skip(f"docs/onnx-coverage.md is for onnx {version}, this is {onnx.__version__}")
    regen = "regenerate it with `python -m tapescope.gpu.onnx_coverage --doc docs/onnx-coverage.md`"
    assert _section(doc) == _section(tc.section_markdown(outcomes) + "\n## Tests not passed"), \
        f"docs/onnx-coverage.md's tape section is stale; {regen}"
    cells = tc.op_cells(outcomes)
    rows = [ln.split(" | ") for ln in doc.splitlines() if ln.startswith("| ")
            and ln.count(" | ") == 6 and not ln.startswith("| operator")]
    assert len(rows) >= 150
    stale = [(r[0][2:], r[2:4], list(cells.get(r[0][2:], ("—", "—")))) for r in rows
             if r[2:4] != list(cells.get(r[0][2:], ("—", "—")))]
    assert not stale, f"tape-import columns are stale ({regen}): {stale[:5]}"
    assert set(cells) <= {r[0][2:] for r in rows}


def test_docs_testing_md_states_this_runs_tape_counts(outcomes):
    # docs/testing.md's node-test table is `python -m tests.stats`'s; its tape rows are this run's
    from tests import stats

    want = stats.node_values(tape=tc.totals(outcomes))
    got = {k: v for k, v in stats.page_node_values(
        (Path(stats.ROOT) / "docs" / "testing.md").read_text()).items() if k in want}
    assert got == want, "docs/testing.md is stale: regenerate it with `python -m tests.stats " \
        f"--doc docs/testing.md` (page {got}, run {want})"
