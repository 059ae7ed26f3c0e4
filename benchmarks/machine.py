"""The line every target benchmark prints first: which CPU, which native path ran, what the
peers run on it, and the load. Ratios move with all four (issue 49: the same ratios were 2-3x
worse on an Intel AVX-512 machine, where PyTorch and onnxruntime take MKL/oneDNN's AVX-512
kernels), so a table without them cannot be compared with another machine's."""

from __future__ import annotations

import os


def machine_line(peers: tuple[str, ...] = ("torch",)) -> str:
    from tapescope.core.native import isa

    parts = [f"native path {isa.describe()}", f"{os.cpu_count()} cores",
             f"load {os.getloadavg()[0]:.1f}"]
    if "torch" in peers:
        try:
            import torch

            cap = torch.backends.cpu.get_cpu_capability()
            mkl = "MKL" if torch.backends.mkl.is_available() else "no MKL"
            parts.append(f"torch {torch.__version__} ({cap}, {mkl}, "
                         f"{torch.get_num_threads()} threads)")
        except (ImportError, AttributeError):
            pass
    if "onnxruntime" in peers:
        try:
            import onnxruntime as ort

            parts.append(f"onnxruntime {ort.__version__}")
        except ImportError:
            pass
    for var in ("TAPESCOPE_ISA", "TAPESCOPE_TUNE", "OPENBLAS_CORETYPE"):
        if os.environ.get(var):
            parts.append(f"{var}={os.environ[var]}")
    return "machine: " + "; ".join(parts)
