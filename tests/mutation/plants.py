"""Plant, by hand, the bugs that once survived the whole default suite, each alone, and check
that the tests written for them fail (docs/testing.md, "Choose inputs where the wrong answer
differs"); then check that the same tests pass unplanted. The last four plants are for the
property tests of issue 48 item 3 (the import's lowerings and the budget).

    python tests/mutation/plants.py            # every plant (~45 CPU s)
    python tests/mutation/plants.py thinning   # the plants whose name contains a word

The working tree (what git does not ignore) is copied to a scratch folder (``PLANTS_DIR``,
default /tmp/tapescope-plants), so nobody's tree and no kernel cache entry of the real source
is touched; each plant is one exact text replacement, refused if its text is not found once
(the source moved on: update the plant). Prints one Markdown row per plant; exits 1 if a plant
survives or a test fails unplanted. Not part of the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (name, file, text, planted text, tests that must fail with it)
PLANTS = [
    ("thinning compares an index with a step number", "app/step_history.py",
     "if self.step_nums[k] != keep_first}", "if k != keep_first}",
     ["tests/app/test_time_travel_memory.py::"
      "test_a_first_divergence_after_step_1_survives_thinning_in_a_long_session",
      "tests/app/test_time_travel_memory.py::"
      "test_the_first_divergence_survives_thinning_for_any_step_numbers"]),
    ("kernel parity without provenance swaps forward and backward", "app/qt/time_travel.py",
     'if k["role"] == "forward" else ("g_n", "g_ulp")',
     'if k["role"] == "backward" else ("g_n", "g_ulp")',
     ["tests/app/test_step_history_views.py::"
      "test_each_kernel_without_provenance_is_judged_by_its_own_side"]),
    ("element view judges mixed dtypes in the wider type", "views/element_view.py",
     "        dt = min(r.dtype, c.dtype, key=lambda d: d.itemsize)\n"
     "        r, c = r.astype(dt), c.astype(dt)\n    return r, c",
     "        dt = max(r.dtype, c.dtype, key=lambda d: d.itemsize)\n"
     "        r, c = r.astype(dt), c.astype(dt)\n    return r, c",
     ["tests/views/test_element_judgement_dtypes.py::"
      "test_a_float64_reference_against_its_float32_rounding_differs_nowhere",
      "tests/views/test_element_judgement_dtypes.py::"
      "test_mixed_dtypes_are_judged_in_the_narrower_type"]),
    ("SoftmaxCrossEntropyLoss moves classes last by the inverse permutation",
     "core/onnx/lowerings.py",
     "    return x if nd == 2 else ops.transpose(x, (0,) + tuple(range(2, nd)) + (1,))",
     "    perm = (0,) + tuple(range(2, nd)) + (1,)\n"
     "    return x if nd == 2 else ops.transpose(x, tuple(int(i) for i in np.argsort(perm)))",
     ["tests/models/test_lowerings.py::test_softmax_cross_entropy_is_the_executor_bit_for_bit",
      "tests/models/test_lowerings.py::"
      "test_losses_over_classes_at_axis_1_are_the_executor_at_any_rank"]),
    ("LayerNormalization's Mean/InvStdDev from the unbiased variance", "core/onnx/importer.py",
     "    var = ops.mean(ops.mul(d, d), axes, keepdims=True)",
     "    nm1 = imp.tape.const(np.array(float(np.prod([x.shape[a] for a in axes]) - 1)))\n"
     "    var = ops.div(ops.sum(ops.mul(d, d), axes, keepdims=True), nm1)",
     ["tests/models/test_lowerings.py::"
      "test_layer_normalization_with_mean_and_inv_std_dev_is_the_executor_bit_for_bit",
      "tests/models/test_lowerings.py::"
      "test_layer_normalization_any_axis_any_outputs_is_the_executor"]),
    ("the budget checks a predicted output against the peak, not the live bytes",
     "core/onnx/limits.py",
     "        if n is not None and self.bytes + n > self.limits.max_bytes:",
     "        if n is not None and self.peak_bytes + n > self.limits.max_bytes:",
     ["tests/core/onnx/test_budget_at_its_limit.py::"
      "test_a_model_that_frees_memory_runs_at_its_peak_and_not_one_byte_under",
      "tests/core/onnx/test_budget_at_its_limit.py::"
      "test_any_loop_and_tile_runs_at_its_peak_and_not_one_byte_under"]),
    # issue 48 item 3: bugs the property tests of the import and the budget are for (each
    # checked once by hand too; none of them survived the suite before, they show the
    # properties have teeth)
    ("Transpose imported with the inverse permutation", "core/onnx/importer.py",
     "return ops.transpose(_v(imp, ins, names, 0), tuple(perm) if perm else None)",
     "return ops.transpose(_v(imp, ins, names, 0),\n"
     "                         tuple(int(i) for i in np.argsort(perm)) if perm else None)",
     ["tests/models/test_import_properties.py::"
      "test_transpose_any_permutation_is_numpy_and_its_gradient_the_inverse"]),
    ("Softmax before opset 13 flattened one axis too far", "core/onnx/importer.py",
     "flat = ops.reshape(x, (int(np.prod(x.shape[:ax])), -1))",
     "flat = ops.reshape(x, (int(np.prod(x.shape[:ax + 1])), -1))",
     ["tests/models/test_import_properties.py::"
      "test_softmax_over_any_axis_is_the_executor_bit_for_bit"]),
    ("a reduction ignores keepdims (always kept)", "core/onnx/importer.py",
     'keepdims=bool(st.attrs.get("keepdims", 1)))',
     'keepdims=True)',
     ["tests/models/test_import_properties.py::"
      "test_a_reduction_over_any_axes_is_the_executor_bit_for_bit"]),
    ("the budget refuses a value that fills it exactly", "core/onnx/limits.py",
     "value.nbytes\n        if self.bytes + nbytes > self.limits.max_bytes:",
     "value.nbytes\n        if self.bytes + nbytes >= self.limits.max_bytes:",
     ["tests/core/onnx/test_budget_at_its_limit.py::"
      "test_a_model_runs_at_the_plain_sum_of_its_live_bytes_and_not_one_byte_under"]),
]


def _copy_tree(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for f in files:
        if f:
            src = ROOT / os.fsdecode(f)
            if src.is_file():
                (dest / os.fsdecode(f)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / os.fsdecode(f))


def _failed(copy: Path, tests: list[str]) -> tuple[int, set[str]]:
    """(pytest's exit status, the node ids that failed) of ``tests`` run in ``copy``."""
    env = dict(os.environ, PYTHONPATH=str(copy), QT_QPA_PLATFORM="offscreen",
               HYPOTHESIS_PROFILE="ci")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                        "-rf", *tests], cwd=copy, env=env,
                       capture_output=True, text=True)
    failed = {ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("FAILED ")}
    return p.returncode, {f.split(" - ")[0] for f in failed}


