"""Backends: device selection, the host compiler and launcher, argument checks, the cache."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core.cache import CacheError, KernelCache
from tapescope.gpu.cuda import NVRTC_FLAGS, cuda_unavailable_reason
from tapescope.gpu.host import HostDevice
from tapescope.gpu.host_compiler import HOST_FLAGS

SRC = r"""
extern "C" __global__ void axpy(const double* x, double* y, double a, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = __dadd_rn(__dmul_rn(a, x[i]), y[i]);
}
extern "C" __global__ void tid(int* out, int k) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    out[i] = (int)i * k;
}
extern "C" __global__ void rowfill(float* y, long long cols) {
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) y[blockIdx.x * cols + c] = 1.0f;
    __syncthreads();
    for (long long c = threadIdx.x; c < cols; c += blockDim.x)
        y[blockIdx.x * cols + c] = __fadd_rn(y[blockIdx.x * cols + c], (float)blockIdx.x);
}
extern "C" __global__ void sub32(const float* a, const float* b, float* y) {
    y[0] = __fsub_rn(a[0], b[0]);
}
"""


@pytest.fixture(scope="module")
def mod(host):
    return host.compile(SRC)


def test_auto_says_why(host):
    reason = cuda_unavailable_reason()
    dev = gpu.open_device("auto")
    if reason is None:
        assert dev.kind == "cuda"
    else:
        assert dev.kind == "host"
        assert dev.describe() == f"device: host ({reason})"
        with pytest.raises(gpu.DeviceError, match="cuda device unavailable"):
            gpu.open_device("cuda")
    with pytest.raises(gpu.DeviceError, match="unknown device"):
        gpu.open_device("tpu")


def test_flags_keep_the_contract():
    assert "-ffp-contract=off" in HOST_FLAGS and "-ffast-math" not in HOST_FLAGS
    assert "--fmad=false" in NVRTC_FLAGS and "-ftz=false" in NVRTC_FLAGS


def test_launch_grid_and_threads(host, mod):
    x = host.alloc(1000, np.float64)
    y = host.alloc(1000, np.float64)
    x.upload(np.arange(1000.0))
    y.upload(np.ones(1000))
    mod["axpy"](3, 32, x, y, 2.0, 1000)
    np.testing.assert_array_equal(y.download(), 2.0 * np.arange(1000.0) + 1.0)
    out = host.alloc(4 * 8, np.int32)
    mod["tid"]((4,), (8,), out, np.int32(3))
    np.testing.assert_array_equal(out.download(), np.arange(32, dtype=np.int32) * 3)


def test_barrier_kernel_runs_its_real_block(host, mod):
    y = host.alloc(3 * 5, np.float32)
    launch = mod["rowfill"].record(3, 64, y, 5)
    assert launch.block == (64, 1, 1)  # threads as fibers (docs/devices.md)
    host.run([launch])
    np.testing.assert_array_equal(y.download().reshape(3, 5),
                                  np.repeat(np.arange(1.0, 4.0, dtype=np.float32), 5).reshape(3, 5))


def test_float32_subnormals_survive(host, mod):
    a, b, y = (host.alloc(1, np.float32) for _ in range(3))
    tiny = np.finfo(np.float32).tiny
    a.upload(np.array([tiny * 1.5], np.float32))
    b.upload(np.array([tiny], np.float32))
    mod["sub32"](1, 1, a, b, y)
    assert y.download()[0] == np.float32(tiny * 1.5) - np.float32(tiny) != 0  # a subnormal


@pytest.mark.parametrize("args, match", [
    ((1000,), "3 arguments declared|4 arguments declared"),
    (("x", "y", 2.0, np.int32(5)), "int32 given where long long"),
    (("x", "y", np.float32(2.0), 5), "float32 given where double"),
    (("x", "y", 2, 5), "int given where double"),
    (("x", "x32", 2.0, 5), "dtype float32 does not match double"),
    (("x", "y", 2.0, 2**63), "does not fit long long"),
    (("x", np.zeros(3), 2.0, 5), "expected a device buffer"),
    (("x", "y", 2.0, True), "bool given"),
])
def test_arguments_are_type_checked(host, mod, args, match):
    bufs = {"x": host.alloc(4, np.float64), "y": host.alloc(4, np.float64),
            "x32": host.alloc(4, np.float32)}
    real = tuple(bufs.get(a, a) if isinstance(a, str) else a for a in args)
    with pytest.raises(gpu.KernelArgError, match=match):
        mod["axpy"](1, 1, *real)


def test_int_where_int_declared_range_checked(host, mod):
    out = host.alloc(1, np.int32)
    with pytest.raises(gpu.KernelArgError, match="int64 given where int"):
        mod["tid"](1, 1, out, np.int64(3))
    with pytest.raises(gpu.KernelArgError, match="does not fit int"):
        mod["tid"](1, 1, out, 2**31)


def test_missing_compiler_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("TAPESCOPE_CXX", str(tmp_path / "no-such-g++"))
    dev = HostDevice("test", cache_root=tmp_path / "cache")
    with pytest.raises(gpu.DeviceError, match="install.*g\\+\\+"):
        dev.compile(SRC)


def test_compile_error_shows_the_log(tmp_path):
    dev = HostDevice("test", cache_root=tmp_path / "cache")
    bad = 'extern "C" __global__ void broken(double* y) { y[0] = undefined_name; }'
    with pytest.raises(gpu.DeviceError, match="undefined_name"):
        dev.compile(bad)


def test_cache_is_private_keyed_and_rebuilds_corrupt_entries(tmp_path):
    root = tmp_path / "cache"
    dev = HostDevice("test", cache_root=root)
    m1 = dev.compile(SRC)
    assert m1.built and stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(m1.path).st_mode) == 0o600
    # a second process finds the entry
    m2 = HostDevice("test", cache_root=root).compile(SRC)
    assert not m2.built and m2.path == m1.path
    # another source is another key
    m3 = HostDevice("test", cache_root=root).compile(SRC + "\n/* changed */\n")
    assert m3.path != m1.path
    # a corrupt (truncated) entry fails verification and is rebuilt. (Written as a new file:
    # truncating the mapped .so in place would crash this very process, which loaded it.)
    data = m1.path.read_bytes()
    (root / "junk").write_bytes(data[: len(data) // 2])
    os.replace(root / "junk", m1.path)
    m4 = HostDevice("test", cache_root=root).compile(SRC)
    assert m4.built and m4.path.read_bytes() == data
    # a half-written entry (no sidecar yet) is rebuilt too
    os.unlink(str(m4.path) + ".json")
    assert HostDevice("test", cache_root=root).compile(SRC).built


def test_cache_keeps_to_its_own_private_subfolder(tmp_path):
    # the chosen folder is the user's: never chmodded, its files never swept (see
    # tests/core/test_cache_safety.py); the entries live in a 0700 subfolder the cache made
    root = tmp_path / "c"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    stale = root / ".abc.dead.so"
    stale.write_bytes(b"user's")
    os.utime(stale, (1, 1))
    cache = KernelCache(root)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o755 and stale.exists()
    assert cache.store.parent == root and stat.S_IMODE(os.stat(cache.store).st_mode) == 0o700


@pytest.mark.cuda
def test_cuda_launch_matches_host(host, mod):
    why = cuda_unavailable_reason()
    if why is not None:
        pytest.skip(f"no CUDA device: {why}")
    dev = gpu.open_device("cuda")
    cm = dev.compile(SRC)
    for d, m in ((dev, cm), (host, mod)):
        x, y = d.alloc(100, np.float64), d.alloc(100, np.float64)
        x.upload(np.linspace(-1, 1, 100))
        m["axpy"](2, 32, x, y, 0.1, 100)
        d.synchronize()
        if d is dev:
            got = y.download()
        else:
            np.testing.assert_array_equal(got.view(np.int64), y.download().view(np.int64))
    with pytest.raises(gpu.KernelArgError):
        cm["axpy"](1, 1, x, y, 2.0, np.int32(5))


def test_unwritable_home_falls_back_to_a_private_temp_cache(monkeypatch, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "file").write_text("")
    monkeypatch.delenv("TAPESCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(ro / "file"))  # a path that cannot be a directory
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cache = KernelCache()
    assert cache.root == tmp_path / "tmp" / f"tapescope-{os.getuid()}" / "kernels"
    assert stat.S_IMODE(os.stat(cache.root.parent).st_mode) == 0o700
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(ro / "file" / "x"))  # chosen: no fallback
    with pytest.raises(CacheError, match="cannot create"):
        KernelCache()
