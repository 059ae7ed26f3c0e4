"""Run ONNX's own backend test suite against :class:`core.onnx.Backend` and summarise it.

``python -m tapescope.core.onnx.conformance [--doc docs/onnx-coverage.md]`` runs every category
that this
onnx package ships (node tests are built in memory; light models, pytorch-converted,
pytorch-operator and simple models are read from its data folder; nothing is downloaded) and can
write the per-operator coverage page.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import re
import sys
import tempfile
import time
import unittest
import warnings
from collections import defaultdict
from dataclasses import dataclass

#: runner category (BackendTest's test-case class) -> our short name
CATEGORIES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendRealModelTest": "light",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
    "OnnxBackendSimpleModelTest": "simple",
}


@dataclass
class Outcome:
    """One CPU test of the suite: its category, whether it passed, and why not."""

    name: str
    category: str
    passed: bool
    reason: str = ""


class _Collect(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.passed: list[str] = []

    def addSuccess(self, test) -> None:  # noqa: N802 - unittest API
        self.passed.append(test.id())


def _last_line(tb: str) -> str:
    lines = [ln for ln in tb.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "?"


def run_suite(categories: tuple[str, ...] = tuple(CATEGORIES.values()),
              name_filter: str | None = None) -> list[Outcome]:
    """Run the chosen categories on CPU; every test's outcome (CUDA twins are not run)."""
    import onnx.backend.test

    from tapescope.core.onnx.backend import Backend

    class _SuiteBackend(Backend):
        pass  # the default limits (core.onnx.Limits()): every light model runs with them

    old_home = os.environ.get("ONNX_HOME")
    with tempfile.TemporaryDirectory() as home, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the suite's own case generators warn (casts, log(0))
        os.environ["ONNX_HOME"] = home  # the light-model runner writes its inputs here
        try:
            bt = onnx.backend.test.BackendTest(_SuiteBackend, __name__)
            outcomes = []
            for cls_name, case in bt.test_cases.items():
                cat = CATEGORIES.get(cls_name)
                if cat not in categories:
                    continue
                suite = unittest.TestSuite()
                for t in unittest.defaultTestLoader.loadTestsFromTestCase(case):
                    name = t.id().rsplit(".", 1)[-1]
                    if name.endswith("_cuda"):
                        continue
                    if name_filter and not re.search(name_filter, name):
                        continue
                    suite.addTest(t)
                res = _Collect()
                suite.run(res)
                for t in res.passed:
                    outcomes.append(Outcome(_short(t), cat, True))
                for t, tb in res.failures + res.errors:
                    outcomes.append(Outcome(_short(t.id()), cat, False, _last_line(tb)))
                for t, why in res.skipped:
                    outcomes.append(Outcome(_short(t.id()), cat, False, f"skipped: {why}"))
        finally:
            if old_home is None:
                os.environ.pop("ONNX_HOME", None)
            else:
                os.environ["ONNX_HOME"] = old_home
    return outcomes


def _short(test_id: str) -> str:
    name = test_id.rsplit(".", 1)[-1]
    return name[: -len("_cpu")] if name.endswith("_cpu") else name


@functools.cache
def node_tests() -> tuple:
    """The onnx package's node tests (``load_model_tests(kind="node")``, built in memory once
    per process: ~5 CPU s). Read them, never change them (copy a model before editing it)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the onnx package computing its expected outputs
        return tuple(load_model_tests(kind="node"))


def node_test_ops() -> dict[str, str]:
    """Node test name -> the operator it tests (expanded forms count for their operator)."""
    cases = node_tests()
    single = {}
    for tc in cases:
        ops = {n.op_type for n in tc.model.graph.node}
        if len(ops) == 1:
            single[tc.name] = next(iter(ops))
    out = {}
    for tc in cases:
        base = re.sub(r"(_expanded)?(_ver\d+)?$", "", tc.name)
        if tc.name in single and not tc.name.endswith(("_expanded", "_ver18")):
            out[tc.name] = single[tc.name]
        elif base in single:
            out[tc.name] = single[base]
        else:
            out[tc.name] = tc.model.graph.node[-1].op_type if tc.model.graph.node else "?"
    return out


def summary(outcomes: list[Outcome]) -> dict[str, tuple[int, int]]:
    """Category -> (passed, total)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes:
        acc[o.category][1] += 1
        acc[o.category][0] += int(o.passed)
    return {k: (v[0], v[1]) for k, v in acc.items()}


def per_op_counts(outcomes: list[Outcome]) -> dict[str, list[int]]:
    """op -> [node tests passed, node tests] over the node-test outcomes."""
    ops = node_test_ops()
    per_op: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes:
        if o.category == "node":
            op = ops.get(o.name, "?")
            per_op[op][1] += 1
            per_op[op][0] += int(o.passed)
    return per_op


def coverage_markdown(outcomes: list[Outcome], seconds: float) -> str:
    """The docs/onnx-coverage.md page: totals per category, then op -> node tests passed/total."""
    import onnx

    per_op = per_op_counts(outcomes)
    lines = [
        "# ONNX conformance of `core.onnx`",
        "",
        "Generated by `python -m tapescope.core.onnx.conformance --doc docs/onnx-coverage.md` "
        f"with onnx {onnx.__version__} ({seconds:.0f} s on this machine). Mode: reference "
        "(the tape's rounding order). Do not edit by hand.",
        "",
        "| suite | passed | total |",
        "|---|---:|---:|",
    ]
    for cat, (p, t) in sorted(summary(outcomes).items()):
        lines.append(f"| {cat} | {p} | {t} |")
    lines += [
        "",
        "`light` is the `real` category of the runner: the nine light models shipped inside the "
        "onnx package (ConstantOfShape weights, 224x224 inputs), run offline. Node tests are "
        "built in memory by `load_model_tests(kind=\"node\")`.",
        "",
        "## Node tests per operator",
        "",
        "| operator | passed | total |",
        "|---|---:|---:|",
    ]
    for op in sorted(per_op):
        p, t = per_op[op]
        lines.append(f"| {op} | {p} | {t} |")
    fails = sorted((o.category, o.name, o.reason) for o in outcomes if not o.passed)
    lines += ["", "## Tests not passed, with the reason", ""]
    for cat, name, reason in fails:
        reason = reason.replace("|", "\\|")
        lines.append(f"- `{cat}` `{name}`: {reason[:160]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: run the suite, print totals, optionally write the coverage page."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", help="write the coverage page here")
    ap.add_argument("--filter", help="only test names matching this regex")
    ap.add_argument("--passing", help="write the names of the passing tests here (one a line)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    outcomes = run_suite(name_filter=args.filter)
    dt = time.perf_counter() - t0
    buf = io.StringIO()
    for cat, (p, t) in sorted(summary(outcomes).items()):
        print(f"{cat:18s} {p:5d} / {t:5d}", file=buf)
    print(f"{'seconds':18s} {dt:.1f}", file=buf)
    sys.stdout.write(buf.getvalue())
    from tapescope.core.atomic import write_atomic  # every file whole or not at all

    if args.passing:
        write_atomic(args.passing, "".join(f"{o.category} {o.name}\n" for o in sorted(
            outcomes, key=lambda o: (o.category, o.name)) if o.passed))
    if args.doc:
        write_atomic(args.doc, coverage_markdown(outcomes, dt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
