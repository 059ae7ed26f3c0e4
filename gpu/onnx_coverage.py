"""Write docs/onnx-coverage.md: the ONNX conformance page of ``core.onnx.conformance`` with its
per-operator table widened to executor / tape import (``core.onnx.tape_conformance``: the same
node tests through the tape, forward and gradient) / tape form / device kernels / fusion class.

``python -m tapescope.gpu.onnx_coverage --doc docs/onnx-coverage.md``. It lives in gpu because only
gpu
knows the kernel library (core never imports gpu); the tape ops each converter records come
from ``core.onnx.coverage``.
"""

from __future__ import annotations

import argparse
import time

SECTION = "## Node tests per operator"
NEXT = "## Tests not passed"


def page(outcomes: list, seconds: float, tape: list | None = None) -> str:
    """The coverage page for these conformance outcomes and ``tape``, the same node tests
    through the tape import (``core.onnx.tape_conformance.run_tape_suite()``; run here when
    not given)."""

    from tapescope.core.onnx import tape_conformance
    from tapescope.core.onnx.conformance import coverage_markdown, per_op_counts
    from tapescope.core.onnx.coverage import op_rows
    from tapescope.gpu.library import KERNELS

    if tape is None:
        tape = tape_conformance.run_tape_suite()
    md = coverage_markdown(outcomes, seconds)
    md = md.replace("python -m tapescope.core.onnx.conformance --doc",
                    "python -m tapescope.gpu.onnx_coverage --doc")
    per_op = per_op_counts(outcomes)
    cells = tape_conformance.op_cells(tape)
    rows = op_rows({k: (v[0], v[1]) for k, v in per_op.items()}, set(KERNELS))
    table = "\n".join([
        "## Per operator: executor, tape import, tape form, device kernels, fusion",
        "",
        "Real models end to end (import, a training step on the tape, the host replay bit for "
        "bit): `tests/gpu/test_models.py`; the heavy ones are `slow`: "
        "`python -m pytest -m slow tests/gpu/test_models.py`. Per-model timings, the default "
        "loss and `--reinit`: [models.md](models.md).",
        "",
        "Executor: node tests passed / total. Tape import: the same node tests imported onto "
        "the tape (below, [Node tests through the tape import]"
        "(#node-tests-through-the-tape-import)): forward within the suite's tolerance / "
        "imported, how many bit-identical to the executor; gradient agreeing with finite "
        "differences / checked. Tape form: `core.onnx.importer.CONVERTERS` (an op "
        "without one still runs when all its inputs are constants: it folds at import). Device "
        "kernels: the tape ops its import recorded on the onnx node tests "
        "(`core.onnx.coverage`) and whether `gpu.library.KERNELS` has them all. Fusion: their "
        "fusion classes (`row_local` ops fuse into generated kernels, docs/fusion.md).",
        "",
        "| operator | executor (node tests) | tape import: forward | tape import: gradient "
        "| tape form | device kernels (tape ops) | fusion class |",
        "|---|---|---|---|---|---|---|",
        *[f"| {op} | {ex} | {cells.get(op, ('—', '—'))[0]} | {cells.get(op, ('—', '—'))[1]} "
          f"| {form} | {dev} | {fus} |" for op, ex, form, dev, fus in rows],
        "",
        tape_conformance.section_markdown(tape),
        "",
    ])
    i, j = md.index(SECTION), md.index(NEXT)
    return md[:i] + table + md[j:].replace(NEXT, NEXT + " (executor)", 1)


def main(argv: list[str] | None = None) -> int:
    """Run the conformance suite and write the page."""
    from tapescope.core.onnx.conformance import run_suite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", required=True, help="write the coverage page here")
    args = ap.parse_args(argv)
    from tapescope.core.onnx.tape_conformance import run_tape_suite

    t0 = time.perf_counter()
    outcomes = run_suite()
    tape = run_tape_suite()
    text = page(outcomes, time.perf_counter() - t0, tape)
    from tapescope.core.atomic import write_atomic

    write_atomic(args.doc, text)  # whole or not at all
    print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
