"""Device layer: backends (cuda, host), kernel library, replay, parity diffs, fusion (gpu.fusion).

    dev = gpu.open_device("auto")           # "device: host (CuPy not installed)"
    prog = gpu.capture(dev, tape, loss)
    prog.set_input(x, batch); prog.forward(); prog.backward(); prog.step(opt)
    report = gpu.parity.compare(tape, prog)
"""

from tapescope.gpu import parity
from tapescope.gpu.backends import open_device
from tapescope.gpu.device import Buffer, Device, DeviceError
from tapescope.gpu.optim import SGD, Adam, from_core
from tapescope.gpu.program import CaptureError, Program
from tapescope.gpu.program import capture as _capture
from tapescope.gpu.program import gc_paused as _gc_paused
from tapescope.gpu.signature import KernelArgError

__all__ = [
    "Adam",
    "Buffer",
    "CaptureError",
    "Device",
    "DeviceError",
    "KernelArgError",
    "Program",
    "SGD",
    "capture",
    "from_core",
    "open_device",
    "parity",
]


def capture(device: Device, tape, loss, math: str | None = None, fuse: bool = False,
            kernels: list | None = None) -> Program:
    """Mirror the episode [0, loss] of ``tape`` on ``device`` (``gpu.program.capture``); ``fuse``
    replaces runs of row-local nodes with generated kernels (gpu.fusion; bit-identical results).
    """
    prog = _capture(device, tape, loss, math, kernels)
    if fuse:
        from tapescope.gpu import (
            fusion,  # fusion composes the Program: imported only when asked for
        )

        with _gc_paused():  # (as the capture: the fused launches are kept)
            fusion.apply(prog)
    return prog
