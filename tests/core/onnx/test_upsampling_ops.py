"""ConvTranspose, Resize / Upsample and InstanceNormalization have tape forms (issue 45 item 2:
a UNet's ConvTranspose2d, F.interpolate and GroupNorm), and 1-D Conv, ConvTranspose, MaxPool
and AveragePool (an audio model's) the 2-D ones' on a unit height: imported, the forward is the
executor's bit for bit (float32 and float64) and the gradient, weights included, is the derivative
(float64 central differences along random directions). What has no tape form is refused in
one line naming the attribute."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import ops
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.importer import import_to_tape
from tapescope.core.tape import Tape

DTYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(op, x_shape, dtype, inits=(), inputs=None, opset=19, **attrs):
    tp = DTYPES[dtype]
    names = inputs if inputs is not None else ["x", *(k for k, _ in inits)]
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], op, [helper.make_tensor_value_info("x", tp, list(x_shape))],
                          [helper.make_tensor_value_info("y", tp, [None] * len(x_shape))],
                          [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _convt(dtype, rng, c=4, mg=3, k=(3, 3), **attrs):
    g = attrs.get("group", 1)
    w = rng.standard_normal((c, mg) + k).astype(dtype)
    b = rng.standard_normal(mg * g).astype(dtype)
    return _model("ConvTranspose", (2, c, 5, 4), dtype, [("w", w), ("b", b)], **attrs)


def _resize(dtype, scales=None, sizes=None, **attrs):
    if scales is not None:
        inits, ins = [("scales", np.array(scales, np.float32))], ["x", "", "scales"]
    else:
        inits, ins = [("sizes", np.array(sizes, np.int64))], ["x", "", "", "sizes"]
    return _model("Resize", (2, 3, 4, 6), dtype, inits, ins, **attrs)


def _inorm(dtype, rng):
    s, b = (rng.standard_normal(3).astype(dtype) for _ in range(2))
    return _model("InstanceNormalization", (2, 3, 4, 5), dtype, [("s", s), ("b", b)],
                  epsilon=1e-5)


def _one_d(op, dtype, rng, weights=(), **attrs):
    inits = [(k, rng.standard_normal(shape).astype(dtype)) for k, shape in weights]
    return _model(op, (2, 4, 11), dtype, inits, opset=17, **attrs)


CASES = {
    "convt-stride2": lambda dt, rng: _convt(dt, rng, k=(2, 2), strides=[2, 2]),
    # ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2) in small
    "convt-pads-opad-group": lambda dt, rng: _convt(
        dt, rng, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=2),
    "convt-dilation-asym": lambda dt, rng: _convt(dt, rng, k=(2, 3), dilations=[2, 1],
                                                  pads=[0, 1, 1, 0]),
    # F.interpolate(scale_factor=2): nearest (asymmetric, floor) and bilinear (both exporters
    # write half_pixel; TorchScript's older opsets pytorch_half_pixel), align_corners=True
    "resize-nearest": lambda dt, rng: _resize(dt, [1, 1, 2, 2], mode="nearest",
                                              coordinate_transformation_mode="asymmetric",
                                              nearest_mode="floor"),
    "resize-bilinear": lambda dt, rng: _resize(dt, [1, 1, 2, 2], mode="linear",
                                               coordinate_transformation_mode="half_pixel"),
    "resize-bilinear-sizes": lambda dt, rng: _resize(
        dt, sizes=[2, 3, 7, 5], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    "resize-align-corners": lambda dt, rng: _resize(
        dt, [1, 1, 2, 1.5], mode="linear", coordinate_transformation_mode="align_corners"),
    "resize-cubic": lambda dt, rng: _resize(dt, [1, 1, 0.5, 2], mode="cubic"),
    "instance-norm": _inorm,
    # Conv1d(4, 6, 3, stride=2, padding=..., dilation=2, groups=2), asymmetric pads
    "conv1d": lambda dt, rng: _one_d("Conv", dt, rng, [("w", (6, 2, 3)), ("b", (6,))],
                                     strides=[2], pads=[1, 2], dilations=[2], group=2),
    "convt1d": lambda dt, rng: _one_d("ConvTranspose", dt, rng, [("w", (4, 3, 3)), ("b", (3,))],
                                      strides=[2], pads=[1, 1], output_padding=[1]),
    "maxpool1d": lambda dt, rng: _one_d("MaxPool", dt, rng, kernel_shape=[3], strides=[2],
                                        pads=[1, 1]),
    "avgpool1d": lambda dt, rng: _one_d("AveragePool", dt, rng, kernel_shape=[3], strides=[2],
                                        pads=[1, 0], count_include_pad=1),
}


def _data(model, rng, dtype):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_is_the_executors_bit_for_bit(case, dtype):
    rng = np.random.default_rng(1)
    model = CASES[case](dtype, rng)
    x = _data(model, rng, dtype)
    want = Session(model).run({"x": x})["y"]
    tape = Tape(dtype)
    got = np.asarray(import_to_tape(Session(model, fold=False), tape, {"x": x}).outputs["y"].value)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), np.max(np.abs(got - want))
    ran = {n.op for n in tape.nodes}
    if case.startswith("convt"):
        assert "conv_transpose2d" in ran  # the op itself, not a fold
    if case.startswith("conv1d"):
        assert "conv2d" in ran
    if case.startswith("resize"):
        assert "gather" in ran


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_is_the_derivative(case):
    """d sum(r * y) along random directions of x and of every weight, by central
    differences of the executor (float64)."""
    rng = np.random.default_rng(2)
    model = CASES[case](np.float64, rng)
    x = _data(model, rng, np.float64)
    tape = Tape(np.float64)
    xp = tape.param(x, name="x")
    imp = import_to_tape(Session(model, fold=False), tape, {"x": xp})
    y = imp.outputs["y"]
    r = rng.standard_normal(y.shape)
    tape.backward(ops.sum(ops.mul(y, tape.const(r))))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    wrt = {"x": (x, xp), **{k: (inits[k], v) for k, v in imp.params.items()}}
    # every weight (and bias) trains; Resize's scales and sizes are not weights
    assert set(imp.params) == {k for k in inits if k not in ("scales", "sizes")}

    def f(name, value):
        m = type(model)()
        m.CopyFrom(model)
        if name != "x":
            for t in m.graph.initializer:
                if t.name == name:
                    t.CopyFrom(numpy_helper.from_array(value, name))
        return float(np.sum(r * Session(m).run({"x": value if name == "x" else x})["y"]))

    for name, (v0, var) in wrt.items():
        d = rng.standard_normal(v0.shape)
        num = (f(name, v0 + 1e-6 * d) - f(name, v0 - 1e-6 * d)) / 2e-6
        got = float(np.sum(np.asarray(tape.grad(var.id)) * d))
        assert got == pytest.approx(num, rel=1e-6, abs=1e-8), name


@pytest.mark.parametrize("make, match", [
    (lambda: _resize(np.float32, [1, 1, 2, 2], mode="linear",
                     coordinate_transformation_mode="tf_crop_and_resize"),
     r"^[^\n]*Resize with coordinate_transformation_mode 'tf_crop_and_resize' has no tape form"),
    (lambda: _resize(np.float32, [1, 1, 2, 2], mode="nearest", nearest_mode="sideways"),
     r"^[^\n]*Resize: unknown nearest_mode 'sideways'$"),
    (lambda: _convt(np.float32, np.random.default_rng(0), strides=[2, 2],
                    output_shape=[10, 8]),
     r"^[^\n]*ConvTranspose with output_shape \[10, 8\] has no tape form"),
    (lambda: _resize(np.float32, [1, 1, 0.5, 0.5], mode="linear", antialias=1),
     r"^[^\n]*Resize with antialias 1 has no tape form"),
], ids=["tf-crop", "nearest-mode", "output-shape", "antialias"])
def test_what_has_no_tape_form_is_one_line_naming_the_attribute(make, match):
    model = make()
    x = _data(model, np.random.default_rng(0), np.float32)
    with pytest.raises(OnnxError, match=match) as e:
        import_to_tape(Session(model, fold=False), Tape(np.float32), {"x": x})
    assert "\n" not in str(e.value)
