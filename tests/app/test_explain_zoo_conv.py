"""issue 44, done-when: the tests/models zoo with --device torch: every conv2d value is explained
(ConvBN's training-mode convolution, the U-Net's three; float64 and float32), and every array
PyTorch's CPU run introduced is a valid reordering."""

from __future__ import annotations

import json

import pytest

from tapescope.app.cli import main

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.xdist_group("explain_zoo_conv")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tests.models import zoo

    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("measured with PyTorch 2.13's AVX-512 kernels (MKL, oneDNN)")
    d = tmp_path_factory.mktemp("zoo")
    return {name: zoo.export(name, d / f"{name}.onnx", dynamo=False)
            for name in ("convbn_train", "unet")}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("model", ["convbn_train", "unet"])
def test_zoo_conv2d_values_are_explained(exported, tmp_path, capsys, model, dtype):
    out = tmp_path / "p.json"
    code = main(["parity", "--model", exported[model], "--device", "torch", "--explain",
                 "--steps", "2", "--dtype", dtype, "--json", str(out)])
    capsys.readouterr()
    intro = json.loads(out.read_text())["introduced"]
    assert code == 1 and intro
    convs = [e for e in intro if e["op"] == "conv2d" and e["which"] == "value"]
    assert convs, "the torch run's convolutions differ from the reference's order"
    assert all(e["cause"] != "unknown" for e in convs), convs
    assert all(e["class"] == "valid reordering" for e in intro), \
        [e for e in intro if e["class"] != "valid reordering"]
