"""ONNX files whose window geometry is hostile (strides of 2**32, ...) and what their one line
must say, and a child script that calls the C entry points with it unchecked
(tests/core/onnx/test_hostile_geometry.py, tests/core/test_native_sanitize.py)."""

from __future__ import annotations

import textwrap

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def save_model(model, path) -> str:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


def one_node_model(node, shape, inits=()):
    x = helper.make_tensor_value_info("x", F, list(shape))
    y = helper.make_tensor_value_info("y", F, None)
    y.type.tensor_type.shape.SetInParent()
    g = helper.make_graph([node], "hostile", [x], [y], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv_model(path, strides, c=1, m=1, group=1, **attrs) -> str:
    """A Conv of a (1, c, 8, 8) image with an (m, c/group, 3, 3) weight (~150-200 bytes)."""
    w = numpy_helper.from_array(np.ones((m, c // group, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=list(strides),
                            group=group, **attrs)
    return save_model(one_node_model(node, (1, c, 8, 8), [w]), path)


def pool_model(path, op, strides, **attrs) -> str:
    node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                            strides=list(strides), **attrs)
    return save_model(one_node_model(node, (1, 1, 8, 8)), path)


HUGE = (2 ** 32, 2 ** 32)


HOSTILE = {  # name -> (builder, what the one line must say)
    "conv": (lambda p: conv_model(p, HUGE, c=2, m=4), "stride 4294967296 is out of range"),
    "depthwise": (lambda p: conv_model(p, HUGE, c=2, m=2, group=2),
                  "stride 4294967296 is out of range"),
    "conv_1ch": (lambda p: conv_model(p, HUGE), "stride 4294967296 is out of range"),
    "maxpool": (lambda p: pool_model(p, "MaxPool", HUGE), "stride 4294967296 is out of range"),
    "avgpool": (lambda p: pool_model(p, "AveragePool", HUGE),
                "stride 4294967296 is out of range"),
    "stride0": (lambda p: conv_model(p, (0, 1), c=2, m=2, group=2),
                "stride 0 is out of range"),
    "dilation": (lambda p: conv_model(p, (1, 1), dilations=[1, 2 ** 40]),
                 "dilation 1099511627776 is out of range"),
    "pad": (lambda p: pool_model(p, "AveragePool", (1, 1), pads=[0, -(2 ** 40), 0, 0]),
            "pad -1099511627776 is out of range"),
}


C_CHILD = textwrap.dedent("""
    import ctypes, numpy as np
    from tapescope.core import native
    lib = native.library()
    assert lib is not None
    ll = ctypes.c_longlong
    x = np.ones((1, 2, 8, 8), np.float32)
    w = np.ones((2, 1, 3, 3), np.float32)
    out = np.zeros((1, 2, 2, 2), np.float32)
    big = 2 ** 32
    geoms = [  # (sh, sw, ph, pw, dh, dw, oh, ow): what no checked caller passes
        (big, big, 0, 0, 1, 1, 2, 2), (0, 1, 0, 0, 1, 1, 2, 2), (1, 1, 0, 0, -1, 1, 2, 2),
        (2 ** 31 - 1, 2 ** 31 - 1, 0, 0, 1, 1, 2, 2), (1, 1, 2 ** 40, 0, 1, 1, 2, 2),
        (1, 1, 0, 0, 2 ** 62, 2 ** 62, 2, 2), (-5, -5, -9, -9, 1, 1, 2, 2)]
    n = 0
    for sh, sw, ph, pw, dh, dw, oh, ow in geoms:
        lib.ts_conv_mg1_f32(x.ctypes.data, w.ctypes.data, out.ctypes.data, 1, 2, 8, 8, 2, 3, 3,
                            oh, ow, sh, sw, ph, pw, dh, dw)
        w2 = np.ones((4, 2, 3, 3), np.float32)
        o2 = np.zeros((1, 4, oh, ow), np.float32)
        lib.ts_conv_ep_f32(x.ctypes.data, w2.ctypes.data, None, o2.ctypes.data, 1, 2, 8, 8, 1,
                           4, 3, 3, oh, ow, sh, sw, ph, pw, dh, dw, 1,
                           ctypes.byref(native.Epilogue(groups=1)))
        cols = np.zeros((1, 2 * 9, oh * ow), np.float32)
        lib.ts_im2col_f32(x.ctypes.data, cols.ctypes.data, 1, 2, 8, 8, 3, 3, oh, ow, sh, sw,
                          ph, pw, dh, dw)
        y = np.zeros((1, 2, oh, ow), np.float32)
        cnt = np.ones(oh * ow, np.float32)
        for fn in (lib.ts_maxpool2d_f32, lib.ts_avgpool2d_f32):
            assert fn(x.ctypes.data, cnt.ctypes.data, y.ctypes.data, 2, 8, 8, 2, 2, oh, ow, sh,
                      sw, ph, pw, dh, dw) in (0, 1)
        n += 1
    print("survived", n)
""")
