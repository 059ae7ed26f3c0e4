"""``tapescope doctor``: what this machine has for tapescope, in one table, and what to install
for what does not work. Each check is small and imports nothing heavy it does not need; GPU and
NVRTC checks go through the same functions the backends use, so the table says what a run would
find. Exit 0 (the table is information; every row that is not ok says what to do).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import platform
import sys
from collections.abc import Callable

OK, MISSING, OPTIONAL = "ok", "MISSING", "not available"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``doctor`` subcommand."""
    p = sub.add_parser("doctor", help="what works here (Python, numpy, Qt, display, gcc, "
                                      "NVRTC, CuPy, GPU, torch, capture) and what to install")
    p.add_argument("--build", action="store_true",
                   help="build the native code for this machine first (its kernels and the "
                        "capture recorder's per-op path in C, into the kernel cache): then "
                        "`with tapescope.capture(...)` in your own script records on the C path "
                        "from its first use")
    p.set_defaults(func=run)


def _dist(*names: str) -> str | None:
    """The version of the first installed distribution among ``names``."""
    for n in names:
        try:
            return f"{md.version(n)}"
        except md.PackageNotFoundError:
            continue
    return None


def _one_line(e: BaseException | str) -> str:
    return " ".join(str(e).split())[:400]


def check_python() -> tuple[str, str, str]:
    ok = sys.version_info >= (3, 10)
    return (OK if ok else MISSING, f"{platform.python_version()} ({sys.executable})",
            "" if ok else "tapescope needs Python 3.10 or newer")


def check_numpy() -> tuple[str, str, str]:
    import numpy

    return OK, numpy.__version__, ""


def check_qt() -> tuple[str, str, str]:
    v = _dist("PySide6-Essentials", "PySide6")
    if v is None:
        return MISSING, "PySide6 not installed", "pip install PySide6-Essentials (the window)"
    g = _dist("pyqtgraph")
    if g is None:
        return MISSING, f"PySide6 {v}, pyqtgraph not installed", "pip install pyqtgraph"
    return OK, f"PySide6 {v}, pyqtgraph {g}", ""


def check_display() -> tuple[str, str, str]:
    from tapescope.app.platform_check import NO_DISPLAY, choose_platform

    choice = choose_platform(os.environ)
    if choice.error == NO_DISPLAY:
        return (OPTIONAL, "no display (DISPLAY and WAYLAND_DISPLAY are unset)",
                "run on a desktop or over `ssh -X`; --screenshot OUT.png and `tapescope "
                "report` work headless")
    if choice.error:  # the line says what to install or set
        return OPTIONAL, " ".join(choice.error.split()), ""
    shown = choice.platform or os.environ.get("QT_QPA_PLATFORM") or "Qt's default"
    return OK, f"Qt platform {shown}", ""


def check_gcc() -> tuple[str, str, str]:
    """The C++ compiler the host backend would use (gpu.host_compiler.find_compiler:
    $TAPESCOPE_CXX or g++), and its version, as the backend reads them."""
    from tapescope.gpu.device import DeviceError
    from tapescope.gpu.host_compiler import compiler_version, find_compiler

    try:
        cxx = find_compiler()
        first = compiler_version(cxx).splitlines()[0]
    except DeviceError as e:
        return (MISSING, _one_line(str(e).split(":")[0]),
                "the host backend compiles its kernels with g++: apt-get install g++ "
                "(dnf install gcc-c++), or set TAPESCOPE_CXX")
    return OK, f"{first} ({cxx})", ""


def check_isa() -> tuple[str, str, str]:
    """The path the native code is built for (core.native.isa): the CPU's widest, or what
    $TAPESCOPE_ISA forces; the paths this CPU can run."""
    from tapescope.core.native import isa

    try:
        isa.extra_flags()
    except isa.ISAError as e:
        return MISSING, _one_line(e), f"unset {isa.ENV} / {isa.TUNE_ENV} or name a path it runs"
    can = isa.runnable()
    return OK, f"{isa.describe()}; runs {', '.join(can) or 'native only'}", ""


