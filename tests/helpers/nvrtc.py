"""Whether NVRTC tests can run here: the ``needs_nvrtc`` mark (the gpu tests)."""

from __future__ import annotations

import platform

import pytest


def nvrtc_skip_reason() -> str | None:
    """Why NVRTC tests skip here, or None. On Linux x86_64 the test extra installs CuPy and NVRTC
    from their wheels, so there they never skip: a missing NVRTC fails with what to install."""
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        return None
    from tapescope.gpu.device import DeviceError
    from tapescope.gpu.nvrtc import load_nvrtc

    try:
        load_nvrtc()
    except DeviceError as e:
        return f"NVRTC cannot be loaded on {platform.system()} {platform.machine()}: {e}"
    return None


NVRTC_SKIP_REASON = nvrtc_skip_reason()


needs_nvrtc = pytest.mark.skipif(NVRTC_SKIP_REASON is not None, reason=NVRTC_SKIP_REASON or "")
