"""The host body of adam_T (gpu/kernels/optim.cu): 64 consecutive elements a thread, the step's
scalars read once a span. Parameters at the span's edges (1, 63, 64, 65 elements, and more
spans than one block of threads holds), with clipping engaged and L2 on some, step after step
bit for bit with core.optim.Adam (the tape's own C pass)."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, optim
from tests.helpers.workloads import weighted_squares

SIZES = (1, 63, 64, 65, 64 * 128 + 3)  # the last: 129 spans, more than a block's 128 threads


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("clip", [None, 0.5], ids=["noclip", "clip"])
def test_adam_spans_are_core_optims_bits(host, dtype, clip):
    rng = np.random.default_rng(7)
    tape = Tape(dtype)
    ps = [tape.param(rng.standard_normal(n).astype(tape.dtype)) for n in SIZES]
    cs = [rng.standard_normal(n).astype(tape.dtype) for n in SIZES]
    opt = optim.Adam(tape, lr=0.05, clip=clip)
    for j, p in enumerate(ps):
        opt.add(p, l2=0.01 if j % 2 else 0.0)
    mark = tape.mark()

    def episode():
        return weighted_squares(tape, ps, cs)

    prog = gpu.capture(host, tape, episode())
    dopt = gpu.from_core(opt)
    before = [tape.value(p).copy() for p in ps]
    for _ in range(3):
        tape.reset_to(mark)
        tape.backward(episode())
        opt.step()
        prog.forward()
        prog.backward()
        prog.step(dopt)
        for p, n in zip(ps, SIZES, strict=True):
            got, want = prog.read(p), tape.value(p)
            assert got.tobytes() == want.tobytes(), f"param of {n} elements"
    # not vacuous: every parameter moved
    assert all(not np.array_equal(tape.value(p), b) for p, b in zip(ps, before, strict=True))
