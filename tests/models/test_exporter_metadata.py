"""What the exporters do to your module's names and parameters (issue 45 items 4 and 5): the
graph and ``--json`` show PyTorch's names (``blocks.0.attn.qkv.weight.T``), not ``val_12`` or
``onnx::MatMul_135``; a zero bias dynamo's optimizer dropped comes back as the parameter it is
(it trains as PyTorch's does); TorchScript's ``tensor_split`` (SplitToSequence + SequenceAt)
has a tape form. Each exported at test time, both exporters where the case is theirs."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch", reason="tests/models needs torch (the test extra installs it)")
from torch import nn  # noqa: E402

from tapescope.app.cli import main  # noqa: E402
from tapescope.core.onnx.executor import Session  # noqa: E402
from tapescope.core.onnx.importer import import_to_tape  # noqa: E402
from tapescope.core.onnx.workload import OnnxWorkload  # noqa: E402
from tapescope.core.tape import Tape  # noqa: E402
from tests.models import zoo  # noqa: E402

RENAMED = re.compile(r"(^|[./])(val_\d+|onnx::\w+)$")


def _export(model, example, path, dynamo: bool) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(path), dynamo=dynamo)
    return str(path)


@pytest.fixture(scope="module")
def vits(tmp_path_factory):
    """vit_sdpa and vit_mha (default init: MultiheadAttention's out_proj.bias is zeros), each
    exporter: {(family, dynamo): path}."""
    d = tmp_path_factory.mktemp("vit")
    return {(n, dy): zoo.export(n, d / f"{n}-{dy}.onnx", dy)
            for n in ("vit_sdpa", "vit_mha") for dy in (False, True)}


@pytest.mark.parametrize("dynamo", [False, True], ids=["ts", "dynamo"])
def test_graph_and_json_show_pytorch_names(vits, tmp_path, dynamo):
    path = vits["vit_sdpa", dynamo]
    inits = {t.name for t in onnx.load(path).graph.initializer}
    renamed = [n for n in inits if RENAMED.search(n)]
    assert renamed, inits  # the exporter did rename the qkv weight (val_12 / onnx::MatMul_N)
    wl = OnnxWorkload(path, dtype=np.float32)
    leaves = {p.name.rsplit("/", 1)[-1]: p for p in wl.params}
    assert not [n for n in leaves if RENAMED.search(n)], sorted(leaves)
    module = dict(zoo.module("vit_sdpa").named_parameters())
    # every weight under the module's name (a Linear's as the .T the file holds), its value
    # the module's
    for name, p in leaves.items():
        base = name.removesuffix(".T")
        want = module[base].detach().numpy()
        assert np.array_equal(np.asarray(p.value), want.T if name.endswith(".T") else want), name
    assert "blocks.0.attn.qkv.weight.T" in leaves
    assert len(leaves) == len(module)
    out = tmp_path / "p.json"
    assert main(["parity", "--model", path, "--device", "host", "--steps", "1",
                 "--json", str(out)]) == 0
    nodes = json.loads(out.read_text())["nodes"]
    names = [n["name"] or "" for n in nodes if n["op"] == "param"]
    assert len(names) == len(module)
    assert any(n.endswith("blocks.0.attn.qkv.weight.T") for n in names)
    assert not [n for n in names if RENAMED.search(n)]  # (constants keep the file's names)
    # the file opened without a workload (File > Open, gui M.onnx) names it the same way
    tape = Tape(np.float32)
    import_to_tape(Session(path), tape, {k: v for k, v in wl.batch_inputs(1).items()})
    assert "blocks.0.attn.qkv.weight.T" in {p.name.rsplit("/", 1)[-1] for p in tape.params()}
    # MultiheadAttention's packed projection: in_proj_weight, not '<scope>.weight'
    mha = OnnxWorkload(vits["vit_mha", dynamo], dtype=np.float32)
    assert "blocks.0.attn.in_proj_weight.T" in {p.name.rsplit("/", 1)[-1] for p in mha.params}


def test_both_exporters_scope_a_weight_in_the_same_module_path(vits):
    """dynamo's namespace holds each module's full path (blocks.0/blocks.0.attn/...); the
    import keeps each one's own part, so the graph groups a layer as TorchScript's does."""
    def scopes(path):
        wl = OnnxWorkload(path, dtype=np.float32)
        return {p.name.rsplit("/", 1)[-1]: p.name.rsplit("/", 2)[0] if p.name.count("/") > 1
                else "" for p in wl.params}

    ts, dy = scopes(vits["vit_sdpa", False]), scopes(vits["vit_sdpa", True])
    assert ts == dy, (ts, dy)
    assert dy["blocks.0.attn.qkv.weight.T"] == "blocks.0/attn/qkv"


class ZeroBiases(nn.Module):
    """A Linear, a Conv2d and a ConvTranspose2d whose biases are zeros (as a user zeroes them,
    as nn.MultiheadAttention initialises out_proj.bias)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 5)
        self.conv = nn.Conv2d(2, 3, 3)
        self.up = nn.ConvTranspose2d(3, 2, 2, stride=2)
        with torch.no_grad():
            for m in (self.lin, self.conv, self.up):
                m.bias.zero_()

    def forward(self, img, x):
        y = self.up(torch.tanh(self.conv(img))).mean((1, 2, 3))
        z = torch.tanh(self.lin(x))
        return torch.stack([z, z * y[:, None], z + y[:, None] ** 2], -1)  # [2, 5, 3]: the mean


