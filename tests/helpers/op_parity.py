"""One op on the tape and on a device, compared: the cases of tests/gpu/test_ops_parity.py, also
run on CUDA (test_cuda.py) and for softplus (test_softplus.py)."""

from __future__ import annotations

import numpy as np

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.core.ops import REGISTRY

try:  # the imported-model ops register only on ONNX import; their kernels exist regardless
    from tapescope.core.ops.nn import NN_OPS
except ImportError:
    NN_OPS = ()

NON_LEAF = sorted({op for op, d in REGISTRY.items() if d.kind != "leaf"}
                  | {d.name for d in NN_OPS})


def run_case(host, op: str, xs: list, attrs: dict, dtype, math: str = "refmath", seed: int = 0):
    """Record op on a tape (params, so every input gets a gradient), replay it, compare."""
    rng = np.random.default_rng(seed)
    tape = Tape(dtype, math)
    nondiff = REGISTRY[op].nondiff_inputs
    vs = [tape.const(x) if k in nondiff else tape.param(x) for k, x in enumerate(xs)]
    y = tape.record(op, vs, attrs)
    assert tape.ok, tape.error
    # a random cotangent, so every gradient element is different
    loss = ops.sum(ops.mul(y, tape.const(rng.standard_normal(y.shape))))
    tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    return tape, prog, gpu.parity.compare(tape, prog)


def assert_exact(rep, what: str) -> None:
    """Fail naming every node of ``rep`` that is not bit-identical."""
    bad = [(n.id, n.op, n.value.n_diff, n.grad and n.grad.n_diff) for n in rep.nodes
           if not n.exact]
    assert rep.exact, f"{what}: differing nodes (id, op, value diffs, grad diffs) {bad}"
