"""Quantization-aware training's fused observer and fake quantizer
(``aten._fused_moving_avg_obs_fq_helper``; core/capture/aten_ref_quant.py): each call was
``no reference`` (60 of a QAT script's 518 outputs). The form is ATen's CPU kernel: every
output (the four running statistics and parameters it writes, the fake-quantized values and
the mask) torch's bits, per tensor and per channel, symmetric and affine, a first call's
empty statistics, fake quantization off; hostile arguments are no reference, named."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import NoReference, reference  # noqa: E402

OP = "aten._fused_moving_avg_obs_fq_helper.default"


def _case(g, t: int, per_row: bool) -> tuple:
    x = torch.randn(4, 3, 5, 5, generator=g) * float(torch.rand(1, generator=g) * 3 + 1e-6)
    if t % 7 == 0:
        x = x * 1e-7  # (a scale under QuantUtils' 6.1e-5 floor)
    if t % 11 == 0:
        x = x.abs()  # (a minimum of 0: the zero point at qmin)
    if per_row:
        first = t % 2 == 1
        rmin = torch.empty(0) if first else torch.randn(4, generator=g) - 1
        rmax = torch.empty(0) if first else torch.rand(4, generator=g)
        sc, zp = torch.ones(1 if first else 4), torch.zeros(1 if first else 4, dtype=torch.int32)
        fq = 1
    else:
        inf = t % 3 == 0
        rmin = torch.tensor(float("inf") if inf else -0.5 - t * 0.01)
        rmax = torch.tensor(float("-inf") if inf else 0.7)
        sc, zp = torch.ones(1), torch.zeros(1, dtype=torch.int32)
        fq = int(t % 4 != 3)
    return (x, torch.ones(1, dtype=torch.long), torch.tensor([fq], dtype=torch.long), rmin, rmax,
            sc, zp)


@pytest.mark.parametrize("per_row, symmetric, qmin, qmax", [
    (False, False, 0, 127), (False, True, -128, 127), (True, True, -128, 127),
    (True, False, 0, 255)], ids=["tensor-affine", "tensor-symmetric", "channel-symmetric",
                                 "channel-affine"])
def test_every_output_is_torchs_every_bit(per_row, symmetric, qmin, qmax):
    """40 calls each (an averaging constant of 0.01): the form's six outputs against torch's
    written arguments and returns, byte for byte. Planted (the running update in double):
    fails. (Which bound's term gives the zero point is not told apart here: both round to the
    same integer in these calls.)"""
    g = torch.Generator().manual_seed(int(per_row) * 2 + int(symmetric))
    for t in range(40):
        base = _case(g, t, per_row)
        args = [*base, 0.01, qmin, qmax, 0, per_row, symmetric]
        theirs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        out, mask = torch.ops.aten._fused_moving_avg_obs_fq_helper(*theirs)
        want = [theirs[3], theirs[4], theirs[5], theirs[6], out, mask]
        got = reference(OP, [a.numpy() if isinstance(a, torch.Tensor) else a for a in args], {})
        assert len(got) == 6
        for k, (a, b) in enumerate(zip(got, want, strict=True)):
            b = b.numpy()
            assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes(), \
                (t, k)


@pytest.mark.parametrize("edit, says", [
    (lambda a: a.__setitem__(8, 127), "quant_min < quant_max"),
    (lambda a: a.__setitem__(0, a[0].astype(np.float16)), "float32 / float64"),
    (lambda a: a.__setitem__(10, 7), "ch_axis 7"),
    (lambda a: a.__setitem__(3, np.zeros(3, np.float32)), "entries expected"),
    (lambda a: a.__setitem__(1, np.ones(2, np.int64)), "one-element switches"),
])
def test_hostile_arguments_have_no_reference(edit, says):
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    args = [x, np.ones(1, np.int64), np.ones(1, np.int64), np.zeros(4, np.float32),
            np.ones(4, np.float32), np.ones(4, np.float32), np.zeros(4, np.int32), 0.01, -128,
            127, 0, True, True]
    edit(args)
    with pytest.raises(NoReference, match=says):
        reference(OP, args, {})
