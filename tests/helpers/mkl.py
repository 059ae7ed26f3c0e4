"""Which MKL kernels torch's float32 products run here: MKL picks them by CPU vendor."""

from __future__ import annotations


def mkl_vendor() -> str | None:
    """"GenuineIntel" or "AuthenticAMD" where torch's products are MKL's, else None (no torch,
    another BLAS, no /proc/cpuinfo). On an AMD EPYC MKL's dgemm tiles 12 columns where an
    Intel Xeon runs one fma chain an element (tests/core/test_explain_blocked.py), and its
    dot-product kernels add rounded products where the Xeon's fma them."""
    try:
        import torch
    except ImportError:
        return None
    if "Math Kernel Library" not in torch.__config__.show():
        return None
    from tapescope.app.capture.recorder import _cpu  # (what a capture records as its vendor)

    return _cpu().get("cpu_vendor")


def mkl_amx() -> bool:
    """Whether this CPU has AMX (``amx_tile`` among /proc/cpuinfo's flags): MKL's AVX-512 path
    blocks some products otherwise without it (``core.explain_aten.mkl_no_amx``: an Ice Lake
    Xeon's few-row products by the dots kernel, wide outputs' panels)."""
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("flags"):
                    return "amx_tile" in ln.split()
    except OSError:
        pass
    return False


def need_amd_mkl():
    """The pytest mark of a test that compares with MKL's AMD kernels: skipped, with the reason,
    where torch's products are not MKL's on an AMD CPU."""
    import pytest

    return pytest.mark.skipif(
        mkl_vendor() != "AuthenticAMD",
        reason="MKL's AMD kernels give torch's bits only where torch runs MKL on an AMD CPU")
