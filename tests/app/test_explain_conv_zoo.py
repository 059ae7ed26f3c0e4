"""issue 44, done-when: on the model zoo with --device torch, conv2d values are explained (they
had no variant: a CNN's first divergence was always `unknown`), and every introduced array of
PyTorch's CPU run is a valid reordering."""

from __future__ import annotations

import json
import os

import pytest

from tapescope.app.cli import main
from tapescope.core.bounds import VALID

pytest.importorskip("torch")
MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "resources", "models")


def _mkl_avx512() -> bool:
    import torch

    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512f" in flags and "Math Kernel Library Version 2024.2" in \
        torch.__config__.show()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("model", ["torch_cnn", "tiny_convnet"])
def test_conv2d_values_are_explained(tmp_path, capsys, model, dtype):
    if not _mkl_avx512():
        pytest.skip("measured with PyTorch 2.13 (MKL 2024.2, oneDNN 3.12) on AVX-512")
    _conv_values_explained(os.path.join(MODELS, f"{model}.onnx"), "1", dtype, tmp_path, capsys)


def _conv_values_explained(model: str, steps: str, dtype: str, tmp_path, capsys) -> None:
    """`parity --device torch --explain` on ``model``: its conv2d values differ and each is
    explained, and every array it introduced is a valid reordering."""
    out = tmp_path / "p.json"
    code = main(["parity", "--model", model, "--device", "torch", "--explain", "--steps", steps,
                 "--dtype", dtype, "--json", str(out)])
    capsys.readouterr()
    intro = json.loads(out.read_text())["introduced"]
    assert code == 1 and intro
    convs = [e for e in intro if e["op"] == "conv2d" and e["which"] == "value"]
    assert convs, "the torch run's convolutions differ from the reference's order"
    assert all(e["cause"] != "unknown" for e in convs), convs
    assert all(e["class"] == VALID for e in intro), [e for e in intro if e["class"] != VALID]


# the tests/models zoo (exported here): ConvBN's training-mode convolution, the U-Net's three
@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import torch

    from tests.models import zoo

    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("measured with PyTorch 2.13's AVX-512 kernels (MKL, oneDNN)")
    d = tmp_path_factory.mktemp("zoo")
    return {name: zoo.export(name, d / f"{name}.onnx", dynamo=False)
            for name in ("convbn_train", "unet")}


@pytest.mark.xdist_group("explain_zoo_conv")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("model", ["convbn_train", "unet"])
def test_zoo_conv2d_values_are_explained(exported, tmp_path, capsys, model, dtype):
    _conv_values_explained(exported[model], "2", dtype, tmp_path, capsys)
