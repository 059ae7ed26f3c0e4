"""Every registered op: grad-check against finite differences, identities, reference order."""

import numpy as np
import pytest

from tapescope.core import Tape, gradcheck, ops
from tapescope.core.ops import REGISTRY
from tapescope.core.ops.reference import matmul, serial_sum

DIFF_OPS = sorted(n for n in REGISTRY if REGISTRY[n].kind != "leaf")


def test_every_op_has_a_complete_definition():
    for name, op in REGISTRY.items():
        assert op.doc, name
        if op.kind == "leaf":
            continue
        assert op.forward and op.backward and op.sample, name
        assert op.sample(np.random.default_rng(0), np.dtype(np.float64)), name


def test_issue_op_list_is_covered():
    wanted = ("param const add sub mul div neg adds muls relu sigmoid tanh exp log sqrt sum mean "
              "matmul bmm transpose reshape softmax slice concat rms_norm silu swiglu rope "
              "cross_entropy").split()
    assert set(wanted) <= set(REGISTRY)
    for composite in ("mse", "add_bias", "scale", "attention"):
        assert callable(getattr(ops, composite))


@pytest.mark.parametrize("name", DIFF_OPS)
def test_gradcheck(name):
    r = gradcheck.check_op(name)
    assert r.inputs_checked > 0
    assert r.ok, f"{name}: max error {r.max_err:.3e}"


def test_identities_hold_to_the_bit():
    for label, ok in gradcheck.identities():
        assert ok, label


def test_serial_sum_is_sequential_not_pairwise():
    # 1 + 1e-16 + ... added one at a time never moves 1.0; pairwise summation would
    x = np.array([1.0] + [1e-16] * 1000)
    assert serial_sum(x) == 1.0
    assert np.sum(x) != 1.0  # numpy's pairwise sum rounds differently: the reason we avoid it


def test_serial_sum_all_negative_zero_is_positive_zero():
    r = serial_sum(np.array([-0.0, -0.0]))
    assert r == 0.0 and not np.signbit(r)


def test_matmul_reference_order_matches_an_explicit_loop():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 7))
    b = rng.standard_normal((7, 2))
    out = matmul(a, b)
    for i in range(3):
        for j in range(2):
            acc = 0.0
            for k in range(7):
                acc = acc + a[i, k] * b[k, j]
            assert out[i, j] == acc


def test_broadcast_backward_reduces_in_row_major_order():
    rng = np.random.default_rng(2)
    a0 = rng.standard_normal((5, 3))
    tape = Tape()
    a = tape.param(a0)
    b = tape.param(np.zeros(3))
    w = rng.standard_normal((5, 3))
    tape.backward(ops.sum((a + b) * tape.const(w)))
    for j in range(3):
        acc = 0.0
        for i in range(5):
            acc = acc + w[i, j]
        assert tape.grad(b)[j] == acc


def test_attention_causal_masks_the_future():
    tape = Tape()
    rng = np.random.default_rng(4)
    q, k = tape.const(rng.standard_normal((4, 2))), tape.const(rng.standard_normal((4, 2)))
    v = tape.param(np.eye(4)[:, :2] * 0 + rng.standard_normal((4, 2)))
    out = ops.attention(q, k, v, causal=True)
    tape.backward(ops.sum(ops.slice(out, 0, 0, 1)))
    # the first query sees only the first key: v's later rows get no gradient
    assert np.all(tape.grad(v)[1:] == 0.0) and np.any(tape.grad(v)[0] != 0.0)


def test_cross_entropy_bad_targets_poison():
    tape = Tape()
    x = tape.param(np.zeros((2, 3)))
    ops.cross_entropy(x, np.array([0, 5]))
    assert not tape.ok and "cross_entropy" in tape.error and "[0, 3)" in tape.error


def test_platform_math_differs_only_in_mode():
    x = np.linspace(-3, 3, 7)
    for mode in ("refmath", "platform"):
        t = Tape(math=mode)
        y = ops.exp(t.const(x))
        np.testing.assert_allclose(y.value, np.exp(x), rtol=1e-15)
