"""0-d parameters (a learned temperature, GELU's constants if a file made them weights) work
everywhere: the tape, both optimizers (with clipping), device replay on host, tape files."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops, optim, tapefile
from tapescope.core.parity import compare_arrays


def _episode(tape, p, w, x):
    xv = tape.const(x, name="x")
    # p scales a matmul: its gradient is a serial sum of every element's contribution
    return ops.mean(ops.tanh(ops.mul(ops.matmul(xv, w), p)), name="loss")


@pytest.fixture(scope="module")
def host():
    dev = gpu.open_device("host")
    dev.orders = "both"
    return dev


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_scalar_param_trains_and_replays(host, kind, dtype):
    rng = np.random.default_rng(3)
    tape = Tape(dtype)
    p = tape.param(np.array(1.5), name="temperature")
    w = tape.param(rng.standard_normal((4, 3)), name="w")
    assert p.shape == () and tape.value(p).shape == ()
    mark = tape.mark()
    opt = (optim.SGD(tape, lr=0.1, clip=0.05) if kind == "sgd"
           else optim.Adam(tape, lr=0.05, clip=0.5))
    opt.add(p, l2=0.01)
    opt.add(w)
    xs = [rng.standard_normal((5, 4)) for _ in range(3)]
    prog = gpu.capture(host, tape, _episode(tape, p, w, xs[0]))
    dopt = gpu.from_core(opt)
    start = float(tape.value(p))
    for x in xs:
        tape.reset_to(mark)
        loss = _episode(tape, p, w, x)
        tape.backward(loss)
        assert tape.grad(p).shape == ()
        opt.step()
        prog.set_input("x", x)
        prog.forward()
        prog.backward()
        prog.step(dopt)
        for v in (p, w):
            assert tape.value(v).shape == v.shape
            assert compare_arrays(np.asarray(tape.value(v)), np.asarray(prog.read(v))).exact
    assert float(tape.value(p)) != start  # it did train


def test_scalar_param_survives_a_tape_file(tmp_path):
    tape = Tape()
    p = tape.param(np.array(-0.25), name="s")
    loss = ops.sum(ops.muls(ops.mul(tape.const(np.ones(3), name="x"), p), 2.0), name="loss")
    tape.backward(loss)
    path = tapefile.save(tape, tmp_path / "s.tape")
    back, _ = tapefile.load(path)
    q = back.params()[0]
    assert q.shape == () and back.value(q).shape == ()
    assert back.value(q).tobytes() == tape.value(p).tobytes()
    opt = optim.Adam(back, lr=0.1)
    opt.add_all()
    back.backward(back.var(len(back) - 1))
    opt.step()
    assert back.value(q).shape == ()
