"""Your weights (issue 45 item 4): ``safetensors.torch.save_file(model.state_dict(), W)`` of a
model trained in torch loads onto its ONNX export (exported before the training, so the file's
weights are not the state_dict's) with ``--weights W``, both exporters: PyTorch's names mapped
onto the export's (a transposed Linear weight is TorchScript's ``onnx::MatMul_N`` and dynamo's
``val_N``), the tape's first loss is torch's on the same batch from the same weights, and
``parity`` trains from them; a missing, extra or misshapen name, and an eval BatchNorm the
exporter folded into its Conv, are one line, exit 2."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

from tapescope.app.cli import main  # noqa: E402
from tapescope.core.onnx.errors import OnnxError  # noqa: E402
from tapescope.core.onnx.workload import OnnxWorkload  # noqa: E402


class MLP(torch.nn.Module):
    """Linear on a 3-D input (exported as MatMul of the transposed weight), LayerNorm, a
    Linear head (Gemm) on the mean over positions."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 6)
        self.ln = torch.nn.LayerNorm(6)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.ln(torch.tanh(self.fc(x))).mean(1))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.bn = torch.nn.BatchNorm2d(2)
        self.fc = torch.nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def _train(m, x, steps=3):
    """A few SGD steps in torch: the weights then differ from the exported file's."""
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    y = torch.tensor([0, 2])
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()


def _export(m, x, path, dynamo, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), str(path), dynamo=dynamo, **kw)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sd")
    torch.manual_seed(0)
    out = {}
    mlp = MLP().eval()
    x = torch.randn(2, 5, 4)
    out["mlp_ts"] = _export(mlp, x, d / "mlp_ts.onnx", False)
    try:
        out["mlp_dy"] = _export(mlp, x, d / "mlp_dy.onnx", True)
    except Exception as exc:  # noqa: BLE001  (dynamo is optional in torch builds)
        out["mlp_dy_error"] = str(exc)
    _train(mlp, x)
    out["mlp_sd"] = {k: v.detach().clone() for k, v in mlp.state_dict().items()}
    save_file(mlp.state_dict(), str(d / "mlp.safetensors"))
    out["mlp_w"] = str(d / "mlp.safetensors")
    out["mlp"] = mlp

    cnn = CNN()
    xc = torch.randn(2, 1, 6, 6)
    out["cnn_eval"] = _export(cnn.eval(), xc, d / "cnn_eval.onnx", False)
    cnn.train()
    out["cnn_train"] = _export(cnn, xc, d / "cnn_train.onnx", False,
                               training=torch.onnx.TrainingMode.TRAINING,
                               do_constant_folding=False)
    _train(cnn, xc)  # (and the running statistics move)
    save_file(cnn.state_dict(), str(d / "cnn.safetensors"))
    out["cnn_w"] = str(d / "cnn.safetensors")
    out["cnn_sd"] = {k: v.detach().clone() for k, v in cnn.state_dict().items()}
    out["dir"] = d
    return out


def _torch_loss(m, wl):
    """torch's loss on the workload's batch 0 (its inputs and targets), in float64."""
    b = wl.batch(0)
    m64 = type(m)()
    m64.load_state_dict(m.state_dict())
    m64 = m64.double().train(m.training)
    x = torch.from_numpy(np.asarray(b[next(iter(wl.input_specs))], np.float64))
    t = torch.from_numpy(np.asarray(b[wl.target_name]).astype(np.int64))
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(m64(x), t))


