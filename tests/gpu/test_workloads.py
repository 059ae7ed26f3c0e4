"""The built-in workloads replayed on the host backend: bit-identical for 20 training steps."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import workloads
from tapescope.core.ops import REGISTRY
from tapescope.core.parity import compare_arrays
from tests.helpers.workloads import train_side_by_side


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_twenty_steps_bit_identical(host, name, dtype):
    losses = []
    for step, tape, prog, rep in train_side_by_side(host, name, dtype, 20):
        bad = [(n.id, n.op, n.name) for n in rep.nodes if not n.exact]
        assert rep.exact, f"{name} step {step}: first divergence {rep.first_divergence}, {bad}"
        assert prog.loss() == float(tape.value(tape.var(prog.loss_id)))
        losses.append(prog.loss())
    # parameters after the 20th update, compared bit for bit
    for i in prog.param_ids():
        assert compare_arrays(tape.value(i), prog.read(i)).exact, f"param {i} after 20 steps"
    assert losses[-1] < losses[0]  # it trained: the comparison is not between two idle runs
    assert prog.stats["launches_optimizer"] > 0


def _tainted(nodes) -> list[bool]:
    """Per node: does its value depend on a transcendental node's value?"""
    out = [False] * len(nodes)
    for n in nodes:
        out[n.id] = any(REGISTRY[nodes[j].op].transcendental or out[j] for j in n.inputs)
    return out


def _check_drift_confined(rep, nodes) -> None:
    tainted = _tainted(nodes)
    for p in rep.nodes:
        if not tainted[p.id] and not REGISTRY[p.op].transcendental:
            assert p.value.exact, f"node {p.id} {p.op} drifted without a transcendental"
    if rep.first_divergence is not None:
        first, which = rep.first_divergence
        assert which == "value" and REGISTRY[nodes[first].op].transcendental
        assert 0 < rep.nodes[first].value.max_ulp <= 8  # a libm difference: a few ulp


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_platform_libm_drifts_exactly_on_transcendental_nodes(host, dtype):
    # The refmath tape replayed with the platform's libm (glibc here, CUDA libm on a GPU):
    # fdlibm-derived refmath is not correctly rounded, so thousands of exp/log calls differ
    # somewhere, and only at and after the transcendental nodes.
    wl = workloads.get("transformer", dtype=dtype)
    loss = wl.record(0)
    wl.tape.backward(loss)
    prog = gpu.capture(host, wl.tape, loss, math="platform")
    prog.forward()
    prog.backward()
    rep = gpu.parity.compare(wl.tape, prog)
    assert rep.first_divergence is not None
    _check_drift_confined(rep, prog.nodes)
    refmath = gpu.capture(host, wl.tape, loss)  # the control: refmath on the device is exact
    refmath.forward()
    refmath.backward()
    assert gpu.parity.compare(wl.tape, refmath).exact


def test_platform_on_both_sides(host):
    # numpy's libm vs the host's: identical where numpy calls glibc (float64 here), a few ulp
    # apart where it has its own SIMD code (float32 here); either way only transcendental
    # nodes and what follows them may differ.
    for dtype in (np.float64, np.float32):
        _, tape, prog, rep = next(train_side_by_side(host, "transformer", dtype, 1,
                                                     math="platform"))
        _check_drift_confined(rep, prog.nodes)
