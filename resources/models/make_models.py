"""Regenerate the small example ONNX models here and their expected outputs.

Run from the repository root: ``python resources/models/make_models.py``. Weights come from a
fixed seed; the expected outputs are computed by onnxruntime (an independent engine) when it is
installed, and are what ``tapescope onnx MODEL --input ... --expected ...`` compares against.
"""

from __future__ import annotations

import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

HERE = os.path.dirname(os.path.abspath(__file__))


def _init(name: str, a: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(a, name)


def tiny_mlp(rng: np.random.Generator):
    """x[2,8] -> Gemm(16) -> Relu -> Gemm(4) -> Softmax."""
    w1 = rng.standard_normal((8, 16)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, 4)).astype(np.float32) * 0.5
    b2 = rng.standard_normal(4).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
        helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes, "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 4])],
        [_init("w1", w1), _init("b1", b1), _init("w2", w2), _init("b2", b2)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), \
        {"x": rng.standard_normal((2, 8)).astype(np.float32)}


def tiny_convnet(rng: np.random.Generator, size: int = 16):
    """x[1,3,S,S] -> Conv3x3(8) -> BN -> Relu -> MaxPool2 -> Conv3x3(8)+residual -> GAP -> Gemm."""
    def w(*s, scale=0.3):
        return (rng.standard_normal(s) * scale).astype(np.float32)

    inits = [
        _init("c1w", w(8, 3, 3, 3)), _init("c1b", w(8, scale=0.1)),
        _init("bn_s", (1 + w(8, scale=0.1)).astype(np.float32)), _init("bn_b", w(8, scale=0.1)),
        _init("bn_m", w(8, scale=0.1)), _init("bn_v", (1 + np.abs(w(8))).astype(np.float32)),
        _init("c2w", w(8, 8, 3, 3)), _init("c2b", w(8, scale=0.1)),
        _init("fcw", w(8, 5)), _init("fcb", w(5, scale=0.1)),
        _init("shape", np.array([1, 8], np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"],
                         name="bn1"),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2w", "c2b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["res"], name="residual"),
        helper.make_node("Relu", ["res"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Reshape", ["gap", "shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fcw", "fcb"], ["y"], name="fc"),
    ]
    g = helper.make_graph(
        nodes, "tiny_convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), \
        {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def resnet_like(rng: np.random.Generator, size: int = 112, widths=(32, 64, 128, 256),
                classes: int = 100):
    """A ResNet-18-shaped net (conv-BN-relu stem, maxpool, 2 basic blocks per stage, GAP, FC)
    with He-initialised random weights: the benchmark's conv net when no model zoo is offline."""
    inits: list = []
    nodes: list = []
    count = [0]

    def fresh(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    def conv_bn(x, cin, cout, k, stride, relu=True):
        w, b = fresh("w"), fresh("b")
        std = np.sqrt(2.0 / (cin * k * k))
        inits.append(_init(w, (rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32)))
        inits.append(_init(b, np.zeros(cout, np.float32)))
        bn = [fresh(n) for n in ("s", "o", "m", "v")]
        inits.append(_init(bn[0], (1 + 0.1 * rng.standard_normal(cout)).astype(np.float32)))
        inits.append(_init(bn[1], (0.1 * rng.standard_normal(cout)).astype(np.float32)))
        inits.append(_init(bn[2], (0.1 * rng.standard_normal(cout)).astype(np.float32)))
        inits.append(_init(bn[3], (1 + 0.1 * np.abs(rng.standard_normal(cout))).astype(np.float32)))
        c, y = fresh("c"), fresh("bn")
        p = k // 2
        nodes.append(helper.make_node("Conv", [x, w, b], [c], strides=[stride, stride],
                                      pads=[p, p, p, p]))
        nodes.append(helper.make_node("BatchNormalization", [c] + bn, [y]))
        if not relu:
            return y
        r = fresh("r")
        nodes.append(helper.make_node("Relu", [y], [r]))
        return r

    x = conv_bn("x", 3, widths[0], 7, 2)
    p = fresh("pool")
    nodes.append(helper.make_node("MaxPool", [x], [p], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    x, cin = p, widths[0]
    for stage, cout in enumerate(widths):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            h = conv_bn(x, cin, cout, 3, stride)
            h = conv_bn(h, cout, cout, 3, 1, relu=False)
            skip = x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride, False)
            a, r = fresh("add"), fresh("r")
            nodes += [helper.make_node("Add", [h, skip], [a]), helper.make_node("Relu", [a], [r])]
            x, cin = r, cout
    g_, f_ = fresh("gap"), fresh("flat")
    nodes += [helper.make_node("GlobalAveragePool", [x], [g_]),
              helper.make_node("Flatten", [g_], [f_])]
    inits.append(_init("fcw", (rng.standard_normal((cin, classes)) / np.sqrt(cin)).astype(
        np.float32)))
    inits.append(_init("fcb", np.zeros(classes, np.float32)))
    nodes.append(helper.make_node("Gemm", [f_, "fcw", "fcb"], ["y"]))
    g = helper.make_graph(
        nodes, "resnet_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), \
        {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def main() -> None:
    """Write the models, their inputs (.npy) and onnxruntime's outputs (.npy)."""
    import onnxruntime as ort

    for name, make in (("tiny_mlp", tiny_mlp), ("tiny_convnet", tiny_convnet)):
        model, feeds = make(np.random.default_rng(1234))
        path = os.path.join(HERE, f"{name}.onnx")
        save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        for k, v in feeds.items():
            np.save(os.path.join(HERE, f"{name}.input.{k}.npy"), v)
        for o, v in zip(sess.get_outputs(), outs, strict=False):
            np.save(os.path.join(HERE, f"{name}.expected.{o.name}.npy"), v)
        print("wrote", path)


if __name__ == "__main__":
    main()
