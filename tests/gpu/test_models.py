"""Real models end to end: every light model of the onnx package (and resources/models) imports
onto the tape, trains one step there, and replays that step on the host backend bit for bit;
every op the importer can record has host kernels.

The heaviest models are ``slow`` (timings in docs/models.md):
``python -m pytest -m slow tests/gpu/test_models.py``.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.core.onnx.importer import CONVERTERS
from tapescope.core.onnx.workload import model_spec, with_options
from tapescope.gpu.library import KERNELS

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RESOURCES = os.path.join(ROOT, "resources", "models")

FAST = ["squeezenet", "shufflenet", "inception_v1"]
SLOW = ["resnet50", "inception_v2", "densenet121", "bvlc_alexnet", "zfnet512", "vgg19"]
CASES = ([pytest.param(os.path.join(LIGHT, f"light_{m}.onnx"), id=m) for m in FAST]
         # (the suite's 300 s per-test timeout is for hangs; vgg19 alone takes ~10 minutes here)
         + [pytest.param(os.path.join(LIGHT, f"light_{m}.onnx"), id=m,
                         marks=[pytest.mark.slow, pytest.mark.timeout(3600)]) for m in SLOW]
         + [pytest.param(os.path.join(RESOURCES, f), id=f[:-5])
            for f in sorted(os.listdir(RESOURCES)) if f.endswith(".onnx")])


@pytest.fixture(autouse=True)
def _free_models():
    """Each model's runs hold gigabytes (tape, device buffers): collect them before the next."""
    yield
    import gc

    gc.collect()


def _pair(path: str, dtype: str = "float32", fuse: bool = False, reinit: bool = True):
    # models we trust: over the default budgets from resnet50 up (--max-bytes 8G)
    spec = with_options(model_spec(path, reinit), limits={"max_bytes": 8 << 30})
    return PairRunner(SessionConfig(workload=spec, device="host", dtype=dtype, fuse=fuse))


def _step_bit_identical(runner: PairRunner) -> None:
    """One step; every compared node's value and gradient, and every parameter after the
    update, are the same bytes on both sides; the parameters moved."""
    wl = runner.ref.wl
    before = {p.id: np.array(p.value) for p in wl.params}
    r = runner.step()
    assert np.isfinite(r.loss_ref), r.loss_ref
    assert r.loss_ref == r.loss_cand
    assert r.exact, r.first
    checked = 0
    for n in runner.nodes:
        got = runner.arrays(n.id)
        for which in ("value", "grad"):
            a, b = got["ref"][which], got["cand"][which]
            if a is None or b is None:  # no gradient reached it (a const, the unused Softmax)
                assert which == "grad" and not np.any(a if a is not None else b), (n.id, n.op)
                continue
            assert a.dtype == b.dtype and a.shape == b.shape, (n.id, n.op, which)
            assert a.tobytes() == b.tobytes(), (n.id, n.op, n.name, which)
            checked += 1
    assert checked > len(runner.nodes)
    moved = sum(not np.array_equal(before[p.id], p.value) for p in wl.params)
    assert moved >= len(wl.params) // 2, (moved, len(wl.params))


@pytest.mark.parametrize("path", CASES)
def test_model_trains_a_step_on_the_tape_and_replays_it_on_host_bit_for_bit(path):
    runner = _pair(path)
    ops_used = {n.op for n in runner.nodes}
    assert ops_used <= set(KERNELS), sorted(ops_used - set(KERNELS))
    _step_bit_identical(runner)


def test_squeezenet_in_float64_and_fused_is_bit_identical_too():
    path = os.path.join(LIGHT, "light_squeezenet.onnx")
    _step_bit_identical(_pair(path, dtype="float64"))
    fused = _pair(path, fuse=True)
    assert fused.plan is not None and fused.plan.to_json()["segments"]
    _step_bit_identical(fused)


def test_parity_command_takes_a_model(tmp_path, capsys):
    import json

    from tapescope.app.cli import main

    out = tmp_path / "p.json"
    code = main(["parity", "--model", os.path.join(RESOURCES, "tiny_convnet.onnx"),
                 "--device", "host", "--steps", "2", "--fuse", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "bit-identical" in text
    rep = json.loads(out.read_text())
    assert rep["exact"] and any(n["op"] == "conv2d" for n in rep["nodes"])
    assert main(["parity", "--reinit", "--device", "host"]) == 2  # --reinit needs --model


def test_every_op_the_importer_records_has_host_kernels():
    """Each converter, fed the onnx package's node tests of its op: every tape op recorded is
    in the kernel library, and every converter recorded something."""
    from tapescope.core.onnx.coverage import recorded_ops

    recorded = recorded_ops()
    # Identity/Dropout record nothing (they pass their input on), nor do Cast/CastLike (the
    # tape's one type); SequenceAt and ConcatFromSequence take a sequence, which no node test
    # feeds from the tape (tests/models/test_exporter_metadata.py imports them)
    missing = sorted(set(CONVERTERS) - {k for k, v in recorded.items() if v}
                     - {"Identity", "Dropout", "Cast", "CastLike", "SequenceAt",
                        "ConcatFromSequence"})
    assert not missing, f"converters no node test exercised: {missing}"
    every = set().union(*recorded.values())
    assert every <= set(KERNELS), sorted(every - set(KERNELS))
    assert {"conv2d", "maxpool2d", "avgpool2d", "concat", "mean", "softmax"} <= every
