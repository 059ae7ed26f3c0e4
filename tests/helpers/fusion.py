"""Fused against unfused programs: bit comparisons, the differing nodes, and random graphs of
row-local ops (test_fusion, test_fusion_random, test_fused_rowlocal, test_host_blocks,
test_fp_contract)."""

from __future__ import annotations

import numpy as np

from tapescope.core import Tape, ops


def bits_equal(a, b) -> bool:
    """Bit-identical arrays (None == None)."""
    if a is None or b is None:
        return a is None and b is None
    a, b = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def diff_nodes(pa, pb) -> list[tuple[int, str, str]]:
    """Nodes whose value or gradient differs between two programs of the same episode."""
    bad = []
    for n in pa.nodes:
        for which in ("value", "grad"):
            if not bits_equal(pa.read(n.id, which), pb.read(n.id, which)):
                bad.append((n.id, n.op, which))
    return bad


UNARY = ["neg", "relu", "sigmoid", "tanh", "exp", "silu"]


def scalar_tail(t: Tape, y, ops_list: list[str], rng, use_sum: bool):
    """The loss: a reduction of y, then scalar arithmetic (the serial loss tail)."""
    loss = ops.sum(y, keepdims=True) if use_sum else ops.mean(ops.mul(y, y))
    for op in ops_list:
        if op == "adds":
            loss = loss + 0.25
        elif op == "muls":
            loss = loss * -1.5
        elif op == "sqrt_abs":
            loss = ops.sqrt(ops.mul(loss, loss))
        elif op == "scale_param":
            loss = ops.mul(loss, t.param(rng.uniform(0.5, 2.0, (1,)), name="alpha"))
        elif op == "sub_const":
            loss = ops.sub(t.const(np.array(0.5)), loss)
        elif op == "div":
            loss = ops.div(loss, t.param(np.array([1.25]), name="beta"))
        elif op == "sum":
            loss = ops.sum(loss)
        else:
            loss = getattr(ops, op)(loss)
    return loss


def build(rows: int, c0: int, seed: int, steps: list, tail: list[str] = (),
          use_sum: bool = False) -> tuple[Tape, object]:
    """A random graph of row-local ops over [rows, c] activations with leaf operands."""
    rng = np.random.default_rng(seed)
    t = Tape()
    acts = [t.const(rng.uniform(-1, 1, (rows, c0)), name="x")]
    for op, pick, width, s in steps:
        a = acts[-1 - pick % min(2, len(acts))]
        c = a.shape[-1]
        if op == "matmul":
            y = a @ t.param(rng.uniform(-1, 1, (c, width)) / np.sqrt(c), name="W")
        elif op == "bias":
            y = ops.add(a, t.param(rng.uniform(-1, 1, (c,)), name="b"))
        elif op == "scale_col":
            y = ops.mul(t.param(rng.uniform(0.5, 1.5, (1, c)), name="g"), a)
        elif op == "div_const":
            y = ops.div(a, t.const(rng.uniform(1, 2, (c,)) * rng.choice([-1, 1], c)))
        elif op == "scalar_const":
            y = ops.sub(t.const(np.array([s])), a)
        elif op == "act_binary":
            same = [v for v in acts if v.shape == a.shape]
            b = same[pick % len(same)]
            y = [ops.add, ops.sub, ops.mul][pick % 3](a, b)
        elif op == "unary":
            y = getattr(ops, UNARY[pick % len(UNARY)])(a)
        elif op == "adds":
            y = a + s
        elif op == "muls":
            y = a * s
        elif op == "softmax":
            y = ops.softmax(a)
        elif op == "rms_norm":
            y = ops.rms_norm(a, t.param(rng.uniform(0.5, 1.5, (c,)), name="gamma"))
        elif op == "layer_norm":
            y = ops.layer_norm(a, t.param(rng.uniform(0.5, 1.5, (c,)), name="gamma"), eps=1e-5)
        elif op == "rope":
            y = ops.rope(a if c % 2 == 0 else a @ t.param(rng.uniform(-1, 1, (c, 2 * width))))
        else:  # swiglu of two projections of the same activation
            u = a @ t.param(rng.uniform(-1, 1, (c, width)), name="W1")
            y = ops.swiglu(u, a @ t.param(rng.uniform(-1, 1, (c, width)), name="W3"))
        acts.append(y)
    loss = scalar_tail(t, acts[-1], list(tail), rng, use_sum)
    assert t.ok, t.error
    return t, loss
