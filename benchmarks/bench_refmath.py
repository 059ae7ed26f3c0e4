"""core.refmath: throughput vs numpy's own functions, and accuracy vs high-precision references.

Throughput (default): each refmath function on ``--n`` elements (1e6) vs its numpy peer in the
same run (np.exp, np.expm1, np.log, np.log1p, np.tanh; 1/(1+np.exp(-x)) for sigmoid and
1/np.sqrt(x) for rsqrt, as core.mathlib's "platform" mode spells them; erf: numpy has none, the
platform mode maps math.erf, timed on the same array). ``--repeat`` pairs of runs, ours then
the peer's, in process CPU time (time.process_time: the machines we run on are shared, and CPU
time is what a busy neighbour disturbs least; everything here is single-threaded); the table
gives each side's best and the median of the per-pair ratios refmath / peer.

Accuracy (``--accuracy``): max error in ulps and the fraction correctly rounded over
``--samples`` inputs per function and dtype spanning the domain (core.refmath._domain), against
an 80-bit long double reference (2**-11 double ulp of its own error), with the worst 64 cases of
each re-checked by mpmath at 120 bits; erf (no long double erf in numpy) against mpmath on
``--mp-samples`` inputs. numpy's own functions are measured on the same inputs for comparison.

Exhaustive float32 parity (``--exhaustive exp,tanh``): every one of the 2**32 float32 bit
patterns through refmath (its float32 loops: core/native/refmath_simd.h's quick twins, certified
per element) and through the C twin's scalar (float)ts_f((double)x) (gcc -O2
-ffp-contract=off, ctypes), counting bit mismatches (a minute or more per function).

Run: ``python benchmarks/bench_refmath.py [--n 1000000] [--repeat 7]``
     ``python benchmarks/bench_refmath.py --accuracy [--samples 1000000] [--mp-samples 20000]``
     ``python benchmarks/bench_refmath.py --exhaustive exp,tanh,sigmoid,log``
"""

from __future__ import annotations

import argparse
import ctypes
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mpmath  # noqa: E402
import numpy as np  # noqa: E402

from tapescope.core import refmath  # noqa: E402
from tapescope.core.refmath._domain import domain_sample, ulp_error  # noqa: E402


