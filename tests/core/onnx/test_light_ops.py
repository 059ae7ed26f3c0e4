"""The tape forms the light models needed (Sum, LRN), weights as params, the model workload:
default losses, --reinit, and what an untrainable model says."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import Tape, ops, workloads
from tapescope.core.onnx import OnnxError, Session, import_to_tape, run
from tapescope.core.onnx.workload import OnnxWorkload, loss_kind


def _model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dt=TensorProto.DOUBLE):
    return helper.make_tensor_value_info(name, dt, shape)


def _save(tmp_path, model, name="m.onnx"):
    p = tmp_path / name
    p.write_bytes(model.SerializeToString())
    return str(p)


def _lrn_model(size, shape=(2, 7, 3, 4)):
    return _model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=2e-3, beta=0.75,
                                    bias=1.5)], [_vi("x", shape)], [_vi("y", shape)])


def test_sum_is_the_executors_left_fold_bit_for_bit_and_passes_gradient_to_every_input():
    rng = np.random.default_rng(0)
    xs = {k: rng.standard_normal((3, 5)) * 10.0 ** rng.integers(-8, 8, (3, 5)) for k in "abc"}
    m = _model([helper.make_node("Sum", ["a", "b", "c"], ["y"])],
               [_vi(k, [3, 5]) for k in "abc"], [_vi("y", [3, 5])])
    tape = Tape(np.float64)
    leaves = {k: tape.param(v, name=k) for k, v in xs.items()}  # Vars as inputs: get gradients
    imp = import_to_tape(m, tape, leaves)
    y = imp.outputs["y"]
    assert y.value.tobytes() == run(m, xs)["y"].tobytes()
    assert [n.op for n in tape.nodes if n.op not in ("const", "param")] == ["add", "add"]
    r = rng.standard_normal((3, 5))
    tape.backward(ops.sum(ops.mul(y, tape.const(r))))
    for k in "abc":
        assert imp.values[k].grad.tobytes() == r.tobytes()


@pytest.mark.parametrize("size", [5, 4, 1])
def test_lrn_matches_the_executor_and_its_gradient_matches_finite_differences(size):
    rng = np.random.default_rng(size)
    x = rng.standard_normal((2, 7, 3, 4)) * 3
    m = _lrn_model(size)
    tape = Tape(np.float64)
    imp = import_to_tape(m, tape, {"x": tape.param(x, name="x")})
    y = imp.outputs["y"]
    # the executor raises with numpy's pow, the tape with refmath's exp(beta*log(d)): a few ulp
    np.testing.assert_allclose(y.value, run(m, {"x": x})["y"], rtol=1e-14, atol=0)
    r = rng.standard_normal(x.shape)

    def f(xv):
        t = Tape(np.float64)
        out = import_to_tape(m, t, {"x": xv}).outputs["y"].value
        return float(np.sum(out * r))

    tape.backward(ops.sum(ops.mul(y, tape.const(r))))
    g = imp.values["x"].grad
    eps = 1e-6
    for idx in [(0, 0, 0, 0), (1, 3, 2, 1), (0, 6, 1, 3), (1, 1, 0, 2)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        fd = (f(xp) - f(xm)) / (2 * eps)
        assert abs(fd - g[idx]) <= 1e-7 * max(1.0, abs(fd)), (idx, fd, g[idx])


def test_constant_of_shape_weights_become_params_and_constant_nodes_stay_const():
    fill = helper.make_tensor("v", TensorProto.DOUBLE, [1], [0.5])
    two = helper.make_tensor("two", TensorProto.DOUBLE, [], [2.0])
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["w"], value=fill),
                helper.make_node("Unsqueeze", ["w", "ax"], ["w3"]),
                helper.make_node("Constant", [], ["k"], value=two),
                helper.make_node("MatMul", ["x", "w3"], ["h"]),
                helper.make_node("Mul", ["h", "k"], ["y"])],
               [_vi("x", [1, 2, 3])], [_vi("y", [1, 2, 3])],
               [numpy_helper.from_array(np.array([3, 3], np.int64), "s"),
                numpy_helper.from_array(np.array([0], np.int64), "ax")])
    tape = Tape(np.float64)
    imp = import_to_tape(m, tape, {"x": np.ones((1, 2, 3))})
    assert list(imp.params) == ["w3"]  # folded from a ConstantOfShape weight: trainable
    mul = next(n for n in tape.nodes if n.op == "mul")
    assert [tape.node(i).op for i in mul.inputs] == ["bmm", "const"]  # k: a Constant node


def test_an_op_without_a_tape_form_is_named_with_its_node():
    m = _model([helper.make_node("Hardmax", ["x"], ["y"], name="pick")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    with pytest.raises(OnnxError, match=r"'pick' \(Hardmax\).*op Hardmax has no tape form"):
        import_to_tape(m, Tape(np.float64), {"x": np.zeros((2, 3))})


def test_the_workload_refuses_an_untrainable_model_naming_the_op(tmp_path):
    m = _model([helper.make_node("Hardmax", ["x"], ["y"], name="pick")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    path = _save(tmp_path, m)
    with pytest.raises(workloads.WorkloadError, match="Hardmax"):
        workloads.get(f"onnx:{path}")


def _classifier(tmp_path, softmax: bool, pooled: bool = False):
    w = numpy_helper.from_array(np.linspace(-1, 1, 12).reshape(3, 4), "W")
    b = numpy_helper.from_array(np.array([0.1, -0.2, 0.3, 0.0]), "B")
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["z"])]
    out = "z"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["z"], ["p"], axis=1))
        out = "p"
    shape = [2, 4]
    if pooled:
        nodes.append(helper.make_node("Unsqueeze", [out, "axes"], ["q"]))
        out, shape = "q", [2, 4, 1, 1]
    inits = [w, b] + ([numpy_helper.from_array(np.array([2, 3], np.int64), "axes")]
                      if pooled else [])
    return _save(tmp_path, _model(nodes, [_vi("x", [2, 3])], [_vi(out, shape)], inits))


@pytest.mark.parametrize("softmax,pooled", [(True, False), (False, False), (False, True)])
def test_a_classifier_trains_on_cross_entropy_of_its_logits_against_seeded_classes(
        tmp_path, softmax, pooled):
    wl = OnnxWorkload(_classifier(tmp_path, softmax, pooled), seed=3)
    assert (wl.loss_kind, wl.n_classes) == ("cross_entropy", 4)
    loss = wl.record(0)
    assert loss.op == "cross_entropy"
    logits = wl.tape.node(loss.node.inputs[0])
    # the Softmax's input, never the probabilities
    assert logits.op in ("add", "reshape") and logits.shape == (2, 4)
    t0 = np.array(wl.inputs["targets"].value)
    assert np.array_equal(t0, np.array(wl.record(0) and wl.inputs["targets"].value))
    assert set(t0.tolist()) <= {0.0, 1.0, 2.0, 3.0}
    before = {k: np.array(v.value) for k, v in wl.weights.items()}
    losses = wl.train(3)
    assert all(np.isfinite(losses))
    assert any(not np.array_equal(before[k], v.value) for k, v in wl.weights.items())
    assert wl.describe_loss().startswith("cross-entropy")


def test_other_outputs_train_on_their_mean_and_a_scalar_output_is_the_loss(tmp_path):
    m = _model([helper.make_node("Mul", ["x", "W"], ["y"])], [_vi("x", [3])], [_vi("y", [3])],
               [numpy_helper.from_array(np.array([1.0, 2.0, 3.0]), "W")])
    wl = OnnxWorkload(_save(tmp_path, m, "vec.onnx"))
    assert wl.loss_kind == "mean" and wl.record(0).op == "mean"
    m2 = _model([helper.make_node("Mul", ["x", "W"], ["y"]),
                 helper.make_node("ReduceSum", ["y"], ["l"], keepdims=0)],
                [_vi("x", [3])], [_vi("l", [])],
                [numpy_helper.from_array(np.array([1.0, 2.0, 3.0]), "W")])
    wl2 = OnnxWorkload(_save(tmp_path, m2, "scalar.onnx"))
    assert wl2.loss_kind == "given"
    assert loss_kind(wl2.record(0))[0] == "given"


def test_reinit_is_seeded_by_role_and_resets_batch_norm_statistics(tmp_path):
    c = 4
    inits = [numpy_helper.from_array(np.full((c, 3, 3, 3), 7.0), "cw"),
             numpy_helper.from_array(np.full(c, 7.0), "cb"),
             numpy_helper.from_array(np.full(c, 7.0), "scale"),
             numpy_helper.from_array(np.full(c, 7.0), "bias"),
             numpy_helper.from_array(np.full(c, 7.0), "mean"),
             numpy_helper.from_array(np.full(c, 7.0), "var")]
    m = _model([helper.make_node("Conv", ["x", "cw", "cb"], ["h"], pads=[1, 1, 1, 1]),
                helper.make_node("BatchNormalization", ["h", "scale", "bias", "mean", "var"],
                                 ["y"])],
               [_vi("x", [1, 3, 5, 5])], [_vi("y", [1, c, 5, 5])], inits)
    path = _save(tmp_path, m)
    a, b, other = (OnnxWorkload(path, reinit=True, seed=s) for s in (1, 1, 2))
    w = a.weights["cw"].value
    assert np.array_equal(w, b.weights["cw"].value)
    assert not np.array_equal(w, other.weights["cw"].value)
    assert 0.1 < np.std(w) / np.sqrt(2.0 / 27) < 2.0  # He normal, fan_in 3*3*3
    assert np.array_equal(a.weights["scale"].value, np.ones(c))
    assert np.array_equal(a.weights["cb"].value, np.zeros(c))
    assert np.array_equal(a.weights["bias"].value, np.zeros(c))
    assert set(a.overrides) == {"mean", "var"}
    # BN now normalises with mean 0, var 1: y = h / sqrt(1 + eps)
    a.record(0)
    h = next(n for n in a.tape.nodes if n.op == "add" and n.shape == (1, c, 5, 5))
    y = a.tape.nodes[-2] if a.tape.nodes[-1].op == "mean" else a.tape.nodes[-1]
    assert np.all(np.isfinite(a.tape.value(y.id))) and h is not None
    plain = OnnxWorkload(path, seed=1)
    assert np.array_equal(plain.weights["cw"].value, np.full((c, 3, 3, 3), 7.0))


def test_session_of_a_light_style_model_imports_every_converter_it_needs():
    # the light models' shapes of LRN and Sum inside a convnet: conv -> LRN -> Sum with itself
    m = _model([helper.make_node("Conv", ["x", "w"], ["h"]),
                helper.make_node("LRN", ["h"], ["n"], size=3),
                helper.make_node("Sum", ["n", "h", "n"], ["y"])],
               [_vi("x", [1, 2, 4, 4])], [_vi("y", [1, 3, 2, 2])],
               [numpy_helper.from_array(np.linspace(-1, 1, 54).reshape(3, 2, 3, 3), "w")])
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4))
    tape = Tape(np.float64)
    imp = import_to_tape(Session(m, fold=False), tape, {"x": x})
    np.testing.assert_allclose(imp.outputs["y"].value, run(m, {"x": x})["y"], rtol=1e-14)
    assert [i["op_type"] for i in imp.onnx_nodes] == ["Conv", "LRN", "Sum"]
    conv = imp.onnx_nodes[0]
    assert tape.node(conv["first"]).op in ("param", "conv2d")
    assert conv["inputs"] == ["x", "w"]


def test_a_pytorch_export_matches_pytorch_and_its_weights_sit_in_their_layers():
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "resources", "models")
    path = os.path.join(root, "torch_cnn.onnx")
    x = np.load(os.path.join(root, "torch_cnn.input.x.npy"))
    want = np.load(os.path.join(root, "torch_cnn.expected.logits.npy"))  # PyTorch's own output
    tape = Tape(np.float32)
    imp = import_to_tape(path, tape, {"x": x})
    np.testing.assert_allclose(imp.outputs["logits"].value, want, rtol=1e-4, atol=1e-6)
    wl = OnnxWorkload(path)
    names = {p.name for p in wl.params}
    assert "head/Gemm/head.weight" in names  # scope of its layer; no '/'-made group of weights
    assert any(n.startswith("stem/stem.0/Conv/") for n in names), names
    assert wl.loss_kind == "cross_entropy" and wl.n_classes == 10
    assert all(np.isfinite(wl.train(2)))
