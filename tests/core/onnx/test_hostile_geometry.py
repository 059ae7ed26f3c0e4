"""Window geometry from a file is checked before it reaches C, and C checks it again (issue 49,
red team 3: a 150-byte ONNX file whose Conv has strides [2**32, 2**32] killed `tapescope onnx`,
`parity --model` and `gui M.onnx` with SIGSEGV after ~20 s: the depthwise conv's phase planes
were sized by an overflowing product and then written sh * sw times).

Every case runs in a child process, so a crash fails the test instead of killing pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core.ops.nn import MAX_EXTENT

F = TensorProto.FLOAT
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _save(model, path) -> str:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


def _graph(node, shape, inits=()):
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
    return _save(_graph(node, (1, c, 8, 8), [w]), path)


def pool_model(path, op, strides, **attrs) -> str:
    node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                            strides=list(strides), **attrs)
    return _save(_graph(node, (1, 1, 8, 8)), path)


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

CHILD = textwrap.dedent("""
    import contextlib, io, json, sys
    from tapescope.app.cli import main
    out = []
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
        out.append([rc, err.getvalue()])
    print(json.dumps(out))
""")


def run_child(argvs, timeout=240):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argvs)], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=ROOT)
    assert p.returncode == 0, f"the child died (rc {p.returncode}): {p.stderr[-2000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_hostile_window_geometry_is_one_line_in_onnx_and_parity(tmp_path):
    argvs, expect = [], []
    for name, (build, says) in HOSTILE.items():
        path = build(tmp_path / f"{name}.onnx")
        assert os.path.getsize(path) < 1024  # a few hundred bytes
        argvs.append(["onnx", path])
        expect.append(("onnx", name, says))
        if name in ("conv", "depthwise", "maxpool", "avgpool"):
            argvs.append(["parity", "--model", path, "--device", "host", "--steps", "1"])
            expect.append(("parity", name, says))
    for (rc, err), (cmd, name, says) in zip(run_child(argvs), expect, strict=True):
        assert rc == 2, (cmd, name, rc, err)
        assert err.count("\n") == 1 and err.startswith(f"tapescope {cmd}: "), (name, err)
        assert says in err and "Traceback" not in err, (name, err)
        assert f"{name}.onnx" in err, err


def test_the_window_opens_on_a_hostile_conv_with_one_line(tmp_path):
    path = conv_model(tmp_path / "c.onnx", HUGE, c=2, m=2, group=2)
    shot = str(tmp_path / "s.png")
    [(rc, err)] = run_child([["gui", path, "--screenshot", shot]])
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("tapescope gui: ") and "stride 4294967296 is out of range" in err


def test_the_largest_stride_in_range_still_runs(tmp_path):
    """At MAX_EXTENT a stride passes the check (one output per axis): C takes its plain loops,
    and the bits are those of stride 8 (one output too: the stride is never used)."""
    from tapescope.core.onnx import Session

    makers = {"conv": lambda p, s: conv_model(p, s, c=2, m=4),
              "depthwise": lambda p, s: conv_model(p, s, c=2, m=2, group=2),
              "maxpool": lambda p, s: pool_model(p, "MaxPool", s),
              "avgpool": lambda p, s: pool_model(p, "AveragePool", s)}
    for name, make in makers.items():
        ys = []
        for s in ((MAX_EXTENT, MAX_EXTENT), (8, 8)):
            sess = Session(make(tmp_path / f"{name}{s[0]}.onnx", s))
            dims = sess.lm.model.graph.input[0].type.tensor_type.shape.dim
            x = np.random.default_rng(1).standard_normal([d.dim_value for d in dims])
            ys.append(sess.run({"x": x.astype(np.float32)})["y"])
        assert ys[0].shape[2:] == (1, 1) and ys[0].tobytes() == ys[1].tobytes(), name


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


def test_the_c_entry_points_do_not_trust_the_geometry():
    """Called straight (as no checked caller does) with strides 2**32, 0 or negative,
    dilations 2**62, pads 2**40: no crash, nothing written out of bounds."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-c", C_CHILD], capture_output=True, text=True,
                       timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0 and "survived 7" in p.stdout, (p.returncode, p.stderr[-2000:])


@pytest.mark.parametrize("bad", [dict(strides=(2 ** 32, 1)), dict(strides=(0, 1)),
                                 dict(dilations=(1, -3)), dict(pads=(2 ** 40, 0, 0, 0))])
def test_the_tape_refuses_hostile_conv_geometry(bad):
    from tapescope.core import Tape
    from tapescope.core.ops import nn  # noqa: F401  (registers conv2d)
    from tapescope.core.optable.registry import REGISTRY

    if "conv2d" not in REGISTRY:
        pytest.skip("conv2d registers on ONNX import")
    t = Tape(np.float32)
    x = t.param(np.ones((1, 1, 8, 8), np.float32))
    w = t.param(np.ones((1, 1, 3, 3), np.float32))
    at = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1, **bad}
    t.record("conv2d", [x, w], at)
    assert not t.ok and "out of range" in str(t.error)
