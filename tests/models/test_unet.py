"""The zoo's UNet (tests/models/zoo.py ``TinyUNet``) as both exporters write it: ConvTranspose,
Resize (linear and nearest) and InstanceNormalization (GroupNorm) reach the tape as
conv_transpose2d and gathers, not folds; fresh GroupNorms (ones and zeros, which dynamo's
optimizer merges into one initializer) train as the module's two; the torch candidate runs it
(test_zoo trains and replays it bit for bit, test_parameters holds its weights to the module's).
Each file is exported once for the module."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest

pytest.importorskip("torch", reason="tests/models needs torch (the test extra installs it)")

from tapescope.app.runs import PairRunner, SessionConfig  # noqa: E402
from tapescope.core.onnx.workload import OnnxWorkload, model_spec  # noqa: E402
from tests.models import zoo  # noqa: E402

# one worker runs the module: its fixture exports each file once (dynamo's export is ~10 s)
pytestmark = pytest.mark.xdist_group("models_unet")


class _Exports(dict):
    """exporter -> file, each exported when first asked for."""

    def __init__(self, d) -> None:
        super().__init__()
        self.d = d

    def __missing__(self, dynamo: bool) -> str:
        self[dynamo] = zoo.export("unet", self.d / f"unet-{dynamo}.onnx", dynamo)
        return self[dynamo]


@pytest.fixture(scope="module")
def unet(tmp_path_factory):
    return _Exports(tmp_path_factory.mktemp("unet"))


@pytest.mark.parametrize("dynamo", [False, True], ids=["ts", "dynamo"])
def test_upsampling_layers_reach_the_tape(unet, dynamo):
    nodes = onnx.load(unet[dynamo]).graph.node
    seen = collections.Counter(n.op_type for n in nodes)
    assert seen["ConvTranspose"] == 2 and seen["InstanceNormalization"] == 2
    modes = sorted(a.s.decode() for n in nodes if n.op_type == "Resize"
                   for a in n.attribute if a.name == "mode")
    assert modes == ["linear", "nearest"]
    wl = OnnxWorkload(unet[dynamo], dtype=np.float32)
    wl.record(0)
    ops = collections.Counter(n.op for n in wl.tape.nodes)
    assert ops["conv_transpose2d"] == 2
    assert ops["gather"] == 2 + 2 * 2  # nearest: one per axis; bilinear: two taps per axis
    tw = [wl.tape.node(n.inputs[1]) for n in wl.tape.nodes if n.op == "conv_transpose2d"]
    assert all(n.op == "param" for n in tw)  # the ConvTranspose2d weights train


def test_fresh_groupnorms_train_as_two_under_dynamo(unet):
    """dynamo's optimizer folds gn1's weight (ones, unsqueezed to [8, 1, 1]) and gn2's equal
    one into one initializer; the import splits gn2's out again by the nodes' fx metadata."""
    module = zoo.module("unet")
    wl = OnnxWorkload(unet[True], dtype=np.float32)
    assert len(wl.weights) == len(list(module.named_parameters())) == 14
    assert {"gn2.weight", "gn2.bias"} <= set(wl.weights)
    assert not [n for n in wl.input_notes if n.startswith("parameters ")]
    gn1 = next(k for k in wl.weights if k != "gn2.weight" and wl.weights[k].shape == (8, 1, 1)
               and np.all(np.asarray(wl.weights[k].value) == 1))
    assert np.all(np.asarray(wl.weights["gn2.weight"].value) == 1)
    assert np.isfinite(wl.train(2)).all()
    a, b = (np.asarray(wl.weights[k].value) for k in (gn1, "gn2.weight"))
    assert not np.array_equal(a, b)  # each took its own gradient


def test_torch_candidate_runs_the_unet(unet):
    r = PairRunner(SessionConfig(workload=model_spec(unet[False]), device="torch",
                                 dtype="float64", explain=True))
    res = r.step()
    assert np.isfinite(res.loss_cand)
    assert res.loss_cand == pytest.approx(res.loss_ref, rel=1e-9)
    ops = {n.op for n in r.nodes}
    assert {"conv_transpose2d", "gather"} <= ops


@pytest.mark.slow
def test_dynamo_unoptimized_export_with_its_casts_trains_bit_for_bit(tmp_path):
    """dynamo with ``optimize=False`` keeps its CastLike nodes (8 in the UNet): each is the
    value itself on the tape, and the pair replays bit for bit."""
    import warnings

    import torch

    _, example, _ = zoo.FAMILIES["unet"]
    path = str(tmp_path / "unet-noopt.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(zoo.module("unet"), example(), path, dynamo=True, optimize=False)
    casts = [n for n in onnx.load(path).graph.node if n.op_type in ("Cast", "CastLike")]
    assert casts
    r = PairRunner(SessionConfig(workload=model_spec(path), device="host", dtype="float32"))
    for _ in range(2):
        res = r.step()
        assert res.exact, res.first
    assert len(r.ref.wl.params) == len(list(zoo.module("unet").parameters()))
