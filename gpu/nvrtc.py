"""Real NVRTC, no GPU needed: the one compile function of the cuda backend, its target choice,
and the PTX audit of the parity contract (`tapescope kernels --audit`, tests/gpu/test_nvrtc.py).

NVRTC is a plain library: it compiles CUDA C to PTX and to a cubin (native code) on any machine
where it loads, with or without a GPU or a driver. It comes with CuPy's wheels
(`cupy-cuda12x` + `nvidia-cuda-nvrtc-cu12`, or `cupy-cuda13x` + its NVRTC); CuPy 14 finds the
wheel's libnvrtc itself (cuda-pathfinder), so no environment variable is needed. We call it
through `cupy_backends.cuda.libs.nvrtc`, not `cupy.RawModule(code=...)`: CuPy's own compile path
appends `-ftz=true` to every option list, which flushes float32 subnormals to zero.

Target: a cubin for the device's compute capability (`--gpu-architecture=sm_XX`). A cubin from
an NVRTC newer than the driver still loads within one CUDA major version (minor version
compatibility), while PTX needs a driver at least as new as the NVRTC that wrote it. PTX
(`compute_XX`, JIT-compiled by the driver) is only the fallback for a device newer than this
NVRTC knows. A driver older than NVRTC's major version cannot load either: a clear error naming
both versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tapescope.gpu.device import DeviceError, header_paths

__all__ = ["NVRTC_FLAGS", "NvrtcOutput", "Target", "load_nvrtc", "nvrtc_version",
           "kernel_headers", "check_arch", "nvrtc_compile", "choose_target", "cuda_version_text",
           "audit_ptx", "AUDIT_COLUMNS", "audit_ok"]

# --fmad=false: no contraction into FMA (the parity contract). -ftz=false: keep float32
# subnormals. IEEE-rounded division and sqrt. No --use_fast_math, ever.
NVRTC_FLAGS = ("--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "--std=c++14")

_INSTALL = ("install CuPy with its NVRTC wheel (Linux x86_64): `pip install cupy-cuda12x "
            "nvidia-cuda-nvrtc-cu12` (or `cupy-cuda13x` with the CUDA 13 NVRTC)")


def load_nvrtc() -> Any:
    """The real NVRTC binding of the installed CuPy; DeviceError saying what to install."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception as e:  # ImportError, or a broken install raising anything
        raise DeviceError(f"NVRTC is not available ({type(e).__name__}: {e}): {_INSTALL}") from e
    try:
        nvrtc.getVersion()
    except Exception as e:
        msg = " ".join(str(e).split())
        raise DeviceError(f"CuPy is installed but libnvrtc cannot be loaded ({msg}): "
                          f"{_INSTALL}") from e
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC CuPy loaded."""
    major, minor = load_nvrtc().getVersion()
    return int(major), int(minor)


def kernel_headers() -> tuple[list[bytes], list[bytes]]:
    """(include names, texts) of the kernels' device headers as NVRTC takes them: bytes, not
    str. refmath.cuh comes from core (core/refmath/); the host-only ones stay out."""
    paths = [p for n, p in header_paths().items()
             if n not in ("host_prelude.h", "intrinsics_host.h")]
    return [p.name.encode() for p in paths], [p.read_bytes() for p in paths]


@dataclass(frozen=True)
class NvrtcOutput:
    """One compilation: PTX always, a cubin for an `sm_XX` target, the log and what made it."""

    ptx: bytes
    cubin: bytes | None
    log: str
    version: tuple[int, int]
    options: tuple[str, ...]

    @property
    def binary(self) -> bytes:
        """What the driver loads: the cubin when there is one, else the PTX."""
        return self.cubin if self.cubin is not None else self.ptx


def check_arch(arch: str) -> None:
    """DeviceError unless `arch` is sm_XX / compute_XX of an architecture this NVRTC knows."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)
    if m is None:
        raise DeviceError(f"arch must look like sm_90 or compute_90, not {arch!r}")
    archs = tuple(int(a) for a in load_nvrtc().getSupportedArchs())
    if int(m.group(1)) not in archs:
        raise DeviceError(f"NVRTC {cuda_version_text(nvrtc_version())} does not know {arch}; "
                          f"it supports {', '.join(f'sm_{a}' for a in archs)}")


def nvrtc_compile(source: str, arch: str, name: str = "tapescope.cu") -> NvrtcOutput:
    """Compile `source` with real NVRTC and the backend's flags for `arch` ("sm_90": cubin and
    PTX; "compute_90": PTX only). The one compile path of the cuda backend and the tests."""
    check_arch(arch)
    nvrtc = load_nvrtc()
    version = nvrtc_version()
    options = (*NVRTC_FLAGS, f"--gpu-architecture={arch}")
    hnames, htexts = kernel_headers()
    # CuPy's binding: source and name are str, header texts and include names bytes,
    # options str (it encodes them itself).
    prog = nvrtc.createProgram(source, name, htexts, hnames)
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(prog)
            raise DeviceError(f"NVRTC {version[0]}.{version[1]} compile failed for {arch} "
                              f"({e}):\n{log[-4000:]}") from e
        log = nvrtc.getProgramLog(prog)
        ptx = bytes(nvrtc.getPTX(prog)).rstrip(b"\0")
        cubin = bytes(nvrtc.getCUBIN(prog)) if arch.startswith("sm_") else None
    finally:
        nvrtc.destroyProgram(prog)
    return NvrtcOutput(ptx, cubin, log, version, options)


