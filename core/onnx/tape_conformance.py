"""ONNX's backend node tests through the tape import: forward values and gradients.

Every node test of the onnx package (``load_model_tests(kind="node")``, built in memory) with a
floating input is imported onto a tape (``core.onnx.importer.import_to_tape``): its floating
inputs become params, its other inputs constants (an integer input of a node test is an axis, a
shape, an index or a label: what a real model ships as an initializer; where a floating one
must be known at import too, Dropout's ratio, only the first floating input is a param). A test
whose data path meets an op without a tape form is counted as such; one a converter refuses
with its reason (a 3-D pool, class weights) is *refused*; an error escaping the import is a bug
(*import failed*); the others are *imported*, and for each:

- **forward**: every output against the test's expected output with the suite's own tolerance
  (``TestCase.rtol`` / ``atol``: rtol 1e-3, atol 1e-7 for every node test, as
  ``onnx.backend.test.runner`` compares them; the tape's value is taken in the output's dtype);
- **exact**: the same outputs bit for bit against our executor in ``reference`` mode (the tape's
  rounding order) on the same inputs: where the op's reference order is ours, both must agree;
- **gradient**: on a float64 tape, ``L = sum_k sum(y_k * W_k)`` (fixed random ``W_k`` over the
  floating outputs the params reach); its gradient along a few random directions against
  central finite differences of the same import (``DIRECTIONS``, ``EPS``, ``TOL``); where the
  one-sided differences disagree (the input sits on a kink: LeakyRelu's example has a 0) it is
  checked again at an upward nudge of the input.

Imported tests that do not pass are ``KNOWN_FAILURES`` (with the reason), and the operators
whose forward is not bit-identical to the executor are ``NOT_OUR_ORDER`` (with the reason);
the suite holds both lists to the run. The whole run takes ~3 CPU s besides the ~5 s the onnx
package takes to build its node tests (``conformance.node_tests``, once per process).

``python -m tapescope.core.onnx.tape_conformance`` prints the totals and every test not passed;
``python -m tapescope.gpu.onnx_coverage --doc docs/onnx-coverage.md`` puts the per-operator counts
on
the coverage page (tests/core/onnx/test_tape_conformance.py holds the page to this run).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

#: random directions of the finite-difference check, its step and its tolerance on
#: |analytic - numeric| / max(1, |analytic|, |numeric|) (float64 throughout)
DIRECTIONS = 2
EPS = 1e-6
TOL = 1e-5

#: statuses of a node test
IMPORTED = "imported"
NO_TAPE_FORM = "no tape form"
NO_FLOAT = "no floating input"
REFUSED = "refused"  # a converter's OnnxError: a case outside its tape form, said why
FAILED = "import failed"  # anything else (a Python error escaping the import): a bug

#: how a Python error reads once the importer wrapped it in an OnnxError
_WRAPPED = re.compile(r"^[A-Z]\w*(Error|Exception|Warning): ")


@dataclass
class TapeOutcome:
    """One node test through the tape import."""

    name: str
    op: str
    status: str
    forward: bool | None = None  # within the suite's tolerance of the expected outputs
    exact: bool | None = None  # bit-identical to the executor (reference mode); None: it
    # refuses the test
    grad: bool | None = None  # None: no floating output depends on a param
    reason: str = ""
    #: "all": every floating input a param; "first": only the first (the others must be
    #: known at import: Dropout's ratio, a Pad value)
    params: str = ""
    jittered: bool = False  # the gradient was checked off the test's input (it sits on a kink)
    note: str = ""  # why the gradient was not checked


def _floating(v: Any) -> bool:
    from tapescope.core import precision

    return isinstance(v, np.ndarray) and v.dtype in (np.float64, np.float32, *precision.HALF)


def _split_model(model: Any, ins: list[np.ndarray], data: set[int]) -> tuple[Any, list[str]]:
    """A copy of ``model`` whose inputs outside ``data`` are initializers; the data names."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = max(m.ir_version, 4)  # IR 3 wants every initializer among the inputs
    every = list(m.graph.input)[:len(ins)]
    names = []
    for i, (vi, v) in enumerate(zip(every, ins, strict=True)):
        if i in data:
            names.append(vi.name)
        else:
            m.graph.initializer.append(numpy_helper.from_array(v, vi.name))
            m.graph.input.remove(vi)
    return m, names