@pytest.fixture(scope="module")
def zero_biases(tmp_path_factory):
    d = tmp_path_factory.mktemp("zb")
    torch.manual_seed(0)
    model = ZeroBiases()
    example = (torch.randn(2, 2, 5, 5), torch.randn(2, 6))
    return model, {dy: _export(model, example, d / f"zb-{dy}.onnx", dy) for dy in (False, True)}


def test_a_zero_bias_dynamo_dropped_is_a_parameter_again_and_trains_as_pytorchs(zero_biases):
    model, paths = zero_biases
    names = {n for n, _ in model.named_parameters()}
    biases = {"lin.bias", "conv.bias", "up.bias"}
    in_file = {t.name for t in onnx.load(paths[True]).graph.initializer}
    assert biases.isdisjoint(in_file)  # what dynamo does: all three dropped from the file
    wl = OnnxWorkload(paths[True], dtype=np.float64)
    assert sorted(wl.restored_biases) == sorted(biases)
    assert set(wl.weights) == names and not wl.input_notes
    # the gradient PyTorch gives each bias, on the same batch
    batch = wl.batch(1)
    loss = wl.record(1)
    wl.tape.backward(loss)
    m64 = ZeroBiases().double()
    m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    feeds = [torch.from_numpy(batch[i.name].astype(np.float64))
             for i in onnx.load(paths[True]).graph.input]
    want = m64(*feeds).mean()
    want.backward()
    np.testing.assert_allclose(float(np.asarray(loss.value)), want.item(), rtol=1e-12)
    grads = dict(m64.named_parameters())
    for b in biases:
        got = wl.tape.grad(wl.weights[b])
        assert got is not None and np.any(got != 0), b
        np.testing.assert_allclose(got, grads[b].grad.numpy(), rtol=1e-10, atol=1e-14)
    # the TorchScript export keeps them: both files train the same model, step for step
    a = OnnxWorkload(paths[False], dtype=np.float64).train(2)
    b = OnnxWorkload(paths[True], dtype=np.float64).train(2)
    np.testing.assert_allclose(a, b, rtol=1e-12)


