"""``tapescope kernels --arch sm_90 [--out DIR] [--audit]``: compile every kernel tapescope can
generate with real NVRTC and the cuda backend's exact flags (no GPU needed), and audit the PTX.

Compilation units: the kernel library, the parity diff kernels, and the fused kernels of both
built-in workloads, each per dtype (float64, float32, float16, bfloat16; the diff kernels
float64 and float32) and math mode (refmath, platform). The audit fails (exit 1) unless every
refmath unit's PTX has no ``fma``, no ``.ftz``, no ``.approx``, only round-to-nearest float
division and square root, and no half conversion other than round-to-nearest-even.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

DTYPES = ("float64", "float32", "float16", "bfloat16")
DIFF_DTYPES = ("float64", "float32")  # the device diff kernels (half episodes compare on host)
MATHS = ("refmath", "platform")
WORKLOADS = ("mlp", "transformer")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``kernels`` subcommand."""
    p = sub.add_parser("kernels", help="compile every kernel with real NVRTC (no GPU); audit "
                                       "the PTX")
    p.add_argument("--arch", default="sm_90",
                   help="sm_XX (cubin + PTX) or compute_XX (PTX only); default sm_90")
    p.add_argument("--out", metavar="DIR", help="write DIR/<unit>-<dtype>-<math>.cu/.ptx/.cubin "
                   "and the headers they include")
    p.add_argument("--template", metavar="OP",
                   help="write OP's stock kernels as one editable file to --out FILE.cu (for "
                        "parity/report --kernel OP=FILE.cu; docs/kernels.md) and exit; with "
                        "--dtype float16|bfloat16: as a half episode's library has them")
    p.add_argument("--dtype", action="append", choices=DTYPES,
                   help="only this dtype's units (repeatable; default: all four)")
    p.add_argument("--audit", action="store_true",
                   help="exit 1 unless every refmath unit has no fma/.ftz/.approx and only "
                        "round-to-nearest division/sqrt")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Unit:
    """One compilation unit: its name parts and the exact CUDA C the backends compile."""

    name: str  # "library", "diff", "fused-mlp", "fused-transformer"
    dtype: str
    math: str
    source: str

    @property
    def stem(self) -> str:
        """File name without suffix: ``<unit>-<dtype>-<math>``."""
        return f"{self.name}-{self.dtype}-{self.math}"


def units(workloads: tuple[str, ...] = WORKLOADS, dtypes: tuple[str, ...] = DTYPES) -> list[Unit]:
    """Every compilation unit tapescope generates (of ``dtypes``), in a fixed order."""
    import numpy as np

    from tapescope import gpu
    from tapescope.core import precision
    from tapescope.core import workloads as wls
    from tapescope.gpu import fusion
    from tapescope.gpu.source import LIBRARY, instantiate, template

    out = []
    for math in MATHS:
        for dt in dtypes:
            # the library as gpu.source.library_source writes it, one dtype per unit
            half = dt in ("float16", "bfloat16")
            parts = ['#include "refmath.cuh"\n'] + (['#include "half.cuh"\n'] if half else [])
            for n in LIBRARY:
                parts += [f"/* ---- {n}.cu, {dt} ---- */\n",
                          instantiate(template(n, half), precision.dtype_of(dt), math)]
            out.append(Unit("library", dt, math, "\n".join(parts)))
    # gpu.diff.DeviceDiff's text (no transcendentals: one math mode)
    for dt in (d for d in DIFF_DTYPES if d in dtypes):
        out.append(Unit("diff", dt, "refmath", instantiate(template("diff"), np.dtype(dt))))
    from tapescope.gpu.kernel_template import source_only_device

    dev = source_only_device()
    for name in workloads:
        for math in MATHS:
            for dt in dtypes:
                wl = wls.get(name, dtype=dt, math=math)
                prog = gpu.capture(dev, wl.tape, wl.record(0), math=math)
                out.append(Unit(f"fused-{name}", dt, math, fusion.plan(prog).source))
    return out


def _row(unit: Unit, counts: dict[str, int], ptx: int, cubin: int | None, verdict: str) -> str:
    from tapescope.gpu.nvrtc import AUDIT_COLUMNS

    cells = "".join(f"{counts[c]:>{max(len(c), 5) + 1}}" for c in AUDIT_COLUMNS)
    cb = f"{cubin:>10}" if cubin is not None else f"{'-':>10}"
    return f"{unit.stem:<36}{ptx:>10}{cb}{cells}  {verdict}"