def _sigmoid_np(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


def _erf_np(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


PEERS = {
    "exp": ("np.exp", np.exp, (-10.0, 10.0)),
    "expm1": ("np.expm1", np.expm1, (-10.0, 10.0)),
    "log": ("np.log", np.log, (1e-3, 100.0)),
    "log1p": ("np.log1p", np.log1p, (-0.9, 100.0)),
    "tanh": ("np.tanh", np.tanh, (-10.0, 10.0)),
    "sigmoid": ("1/(1+np.exp(-x))", _sigmoid_np, (-20.0, 20.0)),
    "erf": ("math.erf (vectorized)", _erf_np, (-5.0, 5.0)),
    "rsqrt": ("1/np.sqrt(x)", lambda x: x.dtype.type(1) / np.sqrt(x), (1e-3, 100.0)),
}


def _paired(ours, peer, x: np.ndarray, repeat: int) -> tuple[float, float, float]:
    """Best CPU seconds of ours and of the peer, and the median of the per-pair ratios: the two
    run interleaved (ours, peer, ours, peer ...) so a busy neighbour slows both alike."""
    ours(x), peer(x)  # warm-up
    t_ours, t_peer, ratios = [], [], []
    for _ in range(repeat):
        t0 = time.process_time()
        ours(x)
        t1 = time.process_time()
        peer(x)
        t2 = time.process_time()
        t_ours.append(t1 - t0)
        t_peer.append(t2 - t1)
        ratios.append((t1 - t0) / max(t2 - t1, 1e-9))
    return min(t_ours), min(t_peer), float(np.median(ratios))


def throughput(n: int, repeat: int) -> None:
    """Print the refmath vs numpy throughput table (markdown)."""
    rng = np.random.default_rng(0)
    print(f"refmath vs numpy, {n:,} elements, best of {repeat} interleaved pairs "
          "(CPU ms; Melem/s; ratio = median of the per-pair ours/peer)")
    print("| function | dtype | refmath ms | Melem/s | peer | peer ms | ratio |")
    print("|---|---|---:|---:|---|---:|---:|")
    for name in refmath.FUNCTIONS:
        label, peer, (lo, hi) = PEERS[name]
        for dtype in (np.float64, np.float32):
            x = rng.uniform(lo, hi, n).astype(dtype)
            ours, theirs, ratio = _paired(getattr(refmath, name), peer, x,
                                          3 if name == "erf" else repeat)
            print(f"| {name} | {np.dtype(dtype)} | {ours * 1e3:.1f} | {n / ours / 1e6:.0f} | "
                  f"{label} | {theirs * 1e3:.2f} | {ratio:.2f} |", flush=True)


LONGDOUBLE = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
    "sigmoid": lambda v: np.where(v >= 0, 1 / (1 + np.exp(-v)), np.exp(v) / (1 + np.exp(v))),
    "rsqrt": lambda v: 1 / np.sqrt(v),
}
MP = {
    "exp": mpmath.exp, "expm1": mpmath.expm1, "log": mpmath.log, "log1p": mpmath.log1p,
    "tanh": mpmath.tanh, "sigmoid": lambda v: 1 / (1 + mpmath.exp(-v)), "erf": mpmath.erf,
    "rsqrt": lambda v: 1 / mpmath.sqrt(v),
}


def _mp_errors(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    mant, emin, top = (53, -1074, 1024) if y.dtype == np.float64 else (24, -149, 128)
    out = np.empty(x.size)
    with mpmath.workprec(120):
        overflow = mpmath.mpf(2) ** top
        for i, (xi, yi) in enumerate(zip(x.tolist(), y.tolist(), strict=True)):
            ref = MP[name](mpmath.mpf(xi))
            if ref == 0:
                out[i] = 0.0 if yi == 0 else math.inf
                continue
            ulp = mpmath.ldexp(1, max(int(mpmath.frexp(ref)[1]) - mant, emin))
            if abs(ref) >= overflow - ulp / 2:
                out[i] = 0.0 if math.isinf(yi) and (yi > 0) == (ref > 0) else math.inf
                continue
            out[i] = float(abs(mpmath.mpf(yi) - ref) / ulp)
    return out


def _inputs(name: str, dtype: type, n: int) -> np.ndarray:
    x = domain_sample(name, dtype, n, seed=101)
    x = x[np.isfinite(x)]
    if name in ("log", "rsqrt"):
        x = np.abs(x[x != 0.0])
    if name == "log1p":
        x = x[x > -1.0]
    return x


def accuracy(samples: int, mp_samples: int) -> None:
    """Print the accuracy table (markdown): refmath and numpy, max ulp and % correctly rounded."""
    print("| function | dtype | inputs | reference | refmath max ulp | refmath correctly "
          "rounded | numpy max ulp | numpy correctly rounded |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for name in refmath.FUNCTIONS:
        for dtype in (np.float64, np.float32):
            if name in LONGDOUBLE:
                x = _inputs(name, dtype, samples)
                with np.errstate(all="ignore"):
                    ref = LONGDOUBLE[name](x.astype(np.longdouble))
                keep = ~np.isnan(ref)
                x, ref = x[keep], ref[keep]
                rows = []
                for fn in (getattr(refmath, name), PEERS[name][1]):
                    with np.errstate(all="ignore"):
                        y = fn(x)
                    err = ulp_error(y, ref)
                    worst = np.argsort(err)[-64:]  # re-check the worst cases exactly
                    err[worst] = _mp_errors(name, x[worst], y[worst])
                    rows.append((float(err.max()), float(np.mean(err <= 0.5))))
                refname = "long double (worst 64: mpmath)"
            else:
                x = _inputs(name, dtype, mp_samples)
                rows = []
                for fn in (getattr(refmath, name), PEERS[name][1]):
                    with np.errstate(all="ignore"):
                        y = fn(x)
                    err = _mp_errors(name, x, y)
                    rows.append((float(err.max()), float(np.mean(err <= 0.5))))
                refname = "mpmath 120-bit"
            (m0, c0), (m1, c1) = rows
            print(f"| {name} | {np.dtype(dtype)} | {x.size:,} | {refname} | {m0:.3f} | "
                  f"{100 * c0:.3f}% | {m1:.3f} | {100 * c1:.3f}% |", flush=True)


def exhaustive(names: list[str]) -> None:
    """Every float32 bit pattern through refmath and the C twin; print the mismatch counts."""
    kernels = Path(__file__).resolve().parents[1] / "core" / "refmath"  # the C twin
    src = '#include "intrinsics_host.h"\n#include "refmath.cuh"\n' + "".join(
        f"void s_{n}(const float* x, float* y, long long m) "
        f"{{ for (long long i = 0; i < m; ++i) y[i] = ts_{n}f(x[i]); }}\n" for n in names)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "s.c").write_text(src)
        lib_path = Path(tmp) / "s.so"
        subprocess.run(["gcc", "-std=c99", "-O2", "-ffp-contract=off", "-shared", "-fPIC",
                        f"-I{kernels}", str(Path(tmp) / "s.c"), "-o", str(lib_path)],
                       check=True)
        lib = ctypes.CDLL(str(lib_path))
        step = 1 << 24
        for name in names:
            fn = getattr(lib, f"s_{name}")
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
            bad, t0 = 0, time.perf_counter()
            for start in range(0, 1 << 32, step):
                x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32)
                x = x.view(np.float32)
                ours = getattr(refmath, name)(x)
                theirs = np.empty_like(x)
                fn(x.ctypes.data, theirs.ctypes.data, x.size)
                bad += int(np.count_nonzero(ours.view(np.uint32) != theirs.view(np.uint32)))
            print(f"{name} float32: all 2**32 inputs, {bad} bit mismatches refmath vs "
                  f"the scalar C twin ({time.perf_counter() - t0:.0f} s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="elements per throughput call")
    ap.add_argument("--repeat", type=int, default=7, help="throughput runs (best is kept)")
    ap.add_argument("--accuracy", action="store_true", help="measure accuracy instead")
    ap.add_argument("--samples", type=int, default=1_000_000, help="inputs per function/dtype")
    ap.add_argument("--mp-samples", type=int, default=20_000, help="inputs for mpmath-only")
    ap.add_argument("--exhaustive", metavar="NAMES", help="comma-separated functions to check "
                    "on every float32 input against the C twin")
    args = ap.parse_args()
    if args.exhaustive:
        names = args.exhaustive.split(",")
        unknown = [n for n in names if n not in refmath.FUNCTIONS]
        if unknown:
            ap.error(f"--exhaustive: unknown function(s) {unknown}; known: {refmath.FUNCTIONS}")
        exhaustive(names)
    elif args.accuracy:
        accuracy(args.samples, args.mp_samples)
    else:
        throughput(args.n, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
