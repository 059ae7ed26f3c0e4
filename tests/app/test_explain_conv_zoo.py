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
    out = tmp_path / "p.json"
    code = main(["parity", "--model", os.path.join(MODELS, f"{model}.onnx"), "--device",
                 "torch", "--explain", "--steps", "1", "--dtype", dtype, "--json", str(out)])
    capsys.readouterr()
    intro = json.loads(out.read_text())["introduced"]
    assert code == 1 and intro
    convs = [e for e in intro if e["op"] == "conv2d" and e["which"] == "value"]
    assert convs, "the torch run's convolutions differ from the reference's order"
    assert all(e["cause"] != "unknown" for e in convs), convs
    assert all(e["class"] == VALID for e in intro), [e for e in intro if e["class"] != VALID]
