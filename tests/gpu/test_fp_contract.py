"""No fused multiply-add on the host: the host backend and the native reference kernels are built
for the machine's real ISA (FMA instructions available), and still round every product and
every add apart (-ffp-contract=off). Inputs are chosen so that an FMA changes the bits, so a
contraction anywhere would fail these tests (and the op parity tests), not just a flag check.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import native
from tapescope.gpu import fusion
from tapescope.gpu import host_compiler as host_mod
from tapescope.gpu.host import HostDevice
from tests.helpers.kernel_text import fma_instructions

SRC = r"""
extern "C" __global__ void muladd64(const double* a, const double* b, const double* c,
                                    double* y, double* z, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = __dadd_rn(__dmul_rn(a[i], b[i]), c[i]);  /* the kernels' spelling */
        z[i] = a[i] * b[i] + c[i];                      /* what gcc would contract first */
    }
}
extern "C" __global__ void muladd32(const float* a, const float* b, const float* c,
                                    float* y, float* z, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = __fadd_rn(__fmul_rn(a[i], b[i]), c[i]);
        z[i] = a[i] * b[i] + c[i];
    }
}
extern "C" __global__ void isa(int* out) {
#ifdef __FMA__
    out[0] = 1;
#else
    out[0] = 0;
#endif
}
"""


def _cases(dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a*b + c where the product's rounding error is the whole answer: (1+e)^2 - (1+2e)."""
    e = 2.0**-30 if dtype == np.float64 else 2.0**-12
    rng = np.random.default_rng(7)
    a = np.concatenate([[1 + e, 1 - e], rng.uniform(0.5, 2, 62)]).astype(dtype)
    b = np.concatenate([[1 + e, 1 + e], rng.uniform(0.5, 2, 62)]).astype(dtype)
    c = -(a * b)  # the rounded product, negated: a*b + c is exactly 0 with two roundings
    return a, b, c


def _fused(a, b, c) -> np.ndarray:
    """fma(a, b, c): the exact a*b + c rounded once."""
    return np.array([float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                     for x, y, z in zip(a, b, c, strict=True)], dtype=a.dtype)


def _run(dev: HostDevice, dtype) -> tuple[np.ndarray, np.ndarray, bool]:
    mod = dev.compile(SRC)
    a, b, c = _cases(dtype)
    bufs = [dev.alloc(a.size, dtype) for _ in range(5)]
    for buf, arr in zip(bufs, (a, b, c), strict=False):
        buf.upload(arr)
    mod["muladd64" if dtype == np.float64 else "muladd32"](2, 32, *bufs, a.size)
    return bufs[3].download(), bufs[4].download(), mod.built


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_host_kernels_round_product_and_add_apart(host, dtype):
    a, b, c = _cases(dtype)
    two = (a * b) + c  # numpy: two roundings, the reference order
    fused = _fused(a, b, c)
    assert not np.array_equal(two.view(np.uint8), fused.view(np.uint8)), "inputs must tell"
    y, z, _ = _run(host, dtype)
    assert y.tobytes() == two.tobytes()
    assert z.tobytes() == two.tobytes()


