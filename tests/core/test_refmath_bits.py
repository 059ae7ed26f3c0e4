"""Bit identity: core.refmath (numpy) vs its C twin core/refmath/refmath.cuh compiled by gcc.

The C twin is compiled for the host exactly as the host backend does it (intrinsics_host.h,
-O2 -ffp-contract=off) and called through ctypes on >= 1e6 inputs per function and dtype that
span the whole domain (random bit patterns, ranges, log-uniform magnitudes, special values).
Zero mismatches, NaN bits included (refmath returns one canonical NaN).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import refmath
from tapescope.core.refmath._domain import domain_sample

C_DIR = refmath.C_DIR  # refmath.cuh and intrinsics_host.h
# the host backend's prelude (gpu/), only for the "prelude" build: the C twin as it ships
PRELUDE_DIR = Path(__file__).resolve().parents[2] / "gpu" / "kernels"
N = 1_000_000

SHIM = """
#include "intrinsics_host.h"
#include "refmath.cuh"
#define LOOP(name) \\
  void shim_##name(const double* x, double* y, long long n) { \\
    for (long long i = 0; i < n; ++i) y[i] = ts_##name(x[i]); } \\
  void shim_##name##f(const float* x, float* y, long long n) { \\
    for (long long i = 0; i < n; ++i) y[i] = ts_##name##f(x[i]); }
"""

# (compiler, extra flags): C99, C++ (the host backend uses g++), and -march=native, which
# enables FMA instructions on this CPU: -ffp-contract=off must still keep them out.
BUILDS = {
    "c99": ("gcc", ["-std=c99", "-x", "c"]),
    "cxx": ("g++", ["-x", "c++"]),
    "native": ("gcc", ["-std=c99", "-x", "c", "-march=native"]),
    "prelude": ("g++", ["-x", "c++"]),  # behind the host backend's own prelude, as it ships
}


def _build(tmp: Path, build: str) -> ctypes.CDLL | None:
    compiler, flags = BUILDS[build]
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not found: the host C twin cannot be built")
    src = tmp / f"shim_{build}.src"
    body = SHIM + "".join(f"LOOP({name})\n" for name in refmath.FUNCTIONS)
    if build == "prelude":
        if not (PRELUDE_DIR / "host_prelude.h").exists():
            return None
        body = '#include "host_prelude.h"\n' + body
    if build in ("cxx", "prelude"):
        body = body.replace("#define LOOP(name) \\\n", '#define LOOP(name) extern "C" { \\\n')
        body = body.replace("ts_##name##f(x[i]); }\n", "ts_##name##f(x[i]); } }\n")
    src.write_text(body)
    lib = tmp / f"shim_{build}.so"
    # our own headers must be warning-free; the prelude is another file, built as it ships
    warn = [] if build == "prelude" else ["-Wall", "-Wextra", "-Werror"]
    cmd = [compiler, *flags, "-O2", "-ffp-contract=off", *warn, "-shared", "-fPIC",
           f"-I{C_DIR}", *([f"-I{PRELUDE_DIR}"] if build == "prelude" else []), str(src), "-o",
           str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"
    return ctypes.CDLL(str(lib))


class _Shims:
    """Builds each variant of the C shim on first use (one compile per test session)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.built: dict[str, ctypes.CDLL | None] = {}

    def __getitem__(self, build: str) -> ctypes.CDLL | None:
        if build not in self.built:
            self.built[build] = _build(self.tmp, build)
        return self.built[build]


@pytest.fixture(scope="module")
def shims(tmp_path_factory: pytest.TempPathFactory) -> _Shims:
    return _Shims(tmp_path_factory.mktemp("refmath_c"))


def _call(lib: ctypes.CDLL, name: str, x: np.ndarray) -> np.ndarray:
    fn = getattr(lib, f"shim_{name}" + ("f" if x.dtype == np.float32 else ""))
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    fn(x.ctypes.data, y.ctypes.data, x.size)
    return y


def _mismatch_report(x: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    itype = np.int64 if x.dtype == np.float64 else np.int32
    bad = np.flatnonzero(got.view(itype) != want.view(itype))
    rows = [f"x={x[i]!r} ({x[i:i + 1].view(itype)[0]:#x}) numpy={got[i]!r} C={want[i]!r}"
            for i in bad[:5]]
    return f"{bad.size} of {x.size} differ; first: " + "; ".join(rows)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", refmath.FUNCTIONS)
def test_numpy_and_c_agree_bit_for_bit(shims, name: str, dtype: type) -> None:
    x = domain_sample(name, dtype, N, seed=refmath.FUNCTIONS.index(name))
    assert x.size >= N
    got = getattr(refmath, name)(x)
    assert got.dtype == x.dtype and got.shape == x.shape
    want = _call(shims["c99"], name, x)
    itype = np.int64 if dtype == np.float64 else np.int32
    assert np.array_equal(got.view(itype), want.view(itype)), _mismatch_report(x, got, want)


@pytest.mark.parametrize("build", ["cxx", "native", "prelude"])
def test_other_builds_agree(shims, build: str) -> None:
    if shims[build] is None:
        pytest.skip("gpu/kernels/host_prelude.h (the host backend's prelude) is not there yet")
    for name in refmath.FUNCTIONS:
        for dtype in (np.float64, np.float32):
            x = domain_sample(name, dtype, 100_000, seed=7)
            a = _call(shims["c99"], name, x)
            b = _call(shims[build], name, x)
            itype = np.int64 if dtype == np.float64 else np.int32
            assert np.array_equal(a.view(itype), b.view(itype)), (
                f"{build} build differs for {name} {np.dtype(dtype)}: "
                + _mismatch_report(x, a, b))


UBSAN_MAIN = """
#include "intrinsics_host.h"
#include "refmath.cuh"
#include <stdio.h>
int main(int argc, char** argv) {
    double x, acc = 0.0;
    FILE* f = fopen(argv[1], "rb");
    if (argc < 2 || !f) return 2;
    while (fread(&x, sizeof x, 1, f) == 1) {
        float g = (float)x;
        acc += ts_exp(x) + ts_expm1(x) + ts_log(x) + ts_log1p(x) + ts_tanh(x) + ts_sigmoid(x)
             + ts_erf(x) + ts_rsqrt(x);
        acc += ts_expf(g) + ts_expm1f(g) + ts_logf(g) + ts_log1pf(g) + ts_tanhf(g)
             + ts_sigmoidf(g) + ts_erff(g) + ts_rsqrtf(g);
    }
    fclose(f);
    printf("%g\\n", acc);
    return 0;
}
"""


def test_c_twin_has_no_undefined_behaviour(tmp_path: Path) -> None:
    """UBSan (shifts, overflow, bad casts) over every function's domain sample."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: the host C twin cannot be built")
    src, exe, data = tmp_path / "ub.c", tmp_path / "ub", tmp_path / "x.bin"
    src.write_text(UBSAN_MAIN)
    xs = [domain_sample(name, np.float64, 50_000, seed=3) for name in refmath.FUNCTIONS]
    np.concatenate(xs).tofile(data)
    cmd = ["gcc", "-std=c99", "-O1", "-ffp-contract=off", "-fsanitize=undefined",
           "-fno-sanitize-recover=all", f"-I{C_DIR}", str(src), "-o", str(exe), "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 and "sanitizer" in done.stderr.lower():
        pytest.skip(f"this gcc has no UBSan runtime: {done.stderr[:200]}")
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr}"
    run = subprocess.run([str(exe), str(data)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"undefined behaviour in refmath.cuh:\n{run.stderr[:2000]}"
