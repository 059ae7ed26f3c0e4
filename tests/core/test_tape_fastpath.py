"""The tape's per-node fast paths (issue 29) keep every bit and every rule.

The constants of adds/muls/relu/tanh/sigmoid are 0-d arrays for float64/float32 instead of
numpy scalars; the sweep adds contributions to a 0-d +0.0; record and the sweep take unary ops
without their per-input loops; mul's backward of x * x computes g * x once; tanh's backward
runs the native extension's tanh_grad (one call for numpy's three ufuncs); Adam rounds its
step scalars once per step. Each is checked here against the formula spelled with numpy
scalars (the spelling before), on specials (+-0.0, NaN, +-inf, subnormals) included.
"""

import numpy as np
import pytest

from tapescope.core import Tape, TapeError, ops, optim
from tapescope.core.ops import REGISTRY

# specials make inf and NaN on purpose (data to the tape, which lets numpy warn)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SPECIALS = [0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, -5e-324, 1e-310, -2.5, 0.75, 3.0,
            1e300, -1e-300]


def bits(a):
    a = np.asarray(a)
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)


def _x(dt):
    with np.errstate(all="ignore"):
        return np.array(SPECIALS, dtype=np.float64).astype(dt)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("s", [0.1, -0.0, 0.0, 1e-40, 3.4028236e38, -2.5])
def test_scalar_ops_round_s_once_as_a_numpy_scalar_would(dt, s):
    x0 = _x(dt)
    t = Tape(dtype=dt)
    x = t.param(x0)
    ya, ym = ops.adds(x, s), ops.muls(x, s)
    t.backward(ops.sum(ops.muls(ya, 1.0) + ym))
    sd = np.dtype(dt).type(s)
    with np.errstate(all="ignore"):
        assert np.array_equal(bits(t.value(ya)), bits(x0 + sd))
        assert np.array_equal(bits(t.value(ym)), bits(x0 * sd))
        g = np.ones_like(x0)
        assert np.array_equal(bits(t.grad(x)), bits(np.dtype(dt).type(0) + g + g * sd))


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_relu_tanh_sigmoid_match_their_numpy_scalar_spelling(dt):
    x0 = _x(dt)
    with np.errstate(all="ignore"):
        gin = np.array([1.0, -1.0, -0.0, 0.0, np.nan, 2.0, -3.0, 1e-310, np.inf, -0.0, 0.5,
                        -np.inf, 7.0], dtype=np.float64).astype(dt)
    t = Tape(dtype=dt)
    x = t.param(x0)
    r, th, sg = ops.relu(x), ops.tanh(x), ops.sigmoid(x)
    w = t.const(gin)
    t.backward(ops.sum(r * w + th * w + sg * w))
    zero, one = np.dtype(dt).type(0), np.dtype(dt).type(1)
    with np.errstate(all="ignore"):
        assert np.array_equal(bits(t.value(r)), bits(np.where(x0 <= 0, zero, x0)))
        y_t, y_s = np.asarray(t.value(th)), np.asarray(t.value(sg))
        # the sweep visits sigmoid, tanh, relu in reverse id order: x's sum in that order
        order = zero + gin * (y_s * (one - y_s))
        order = order + gin * (one - y_t * y_t)
        order = order + np.where(x0 > 0, gin, zero)
    assert np.array_equal(bits(t.grad(x)), bits(order))


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_square_backward_is_g_times_x_added_twice(dt):
    x0 = _x(dt)
    t = Tape(dtype=dt)
    x = t.param(x0)
    y = x * x
    t.backward(ops.sum(y))
    steps = list(_events(dt, x0))
    with np.errstate(all="ignore"):
        c = np.ones_like(x0) * x0
        expect = (np.dtype(dt).type(0) + c) + c
    assert np.array_equal(bits(t.grad(x)), bits(expect))
    # backward_steps reports both contributions, equal, and the running sums
    mul = [s for s in steps if s.node.op == "mul"][0]
    a, b = mul.contributions
    assert a.input_id == b.input_id == 0 and np.array_equal(bits(a.value), bits(b.value))
    assert a.before is None and np.array_equal(bits(b.before), bits(a.after))
    assert np.array_equal(bits(b.after), bits(expect))


def _events(dt, x0):
    t = Tape(dtype=dt)
    x = t.param(x0)
    yield from t.backward_steps(ops.sum(x * x))


def test_unary_and_binary_record_keep_their_errors_and_rules():
    t, other = Tape(), Tape()
    x = t.param(np.ones(3))
    c = t.const(np.ones(3))
    foreign = other.param(np.ones(3))
    for rec in (lambda v: t.record("relu", [v]), lambda v: ops.add(x, v),
                lambda v: ops.add(v, x)):
        with pytest.raises(TapeError, match="belongs to another tape"):
            rec(foreign)
    assert len(t) == 2  # nothing recorded by the failed calls
    tc, tx = ops.tanh(c), ops.tanh(x)
    assert t.node(tc).requires_grad is False and t.node(tx).requires_grad is True
    # keep's mask (input 1) never takes a gradient: a param mask alone does not make it needed
    k = t.record("keep", [c, x])
    assert t.node(k).requires_grad is False
    # a tuple of inputs and a generator take the general path, the same node
    a = t.record("neg", (x,))
    b = t.record("neg", (v for v in [x]))
    assert t.node(a)[1:] == t.node(b)[1:]
    # a shape error poisons from a unary op too (reshape to a wrong size)
    bad = ops.reshape(x, (2, 2))
    assert bad.id == -1 and not t.ok and "reshape" in t.error