def cuda_version_text(v: int | tuple[int, int]) -> str:
    """12040 (the driver API's encoding) or (12, 4) → "12.4"."""
    if isinstance(v, tuple):
        return f"{v[0]}.{v[1]}"
    return f"{v // 1000}.{(v % 1000) // 10}"


@dataclass(frozen=True)
class Target:
    """What the cuda backend compiles for one device: `arch` and "cubin" or "ptx"."""

    arch: str
    kind: str
    why: str


def choose_target(cc: int, nvrtc: tuple[int, int], supported: tuple[int, ...],
                  driver: int) -> Target:
    """The compile target for a device of compute capability `cc` (e.g. 90), an NVRTC of version
    `nvrtc` supporting the sm numbers `supported`, and a driver of CUDA version `driver`
    (12040 = 12.4; 0 = none). DeviceError when nothing this NVRTC writes can load."""
    drv = (driver // 1000, (driver % 1000) // 10)
    both = f"the NVIDIA driver supports CUDA {cuda_version_text(driver)}, NVRTC is " \
           f"{cuda_version_text(nvrtc)}"
    if drv[0] < nvrtc[0]:
        raise DeviceError(f"{both}: the driver is too old to load code from this NVRTC; update "
                          f"the driver, or install the CUDA {drv[0]} wheels (cupy-cuda{drv[0]}x, "
                          f"nvidia-cuda-nvrtc-cu{drv[0]})")
    if cc in supported:
        return Target(f"sm_{cc}", "cubin", f"native code for sm_{cc}")
    lower = [a for a in supported if a <= cc]
    if not lower:
        raise DeviceError(f"compute capability {cc // 10}.{cc % 10} is older than any "
                          f"architecture NVRTC {cuda_version_text(nvrtc)} supports "
                          f"({min(supported)} and up)")
    if drv < nvrtc:
        raise DeviceError(f"{both}: NVRTC does not know sm_{cc}, and its PTX fallback needs a "
                          f"driver at least as new as NVRTC; update the driver")
    best = max(lower)
    return Target(f"compute_{best}", "ptx",
                  f"PTX for compute_{best}, JIT-compiled by the driver: NVRTC "
                  f"{cuda_version_text(nvrtc)} does not know sm_{cc}")


# ---- the PTX audit ---------------------------------------------------------------------------
_FLOAT = r"f(?:16|32|64)"
_RULES = {
    # a fused multiply-add in either spelling: fma.rn.f64, or the older mad.rn.f32 / mad.f32
    # (a float mad with a rounding mode IS fma; integer mad.lo/mad.wide/mad.hi are index math)
    "fma": re.compile(rf"^\s*(?:@!?%\w+\s+)?(?:fma\.|mad(?:\.(?:rn|rz|rm|rp|ftz|sat))*\."
                      rf"{_FLOAT}\b)", re.M),
    "ftz": re.compile(r"\.ftz\b"),
    "approx": re.compile(r"\.approx\b"),
    "div.rn": re.compile(rf"\bdiv\.rn\.{_FLOAT}\b"),
    "div.other": re.compile(rf"\bdiv\.(?!rn\.)[\w.]*{_FLOAT}\b"),
    "sqrt.rn": re.compile(rf"\bsqrt\.rn\.{_FLOAT}\b"),
    "sqrt.other": re.compile(rf"\bsqrt\.(?!rn\.)[\w.]*{_FLOAT}\b"),
    # a conversion to a half type that does not round to nearest even (truncating, directed,
    # stochastic or relu/satfinite). The half kernels convert in integer code
    # (gpu/kernels/half.cuh), so their PTX has none at all.
    "cvt.other": re.compile(r"\bcvt\.(?:(?:rz|rm|rp|rna|rs)\b[\w.]*|rn\.(?:relu|satfinite)[\w.]*)"
                            r"\.b?f16(?:x2)?\b"),
}
AUDIT_COLUMNS = ("kernels", *_RULES)


def audit_ptx(ptx: bytes | str) -> dict[str, int]:
    """Counts per rule in PTX text: kernels (.entry), fma (either spelling: fma.*, float mad.*),
    .ftz, .approx, round-to-nearest division/sqrt and any other float division/sqrt (full,
    approx, directed rounding)."""
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    text = re.sub(r"//[^\n]*", "", text)  # comments name source files, not instructions
    out = {"kernels": len(re.findall(r"\.entry\s+\w+", text))}
    out.update({k: len(r.findall(text)) for k, r in _RULES.items()})
    return out


def audit_ok(counts: dict[str, int]) -> bool:
    """The refmath contract: no fma, no .ftz, no .approx, only .rn float division and sqrt,
    no half conversion other than round-to-nearest-even."""
    return not (counts["fma"] or counts["ftz"] or counts["approx"] or counts["div.other"]
                or counts["sqrt.other"] or counts["cvt.other"])