def check_nvrtc() -> tuple[str, str, str]:
    from tapescope.gpu.device import DeviceError
    from tapescope.gpu.nvrtc import cuda_version_text, nvrtc_version

    try:
        return OK, f"NVRTC {cuda_version_text(nvrtc_version())}", ""
    except (DeviceError, ImportError, OSError) as e:
        return (OPTIONAL, _one_line(e), "`tapescope kernels` and the cuda backend need it: "
                "pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12 (Linux x86_64)")


def check_cupy() -> tuple[str, str, str]:
    v = _dist("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
    if v is None:
        return OPTIONAL, "CuPy not installed", "for the cuda backend: pip install cupy-cuda12x"
    return OK, f"CuPy {v}", ""


def check_gpu() -> tuple[str, str, str]:
    from tapescope.gpu.cuda import cuda_unavailable_reason

    why = cuda_unavailable_reason()
    if why is not None:
        return (OPTIONAL, why, "a CUDA device for --device cuda; --device host runs the same "
                "kernels on the CPU")
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return OK, f"{name}, sm_{cupy.cuda.Device(0).compute_capability}", ""


def check_torch() -> tuple[str, str, str]:
    v = _dist("torch")
    if v is None:
        return (OPTIONAL, "PyTorch not installed", "for PyTorch as a candidate (--device torch), "
                "`tapescope capture` of your own training script, the PyTorch benchmarks and "
                "exporting models to ONNX: pip install torch")
    return OK, (f"PyTorch {v}: a candidate (--device torch, --against torch) and `tapescope "
                "capture`"), ""


def check_capture() -> tuple[str, str, str]:
    """Whether the capture recorder's per-op path in C is built for this Python (looked up in
    the kernel cache, never built here: ``--build`` does). The ``tapescope capture`` command
    builds it before it starts a script; the Python API (``with tapescope.capture(...)``) runs
    in the user's process, where nothing is compiled, so until it is built that records on the
    recorder's Python path: the same file, slower."""
    if _dist("torch") is None:
        return OPTIONAL, "needs PyTorch", "pip install torch"
    if os.environ.get("TAPESCOPE_NO_NATIVE"):
        return (OPTIONAL, "TAPESCOPE_NO_NATIVE is set: the recorder's Python path (the same "
                "file, slower)", "")
    from tapescope.app.capture import recorder_native

    if recorder_native.module(build=False) is not None:
        return OK, "the recorder's per-op path in C is built", ""
    return (OPTIONAL, "the recorder's per-op path in C is not built yet: `with "
            "tapescope.capture(...)` records on its Python path (the same file, slower)",
            "tapescope doctor --build (the first `tapescope capture` builds it too; it needs "
            "gcc and Python's headers, python3-dev)")


CHECKS: list[tuple[str, Callable[[], tuple[str, str, str]]]] = [
    ("Python", check_python), ("numpy", check_numpy), ("Qt", check_qt),
    ("display", check_display), ("gcc", check_gcc), ("native", check_isa),
    ("NVRTC", check_nvrtc),
    ("CuPy", check_cupy), ("GPU", check_gpu), ("torch", check_torch),
    ("capture", check_capture),
]


def rows() -> list[tuple[str, str, str, str]]:
    """(what, status, found, what to do) per check; a check that raises is reported, not
    propagated (a broken install is what doctor is for)."""
    out = []
    for what, check in CHECKS:
        try:
            status, found, todo = check()
        except Exception as e:  # noqa: BLE001
            status, found, todo = MISSING, f"{type(e).__name__}: {_one_line(e)}", "reinstall it"
        out.append((what, status, found, todo))
    return out


def build() -> None:
    """The native code for this machine, into the kernel cache: core.native's library for the
    path this CPU takes, and the capture recorder's per-op path in C where PyTorch is here.
    What cannot be built is left to the table's rows to say."""
    from tapescope.core import native

    native.library(build=True)
    if _dist("torch") is not None:
        from tapescope.app.capture import recorder_native

        recorder_native.module(build=True)


def run(args: argparse.Namespace) -> int:
    """Print the table (after ``--build``'s builds); exit 0."""
    from tapescope.app.about import version

    if getattr(args, "build", False):
        build()
    print(f"tapescope {version()}")
    table = rows()
    w = max(len(r[0]) for r in table)
    s = max(len(r[1]) for r in table)
    for what, status, found, todo in table:
        print(f"{what:<{w}}  {status:<{s}}  {found}" + (f"  -> {todo}" if todo else ""))
    return 0
