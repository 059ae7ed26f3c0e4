"""3-D convolutions and pools (ONNX Conv, ConvTranspose, MaxPool, AveragePool with a 5-D input,
what nn.Conv3d, nn.ConvTranspose3d, F.max_pool3d, F.avg_pool3d export) import as the tape's
conv3d, conv_transpose3d, maxpool3d and avgpool3d ops: the 2-D ops' orders with a depth axis
(docs/reference-order-nn.md). The tape's values are the executor's bit for bit (and
onnxruntime's within float32 rounding), the gradients match finite differences, and the host
backend (the CUDA source; the 2-D ops' kernels with 3-D index maps) trains the model bit for
bit in float32, float16, bfloat16 and under --amp.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from tapescope.app.cli import main
from tapescope.core import Tape, gradcheck
from tapescope.core.onnx import import_to_tape, run

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


class C3(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv3d(2, 4, 3, padding=1)
        self.c2 = nn.Conv3d(4, 4, (2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), groups=2,
                            dilation=(2, 1, 1))
        self.up = nn.ConvTranspose3d(4, 4, (2, 3, 2), stride=(1, 2, 2), padding=(0, 1, 0),
                                     output_padding=(0, 1, 1), groups=2)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        h = F.max_pool3d(F.relu(self.c1(x)), (1, 2, 2), padding=(0, 1, 0), ceil_mode=True)
        h = F.relu(self.up(F.relu(self.c2(h))))
        h = F.avg_pool3d(h, 2, stride=1, padding=1, count_include_pad=False)
        return self.head(h.mean((2, 3, 4)))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("c3") / "c3.onnx"
    torch.manual_seed(0)
    x = torch.randn(2, 2, 5, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(C3(), (x,), str(path), dynamo=False)
    return str(path), x.numpy()


def test_import_is_the_executor_bit_for_bit(model):
    import onnxruntime as ort

    path, x = model
    tape = Tape(np.float32)
    imp = import_to_tape(path, tape, {"input.1": x})
    assert tape.ok, tape.error
    assert sum(n.op == "conv3d" for n in tape.nodes) == 2
    assert sum(n.op == "conv_transpose3d" for n in tape.nodes) == 1
    assert {"maxpool3d", "avgpool3d"} <= {n.op for n in tape.nodes}
    ref = run(path, {"input.1": x})
    ((name, v),) = imp.outputs.items()
    got = tape.value(v)
    assert np.array_equal(got.view(np.uint32), ref[name].view(np.uint32))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (want,) = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(
        None, {"input.1": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["conv3d", "conv_transpose3d", "maxpool3d", "avgpool3d"])
def test_gradient_matches_finite_differences(op):
    r = gradcheck.check_op(op)
    assert r.ok and r.inputs_checked > 0, r
    for dt in ("float16", "bfloat16"):
        h = gradcheck.check_op_half(op, dt)
        assert h.ok and h.inputs_checked > 0, (dt, h)


@pytest.mark.parametrize("flags", [["--dtype", "float32"], ["--dtype", "float16"],
                                   ["--dtype", "bfloat16"], ["--amp", "bfloat16"]],
                         ids=["float32", "float16", "bfloat16", "amp-bf16"])
def test_host_trains_conv3d_bit_for_bit(tmp_path, capsys, model, flags):
    out = tmp_path / "p.json"
    rc = main(["parity", "--model", model[0], "--device", "host", "--steps", "2", "--json",
               str(out), *flags])
    text = capsys.readouterr()
    assert rc == 0, text.out + text.err
    rep = json.loads(out.read_text())
    assert rep["exact"] is True and rep["dtype"] == flags[1]
    assert sum(n["op"] == "conv3d" for n in rep["nodes"]) == 2
    assert {"conv_transpose3d", "maxpool3d", "avgpool3d"} <= {n["op"] for n in rep["nodes"]}
    (l1, l2) = rep["losses"]
    assert l1["reference"] == l1["candidate"] and l2["reference"] == l2["candidate"]
    assert l1["reference"] != l2["reference"]
