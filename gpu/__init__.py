"""Device layer: backends (cuda, host), kernel library, replay, parity diffs (and later fusion).

    dev = gpu.open_device("auto")           # "device: host (CuPy not installed)"
    prog = gpu.capture(dev, tape, loss)
    prog.set_input(x, batch); prog.forward(); prog.backward(); prog.step(opt)
    report = gpu.parity.compare(tape, prog)
"""

from gpu import parity
from gpu.device import Buffer, Device, DeviceError, open_device
from gpu.optim import SGD, Adam, from_core
from gpu.program import CaptureError, Program, capture
from gpu.signature import KernelArgError

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