@pytest.mark.parametrize("kind", ["mlp_ts", "mlp_dy"])
def test_state_dict_loads_onto_either_export(files, kind):
    if kind not in files:
        pytest.fail(f"the dynamo export failed: {files.get('mlp_dy_error')}")
    before = OnnxWorkload(files[kind], dtype=np.float64)
    wl = OnnxWorkload(files[kind], dtype=np.float64, weights=files["mlp_w"])
    sd = {k: v.numpy() for k, v in files["mlp_sd"].items()}
    # every state_dict tensor is a weight of the tape, bit for bit (the MatMul's transposed)
    got = {k: v.value for k, v in wl.weights.items()}
    assert len(got) == len(sd)
    matched = set()
    for name, a in sd.items():
        hits = [k for k, v in got.items() if v.shape == a.shape and np.array_equal(v, a)
                or v.shape == a.T.shape and a.ndim == 2 and np.array_equal(v, a.T)]
        assert hits, name
        matched.update(hits)
    assert matched == set(got)
    # ... which the file's were not (the export is of the untrained model)
    assert any(not np.array_equal(before.weights[k].value, got[k]) for k in got)
    # the tape's first loss is torch's on the same batch from the same weights
    loss = wl.tape.value(wl.record(0))
    ref = _torch_loss(files["mlp"], wl)
    assert loss == pytest.approx(ref, rel=1e-10)
    assert before.tape.value(before.record(0)) != pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("kind", ["mlp_ts", "mlp_dy"])
def test_parity_trains_from_the_state_dict(files, kind, capsys):
    if kind not in files:
        pytest.fail(f"the dynamo export failed: {files.get('mlp_dy_error')}")
    out = files["dir"] / f"{kind}.json"
    assert main(["parity", "--model", files[kind], "--weights", files["mlp_w"], "--device",
                 "host", "--steps", "2", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["exact"]
    tape_loss = rep["losses"][0]["reference"]
    wl = OnnxWorkload(files[kind], dtype=np.float32, weights=files["mlp_w"])
    assert tape_loss == pytest.approx(_torch_loss(files["mlp"], wl), rel=1e-5)


def test_buffers_set_the_running_statistics(files):
    wl = OnnxWorkload(files["cnn_train"], dtype=np.float64, weights=files["cnn_w"])
    sd = files["cnn_sd"]
    for k in ("bn.running_mean", "bn.running_var"):
        assert np.array_equal(wl.overrides[k], sd[k].numpy())
    for k in ("conv.weight", "bn.weight", "fc.weight"):
        assert np.array_equal(wl.weights[k].value, sd[k].numpy())
    # training-mode batch norm: the loss is torch's in train mode on the same batch
    cnn = CNN()
    cnn.load_state_dict(sd)
    cnn.train()
    assert wl.tape.value(wl.record(0)) == pytest.approx(_torch_loss(cnn, wl), rel=1e-10)


def _one_line_exit_2(capsys, model, weights, *want):
    assert main(["parity", "--model", model, "--weights", weights, "--device", "host",
                 "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in want:
        assert w in err, err
    return err


def test_hostile_state_dicts(files, tmp_path, capsys):
    sd = dict(files["mlp_sd"])
    m = files["mlp_ts"]
    missing = {k: v for k, v in sd.items() if k != "ln.bias"}
    save_file(missing, str(tmp_path / "missing.safetensors"))
    _one_line_exit_2(capsys, m, str(tmp_path / "missing.safetensors"), "'ln.bias'",
                     "not in the file")
    extra = {**sd, "extra.weight": torch.ones(3)}
    save_file(extra, str(tmp_path / "extra.safetensors"))
    _one_line_exit_2(capsys, m, str(tmp_path / "extra.safetensors"),
                     "'extra.weight' is not a weight of the model (its weights: ")
    shape = {**sd, "fc.weight": torch.ones(6, 5)}
    save_file(shape, str(tmp_path / "shape.safetensors"))
    _one_line_exit_2(capsys, m, str(tmp_path / "shape.safetensors"), "'fc.weight'",
                     "(6, 5)")
    shape = {**sd, "ln.weight": torch.ones(7)}
    save_file(shape, str(tmp_path / "shape2.safetensors"))
    _one_line_exit_2(capsys, m, str(tmp_path / "shape2.safetensors"),
                     "'ln.weight' has shape (7,), the model's is (6,)")
    # an eval-mode BatchNorm folded into the Conv: which names, why, and what to do
    _one_line_exit_2(capsys, files["cnn_eval"], files["cnn_w"], "'bn.weight'",
                     "folded an eval-mode BatchNorm into the Conv",
                     "TrainingMode.TRAINING")
    with pytest.raises(OnnxError, match="could not be mapped"):
        OnnxWorkload(files["cnn_eval"], weights=files["cnn_w"])
