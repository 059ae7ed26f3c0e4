"""layer_norm (ONNX LayerNormalization over the last axis, no bias: a bias is a separate add).

Its order is the importer's composite (mean, sub, mul, mean, adds(eps), sqrt, div, mul), so the
forward is that composite bit for bit; values and gradients agree with PyTorch's layer_norm (an
independent engine) to a few ulp. Grad-check, the device parity and fused == unfused walk the op
table (tests/core/test_ops.py, tests/gpu/test_ops_parity.py, tests/gpu/test_fused_rowlocal.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import Tape, ops


def _inputs(dt, shape=(4, 3, 8)):
    rng = np.random.default_rng(7)
    x = rng.normal(0.3, 2.0, shape).astype(dt)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(dt)
    return x, gamma


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_layer_norm_is_the_onnx_composite_bit_for_bit(dt):
    x, gamma = _inputs(dt)
    t = Tape(dtype=np.dtype(dt).name)
    xv, gv = t.param(x), t.param(gamma)
    y = ops.layer_norm(xv, gv, eps=1e-5)
    m = ops.mean(xv, (2,), keepdims=True)
    d = ops.sub(xv, m)
    inv = ops.div(t.const(np.ones(())), ops.sqrt(ops.adds(ops.mean(ops.mul(d, d), (2,),
                                                                  keepdims=True), 1e-5)))
    want = ops.mul(ops.mul(d, inv), gv)
    assert t.ok, t.error
    assert t.value(y).tobytes() == t.value(want).tobytes()


def test_layer_norm_takes_eps_and_defaults_to_onnx_s():
    x, gamma = _inputs(np.float64)
    t = Tape()
    a = ops.layer_norm(t.param(x), t.param(gamma))
    b = ops.layer_norm(t.param(x), t.param(gamma), eps=1e-5)
    c = ops.layer_norm(t.param(x), t.param(gamma), eps=0.5)
    assert t.value(a).tobytes() == t.value(b).tobytes() != t.value(c).tobytes()
    with pytest.raises(TypeError, match="no attribute"):
        ops.layer_norm(t.param(x), t.param(gamma), axis=1)
    ops.layer_norm(t.param(x), t.param(np.ones(3)))
    assert not t.ok and "layer_norm needs x [..., D] and gamma [D]" in t.error


def test_layer_norm_agrees_with_torch():
    torch = pytest.importorskip("torch")
    x, gamma = _inputs(np.float64)
    g = np.random.default_rng(3).uniform(-1, 1, x.shape)
    t = Tape()
    xv, gv = t.param(x), t.param(gamma)
    y = ops.layer_norm(xv, gv, eps=1e-5)
    loss = ops.sum(ops.mul(y, t.const(g)))
    t.backward(loss)
    tx = torch.tensor(x, requires_grad=True)
    tg = torch.tensor(gamma, requires_grad=True)
    ty = torch.nn.functional.layer_norm(tx, (x.shape[-1],), tg, None, 1e-5)
    (ty * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(t.value(y), ty.detach().numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(t.grad(xv), tx.grad.numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(t.grad(gv), tg.grad.numpy(), rtol=1e-11, atol=1e-13)
