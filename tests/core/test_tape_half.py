"""Half tapes (float16, bfloat16) follow docs/reference-order.md's half-precision rule: every op
widens its inputs exactly to float32, runs the float32 reference, and rounds its result (and
each backward contribution) once to the storage type; gradients accumulate in storage."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import mathlib, precision
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.tape import Tape, TapeError

HALVES = ["float16", "bfloat16"]


def _record(t: Tape, op: str, xs, attrs):
    vs = [t.param(x) for x in xs]
    return vs, t.record(op, vs, attrs)


@pytest.mark.parametrize("dtname", HALVES)
def test_every_op_is_its_float32_reference_rounded_once(dtname):
    dt = precision.dtype_of(dtname)
    rng = np.random.default_rng(3)
    checked = 0
    for name, opdef in sorted(REGISTRY.items()):
        if opdef.sample is None or name in ("param", "const"):
            continue
        for xs, attrs in opdef.sample(rng, np.dtype(np.float32)):
            xs = [np.asarray(x).astype(dt) for x in xs]  # data representable in both tapes
            th, t32 = Tape(dtname), Tape("float32")
            with np.errstate(all="ignore"):
                vh, yh = _record(th, name, xs, attrs)
                v32, y32 = _record(t32, name, [x.astype(np.float32) for x in xs], attrs)
            if not th.ok:
                assert not t32.ok, name
                continue
            want = y32.value.astype(dt)
            assert yh.value.dtype == dt
            same = (yh.value.view(np.uint16) == want.view(np.uint16)) | (
                np.isnan(yh.value.astype(np.float32)) & np.isnan(want.astype(np.float32)))
            assert same.all(), name
            # backward from a seed of ones: each input's gradient is the op's float32 backward
            # on the widened (g, inputs, stored half output), rounded once
            g = np.ones(yh.shape, dt)
            th._grads = [None] * len(th)
            with np.errstate(all="ignore"):
                lh = th.record("sum", [yh], {"axis": None, "keepdims": False})
                th.backward(lh)
                needs = [True] * len(xs)
                parts = opdef.backward(mathlib.get("refmath"), g.astype(np.float32),
                                       [x.astype(np.float32) for x in xs],
                                       yh.value.astype(np.float32), attrs, needs)
            for k, a in enumerate(vh):
                ga = a.grad
                if ga is None or parts[k] is None or k in opdef.nondiff_inputs:
                    continue
                assert ga.dtype == dt
                with np.errstate(all="ignore"):
                    wb = (np.float32(0) + np.asarray(parts[k]).astype(dt).reshape(ga.shape)
                          .astype(np.float32)).astype(dt)
                same = (ga.view(np.uint16) == wb.view(np.uint16)) | (
                    np.isnan(ga.astype(np.float32)) & np.isnan(wb.astype(np.float32)))
                assert same.all(), f"{name} gradient"
            checked += 1
    assert checked > 30


def test_products_accumulate_in_float32_and_round_once():
    # 2048 + 1 + 1 ... in float16 steps of 2 would stay at 2048; float32 accumulation does not
    t = Tape("float16")
    a = t.const(np.ones((1, 64)))
    b = t.const(np.full((64, 1), 64.0))  # 64 * 64 = 4096 exactly
    y = t.record("matmul", [a, b])
    assert y.value.dtype == np.float16 and float(y.value[0, 0]) == 4096.0
    x = np.concatenate([[2048.0], np.ones(100)])
    s = t.record("sum", [t.const(x)], {"axis": None, "keepdims": False})
    assert float(s.value) == 2148.0  # a float16 running sum would be stuck at 2048


def test_bfloat16_storage_type_and_integer_leaves():
    t = Tape("bfloat16")
    assert t.dtype == precision.BFLOAT16 and t.compute_dtype == np.float32 and t.half
    v = t.const(np.array([1, 2, 255]))
    assert v.value.dtype == precision.BFLOAT16
    with pytest.raises(TapeError, match="not exact in bfloat16"):
        t.const(np.array([257]))  # class ids / indices must survive storage exactly
    with pytest.raises(TapeError, match="not supported"):
        Tape("float8")


def test_half_adam_rounds_moments_and_weights_once():
    from tapescope.core.optim import Adam
    t = Tape("float16")
    w = t.param(np.array([0.5, -0.25, 1.0]))
    loss = t.record("sum", [t.record("mul", [w, w])], {"axis": None, "keepdims": False})
    t.backward(loss)
    opt = Adam(t, lr=1e-2)
    opt.add_all()
    opt.step()
    assert opt.slots[0].m.dtype == np.float16 and w.value.dtype == np.float16
    # by hand in float32: g = 2w, m = 0.1 g, v = 0.001 g^2, lr_t from the host
    g = 2 * np.array([0.5, -0.25, 1.0], np.float32)
    k = {n: np.float32(v) for n, v in opt.step_scalars().items()}
    m = k["b1"] * np.float32(0) + k["omb1"] * g
    v = k["b2"] * np.float32(0) + k["omb2"] * (g * g)
    w1 = np.array([0.5, -0.25, 1.0], np.float32) - k["lr_t"] * (m / (np.sqrt(v) + k["eps"]))
    assert np.array_equal(w.value, w1.astype(np.float16))
    assert np.array_equal(opt.slots[0].m, m.astype(np.float16))
    assert np.array_equal(opt.slots[0].v, v.astype(np.float16))
