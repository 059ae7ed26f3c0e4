"""The device's torch.optim steps (gpu.SGDMomentum / gpu.AdamW: sgdm_T, adamw_T in
gpu/kernels/optim.cu) and scheduled lrs, step after step bit for bit with core.optim, in every
dtype, on the host backend (the identical CUDA source); NVRTC compiles them and their PTX has no
fma instruction (the fused multiply-adds are emulated from round-to-nearest operations).
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, optim, precision
from tapescope.core.schedule import Schedule
from tests.helpers.nvrtc import needs_nvrtc
from tests.helpers.workloads import weighted_squares

SIZES = (1, 63, 65, 300)
DTYPES = [np.float64, np.float32, precision.FLOAT16, precision.BFLOAT16]
IDS = ["f64", "f32", "f16", "bf16"]


def _scheduled(opt, sched):
    opt.schedule = sched
    return opt


CASES = {
    "sgd-nesterov-wd": lambda t: optim.SGDMomentum(t, 0.05, momentum=0.9, nesterov=True,
                                                   weight_decay=0.01),
    "sgd-momentum-clip": lambda t: optim.SGDMomentum(t, 0.05, momentum=0.9, dampening=0.2,
                                                     clip=0.5),
    "sgd-wd-cosine": lambda t: _scheduled(optim.SGDMomentum(t, 0.05, weight_decay=0.1),
                                          Schedule("cosine", warmup=2, t_max=3)),
    "adamw": lambda t: optim.AdamW(t, 0.01, weight_decay=0.1),
    "adamw-bigb1-clip-step": lambda t: _scheduled(
        optim.AdamW(t, 0.01, betas=(0.3, 0.99), weight_decay=0.0, clip=0.5),
        Schedule("step", step_size=2, gamma=0.5)),
    "adam-cosine-warmup": lambda t: _scheduled(optim.Adam(t, 0.01),
                                               Schedule("cosine", warmup=2, t_max=3)),
}


def _steps(host, dtype, make, steps=5, fuse=False):
    rng = np.random.default_rng(7)
    tape = Tape(dtype)
    ps = [tape.param(rng.standard_normal(n).astype(np.float32).astype(tape.dtype))
          for n in SIZES]
    cs = [rng.standard_normal(n).astype(np.float32).astype(tape.dtype) for n in SIZES]
    opt = make(tape)
    for j, p in enumerate(ps):
        opt.add(p, l2=0.01 if j % 2 else 0.0)  # the workload's L2 before the torch step
    mark = tape.mark()

    def episode():
        return weighted_squares(tape, ps, cs)

    prog = gpu.capture(host, tape, episode())
    if fuse:
        from tapescope.gpu.fusion import apply

        apply(prog)
    dopt = gpu.from_core(opt)
    before = [np.array(tape.value(p)) for p in ps]
    for step in range(steps):
        tape.reset_to(mark)
        tape.backward(episode())
        opt.step()
        prog.forward()
        prog.backward()
        prog.step(dopt)
        for p, n in zip(ps, SIZES, strict=True):
            assert prog.read(p).tobytes() == np.asarray(tape.value(p)).tobytes(), \
                f"step {step + 1}, param of {n} elements"
        if getattr(opt.slots[1], "m", None) is not None and dopt.moments:
            m = dopt.moments[ps[1].id][0].download()
            assert m.tobytes() == np.asarray(opt.slots[1].m).reshape(-1).tobytes()
    # not vacuous: the parameters moved (all but a bfloat16 one whose clipped steps round away)
    moved = [not np.array_equal(tape.value(p), b) for p, b in zip(ps, before, strict=True)]
    assert sum(moved) >= len(ps) - (tape.dtype == precision.BFLOAT16), moved
    return dopt


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("case", list(CASES))
def test_device_step_is_core_optims_bits(host, dtype, case):
    dopt = _steps(host, dtype, CASES[case])
    assert dopt.kind == {"sgd": "sgdm", "ada": "adamw"}[case[:3]] or case.startswith("adam-")


@pytest.mark.parametrize("case", ["sgd-nesterov-wd", "adamw", "adam-cosine-warmup"])
def test_a_fused_program_keeps_the_schedule_and_the_torch_steps(host, case):
    # the fused optimizer launch reads Adam's staged k; the torch steps keep their own launches
    _steps(host, np.float32, CASES[case], fuse=True)


def test_the_emulated_fma_is_one_rounding_not_two(host):
    # the kernel's fma, not a*b + c: momentum's buf*m + g as plain ops would differ somewhere
    from tapescope.core.explain_prims import fma

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4096) for _ in range(3))
    assert not np.array_equal(fma(a, b, c), a * b + c)
    a32, b32, c32 = (x.astype(np.float32) for x in (a, b, c))
    assert not np.array_equal(fma(a32, b32, c32), a32 * b32 + c32)


def test_plain_sgd_with_a_schedule_is_refused_in_one_line():
    tape = Tape(np.float64)
    tape.param(np.ones(3))
    opt = optim.SGD(tape, 0.1)
    opt.add_all()
    opt.schedule = Schedule("step", step_size=1)
    with pytest.raises(TypeError, match="a schedule needs --optimizer sgd"):
        gpu.from_core(opt)


@needs_nvrtc
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_nvrtc_compiles_the_torch_steps_without_an_fma(dtype):
    from tapescope.gpu.nvrtc import audit_ok, audit_ptx, nvrtc_compile
    from tapescope.gpu.source import STORAGE, SUFFIX, instantiate, template

    half = np.dtype(dtype) in STORAGE
    src = ('#include "half.cuh"\n' if half else "") + instantiate(template("optim", half),
                                                                   dtype)
    res = nvrtc_compile(src, "sm_90", name="optim.cu")
    sfx = SUFFIX[np.dtype(dtype)]
    for k in ("sgdm", "adamw"):
        assert f".entry {k}_{sfx}(".encode() in res.ptx
    counts = audit_ptx(res.ptx)
    assert audit_ok(counts) and counts["fma"] == 0, counts
