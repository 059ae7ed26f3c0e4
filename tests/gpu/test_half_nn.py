"""conv2d/3d, conv_transpose2d/3d, maxpool2d/3d and avgpool2d/3d in float16 and bfloat16 on the host
backend (the CUDA kernel source; NVRTC compiles the same units in tests/gpu/test_nvrtc.py):
forward and every backward bit for bit against the half reference (docs/reference-order-nn.md,
"Half precision"), on odd shapes, strides, pads, dilations, groups, depthwise, ceil_mode and
count_include_pad, with every input's gradient fanned out so each contribution is added to a
gradient that already holds one (where the one rounding per contribution shows).
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.core.ops import REGISTRY
from tapescope.core.ops.nn import NN_OPS

HALF = ["float16", "bfloat16"]
OPS = ["conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d", "maxpool2d", "avgpool2d",
       "maxpool3d", "avgpool3d"]


def _u(rng, *shape):
    return rng.uniform(-1, 1, shape)


def _extra(op: str, rng) -> list:
    """Cases beyond the registry's samples: odd extents, every geometry attribute, long chains
    (float32 accumulation differs from half accumulation there)."""
    if op == "conv2d":
        return [([_u(rng, 3, 5, 7, 6), _u(rng, 6, 5, 3, 3)],
                 {"strides": (2, 1), "pads": (1, 2, 0, 1), "dilations": (1, 2)}),
                ([_u(rng, 2, 4, 5, 5), _u(rng, 4, 1, 3, 3)], {"pads": (1, 1, 1, 1),
                                                              "group": 4}),  # depthwise
                ([_u(rng, 2, 6, 3, 4), _u(rng, 4, 3, 1, 1)], {"group": 2}),
                ([_u(rng, 2, 16, 5, 5), _u(rng, 3, 16, 3, 3)], {})]  # 144-term chains
    if op == "conv3d":
        return [([_u(rng, 2, 6, 3, 5, 4), _u(rng, 3, 6, 2, 3, 2)],
                 {"strides": (1, 2, 1), "pads": (1, 1, 0, 0, 1, 1), "dilations": (2, 1, 1)}),
                ([_u(rng, 1, 3, 3, 3, 3), _u(rng, 3, 1, 3, 3, 3)], {"pads": (1,) * 6,
                                                                    "group": 3})]
    if op == "conv_transpose3d":
        return [([_u(rng, 2, 4, 3, 2, 3), _u(rng, 4, 3, 2, 3, 2)],
                 {"strides": (1, 2, 2), "pads": (0, 1, 0, 1, 0, 1), "output_padding": (0, 1, 1),
                  "group": 2})]
    if op == "conv_transpose2d":
        return [([_u(rng, 3, 4, 3, 5), _u(rng, 4, 3, 3, 2)],
                 {"strides": (2, 3), "pads": (1, 0, 0, 1), "dilations": (1, 2),
                  "output_padding": (1, 2)})]
    if op.endswith("3d"):  # the pools' 3-D twins: overlapping, padded, ceil_mode, ties
        x3 = np.round(_u(rng, 2, 3, 5, 4, 6) * 4) / 4
        at3 = {"kernel": (2, 3, 2), "strides": (1, 2, 1), "pads": (1, 1, 0, 0, 1, 1),
               "ceil_mode": 1}
        return [([x3], at3 if op == "maxpool3d" else {**at3, "count_include_pad": 1}),
                ([x3], {"kernel": (3, 3, 3), "strides": (2, 1, 2)})]
    x = rng.permutation(3 * 2 * 7 * 9).reshape(3, 2, 7, 9) / 17 - 3
    ties = np.round(_u(rng, 2, 3, 6, 6) * 2) / 2  # many equal maxima: the first one wins
    big = _u(rng, 1, 2, 17, 17)  # a 289-tap window: 289 is not a bfloat16 (the count is float32)
    if op == "maxpool2d":
        return [([x], {"kernel": (3, 2), "strides": (2, 3), "pads": (1, 1, 2, 0),
                       "ceil_mode": 1}),
                ([ties], {"kernel": (2, 3), "strides": (1, 1)}), ([big], {"kernel": (17, 17)})]
    return [([x], {"kernel": (3, 2), "strides": (2, 3), "pads": (1, 1, 2, 0), "ceil_mode": 1}),
            ([x], {"kernel": (2, 2), "strides": (1, 2), "pads": (1, 0, 1, 1),
                   "count_include_pad": 1}),
            ([ties], {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
            ([big], {"kernel": (17, 17)})]


def _cases(op: str) -> list:
    rng = np.random.default_rng(45)
    return REGISTRY[op].sample(rng, np.dtype(np.float32)) + _extra(op, rng)


@pytest.fixture(scope="module", autouse=True)
def _nn_registered():
    """The nn ops in REGISTRY for this module (restored afterwards)."""
    saved = {d.name: REGISTRY.get(d.name) for d in NN_OPS}
    for d in NN_OPS:
        REGISTRY[d.name] = d
    yield
    for name, d in saved.items():
        if d is None:
            REGISTRY.pop(name, None)
        else:
            REGISTRY[name] = d


def _episode(dev, op: str, xs: list, attrs: dict, dtype: str, seed: int):
    """The op on params, each param also read by a second node (a fanned-out gradient), a
    random cotangent; the episode replayed on ``dev``; (tape, the parity report)."""
    rng = np.random.default_rng(seed)
    tape = Tape(dtype)
    vs = [tape.param(x) for x in xs]
    y = tape.record(op, vs, attrs)
    assert tape.ok, tape.error
    loss = ops.sum(ops.mul(y, tape.const(rng.standard_normal(y.shape))))
    for v in vs:
        loss = ops.add(loss, ops.sum(ops.mul(v, tape.const(rng.standard_normal(v.shape)))))
    tape.backward(loss)
    prog = gpu.capture(dev, tape, loss)
    prog.forward()
    prog.backward()
    return tape, gpu.parity.compare(tape, prog)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", OPS)
def test_half_kernels_bit_identical(host, op, dtype):
    for i, (xs, attrs) in enumerate(_cases(op)):
        tape, rep = _episode(host, op, xs, attrs, dtype, i)
        bad = [(n.id, n.op, n.value.n_diff, n.grad and n.grad.n_diff) for n in rep.nodes
               if not n.exact]
        assert rep.exact, f"{op} case {i} {attrs}: differing (id, op, value, grad) {bad}"
        node = rep.nodes[len(xs)]
        assert node.op == op and node.value.n > 0
        for k in range(len(xs)):  # every input's gradient was compared, and is not all zero
            assert rep.nodes[k].grad is not None and rep.nodes[k].grad.n == xs[k].size
            assert np.any(tape.grad(tape.var(k)).astype(np.float32) != 0), (op, i, k)
        assert tape.value(tape.var(len(xs))).dtype == np.dtype(
            tape.dtype), "the tape stores the half type"


def test_a_contribution_added_unrounded_is_caught(host, monkeypatch):
    # control: without RND (the contribution rounded once before it is added to a gradient
    # that already holds one) conv2d's weight gradient (batch_sum_add), its input gradient
    # (col2im) and max-pool's (maxpool_bwd) differ from the reference
    from tapescope.gpu import source

    monkeypatch.setitem(source._COMMON[np.dtype(np.float16)], "RND", "")
    xs, attrs = _cases("conv2d")[-1]
    _, rep = _episode(host, "conv2d", xs, attrs, "float16", 0)
    assert not rep.exact
    assert {n.id for n in rep.nodes if n.grad is not None and n.grad.n_diff} >= {0, 1}
    xs, attrs = _cases("maxpool2d")[4]  # overlapping windows: pixels that take several g
    assert attrs["strides"] == (1, 1)
    _, rep = _episode(host, "maxpool2d", xs, attrs, "float16", 0)
    assert not rep.nodes[0].exact


def test_half_reference_accumulates_in_float32():
    # the order the kernels are held to: a half conv2d is the float32 conv of the widened
    # inputs rounded once (not a half-accumulated chain), checked against float64 products
    rng = np.random.default_rng(3)
    x, w = _u(rng, 1, 16, 4, 4), _u(rng, 2, 16, 3, 3)
    for dt in HALF:
        t = Tape(dt)
        y = t.value(t.record("conv2d", [t.const(x), t.const(w)], {}))
        xh = t.value(t.var(0)).astype(np.float32)
        wh = t.value(t.var(1)).astype(np.float32)
        acc = np.zeros((1, 2, 2, 2), np.float32)
        for c in range(16):  # (c, a, b) row-major, one float32 rounding per add and product
            for a in range(3):
                for b in range(3):
                    acc = acc + wh[None, :, c, a, b, None, None] * xh[:, c, a:a + 2, b:b + 2][
                        :, None]
        assert np.array_equal(y.view(np.uint16), acc.astype(t.dtype).view(np.uint16)), dt


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_maxpool_signed_zero_ties_follow_np_maximum(host, dtype):
    # the value is np.maximum's chain (of -0.0 and +0.0 the later tap's), the gradient goes to
    # the first maximum (np.argmax): the kernel had taken the first zero's sign for the value
    x = np.array([[-0.5, -0.0, 0.0], [0.0, -0.0, -1.0], [np.nan, -0.0, -2.0]]).reshape(
        1, 1, 3, 3)
    tape, rep = _episode(host, "maxpool2d", [x], {"kernel": (1, 3), "strides": (1, 1)},
                         dtype, 0)
    assert rep.exact, [(n.id, n.op) for n in rep.nodes if not n.exact]
    y = tape.value(tape.var(1)).astype(np.float64).reshape(-1)
    assert np.signbit(y[:2]).tolist() == [False, True] and np.isnan(y[2])


def test_a_half_kernel_template_reproduces_the_stock_half_kernels(tmp_path, capsys):
    # `kernels --template softmax --dtype float16`: a half library's row kernels (no stash), so
    # the --kernel file is the stock kernel of a float16 transformer, bit for bit; one file for
    # a half and a float dtype at once is refused in one line
    from tapescope.app.cli import main

    cu = tmp_path / "sm.cu"
    assert main(["kernels", "--template", "softmax", "--dtype", "float16", "--out",
                 str(cu)]) == 0
    capsys.readouterr()
    assert main(["parity", "--workload", "transformer", "--dtype", "float16", "--device",
                 "host", "--steps", "1", "--kernel", f"softmax={cu}"]) == 0, capsys.readouterr()
    assert main(["kernels", "--template", "softmax", "--dtype", "float16", "--dtype", "float32",
                 "--out", str(cu)]) == 2
    assert "not both" in capsys.readouterr().err
