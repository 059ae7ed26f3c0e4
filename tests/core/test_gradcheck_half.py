"""Grad-check over the half dtypes: every op's float16 / bfloat16 gradient against float64's
within the tolerance stated per op (core.gradcheck.HALF_TOL), exact where stated exact."""

from __future__ import annotations

import pytest

from tapescope.core import gradcheck
from tapescope.core.optable.registry import REGISTRY

OPS = sorted(n for n, d in REGISTRY.items() if d.kind != "leaf" and d.sample is not None)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_op_within_its_stated_tolerance(dtype):
    bad = []
    for name in OPS:
        r = gradcheck.check_op_half(name, dtype)
        assert r.inputs_checked > 0, name
        if not r.ok:
            bad.append((name, r.max_err))
        if name in gradcheck.HALF_EXACT:
            assert r.max_err == 0.0, name
    assert not bad, bad


def test_the_check_can_fail(monkeypatch):
    # the half path (float32 compute) off by 2**-6 relative in mul's backward, the float64
    # path untouched: the comparison must see it
    import numpy as np

    from tapescope.core.optable.registry import OpDef

    mul = REGISTRY["mul"]

    def skewed(M, g, xs, y, at, nd):
        parts = mul.backward(M, g, xs, y, at, nd)
        if g.dtype != np.float32:
            return parts
        return [None if p is None else p * np.float32(1 + 2 ** -6) for p in parts]

    fake = OpDef(**{**mul.__dict__, "backward": skewed})
    monkeypatch.setitem(REGISTRY, "mul", fake)
    r = gradcheck.check_op_half("mul", "float16")
    assert not r.ok and r.max_err > 1.0


def test_cli_prints_the_half_table(capsys):
    from tapescope.app.cli import main

    assert main(["gradcheck", "--dtype", "bfloat16", "--op", "softmax", "--op", "sum"]) == 0
    out = capsys.readouterr().out
    assert "bfloat16 gradients against float64's" in out and "softmax" in out
