"""refmath_simd.h's float32 loops: a quick double, certified per element, else ts_f itself.

The float loops keep (float)r of a quick double r only when r is far from a float rounding
midpoint, and recompute every other element with (float)ts_f((double)x). These tests aim at
where that could go wrong and hold each case to the numpy spelling bit for bit: inputs whose
exact result lies near a midpoint (the ones the loop must hand back to ts_f, and their
neighbours it keeps), the thresholds of each quick path and their float neighbours, specials,
and deferred elements at block edges. (`python benchmarks/bench_refmath.py --exhaustive NAMES`
checks every one of the 2**32 float inputs against the scalar C routine.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tapescope.core import native, refmath
from tapescope.core.cache import KernelCache, cache_key
from tapescope.core.refmath._domain import domain_sample

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
pytestmark = pytest.mark.usefixtures("native_isa")

QUICK = ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf")  # loops with a quick twin


@pytest.fixture
def need_native():
    if native.library() is None:
        pytest.skip("no C compiler here: refmath runs its numpy spelling (tested elsewhere)")


def _same(name, x):
    got = getattr(refmath, name)(x)
    want = refmath.numpy_apply(name, x)
    bad = np.flatnonzero(got.view(np.int32) != want.view(np.int32))
    rows = [f"x={x[i]!r} ({x[i:i + 1].view(np.uint32)[0]:#010x}) C={got[i]!r} "
            f"numpy={want[i]!r}" for i in bad[:5]]
    assert bad.size == 0, f"{name}: {bad.size} of {x.size} differ; " + "; ".join(rows)


def _near_midpoints(name, n, within):
    """Float inputs whose float64 result (ts_f's double) lies within `within` double ulps of
    a float rounding midpoint: the hard cases of the float rounding."""
    x = domain_sample(name, np.float32, n, seed=700 + QUICK.index(name))
    with np.errstate(invalid="ignore"):  # signalling NaN payloads
        d = refmath.numpy_apply(name, x.astype(np.float64))
    low = d.view(np.uint64) & np.uint64(0x1FFFFFFF)
    off = np.abs(low.astype(np.int64) - 0x10000000)
    keep = (off <= within) & np.isfinite(d) & (np.abs(d) >= np.finfo(np.float32).tiny)
    return x[keep], off[keep]


@pytest.mark.parametrize("name", QUICK)
def test_inputs_near_a_rounding_midpoint(need_native, name):
    hard, off = _near_midpoints(name, 4_000_000, 1 << 20)
    # the loop hands those within 2**14 ulps (TSQ_SLACK) back to ts_f and keeps the rest
    assert hard.size > 1000 and np.count_nonzero(off <= 1 << 14) > 10
    _same(name, hard)


def _neighbours(values, k=3):
    v = np.asarray(values, dtype=np.float32)
    out = [v]
    up, down = v.copy(), v.copy()
    with np.errstate(invalid="ignore", over="ignore"):  # NaN's and FLT_MAX's neighbours
        for _ in range(k):
            up = np.nextafter(up, np.float32(np.inf))
            down = np.nextafter(down, np.float32(-np.inf))
            out += [up, down]
    return np.concatenate(out)


THRESHOLDS = [
    0.0, -0.0, 1.0, -1.0, 2.0**-29, -(2.0**-29), 2.0**-54, 2.0**-126, -(2.0**-126), 2.0**-149,
    1e-30, -1e-30, 0.125, -0.125, 0.3465736, -0.3465736, 0.6931472, -0.6931472, 1.0397208,
    22.0, -22.0, 9.0, -9.0, 17.3, -17.3, 38.8, -38.8, 87.33655, -87.33655, 88.72284, -88.72284,
    100.0, -100.0, 103.97208, -103.97208, 104.0, -104.0, 708.0, -708.0, 709.78, -745.2,
    2.0**24, 2.0**53, 2.0**60, 3.4e38, -3.4e38, 0.41421357, -0.29289323, 1.4142135, 0.70710677,
    np.inf, -np.inf, np.nan,
    # erf's: its small range's end, its ranges' edges (half a unit apart), where the float
    # result becomes 1, where the quick loop answers 1 itself
    0.84375, -0.84375, 1.34375, 1.84375, -2.34375, 2.84375, 3.34375, -3.84375, 3.9192057,
    -3.9192057, 4.0, -4.0, 6.0,
]


@pytest.mark.parametrize("name", QUICK)
def test_thresholds_specials_and_their_neighbours(need_native, name):
    _same(name, _neighbours(THRESHOLDS))
    x = domain_sample(name, np.float32, 0)  # the specials and branch boundaries of ts_f
    _same(name, _neighbours(x, 2))


@pytest.mark.parametrize("name", QUICK)
def test_deferred_elements_at_block_edges(need_native, name):
    """NaN, inf, subnormals and near-midpoint inputs at the edges of the loop's blocks."""
    rng = np.random.default_rng(11)
    hard, _ = _near_midpoints(name, 400_000, 1 << 12)
    odd = np.array([np.nan, np.inf, -np.inf, 1e-40, -1e-45, 0.0, -0.0], dtype=np.float32)
    for n in (1, 7, 511, 512, 513, 1023, 1024, 1025, 3000):
        x = rng.uniform(-3, 3, n).astype(np.float32)
        for i in {0, 510, 511, 512, 513, 1023, 1024, n - 1}:
            if i < n:
                pool = hard if hard.size and rng.random() < 0.5 else odd
                x[i] = pool[rng.integers(pool.size)]
        _same(name, x)


def test_the_float_loops_are_vectorised_without_fma(need_native):
    """Each quick float loop (and the double sigmoid loop) holds packed double arithmetic and no
    FMA (x86-64 objdump).

    No FMA is checked on the library this machine builds and loads (-march=native). Whether
    gcc's cost model packs log's and log1p's loops depends on the CPU -march=native names (with
    AVX-512 it does; on AVX2, e.g. znver3, it keeps them scalar), so the packed-multiply check
    reads the same source (refmath_host.c, the loops' file) compiled for a pinned AVX-512
    target (icelake-server: an object disassembled, never loaded; cached as the library is)."""
    import platform
    import re
    import shutil
    import subprocess

    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None:
        pytest.skip("the audit reads x86-64 machine code with objdump")
    loops = [f"tsl_{name}f" for name in QUICK] + ["tsl_sigmoid"]

    def bodies() -> dict[str, str]:
        path = native._build(shutil.which("gcc"))
        dis = subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True,
                             check=True).stdout
        return dict(re.findall(r"<(tsl_\w+)>:\n(.*?)(?:\n\n|\Z)", dis, flags=re.S))

    fma = r"\bv?f(?:n?m(?:add|sub)|maddsub|msubadd)\w*"
    here = bodies()
    for loop in loops:
        if loop not in here:
            pytest.skip(f"{loop} inlined away: nothing to audit by name")
        assert not re.findall(fma, here[loop]), loop
    if "-march=native" not in native.FLAGS:
        pytest.skip("no -march in the native flags: nothing to pin")
    # the pinned target alone (not the path, -mno-avx ..., the native_isa fixture forces), and
    # only the file that holds the loops (refmath_host.c: refkernels.c is ~25 CPU s of -O3 on
    # a 2.6 GHz Xeon, and none of these loops), compiled to an object with the library's flags
    pinned_flags = ["-march=icelake-server" if f == "-march=native" else f
                    for f in native.FLAGS if f != "-shared"]
    src = native._HERE / "refmath_host.c"
    key = cache_key(*(p.read_bytes() for p in [src, *native._HEADERS]), " ".join(pinned_flags),
                    native._compiler_id(shutil.which("gcc")))

    def build(out: Path) -> None:
        subprocess.run([shutil.which("gcc"), *pinned_flags, f"-I{native.REFMATH_C}",
                        f"-I{native._HERE}", "-c", str(src), "-o", str(out)], check=True,
                       capture_output=True, timeout=native.BUILD_TIMEOUT_S)

    obj, _ = KernelCache().get_or_build(f"refmath-host-pinned-{key}", ".o", build)
    dis = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    pinned = dict(re.findall(r"<(tsl_\w+)>:\n(.*?)(?:\n\n|\Z)", dis, flags=re.S))
    for loop in loops:
        body = pinned.get(loop)
        if body is None:
            pytest.skip(f"{loop} inlined away: nothing to audit by name")
        assert re.search(r"\bv?mulpd\b", body), f"{loop}: no packed double multiply"
        assert not re.findall(fma, body), loop


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf"])
def test_every_float32_input_gives_the_scalar_twins_bits(name):
    """The certificate's slack rests on a measured bound (tsq_f vs ts_f <= 124 double ulps on all
    2**32 floats): run that whole check (`python -m pytest -m slow`; ~1 min a function here)."""
    import subprocess
    import sys
    from pathlib import Path

    if native.library() is None:
        pytest.skip("no C compiler: the numpy spelling runs, nothing to certify")
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_refmath.py"
    out = subprocess.run([sys.executable, str(bench), "--exhaustive", name], check=True,
                         capture_output=True, text=True).stdout
    assert f"{name} float32: all 2**32 inputs, 0 bit mismatches" in out, out