def main(argv: list[str]) -> int:
    words = argv[1:]
    chosen = [p for p in PLANTS if not words or any(w in p[0] for w in words)]
    copy = Path(os.environ.get("PLANTS_DIR", "/tmp/tapescope-plants"))
    _copy_tree(copy)
    probe = subprocess.run([sys.executable, "-c", "import core; print(core.__file__)"],
                           cwd=copy, env=dict(os.environ, PYTHONPATH=str(copy)),
                           capture_output=True, text=True).stdout.strip()
    if not probe.startswith(str(copy)):
        print(f"plants.py: the copy imports {probe}, not its own core", file=sys.stderr)
        return 2
    bad = 0
    print("| planted bug | file | tests that failed | unplanted |")
    print("|---|---|---|---|")
    for name, rel, text, planted, tests in chosen:
        path = copy / rel
        src = path.read_text()
        if src.count(text) != 1:
            print(f"plants.py: {rel}: the text to plant for {name!r} is not there once",
                  file=sys.stderr)
            return 2
        path.write_text(src.replace(text, planted))
        try:
            _, failed = _failed(copy, tests)
        finally:
            path.write_text(src)
        rc_clean, failed_clean = _failed(copy, tests)
        caught = [t for t in tests if any(f == t or f.startswith(t + "[") for f in failed)]
        ok = len(caught) == len(tests) and rc_clean == 0
        bad += not ok
        shown = "; ".join(f"`{t.split('/', 1)[1]}`" for t in caught) or "**none: survived**"
        print(f"| {name} | `{rel}` | {shown} | "
              f"{'pass' if rc_clean == 0 else 'FAIL: ' + ', '.join(sorted(failed_clean))} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
