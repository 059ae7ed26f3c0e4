"""Per ONNX operator: does the executor run it, does it have a tape form, which tape ops does the
import record, do they all have device kernels, which fusion class are they.

The tape ops are found by running every converter of ``core.onnx.importer`` on the onnx
package's one-node backend tests of its op (the data input stays an input, the others become
initializers, as in a real model), so nothing here is a hand-kept list. Used by
``python -m tapescope.gpu.onnx_coverage --doc docs/onnx-coverage.md`` (which knows the device
kernels:
core never imports gpu) and tests/gpu/test_models.py.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Collection, Iterator
from typing import Any

import numpy as np


def node_cases(op_types: set[str]) -> Iterator[tuple[str, Any, list[np.ndarray]]]:
    """The onnx package's one-node backend tests of ``op_types`` (built in memory), as
    (op type, model with every input but the first turned into an initializer, [first input])."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the onnx package computing its expected outputs
        cases = load_model_tests(kind="node")
    for t in cases:
        model = t.model
        if model is None or len(model.graph.node) != 1 or \
                model.graph.node[0].op_type not in op_types or not t.data_sets:
            continue
        ins = list(t.data_sets[0][0])
        if not ins or not all(isinstance(v, np.ndarray) for v in ins):
            continue
        m = onnx.ModelProto()
        m.CopyFrom(model)
        # the data input: the first floating one (Where's first input is its condition)
        k = next((i for i, v in enumerate(ins) if v.dtype.kind == "f"), 0)
        every = list(m.graph.input)[:len(ins)]
        for i, (vi, v) in enumerate(zip(every, ins, strict=True)):
            if i != k:
                m.graph.initializer.append(numpy_helper.from_array(v, vi.name))
                m.graph.input.remove(vi)
        yield model.graph.node[0].op_type, m, ins[k:k + 1]


def recorded_ops() -> dict[str, Counter]:
    """ONNX op -> Counter of the tape ops its converter recorded over its node tests (float
    data input, float32/float64 only; cases outside the tape form are skipped)."""
    from tapescope.core.onnx.executor import Session
    from tapescope.core.onnx.importer import CONVERTERS, import_to_tape
    from tapescope.core.tape import Tape

    out: dict[str, Counter] = {}
    for op_type, model, ins in node_cases(set(CONVERTERS)):
        x = ins[0]
        if x.dtype not in (np.float32, np.float64):
            continue
        tape = Tape(x.dtype)
        try:
            import_to_tape(Session(model, fold=False), tape, {model.graph.input[0].name: x})
        except Exception:  # noqa: BLE001 - e.g. a strided Slice: outside the tape form
            continue
        out.setdefault(op_type, Counter()).update(
            n.op for n in tape.nodes if n.op not in ("param", "const"))
    return out


def op_rows(executor_ops: dict[str, tuple[int, int]], kernels: Collection[str]
            ) -> list[tuple[str, str, str, str, str]]:
    """(op, executor, tape form, device kernels, fusion) for every op the executor knows or the
    importer converts; ``executor_ops`` maps op -> (node tests passed, total), ``kernels`` is
    the tape ops the device kernel library has (``gpu.library.KERNELS``)."""
    from tapescope.core.onnx.importer import CONVERTERS
    from tapescope.core.ops import REGISTRY

    rec = recorded_ops()
    rows = []
    for op in sorted(set(executor_ops) | set(CONVERTERS)):
        p, t = executor_ops.get(op, (0, 0))
        ex = f"{p}/{t}" if t else "yes"
        if op not in CONVERTERS:
            rows.append((op, ex, "folds only (constant inputs)", "—", "—"))
            continue
        tape_ops = sorted(rec.get(op, ()))
        if not tape_ops:
            rows.append((op, ex, "yes (passes its input on)", "none needed", "—"))
            continue
        missing = [o for o in tape_ops if o not in kernels]
        dev = "all: " + ", ".join(tape_ops) if not missing else "MISSING " + ", ".join(missing)
        fus = sorted({REGISTRY[o].fusion for o in tape_ops if o in REGISTRY})
        rows.append((op, ex, "yes", dev, ", ".join(fus)))
    return rows


def op_table_markdown(executor_ops: dict[str, tuple[int, int]], kernels: Collection[str]
                      ) -> str:
    """The per-operator table of docs/onnx-coverage.md."""
    lines = ["| operator | executor (node tests) | tape form | device kernels (tape ops) "
             "| fusion class |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |"
              for a, b, c, d, e in op_rows(executor_ops, kernels)]
    return "\n".join(lines)
