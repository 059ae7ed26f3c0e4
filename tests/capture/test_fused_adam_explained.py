"""PyTorch's CPU fused Adam and AdamW (``torch.optim.AdamW(..., fused=True)``: ATen's
FusedAdamKernel.cpp) written out for ``--explain`` (core/capture/explain.py ``_aten_adam``): the
kernel as its AVX-512 build contracts it (its AVX2 build gives the same bits: session 30,
test_capture_causes.py's AVX2 child), measured on this machine's torch (2.13): lerp's fma,
``exp_avg_sq = fma(c2 * g, g, exp_avg_sq * beta2)`` in its vector loops, ``fma(exp_avg_sq,
beta2, (c2 * g) * g)`` in its scalar loop over the last ``n % 8`` elements of a tensor, Adam's
weight decay ``fma(param, wd, grad)``. A Llama-like script with ``fused=True`` had all 49 of its
fused AdamW outputs ``unknown``; the reference form keeps the written order (no fma)."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture.aten_ref import reference
from tapescope.core.capture.explain import _fused_adams, explain_op
from tapescope.core.parity import compare_arrays

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AVX2"),
    reason="the contraction was measured in ATen's AVX-512 and AVX2 builds of the kernel (the "
           "same bits; the no-AVX build contracts its own way: not written out)")

SIZES = (3, 5, 8, 13, 15, 16, 19, 37, 100, 1000, 4101)


def _run(adamw: bool, wd: float, amsgrad: bool, seed: int, maximize: bool = False,
         dt: torch.dtype = torch.float32) -> tuple:
    g = torch.Generator().manual_seed(seed)
    ps = [torch.randn(n, generator=g, dtype=dt) for n in SIZES]
    gs = [torch.randn(n, generator=g, dtype=dt) * 0.1 for n in SIZES]
    ms = [torch.randn(n, generator=g, dtype=dt) * 0.01 for n in SIZES]
    vs = [torch.rand(n, generator=g, dtype=dt) * 1e-3 for n in SIZES]
    vms = [torch.rand(n, generator=g, dtype=dt) * 1e-3 for n in SIZES] if amsgrad else []
    steps = [torch.tensor(3.0) for _ in SIZES]
    kw = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": wd, "eps": 1e-8,
          "amsgrad": amsgrad, "maximize": maximize}
    args = [[t.numpy().copy() for t in lst] for lst in (ps, gs, ms, vs, vms)]
    args.append([t.numpy().copy() for t in steps])
    (torch._fused_adamw_ if adamw else torch._fused_adam_)(ps, gs, ms, vs, vms, steps, **kw)
    outs = [t.numpy() for lst in (ps, gs, ms, vs, vms) for t in lst]
    return args, kw, outs


CASES = [(True, 0.1, False), (True, 0.0, False), (False, 0.01, False), (False, 0.0, False),
         (True, 0.1, True), (False, 0.01, True)]
# the vector loops' reach, as measured: float32's scalar loop takes n % 8, float64's n % 4
WIDTH = {torch.float32: 8, torch.float64: 4}


@pytest.mark.parametrize("adamw,wd,amsgrad", CASES)
@pytest.mark.parametrize("seed,dt", [(0, torch.float32), (1, torch.float32),
                                     (2, torch.float64)])
def test_the_kernels_order_gives_torchs_bits(adamw, wd, amsgrad, seed, dt):
    args, kw, outs = _run(adamw, wd, amsgrad, seed, dt=dt)
    op = "aten._fused_adamw_.default" if adamw else "aten._fused_adam_.default"
    (run,) = [v[2] for v in _fused_adams(op.split(".")[1])
              if f"n % {WIDTH[dt]} elements" in v[1]]
    got = run(args, kw)
    assert len(got) == len(outs)
    for j, (y, t) in enumerate(zip(got, outs, strict=True)):
        assert y.tobytes() == t.tobytes(), (j, int(np.sum(y != t)))
    # and the written order differs from the kernel's (what the variant explains)
    ref = reference(op, args, kw)
    assert any(r.tobytes() != t.tobytes() for r, t in zip(ref, outs, strict=True))


def test_the_judge_names_it_and_a_wrong_order_stays_unknown():
    args, kw, outs = _run(True, 0.1, False, 2)
    op = "aten._fused_adamw_.default"
    ref = reference(op, args, kw)
    n = len(SIZES)
    j = next(j for j in range(2 * n, 3 * n) if ref[j].tobytes() != outs[j].tobytes())
    d = compare_arrays(ref[j], outs[j])
    diff = {"n_diff": d.n_diff, "max_ulp": d.max_ulp}
    got = explain_op(op, args, kw, outs[j], diff, output=j)
    assert got["cause"] == "fma" and "fused AdamW" in got["variant"], got
    # one ulp planted in one exp_avg element: no written order gives it
    planted = outs[j].copy()
    planted.view(np.uint32)[0] += 1
    d = compare_arrays(ref[j], planted)
    got = explain_op(op, args, kw, planted, {"n_diff": d.n_diff, "max_ulp": d.max_ulp},
                     output=j)
    assert got["cause"] == "unknown", got
