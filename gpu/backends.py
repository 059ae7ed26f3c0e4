"""Open a device backend by name: "cuda", "host", or "auto".

Apart from ``gpu.device`` (the interface every backend implements, which ``gpu.host`` and
``gpu.cuda`` import) so that the interface never imports its backends. CuPy is imported only
when CUDA is asked for, the host backend when it is opened.
"""

from __future__ import annotations

from tapescope.gpu.device import Device, DeviceError


def open_device(kind: str = "auto") -> Device:
    """Open "cuda", "host", or "auto" (CUDA when CuPy imports, a device answers and NVRTC loads,
    else host, whose `reason` says why)."""
    if kind not in ("auto", "cuda", "host"):
        raise DeviceError(f"unknown device {kind!r}: use auto, cuda or host")
    if kind in ("auto", "cuda"):
        from tapescope.gpu.cuda import cuda_unavailable_reason

        why = cuda_unavailable_reason()
        if why is None:
            from tapescope.gpu.cuda import CudaDevice

            try:
                return CudaDevice("CUDA device answered" if kind == "auto" else "requested")
            except DeviceError as e:  # e.g. a driver older than NVRTC
                why = str(e)
        if kind == "cuda":
            raise DeviceError(f"cuda device unavailable: {why}")
        from tapescope.gpu.host import HostDevice

        return HostDevice(why)
    from tapescope.gpu.host import HostDevice  # (imported when asked for, as CuPy is)

    return HostDevice("requested")