def run(args: argparse.Namespace) -> int:
    """Compile every unit; print one table row per unit; 1 when --audit finds a violation, 2
    when NVRTC cannot load or the arch is unknown to it."""
    import sys

    from tapescope.gpu.device import DeviceError

    if getattr(args, "template", None):
        return _template(args)
    try:
        return _run(args)
    except DeviceError as e:
        if getattr(args, "debug", False):  # the one line stays last, as for every command
            import traceback

            traceback.print_exception(e)
        print(f"tapescope kernels: {e}", file=sys.stderr)
        return 2


def _template(args: argparse.Namespace) -> int:
    """``--template OP --out FILE.cu``: the op's stock kernels as one file (no compiler)."""
    from pathlib import Path

    from tapescope.gpu.kernel_template import template

    if not args.out or not args.out.endswith((".cu", ".cuh", ".c")):
        raise ValueError(f"--template {args.template}: give --out FILE.cu (not {args.out!r})")
    dts = set(getattr(args, "dtype", None) or ())
    half = bool(dts) and dts <= {"float16", "bfloat16"}
    if dts and not half and dts & {"float16", "bfloat16"}:
        raise ValueError(f"--template {args.template}: one file is one text: give --dtype "
                         "float16/bfloat16 (a half episode's kernels) or float64/float32, not both")
    text = template(args.template, half)  # UserKernelError (a ValueError): one line, exit 2
    out = Path(args.out)
    try:
        out.write_text(text)
    except OSError as e:
        raise OSError(f"cannot write {out}: {e}") from e
    print(f"wrote {out}: the stock {args.template} kernels; run them with "
          f"--kernel {args.template}={out}")
    return 0


def _run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from tapescope.core.atomic import check_writable, write_atomic
    from tapescope.gpu.nvrtc import (
        AUDIT_COLUMNS,
        NVRTC_FLAGS,
        audit_ok,
        audit_ptx,
        check_arch,
        cuda_version_text,
        kernel_headers,
        nvrtc_compile,
        nvrtc_version,
    )

    version = nvrtc_version()  # a DeviceError (one line) when NVRTC cannot load
    check_arch(args.arch)
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:  # the folder the user named, not its parents; checked before work
        try:
            out_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise OSError(f"cannot make --out {out_dir}: {e.strerror or e}") from None
        check_writable(out_dir / "probe", f"in --out {out_dir}:")
        # the headers the units include (refmath.cuh, from core/refmath/): DIR compiles alone
        for hname, htext in zip(*kernel_headers(), strict=True):
            write_atomic(out_dir / hname.decode(), htext)
    print(f"NVRTC {cuda_version_text(version)}, --gpu-architecture={args.arch} "
          f"{' '.join(NVRTC_FLAGS)}")
    head = "".join(f"{c:>{max(len(c), 5) + 1}}" for c in AUDIT_COLUMNS)
    print(f"{'unit':<36}{'ptx B':>10}{'cubin B':>10}{head}  audit")
    failed = []
    for unit in units(dtypes=tuple(args.dtype) if getattr(args, "dtype", None) else DTYPES):
        res = nvrtc_compile(unit.source, args.arch, name=f"{unit.stem}.cu")
        counts = audit_ptx(res.ptx)
        ok = audit_ok(counts)
        if unit.math == "refmath":
            verdict = "ok" if ok else "FAIL"
            if not ok:
                failed.append(unit.stem)
        else:
            verdict = "(platform: not audited)"
        cubin = len(res.cubin) if res.cubin is not None else None
        print(_row(unit, counts, len(res.ptx), cubin, verdict if args.audit else ""),
              flush=True)
        if out_dir is not None:  # each file whole or not at all (core.atomic)
            write_atomic(out_dir / f"{unit.stem}.cu", unit.source)
            write_atomic(out_dir / f"{unit.stem}.ptx", res.ptx)
            if res.cubin is not None:
                write_atomic(out_dir / f"{unit.stem}.cubin", res.cubin)
    if args.audit:
        if failed:
            print(f"audit FAILED: {', '.join(failed)} (refmath PTX must have no fma, .ftz, "
                  f".approx, and only .rn division/sqrt)", file=sys.stderr)
            return 1
        print("audit ok: every refmath unit has no fma, no .ftz, no .approx, only .rn "
              "division/sqrt, no half conversion but round-to-nearest-even")
    return 0