def test_host_backend_is_built_for_the_cpus_fma():
    """-march=native reaches the compiler: where the CPU has FMA, the kernels could use it."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "").split()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if "fma" not in flags:
        pytest.skip("this CPU has no FMA")
    dev = HostDevice("test")
    out = dev.alloc(1, np.int32)
    dev.compile(SRC)["isa"](1, 1, out)
    assert out.download()[0] == 1


def test_contraction_would_change_the_bits_and_the_cache_key(monkeypatch, tmp_path):
    """The same source with -ffp-contract=fast is a new cache entry (the flags are in the key)
    and gives FMA bits: exactly what the contract flag keeps out."""
    cxx = host_mod.find_compiler()
    flags = host_mod.host_flags(cxx)
    if "-march=native" not in flags:
        pytest.skip("the compiler refused -march=native: no FMA to contract into")
    dev = HostDevice("test", cache_root=tmp_path)
    y_off, _, built = _run(dev, np.float64)
    assert built
    _, _, built_again = _run(HostDevice("test", cache_root=tmp_path), np.float64)
    assert not built_again  # same flags: the cached object
    fast = tuple("-ffp-contract=fast" if f == "-ffp-contract=off" else f for f in flags)
    monkeypatch.setattr(host_mod, "host_flags", lambda _cxx: fast)
    _, z_fast, built_fast = _run(HostDevice("test", cache_root=tmp_path), np.float64)
    assert built_fast  # the flags are part of the key
    try:
        with open("/proc/cpuinfo") as f:
            has_fma = "fma" in next((ln for ln in f if ln.startswith("flags")), "").split()
    except OSError:
        has_fma = False
    if has_fma:
        a, b, c = _cases(np.float64)
        assert z_fast.tobytes() == _fused(a, b, c).tobytes()
        assert z_fast.tobytes() != y_off.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_matmul_rounds_product_and_add_apart(dtype):
    """acc = acc + a*b per k: on inputs where an FMA would change the bits, the native
    reference-order matmul (built -march=native) equals the two-rounding order."""
    if native.library() is None:
        pytest.skip("native kernels unavailable (no gcc)")
    a_, b_, c_ = _cases(dtype)
    n = 8
    # row i: [c_i, a_i] @ [[1], [b_i]]: acc = 0 + c_i*1 (exact), then acc + a_i*b_i
    a = np.stack([c_[:n], a_[:n]], axis=1).astype(dtype)
    b = np.stack([np.ones(n), b_[:n]]).astype(dtype)
    got = native.mm(a, b)
    want = np.empty((n, n), dtype)
    for i in range(n):
        for j in range(n):
            acc = dtype(0) + a[i, 0] * dtype(1)
            want[i, j] = acc + a[i, 1] * b_[j]
    assert got.tobytes() == want.tobytes()
    diag_two = np.array([want[i, i] for i in range(2)])
    assert not np.array_equal(diag_two, _fused(a_[:2], b_[:2], c_[:2])), "inputs must tell"


# ---- the machine code: no FMA instruction anywhere ------------------------------------------


def _rope_pair_tape():
    """A fused rope whose half width is 1: gcc 12 -march=native vectorised its two writes into
    one vfmaddsub despite -ffp-contract=off (found by test_fusion_random)."""
    from tests.helpers.fusion import build

    with np.errstate(all="ignore"):
        t, loss = build(2, 2, 3643, [("rope", 0, 2, 1.9082149292705877e-10),
                                     ("scalar_const", 4, 2, 0.3122768888470451),
                                     ("softmax", 7, 5, -3.1025526381819975e-198)],
                        ["neg", "adds", "sqrt_abs", "sum", "neg"], True)
        t.backward(loss)
    return t, loss


def test_fused_rope_pair_is_not_contracted_by_the_vectorizer(host):
    t, loss = _rope_pair_tape()
    prog = fusion.capture(host, t, loss, fuse=True)
    assert "rope" in prog.fusion.segments[0].ops
    prog.forward()
    prog.backward()
    assert gpu.parity.compare(t, prog).exact
    assert fma_instructions(prog.fusion_runtime.module.path) == []


def test_no_fma_instruction_in_any_host_object(host):
    """The kernel library (both dtypes, both math modes), the diff kernels, the fused kernels of
    both workloads and the native reference matmul: built for a CPU with FMA, none uses it."""
    from tapescope.core import workloads
    from tapescope.gpu.diff import DeviceDiff

    objects = {"diff": DeviceDiff(host).module.path}
    for name in ("mlp", "transformer"):
        for dt in ("float64", "float32"):
            for math in ("refmath", "platform"):
                wl = workloads.get(name, dtype=dt, math=math)
                prog = fusion.capture(host, wl.tape, wl.record(0), fuse=True)
                objects[f"library {dt} {math}"] = prog.module.path
                objects[f"fused {name} {dt} {math}"] = prog.fusion_runtime.module.path
    if native.library() is not None:
        objects["native refkernels"] = native.library()._name
    found = {k: fma_instructions(p) for k, p in objects.items()}
    assert {k: v for k, v in found.items() if v} == {}
    assert len(objects) >= 13