def _import(model: Any, dtype: Any, feeds: dict[str, np.ndarray]) -> tuple[Any, Any, dict]:
    """(tape, Imported, {name: param Var}) with every feed a param of a fresh tape."""
    from tapescope.core.onnx.importer import import_to_tape
    from tapescope.core.tape import Tape

    tape = Tape(dtype)
    params = {k: tape.param(v, name=k) for k, v in feeds.items()}
    imp = import_to_tape(model, tape, dict(params))
    return tape, imp, params


def _value(imp: Any, name: str) -> np.ndarray:
    from tapescope.core.tape import Var

    v = imp.values[name]
    return np.asarray(v.value) if isinstance(v, Var) else np.asarray(v)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes() or (a.dtype.kind == "f" and bool(
        np.array_equal(a, b, equal_nan=True)))


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    """'' when ``got`` is what the onnx runner would accept, else why not."""
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype == object:
        return "" if np.array_equal(got, want) else "values differ"
    if want.dtype.name == "bfloat16":
        rtol = max(rtol, 2 ** -6)  # as the runner: two bfloat16 ulps
    g = got.astype(np.float64) if got.dtype.kind in "fV" else got
    w = want.astype(np.float64) if want.dtype.kind in "fV" else want
    try:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()
                 if "Max absolute" in ln or "Mismatched" in ln]
        return "; ".join(lines) or "values differ"
    return ""


def _loss(vals: dict[str, np.ndarray], ws: dict[str, np.ndarray]) -> float:
    return float(sum(np.sum(vals[n].astype(np.float64) * w) for n, w in ws.items()))


def _grad_check(model: Any, feeds: dict[str, np.ndarray], outs: list[str],
                rng: np.random.Generator, jitter: bool = False) -> tuple[bool | None, str]:
    """The float64 gradient of L = sum_k sum(y_k * W_k) along DIRECTIONS random directions
    against central finite differences of the same import. (None, why) when there is nothing
    to check; (None, "kink") when a direction's one-sided differences disagree (the inputs sit
    on a point where the function has no derivative: a relu at 0, a max of ties)."""
    from tapescope.core import ops
    from tapescope.core.tape import Var

    x64 = {k: np.asarray(v, np.float64) for k, v in feeds.items()}
    if jitter:  # off the kink: an upward nudge (a pow's base at 0 stays in its domain), far
        # above EPS and far below the values' scale
        x64 = {k: v + 1e-3 * (np.abs(v) + 1) * np.abs(rng.standard_normal(v.shape))
               for k, v in x64.items()}
    tape, imp, params = _import(model, np.float64, x64)
    ys = [(n, imp.values[n]) for n in outs]
    # (an output that is a param itself is its input passed on: Identity, Dropout at inference)
    ys = [(n, y) for n, y in ys if isinstance(y, Var) and y.op != "const"]
    if not ys:
        return None, "every output folds at import (a shape, a size: nothing to differentiate)"
    if not all(np.all(np.isfinite(y.value)) for _, y in ys):
        return None, "an output is not finite at the test's input"
    ws = {n: rng.uniform(-1.0, 1.0, y.shape) for n, y in ys}
    loss = None
    for n, y in ys:
        term = ops.sum(ops.mul(y, tape.const(ws[n])))
        loss = term if loss is None else ops.add(loss, term)
    tape.backward(loss)
    if not tape.ok:
        return False, f"backward refused: {tape.error}"
    grads = {k: tape.grad(p) for k, p in params.items()}
    if all(g is None for g in grads.values()):
        return None, "no param reaches an output"
    l0 = _loss({n: np.asarray(y.value) for n, y in ys}, ws)
    worst = 0.0
    with np.errstate(all="ignore"):
        for _ in range(DIRECTIONS):
            d = {k: rng.standard_normal(v.shape) for k, v in x64.items()}
            a = sum(float(np.sum(g * d[k])) for k, g in grads.items() if g is not None)
            side = []
            for s in (EPS, -EPS):
                _, imp2, _ = _import(model, np.float64, {k: v + s * d[k] for k, v in x64.items()})
                side.append(_loss({n: _value(imp2, n) for n, _ in ys}, ws))
            num = (side[0] - side[1]) / (2 * EPS)
            right, left = (side[0] - l0) / EPS, (l0 - side[1]) / EPS
            if not abs(right - left) <= 1e3 * TOL * max(1.0, abs(right), abs(left)):
                return None, "kink"  # (or an edge of the domain: pow's base at 0)
            err = abs(a - num) / max(1.0, abs(a), abs(num))
            worst = max(worst, err if np.isfinite(err) else np.inf)
    if worst <= TOL:
        return True, ""
    return False, f"gradient vs finite differences: relative error {worst:.2e} (tolerance {TOL})"


