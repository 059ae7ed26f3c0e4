"""A workload trained on the tape and on a device side by side (tests/gpu/test_workloads.py,
test_cuda, test_cuda_plumbing), and the small loss the optimizer tests step."""

from __future__ import annotations

from tapescope import gpu
from tapescope.core import ops, workloads


def train_side_by_side(host, name: str, dtype, steps: int, math: str = "refmath"):
    """Train on the tape and on the device; yield (step, tape, prog, report) before each update."""
    wl = workloads.get(name, dtype=dtype, math=math)
    opt = wl.make_optimizer()
    prog = gpu.capture(host, wl.tape, wl.record(0))
    dopt = gpu.from_core(opt)
    for step in range(steps):
        loss = wl.record(step)
        wl.tape.backward(loss)
        for v in wl.inputs.values():
            prog.set_input(v.id, wl.tape.value(v))
        prog.forward()
        prog.backward()
        yield step, wl.tape, prog, gpu.parity.compare(wl.tape, prog)
        opt.step()
        prog.step(dopt)


def weighted_squares(tape, ps, cs):
    """The loss sum_k sum(p_k * p_k * c_k), recorded on ``tape`` (the optimizer tests' episode:
    every parameter gets its own gradient, 2 p c)."""
    terms = [ops.sum(ops.mul(ops.mul(p, p), tape.const(c))) for p, c in zip(ps, cs, strict=True)]
    loss = terms[0]
    for t in terms[1:]:
        loss = ops.add(loss, t)
    return loss
