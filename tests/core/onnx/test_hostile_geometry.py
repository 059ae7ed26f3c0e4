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

from tapescope.core.ops.nn import MAX_EXTENT
from tests.helpers.hostile_geometry import (
    C_CHILD,
    HOSTILE,
    HUGE,
    conv_model,
    pool_model,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


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


def test_the_c_entry_points_do_not_trust_the_geometry():
    """Called straight (as no checked caller does) with strides 2**32, 0 or negative,
    dilations 2**62, pads 2**40: no crash, nothing written out of bounds."""
    from tapescope.core import native

    if native.library() is None:  # (the other tests here hold the numpy paths to the same)
        pytest.skip("no C entry points: no native code (TAPESCOPE_NO_NATIVE or no gcc)")
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