def _inputs(tc: Any) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The test's first data set as arrays (numpy scalars and bools as 0-d arrays); None when
    it holds sequences or optionals (no tape form takes those)."""
    ins, want = tc.data_sets[0]

    def arr(v: Any) -> np.ndarray | None:
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, (np.generic, bool, int, float)):
            return np.asarray(v)
        return None

    ins, want = [arr(v) for v in ins], [arr(v) for v in want]
    if any(v is None for v in ins + want):
        return None
    return ins, want


def run_case(tc: Any, op: str) -> TapeOutcome:
    """One node test through the tape import."""
    import zlib

    from tapescope.core import precision
    from tapescope.core.onnx.errors import OnnxError
    from tapescope.core.onnx.executor import Session

    if tc.model is None or not tc.data_sets:
        return TapeOutcome(tc.name, op, NO_FLOAT, reason="no data")
    arrays = _inputs(tc)
    if arrays is None:
        return TapeOutcome(tc.name, op, NO_FLOAT, reason="sequence or optional values")
    ins, want = arrays
    floating = [i for i, v in enumerate(ins) if _floating(v)]
    if not floating:
        return TapeOutcome(tc.name, op, NO_FLOAT)
    dtype = precision.dtype_of(ins[floating[0]].dtype)
    out_names = [o.name for o in tc.model.graph.output]
    which, data = "all", set(floating)
    while True:
        model, names = _split_model(tc.model, ins, data)
        feeds = {n: ins[i] for n, i in zip(names, sorted(data), strict=True)}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                _, imp, _ = _import(model, dtype, feeds)
                got = [_value(imp, n) for n in out_names]
        except OnnxError as exc:
            msg = exc.reason
            if "must be known at import" in msg and which == "all" and len(floating) > 1:
                which, data = "first", {floating[0]}  # a ratio, running statistics: consts
                continue
            # an op on the data path without a converter, or one no part of core.onnx runs
            if re.match(r"op \w+ has no tape form|unsupported op", msg):
                return TapeOutcome(tc.name, op, NO_TAPE_FORM, reason=msg[:300])
            status = FAILED if _WRAPPED.match(msg) else REFUSED
            return TapeOutcome(tc.name, op, status, reason=(
                f"{exc.node}: {msg}" if exc.node else msg)[:300])
        except Exception as exc:  # noqa: BLE001 - escaped the importer: a bug, named
            return TapeOutcome(tc.name, op, FAILED, reason=f"{type(exc).__name__}: {exc}"[:300])
        break
    out = TapeOutcome(tc.name, op, IMPORTED, params=which)
    why = []
    for n, g, w in zip(out_names, got, want, strict=True):
        g = g.astype(w.dtype) if g.dtype != w.dtype and w.dtype != object else g
        r = _close(g, w, tc.rtol, tc.atol)
        if r:
            why.append(f"{n}: {r}")
    out.forward = not why
    try:  # the executor, reference mode, on the same model and inputs
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ref = Session(model, mode="reference").run(feeds)
        out.exact = all(_same_bits(g.astype(ref[n].dtype) if g.dtype != ref[n].dtype else g,
                                   np.asarray(ref[n])) for n, g in zip(out_names, got,
                                                                       strict=True))
    except OnnxError:  # the executor refuses it (training-mode Dropout): not compared
        out.exact = None
    rng = np.random.default_rng(zlib.crc32(tc.name.encode()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.grad, r = _grad_check(model, feeds, out_names, rng)
            if out.grad is None and r == "kink":
                out.jittered = True
                out.grad, r = _grad_check(model, feeds, out_names, rng, jitter=True)
                if r == "kink":
                    out.grad, r = False, "a kink at the test's input and at a nudged one"
                elif out.grad is None:
                    r = f"not differentiable at the test's input, and nudged: {r}"
    except Exception as exc:  # noqa: BLE001
        out.grad, r = False, f"gradient: {type(exc).__name__}: {exc}"
    if out.grad is False:
        why.append(r)
    elif out.grad is None:
        out.note = r
    out.reason = "; ".join(why)[:300]
    return out


def run_tape_suite(name_filter: str | None = None) -> list[TapeOutcome]:
    """Every node test through the tape import (``name_filter``: a regex on test names)."""
    from tapescope.core.onnx.conformance import node_test_ops, node_tests

    ops_of = node_test_ops()
    return [run_case(tc, ops_of.get(tc.name, "?")) for tc in node_tests()
            if not name_filter or re.search(name_filter, tc.name)]


#: imported node tests whose forward or gradient is known not to pass, and why. The suite
#: holds this list to the run both ways: a new failure is named, and so is one that passes now
KNOWN_FAILURES = dict.fromkeys(
    ("test_training_dropout", "test_training_dropout_default", "test_training_dropout_mask",
     "test_training_dropout_default_mask"),
    "training-mode Dropout: the tape draws its own seeded mask (`default_rng((step_seed, "
    "node))`, replayable on a device), the test's mask came from numpy's global random state: "
    "the values agree only where both masks keep (the executor refuses training mode)")
KNOWN_FAILURES.update(dict.fromkeys(
    ("test_attention_causal_boolmask_nan_robustness_expanded",
     "test_attention_23_boolmask_fullymasked_row_nan_robustness_expanded",
     "test_attention_4d_causal_nonpad_negative_offset_structural_empty_expanded",
     "test_attention_23_fullymasked_qk_matmul_output_mode3_zero_expanded",
     "test_attention_24_fullymasked_qk_matmul_output_mode3_zero_expanded"),
    "a fully masked row (every score -inf): its softmax is NaN and the body replaces it "
    "(Where of IsNaN), so the forward is finite, but softmax's backward on that row multiplies "
    "NaN by the zero gradient the Where passes it: NaN reaches the scores' gradient (the "
    "written backward, as PyTorch's autograd does); finite differences see a flat row"))
KNOWN_FAILURES["test_attention_4d_causal_fp16_expanded"] = (
    "float16: the tape's half rule rounds each node's output to float16 (the executor's too: "
    "bit for bit), the expected output kept float32 through the expanded body; 2 of 192 "
    "elements one float16 ulp outside rtol 1e-3")


#: operators whose imported node tests are not bit-identical to the executor, and why: the
#: executor's kernel for them is not written in the tape's reference order (numpy's pow,
#: matmul and transcendentals), so agreement is within the tolerance, not bit for bit. Every
#: other imported test is bit-identical; the suite holds this list to the run both ways
NOT_OUR_ORDER = {
    "Pow": "the tape's `exp(y * log x)` (one order a device replays), the executor's numpy "
           "`x ** y`",
    "LRN": "the window's `d ** beta` as `exp(beta * log d)` on the tape, numpy's pow in the "
           "executor (docs/models.md)",
    **dict.fromkeys(
        ("RNN", "GRU", "LSTM"),
        "the executor's loop uses numpy's matmul (BLAS order), `np.tanh` and "
        "`1 / (1 + np.exp(-x))`; the tape's unrolled form runs its own kernels in the gates' "
        "order (docs/reference-order-nn.md)"),
}


def passed(o: TapeOutcome) -> bool:
    """An imported test whose forward is within tolerance and whose gradient, where checked,
    agrees with finite differences."""
    return o.status == IMPORTED and bool(o.forward) and o.grad is not False


def per_op(outcomes: list[TapeOutcome]) -> dict[str, dict[str, int]]:
    """op -> counts: imported, forward, exact, grad_checked, grad."""
    acc: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for o in outcomes:
        if o.status != IMPORTED:
            continue
        a = acc[o.op]
        a["imported"] += 1
        a["forward"] += int(bool(o.forward))
        a["exact"] += int(bool(o.exact))
        a["grad_checked"] += int(o.grad is not None)
        a["grad"] += int(bool(o.grad))
    return {k: dict(v) for k, v in acc.items()}


def totals(outcomes: list[TapeOutcome]) -> dict[str, int]:
    """The run's counts over every node test."""
    t: dict[str, int] = defaultdict(int)
    for o in outcomes:
        t[o.status] += 1
        if o.status == IMPORTED:
            t["forward"] += int(bool(o.forward))
            t["exact"] += int(bool(o.exact))
            t["grad_checked"] += int(o.grad is not None)
            t["grad"] += int(bool(o.grad))
            t["nudged"] += int(o.jittered and o.grad is not None)
            t["first_only"] += int(o.params == "first")
    t["node tests"] = len(outcomes)
    return dict(t)


