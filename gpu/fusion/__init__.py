"""Fusion: a captured program's row-local runs become generated megakernels, bit-identically.

    prog = gpu.capture(dev, tape, loss)
    p = gpu.fusion.plan(prog)        # inspect: p.segments, p.kernels, p.describe()
    gpu.fusion.apply(prog, p)        # or apply(prog): plan + apply; prog.fusion is the plan
    prog.forward(); prog.backward(); prog.step(opt)   # same API, fewer launches

See docs/fusion.md for the row space, the pointer-table ABI and the launch accounting.
"""

from __future__ import annotations

from typing import Any

from tapescope.gpu.fusion.analysis import RowNode, Segment, find_segments, row_info
from tapescope.gpu.fusion.optimizer import FusionRuntime
from tapescope.gpu.fusion.plan import FusedKernel, FusionError, FusionPlan, SegmentPlan, apply, plan

__all__ = ["FusedKernel", "FusionRuntime", "FusionError", "FusionPlan", "RowNode", "Segment",
           "SegmentPlan", "apply", "capture", "find_segments", "plan", "row_info"]


def capture(device: Any, tape: Any, loss: Any, fuse: bool = True) -> Any:
    """``gpu.capture`` then ``apply`` when ``fuse``: the ``capture(..., fuse=True)`` form."""
    from tapescope.gpu.program import capture as _capture

    prog = _capture(device, tape, loss)
    if fuse:
        apply(prog)
    return prog