class Shared(nn.Module):
    """One Linear with a zero bias called twice: both Gemms lose it in the dynamo file."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        with torch.no_grad():
            self.lin.bias.zero_()

    def forward(self, x):
        return self.lin(torch.tanh(self.lin(x)))


def test_a_module_called_twice_gets_its_one_bias_back_in_both_places(tmp_path):
    torch.manual_seed(0)
    model = Shared()
    paths = {dy: _export(model, (torch.randn(2, 4),), tmp_path / f"s-{dy}.onnx", dy)
             for dy in (False, True)}
    wl = OnnxWorkload(paths[True], dtype=np.float64)
    assert wl.restored_biases == ["lin.bias"] and sorted(wl.weights) == ["lin.bias",
                                                                         "lin.weight"]
    assert all(len(n.input) == 3 for n in wl.sess.model.graph.node if n.op_type == "Gemm")
    np.testing.assert_array_equal(wl.train(3),
                                  OnnxWorkload(paths[False], dtype=np.float64).train(3))


def test_multihead_attentions_zero_out_proj_bias_is_a_weight(vits):
    wl = OnnxWorkload(vits["vit_mha", True], dtype=np.float32)
    assert wl.restored_biases == ["blocks.0.attn.out_proj.bias"]
    assert len(wl.weights) == len(list(zoo.module("vit_mha").named_parameters()))
    before = np.array(wl.weights["blocks.0.attn.out_proj.bias"].value)
    assert not before.any()
    wl.train(2)
    assert wl.weights["blocks.0.attn.out_proj.bias"].value.any()  # it trained


class TensorSplit(nn.Module):
    """``tensor_split`` and ``unbind``: TorchScript exports SplitToSequence + SequenceAt."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        a = torch.tanh(self.lin(x))
        p = a.tensor_split(3, dim=-1)
        return torch.cat([p[0] * p[2], p[1] + a.unbind(0)[1][:2]], -1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_split_to_sequence_trains_and_replays_bit_for_bit(tmp_path, dtype):
    torch.manual_seed(0)
    path = _export(TensorSplit(), (torch.randn(2, 6),), tmp_path / "split.onnx", False)
    ops_in_file = {n.op_type for n in onnx.load(path).graph.node}
    assert {"SplitToSequence", "SequenceAt"} <= ops_in_file
    wl = OnnxWorkload(path, dtype=np.dtype(dtype).type)
    batch = wl.batch_inputs(1)
    loss = wl.record(1)
    out = next(iter(Session(path).run({k: v.astype(np.float32) for k, v in batch.items()})
                    .values()))
    # the tape's first output (before the loss) is the executor's
    logits = wl.tape.value(wl.tape.node(loss.id).inputs[0])
    np.testing.assert_allclose(np.asarray(logits).reshape(out.shape), out, rtol=1e-6)
    out_json = tmp_path / "p.json"
    assert main(["parity", "--model", path, "--device", "host", "--dtype", dtype, "--steps",
                 "2", "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["exact"]


@pytest.mark.parametrize("new_axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sequence_ops_of_tape_values_are_the_executor_bit_for_bit(dtype, new_axis):
    """SplitToSequence (a split given, and keepdims=0 without one), SequenceAt and
    ConcatFromSequence (new_axis 0 and 1) of tape values: the executor's values bit for bit,
    and each element's gradient flows back to its slice of x."""
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    nodes = [
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Constant", [], ["sp"], value=helper.make_tensor(
            "sp", TensorProto.INT64, [3], [1, 2, 1])),
        helper.make_node("SplitToSequence", ["t", "sp"], ["s"], axis=1),
        helper.make_node("SplitToSequence", ["t"], ["u"], axis=0, keepdims=0),
        helper.make_node("Constant", [], ["i"], value=helper.make_tensor(
            "i", TensorProto.INT64, [], [-1])),
        helper.make_node("SequenceAt", ["u", "i"], ["row"]),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
            "one", TensorProto.INT64, [], [1])),
        helper.make_node("SequenceAt", ["s", "one"], ["mid"]),  # columns 1..2
        helper.make_node("ConcatFromSequence", ["u"], ["c"], axis=0, new_axis=new_axis),
        helper.make_node("ReduceSum", ["c"], ["cs"], keepdims=0),
        helper.make_node("ReduceSum", ["row"], ["rs"], keepdims=0),
        helper.make_node("ReduceSum", ["mid"], ["ms"], keepdims=0),
        helper.make_node("Add", ["cs", "rs"], ["y0"]),
        helper.make_node("Add", ["y0", "ms"], ["y"]),
    ]
    g = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", f, [3, 4])],
                          [helper.make_tensor_value_info("y", f, []),
                           helper.make_tensor_value_info("c", f, [3, 4] if new_axis
                                                         else [12])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(dtype)
    want = Session(model).run({"x": x})
    tape = Tape(dtype)
    xv = tape.param(x, name="x")
    imp = import_to_tape(Session(model, fold=False), tape, {"x": xv})
    y = imp.outputs["y"]
    assert np.asarray(y.value).tobytes() == np.asarray(want["y"], dtype).tobytes()
    c = np.asarray(imp.outputs["c"].value)
    assert c.shape == ((3, 4) if new_axis else (12,)) == want["c"].shape
    assert c.tobytes() == want["c"].tobytes()
    tape.backward(y)
    d = 1 - np.tanh(x.astype(np.float64)) ** 2
    d = d * (1 + (np.arange(3)[:, None] == 2) + ((np.arange(4) >= 1) & (np.arange(4) <= 2)))
    np.testing.assert_allclose(tape.grad(xv), d, rtol=1e-6)


@pytest.mark.parametrize("dynamo", [False, True], ids=["ts", "dynamo"])
def test_a_multihead_attention_state_dict_loads_onto_either_export(vits, tmp_path, dynamo):
    """--weights from vit_mha's state_dict: TorchScript's onnx::MatMul_N is in_proj_weight
    (the packed projection), dynamo's dropped zero out_proj.bias is a weight again: every name
    maps, and each weight is the state_dict's (transposed where the file holds W.T)."""
    from safetensors.torch import save_file

    module = zoo.module("vit_mha")
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.125)  # not the exported values: the file's weights must be replaced
    sd = {k: v.contiguous() for k, v in module.state_dict().items()}
    save_file(sd, str(tmp_path / "w.safetensors"))
    wl = OnnxWorkload(vits["vit_mha", dynamo], dtype=np.float32,
                      weights=str(tmp_path / "w.safetensors"))
    by_name = {p.name.rsplit("/", 1)[-1]: np.asarray(p.value) for p in wl.params}
    assert len(by_name) == len(sd)
    for name, v in by_name.items():
        want = sd[name.removesuffix(".T")].numpy()
        assert np.array_equal(v, want.T if name.endswith(".T") else want), name
