"""The arithmetic ceiling of a bit-exact product on this CPU, against an FMA engine's.

The reference order forbids fused multiply-add (docs/reference-order.md): every product is
rounded, then added. A CPU whose vector units all fuse (Intel's two 512-bit FMA ports) runs a
mul and an add as two instructions on the same ports, so an engine that may fuse (onnxruntime's
MLAS, PyTorch's oneDNN, OpenBLAS) has twice our arithmetic peak there; a CPU with separate add
pipes (AMD Zen 3: two FMA/mul pipes and two add pipes) gives both the same peak. This script
measures which kind of machine it runs on, so the ONNX and tape rows of issue 29 can say whether
a compute-bound model can reach its target at all.

Peak rows: one core, register-only loops of independent chains in inline assembly (12
accumulators, enough to hide the add latency), ``vmulps`` + ``vaddps`` against ``vfmadd231ps``
at each vector width the CPU has (gcc -O2 -march=native; x86-64 only).

Product rows: ``core.native.mm`` (the reference product, float32 and float64) against numpy's
BLAS (it fuses) on the same square and conv-like shapes, one thread each (OPENBLAS_NUM_THREADS=1,
core.native.set_threads(1)), median of ``--repeat`` paired runs in process CPU time; each row
also gives ours as a fraction of our own (mul + add) peak and BLAS's of the FMA peak.

    python benchmarks/bench_peak.py [--repeat 7]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: one BLAS thread

import argparse  # noqa: E402
import ctypes  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from tapescope.core import native  # noqa: E402

# 12 independent accumulators (registers 0-11), operands in 30/31 (zmm) or 14/15 (ymm): no
# memory traffic, no dependence between chains beyond each accumulator's own adds
_REGS = range(12)
_MULADD = {
    "zmm": "".join(f"vmulps %%zmm30, %%zmm31, %%zmm{20 + r % 6}\\n"
                   f"vaddps %%zmm{20 + r % 6}, %%zmm{r}, %%zmm{r}\\n" for r in _REGS),
    "ymm": "".join(f"vmulps %%ymm14, %%ymm15, %%ymm{12 + r % 2}\\n"
                   f"vaddps %%ymm{12 + r % 2}, %%ymm{r}, %%ymm{r}\\n" for r in _REGS),
}
_FMA = {w: "".join(f"vfmadd231ps %%{w}{30 if w == 'zmm' else 14}, %%{w}{31 if w == 'zmm' else 15}"
                   f", %%{w}{r}\\n" for r in _REGS) for w in ("zmm", "ymm")}
_CLOBBER = {"zmm": ", ".join(f'"xmm{r}"' for r in [*_REGS, 20, 21, 22, 23, 24, 25, 30, 31]),
            "ymm": ", ".join(f'"xmm{r}"' for r in [*_REGS, 12, 13, 14, 15])}


def _source() -> str:
    """One function per (kind, width): the whole loop in one asm block, its registers set
    first (garbage left in a register can be a subnormal, and each op on one takes a microcode
    assist: measured 0.8 GFLOP/s)."""
    fns = []
    for w in ("zmm", "ymm"):
        a, b = (30, 31) if w == "zmm" else (14, 15)
        init = (f"movl $0x3f800000, %%eax\\n vmovd %%eax, %%xmm{a}\\n"
                f" vbroadcastss %%xmm{a}, %%{w}{a}\\n vmovaps %%{w}{a}, %%{w}{b}\\n"
                + "".join(f"vxorps %%{w}{r}, %%{w}{r}, %%{w}{r}\\n" for r in _REGS))
        for kind, body in (("muladd", _MULADD[w]), ("fma", _FMA[w])):
            fns.append(f"void peak_{kind}_{w}(long iters) {{\n"
                       f"  __asm__ volatile(\"{init}1:\\n{body}dec %0\\n jnz 1b\\n\"\n"
                       f"                   : \"+r\"(iters) :: \"eax\", \"cc\", "
                       f"{_CLOBBER[w]});\n}}\n")
    return "\n".join(fns)


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peaks(seconds: float = 0.3) -> dict[str, tuple[float, float]]:
    """{width: (mul+add GFLOP/s, fma GFLOP/s)} for the vector widths this CPU has (empty off
    x86-64 or without gcc)."""
    flags = _cpu_flags()
    widths = [w for w, need in (("zmm", "avx512f"), ("ymm", "fma")) if need in flags]
    if platform.machine() not in ("x86_64", "AMD64") or not widths:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp, "peak.c"), Path(tmp, "peak.so")
        src.write_text(_source())
        try:
            subprocess.run(["gcc", "-O2", "-march=native", "-shared", "-fPIC", str(src), "-o",
                            str(lib)], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return {}
        so = ctypes.CDLL(str(lib))
        out = {}
        for w in widths:
            lanes = 16 if w == "zmm" else 8
            rates = []
            for kind in ("muladd", "fma"):
                fn = getattr(so, f"peak_{kind}_{w}")
                fn.argtypes = [ctypes.c_long]
                fn(1_000_000)  # warm the clock up
                iters, best = 2_000_000, 0.0
                for _ in range(5):
                    t = time.process_time()
                    fn(iters)
                    dt = time.process_time() - t
                    best = max(best, 2.0 * lanes * len(_REGS) * iters / dt / 1e9)
                    if dt < seconds / 5:
                        iters *= 2
                rates.append(best)
            out[w] = (rates[0], rates[1])
    return out


SHAPES = [(512, 512, 512), (512, 4608, 49), (2048, 1024, 49), (256, 2304, 196), (64, 576, 3136)]


def _cpu_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    native.set_threads(1)
    print(f"cpu: {_cpu_name()}; {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.1f}; numpy {np.__version__}")
    pk = peaks()
    if not pk:
        print("peak: not measured (needs x86-64 with AVX2/FMA or AVX-512, and gcc)")
    else:
        print("\n| vectors | mul + add GFLOP/s (ours) | FMA GFLOP/s (BLAS, MLAS) | FMA / mul+add |")
        print("|---|---:|---:|---:|")
        for w, (ma, fma) in pk.items():
            print(f"| {w} ({16 if w == 'zmm' else 8} floats) | {ma:.1f} | {fma:.1f} | "
                  f"{fma / ma:.2f} |")
    ours_peak = max(v[0] for v in pk.values()) if pk else float("nan")
    fma_peak = max(v[1] for v in pk.values()) if pk else float("nan")
    if native.library() is None:
        print("products: not measured (no native code: no C compiler)")
        return 0
    rng = np.random.default_rng(0)
    print("\n| dtype | m x k x n | ours GFLOP/s | BLAS GFLOP/s | ours / BLAS time | ours of our "
          "peak | BLAS of FMA peak |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for dt in (np.float32, np.float64):
        for m, k, n in SHAPES:
            a = rng.standard_normal((m, k)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            ta = _cpu_time(lambda a=a, b=b: native.mm(a, b), args.repeat)
            tb = _cpu_time(lambda a=a, b=b: a @ b, args.repeat)
            fl = 2.0 * m * k * n
            ga, gb = fl / ta / 1e9, fl / tb / 1e9
            half = 2.0 if dt == np.float64 else 1.0  # a vector holds half as many doubles
            print(f"| {np.dtype(dt).name} | {m} x {k} x {n} | {ga:.1f} | {gb:.1f} | {ta / tb:.2f} "
                  f"| {ga * half / ours_peak:.0%} | {gb * half / fma_peak:.0%} |")
    print("\n(one thread each side; median of", args.repeat, "runs in process CPU time; the peaks "
          "are float32 lanes, halved for float64)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