def test_adam_rounds_step_scalars_per_step_and_follows_a_changed_lr():
    def run(change_lr):
        t = Tape()
        w = t.param(np.linspace(-1.0, 1.0, 5))
        v = t.param(np.linspace(2.0, 3.0, 5))
        opt = optim.Adam(t, lr=1e-2)
        opt.add_all()
        for step in range(3):
            t.backward(ops.sum(w * w + v * w))
            if change_lr and step == 1:
                opt.lr = 3e-2
            opt.step()
        return t.value(w).copy(), t.value(v).copy(), opt

    w1, v1, _ = run(False)
    w2, v2, opt = run(True)
    assert not np.array_equal(w1, w2)  # the new lr took effect
    # the same three steps by hand with the documented scalars (fresh each step)
    t = Tape()
    w = t.param(np.linspace(-1.0, 1.0, 5))
    v = t.param(np.linspace(2.0, 3.0, 5))
    ref = optim.Adam(t, lr=1e-2)
    ref.add_all()
    for step in range(3):
        t.backward(ops.sum(w * w + v * w))
        if step == 1:
            ref.lr = 3e-2
        ref.t += 1
        k = {n: np.float64(x) for n, x in ref.step_scalars().items()}
        for slot in ref.slots:
            g = np.asarray(t.grad(slot.var))
            p = np.asarray(t.value(slot.var))
            if slot.m is None:
                slot.m, slot.v = np.zeros_like(p), np.zeros_like(p)
            slot.m = k["b1"] * slot.m + k["omb1"] * g
            slot.v = k["b2"] * slot.v + k["omb2"] * (g * g)
            t.assign(slot.var, p - k["lr_t"] * (slot.m / (np.sqrt(slot.v) + k["eps"])))
    assert np.array_equal(bits(t.value(w)), bits(w2))
    assert np.array_equal(bits(t.value(v)), bits(v2))
    assert opt.t == 3


def _tanh_grad_numpy(g, y):
    dt = np.asarray(y).dtype
    return g * (dt.type(1) - y * y)  # the spelling before the extension took it


def _random_bits(rng, dt, n):
    it = np.uint64 if np.dtype(dt) == np.float64 else np.uint32
    return rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dt)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_tanh_backward_is_its_numpy_spelling_bit_for_bit(dt):
    """tanh's backward runs the extension's tanh_grad where it is built: g * (1 - y * y), the
    same three roundings in the same order, on every bit pattern (NaN payloads and signs too)."""
    from tapescope.core.ops import elementwise

    rng = np.random.default_rng(29)
    sp = _x(dt)
    nans = (np.array([0x7FF8000000000ABC, 0xFFF80000DEADBEEF, 0x7FF0000000000001], np.uint64)
            if np.dtype(dt) == np.float64 else
            np.array([0x7FC00ABC, 0xFFC0BEEF, 0x7F800001], np.uint32)).view(dt)
    sp = np.concatenate([sp, nans])
    gs, ys = np.meshgrid(sp, sp)
    g = np.concatenate([gs.ravel(), _random_bits(rng, dt, 200_000)])
    y = np.concatenate([ys.ravel(), _random_bits(rng, dt, 200_000)])
    bwd = REGISTRY["tanh"].backward
    with np.errstate(all="ignore"):
        want = _tanh_grad_numpy(g, y)
        got = bwd(None, g, [None], y, {}, [True])[0]
        assert np.array_equal(bits(got), bits(want))
        fn = elementwise._tanh_grad_fn()
        if fn is not None:  # the extension itself (the op falls back silently)
            out = fn(g, y)
            assert out.dtype == want.dtype and out.flags.c_contiguous and out.flags.writeable
            assert np.array_equal(bits(out), bits(want))


def test_tanh_backward_falls_back_to_numpy_for_what_the_extension_refuses():
    """Strided operands, broadcasting, mixed dtypes, non-native byte order, scalars and 0-d
    values give exactly what numpy's spelling gives: values, dtype, shape and type."""
    from tapescope.core.ops import elementwise

    g = np.linspace(-1, 1, 12).reshape(3, 4)
    y = np.tanh(g)
    cases = [(g, y), (g.T, y.T), (g[:, ::2], y[:, ::2]), (g[0], y), (g[:1], y), (y, g[0]),
             (np.float64(2.0), y), (2.0, y), (g.astype(np.float32), y),
             (g, y.astype(np.float32)), (g, y.astype(">f8")), (g.astype(">f8"), y),
             (np.array(0.3), np.array(0.2)), (g, np.array(0.2)), (np.empty((0, 4)), y[:0])]
    bwd = REGISTRY["tanh"].backward
    for gg, yy in cases:
        got = bwd(None, gg, [None], yy, {}, [True])[0]
        want = _tanh_grad_numpy(gg, yy)
        assert type(got) is type(want) and got.dtype == want.dtype
        assert np.shape(got) == np.shape(want)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    fn = elementwise._tanh_grad_fn()
    if fn is None:
        pytest.skip("no native extension here: only the numpy spelling runs")
    for bad in ((g.T, y), (g, y.T), (g[:, ::2], y[:, ::2]), (g[0], y), (g[:1], y)):
        with pytest.raises(ValueError):
            fn(*bad)
    for bad in ((g, y.astype(np.float32)), (g.astype(">f8"), y), (g, y.astype(">f8")),
                (g.astype(np.float16), y.astype(np.float16)), (np.arange(12).reshape(3, 4), y),
                (2.0, y), (np.float64(2.0), y), (g.tolist(), y), (g, y.view(np.matrix)), (g,)):
        with pytest.raises(TypeError):
            fn(*bad)
