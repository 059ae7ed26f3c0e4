"""Imported ONNX models (conv, pooling, batch-norm composites) replay bit-identically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops

pytest.importorskip("tapescope.core.ops.nn",
                    reason="the imported-model ops (core/ops/nn.py) are absent")
onnx = pytest.importorskip("onnx")

MODELS = Path(__file__).resolve().parents[2] / "resources" / "models"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["tiny_convnet", "tiny_mlp"])
def test_imported_model_forward_backward(host, name, dtype):
    from tapescope.core.onnx.importer import import_to_tape

    path = MODELS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    model = onnx.load(str(path))
    x = np.load(MODELS / f"{name}.input.x.npy")
    tape = Tape(dtype)
    imp = import_to_tape(model, tape, {"x": x})
    outs = imp.outputs
    out = list(outs.values())[0] if isinstance(outs, dict) else outs[0]
    loss = ops.mean(out * out)
    tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    rep = gpu.parity.compare(tape, prog)
    assert rep.exact, rep.first_divergence
    assert any(n.grad is not None for n in rep.nodes if n.op == "param")