def op_cells(outcomes: list[TapeOutcome]) -> dict[str, tuple[str, str]]:
    """op -> (forward cell, gradient cell) of the coverage page's per-operator table."""
    refused: dict[str, int] = defaultdict(int)
    for o in outcomes:
        if o.status in (REFUSED, FAILED):
            refused[o.op] += 1
    out = {}
    for op, a in per_op(outcomes).items():
        n, e = a["imported"], a["exact"]
        fwd = f"{a['forward']}/{n}, " + ("bit-exact" if e == n else f"{e} bit-exact")
        if refused[op]:
            fwd += f" ({refused[op]} refused)"
        grad = f"{a['grad']}/{a['grad_checked']}" if a["grad_checked"] else "— (folds)"
        out[op] = (fwd, grad)
    for op, n in refused.items():
        out.setdefault(op, (f"0/0 ({n} refused)", "—"))
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section_markdown(outcomes: list[TapeOutcome]) -> str:
    """The coverage page's section on this run: totals, what is not bit-exact, what fails."""
    t = totals(outcomes)
    floating = t["node tests"] - t.get(NO_FLOAT, 0)
    rows = [
        ("node tests", t["node tests"]),
        ("with a floating input (the others fold at import: nothing on the tape)", floating),
        ("an op on the data path has no tape form", t.get(NO_TAPE_FORM, 0)),
        ("refused at import, saying why (outside the op's tape form)", t.get(REFUSED, 0)),
        ("failed at import (an error escaping the importer: a bug)", t.get(FAILED, 0)),
        ("**imported**", t.get(IMPORTED, 0)),
        ("forward within the suite's tolerance (rtol 1e-3, atol 1e-7)", t.get("forward", 0)),
        ("forward bit-identical to the executor (reference mode)", t.get("exact", 0)),
        ("gradient checked (a floating output on the tape)", t.get("grad_checked", 0)),
        ("gradient agrees with finite differences", t.get("grad", 0)),
    ]
    lines = [
        "## Node tests through the tape import",
        "",
        "`core.onnx.tape_conformance`: every node test with a floating input is imported onto a "
        "tape in its own dtype, its floating inputs as params and its other inputs as "
        "initializers (an axis, a shape, an index: what a model ships as constants; "
        f"{t.get('first_only', 0)} tests import with only their first floating input on the tape: "
        "the others must be known at import, e.g. Dropout's ratio). Forward: every output "
        "against the test's expected output with the tolerance of onnx's runner (each test's "
        "`rtol`/`atol`: 1e-3 / 1e-7 for all of them), and bit for bit against the executor in "
        "reference mode on the same inputs. Gradient: on a float64 tape, "
        f"L = sum(y * W) over the floating outputs along {DIRECTIONS} random directions against "
        f"central finite differences of the same import (step {EPS:g}, relative tolerance "
        f"{TOL:g}); where the test's input sits on a kink (a relu at 0: the one-sided "
        "differences disagree) it is checked at an upward nudge of the input "
        f"({t.get('nudged', 0)} tests). A test counts for the operator it tests (an "
        "`_expanded` test for the op its body expands). "
        "`tests/core/onnx/test_tape_conformance.py` runs it in the default suite and holds "
        "this page to it.",
        "",
        "| node tests | count |",
        "|---|---:|",
        *[f"| {k} | {v} |" for k, v in rows],
        "",
    ]
    inexact: dict[str, int] = defaultdict(int)
    for o in outcomes:
        if o.status == IMPORTED and o.exact is False:
            inexact[o.op] += 1
    unrun = [o.name for o in outcomes if o.status == IMPORTED and o.exact is None]
    lines += [
        "Every imported test's forward is bit-identical to the executor's but these (the "
        "executor's kernel is not in the tape's reference order; within the tolerance):",
        "",
        *[f"- {op} ({n} tests): {NOT_OUR_ORDER.get(op, 'NEW: not explained')}"
          for op, n in sorted(inexact.items())],
    ]
    if unrun:
        lines.append(f"- not compared ({len(unrun)} tests: the executor refuses them): "
                     + ", ".join(f"`{n}`" for n in unrun))
    lines += [
        "",
        "### Imported, not passed (known failures, with the reason)",
        "",
    ]
    bad: dict[str, list[str]] = defaultdict(list)
    for o in outcomes:
        if o.status == IMPORTED and not passed(o):
            bad[f"{o.op}: {KNOWN_FAILURES.get(o.name, 'NEW ' + o.reason)}"].append(o.name)
    lines += [f"- {_md(why)} ({len(names)}): " + ", ".join(f"`{n}`" for n in names)
              for why, names in sorted(bad.items())] or ["None."]
    lines += ["", "### Refused at import, by reason", ""]
    by: dict[str, list[str]] = defaultdict(list)
    for o in outcomes:
        if o.status in (REFUSED, FAILED):
            why = re.sub(r"^node \d+[^:]*: ", "", o.reason)
            why = re.sub(r"(ignore_index|equals) -?\d+", r"\1 N", why)
            by[("BUG " if o.status == FAILED else "") + why].append(o.name)
    for why, names in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        lines.append(f"- {_md(why)} ({len(names)}): "
                     + ", ".join(f"`{n}`" for n in names[:3]) + more)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: run the node tests through the tape, print totals and what did not pass."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", help="only test names matching this regex")
    args = ap.parse_args(argv)
    t0 = time.process_time()
    outcomes = run_tape_suite(args.filter)
    dt = time.process_time() - t0
    for k, v in totals(outcomes).items():
        print(f"{k:18s} {v:5d}")
    print(f"{'CPU seconds':18s} {dt:.1f}")
    for o in outcomes:
        if o.status == FAILED or (o.status == IMPORTED and not passed(o)):
            print(f"{o.name} [{o.op}] {o.status}: {o.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
