"""The cuda backend without a GPU: real NVRTC compiles (cubin for the device's architecture),
the CuPy stand-in (tests/gpu/fake_cupy.py) loads, launches, queues on streams and replays
graphs. Covers the compile cache, graph capture once across episodes, the pinned scalar
uploads, the PTX fallback and the driver-version errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tapescope import gpu
from tapescope.gpu.device import DeviceError
from tests.gpu import fake_cupy
from tests.helpers.nvrtc import needs_nvrtc

pytestmark = needs_nvrtc  # the fake compiles with the real NVRTC

_TINY = ('extern "C" __global__ void twice(const double* x, double* y) '
         '{ y[0] = __dmul_rn(x[0], 2.0); }')


@pytest.fixture
def cache(monkeypatch, tmp_path_factory):
    # one cache for every fake-CUDA test of the run: the library compiles once, not per test
    # or per worker (fake_cupy.session_cache)
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(fake_cupy.session_cache(tmp_path_factory)))


@pytest.fixture
def fake_cuda(monkeypatch, cache):
    fake_cupy.install(monkeypatch)
    dev = gpu.open_device("auto")
    assert dev.kind == "cuda"
    assert dev.describe().startswith("device: cuda (CUDA device answered; sm_90 cubin, NVRTC ")
    return dev


def test_graph_episodes_bit_identical_through_the_cuda_path(fake_cuda):
    from tests.helpers.workloads import train_side_by_side

    for _, _, _, rep in train_side_by_side(fake_cuda, "transformer", np.float32, 2):
        assert rep.exact, rep.first_divergence
    # what the fake loaded is NVRTC's native code for the device, never PTX
    assert fake_cupy.state.loaded and set(fake_cupy.state.loaded) == {("cubin", "sm_90")}


# float16's buffers are CuPy's own float16 (25 s here, `slow`); bfloat16's are the uint16 bits
# only this path handles; both half types run on the host in tests/gpu/test_amp.py and
# test_half_kernels.py
@pytest.mark.parametrize("dtype", [pytest.param("float16", marks=pytest.mark.slow), "bfloat16"])
def test_half_episodes_through_the_cuda_path(fake_cuda, dtype):
    # CuPy has no bfloat16: its buffers hold the bits (uint16), uploads and downloads view them
    from tests.helpers.workloads import train_side_by_side

    for _, _, _, rep in train_side_by_side(fake_cuda, "mlp", dtype, 2):
        assert rep.exact, rep.first_divergence
    with pytest.raises(TypeError, match="Unsupported dtype"):
        fake_cupy.zeros(4, dtype="bfloat16")


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_run_episode_captures_one_graph_across_episodes(fake_cuda, fuse):
    from tapescope.core import workloads

    wl = workloads.get("mlp")
    prog = gpu.capture(fake_cuda, wl.tape, wl.record(0), fuse=fuse)
    opt = gpu.from_core(wl.make_optimizer())
    core_opt = wl.make_optimizer()
    copies = len(fake_cupy.state.copies)
    for s in range(4):
        wl.tape.backward(wl.record(s))
        core_opt.step()
        prog.set_input(wl.inputs["x"].id, wl.tape.value(wl.inputs["x"]))
        prog.run_episode(opt)
    assert fake_cupy.state.captures == prog.graph_captures == 1
    assert fake_cupy.state.graph_launches == 4
    graph = prog._graph[1]
    assert len(graph.calls) == prog.stats["launches_per_episode"]
    for i in prog.param_ids():
        assert np.array_equal(prog.read(i).view(np.uint8),
                              np.asarray(wl.tape.value(i)).view(np.uint8))
    # Adam's six per-step scalars came from pinned memory, once per episode
    scalars = [p for n, p in fake_cupy.state.copies[copies:] if n == 6]
    assert scalars == [True] * 4
    # episodes without an optimizer: one more graph, not one per episode
    for _ in range(3):
        prog.run_episode()
    assert fake_cupy.state.captures == prog.graph_captures == 2


def test_a_pinned_slot_is_not_rewritten_before_its_copy_ran(fake_cuda):
    # the fake's streams run only when waited for: without the event wait in `stage`, the first
    # copy would read the second step's value out of the shared pinned slot
    m = fake_cuda.compile(_TINY)
    x = fake_cuda.alloc(1, np.float64)
    y1, y2 = fake_cuda.alloc(1, np.float64), fake_cuda.alloc(1, np.float64)
    fake_cuda.stage(x, np.array([3.0]))
    m["twice"](1, 1, x, y1)
    fake_cuda.stage(x, np.array([5.0]))
    m["twice"](1, 1, x, y2)
    fake_cuda.synchronize()
    assert y1.download()[0] == 6.0 and y2.download()[0] == 10.0


def test_the_compile_cache_serves_a_second_device(fake_cuda):
    import tapescope.gpu.cuda  # noqa: F401  (loads the submodule)

    a = gpu.open_device("cuda").compile('extern "C" __global__ void one(double* y) { y[0] = 1; }')
    calls = []
    real = gpu.cuda.nvrtc_compile
    gpu.cuda.nvrtc_compile = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        b = gpu.open_device("cuda").compile(
            'extern "C" __global__ void one(double* y) { y[0] = 1; }')
    finally:
        gpu.cuda.nvrtc_compile = real
    assert a.path == b.path and a.path.suffix == ".cubin" and not b.built and calls == []


def test_a_device_newer_than_nvrtc_gets_ptx(monkeypatch, cache):
    fake_cupy.install(monkeypatch, cc="200", driver=99990)
    dev = gpu.open_device("cuda")
    assert dev.target.kind == "ptx" and dev.target.arch.startswith("compute_")
    m = dev.compile(_TINY)
    x, y = dev.alloc(1, np.float64), dev.alloc(1, np.float64)
    x.upload(np.array([1.5]))
    m["twice"](1, 1, x, y)
    assert y.download()[0] == 3.0 and m.path.suffix == ".ptx"
    assert fake_cupy.state.loaded == [("ptx", dev.target.arch.replace("compute", "sm"))]


def test_a_driver_older_than_nvrtc_is_one_clear_error(monkeypatch, cache):
    from tapescope.gpu.nvrtc import cuda_version_text, nvrtc_version

    fake_cupy.install(monkeypatch, driver=11080)
    nv = cuda_version_text(nvrtc_version())
    with pytest.raises(DeviceError, match=rf"CUDA 11\.8, NVRTC is {nv}.*cupy-cuda11x") as e:
        gpu.open_device("cuda")
    assert "\n" not in str(e.value)
    host = gpu.open_device("auto")  # auto says why it fell back
    assert host.kind == "host" and "11.8" in host.reason and nv in host.reason


def test_the_fake_enforces_cupy_types(fake_cuda, tmp_path):
    import cupy  # the fake

    m = fake_cuda.compile(_TINY)
    fn = m["twice"].handle
    x, y = cupy.zeros(1, np.float64), cupy.zeros(1, np.float64)
    with pytest.raises(TypeError, match="expected tuple"):
        fn([1, 1, 1], (1, 1, 1), (x, y))
    with pytest.raises(TypeError, match="Unsupported type"):
        fn((1, 1, 1), (1, 1, 1), (x, "y"))
    with pytest.raises(TypeError, match="expected str"):
        cupy.RawModule(path=m.path)  # a Path: CuPy's path parameter is typed str
    with pytest.raises(TypeError, match="cannot be set"):
        x.set(np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="Shape"):
        x.set(np.zeros(2, np.float64))
    bogus = tmp_path / "k.cubin"
    bogus.write_bytes(b"\x7fELF\x02" + bytes(60))
    with pytest.raises(RuntimeError, match="INVALID_IMAGE"):
        cupy.RawModule(path=str(bogus))
    s = cupy.cuda.Stream(non_blocking=True)
    s.begin_capture()
    with pytest.raises(RuntimeError, match="capturing"):
        x.set(np.zeros(1, np.float64), stream=s)
    s.end_capture()


def test_the_fake_signatures_match_the_installed_cupy():
    import inspect
    import re

    cupy = pytest.importorskip("cupy", reason="the real CuPy is not installed")
    real = {
        "RawModule": cupy.RawModule.__doc__,
        "RawModule.get_function": cupy.RawModule.get_function.__doc__,
        "ndarray.set": cupy.ndarray.set.__doc__,
        "ndarray.get": cupy.ndarray.get.__doc__,
        "Graph.launch": cupy.cuda.graph.Graph.launch.__doc__,
        "Stream.begin_capture": cupy.cuda.Stream.begin_capture.__doc__,
        "Stream.record": cupy.cuda.Stream.record.__doc__,
        "alloc_pinned_memory": cupy.cuda.alloc_pinned_memory.__doc__,
    }
    fake = {
        "RawModule": fake_cupy.RawModule.__init__, "RawModule.get_function":
        fake_cupy.RawModule.get_function, "ndarray.set": fake_cupy.ndarray.set,
        "ndarray.get": fake_cupy.ndarray.get, "Graph.launch": fake_cupy.Graph.launch,
        "Stream.begin_capture": fake_cupy.Stream.begin_capture,
        "Stream.record": fake_cupy.Stream.record,
        "alloc_pinned_memory": fake_cupy.alloc_pinned_memory,
    }
    for name, doc in real.items():
        first = doc.strip().splitlines()[0]  # Cython's embedded signature
        params = re.search(r"\((.*)\)", first).group(1)
        names = [re.split(r"[\s=]", p.strip().split(" ")[-1] if "=" not in p else
                          p.strip().split("=")[0].split(" ")[-1])[0]
                 for p in params.split(",") if p.strip() not in ("", "*", "self")]
        mine = [p for p in inspect.signature(fake[name]).parameters if p != "self"]
        assert mine == names, (name, first)
    assert list(inspect.signature(cupy.cuda.Stream).parameters) == \
        list(inspect.signature(fake_cupy.Stream).parameters)


def test_real_cupy_without_a_device_is_one_clear_line():
    import subprocess
    import sys

    from tapescope.gpu.cuda import cuda_unavailable_reason

    cupy = pytest.importorskip("cupy", reason="the real CuPy is not installed")
    why = cuda_unavailable_reason()
    if why is None:
        pytest.skip("a CUDA device answered: this is the no-GPU case")
    assert why.startswith(f"CuPy {cupy.__version__} found, but no CUDA device") and "\n" not in why
    argv = [sys.executable, "-m", "tapescope.app.cli", "parity", "--workload", "mlp", "--steps",
            "1"]
    proc = subprocess.run([*argv, "--device", "cuda"], capture_output=True, text=True,
                          timeout=300)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "cuda device unavailable: CuPy" in lines[0] and "Traceback" not in proc.stderr
    proc = subprocess.run([*argv, "--device", "auto"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == f"device: host ({why})"


_GRID = ('extern "C" __global__ void grid(double* y) '
         '{ if (blockIdx.x == 0 && threadIdx.x == 0) y[0] = 1.0; }')


def test_the_fake_enforces_the_launch_limits(fake_cuda):
    import cupy  # the fake

    fn = fake_cuda.compile(_GRID)["grid"].handle
    y = cupy.zeros(1, np.float64)
    for grid, block in (((1,), (1024,)), ((1,), (32, 32)), ((1,), (1, 16, 64)), ((2,), (1,))):
        fn(grid, block, (y,))
    assert y.get()[0] == 1.0
    for grid in ((2**31 - 1,), (1, 65535, 65535)):  # legal, but billions of blocks on the host
        fake_cupy._check_launch("grid", grid, (1,), 0)
    bad = {((1,), (1025,)): "block.x = 1025", ((1,), (64, 32)): "2048 threads",
           ((1,), (1, 1, 65)): "block.z = 65", ((1,), (1, 1025)): "block.y = 1025",
           ((2**31,), (1,)): "grid.x = 2147483648", ((1, 65536), (1,)): "grid.y = 65536",
           ((1, 1, 65536), (1,)): "grid.z = 65536", ((0,), (1,)): "grid.x = 0",
           ((1,), (0,)): "block.x = 0"}
    for (grid, block), what in bad.items():
        with pytest.raises(RuntimeError, match=rf"CUDA_ERROR_INVALID_VALUE.*{re.escape(what)}"):
            fn(grid, block, (y,))
    # 48 KB of shared memory per block, static + dynamic
    fn((1,), (1,), (y,), shared_mem=48 * 1024)
    with pytest.raises(RuntimeError, match="49153 bytes of shared memory"):
        fn((1,), (1,), (y,), shared_mem=48 * 1024 + 1)
    stat = fake_cuda.compile(
        'extern "C" __global__ void st(double* y) { __shared__ double b[4000]; '
        'b[threadIdx.x] = y[0]; __syncthreads(); y[0] = b[3999 - threadIdx.x]; }')["st"].handle
    assert stat.static_shared == 32000
    stat((1,), (1,), (y,), shared_mem=48 * 1024 - 32000)
    with pytest.raises(RuntimeError, match="49153 bytes"):
        stat((1,), (1,), (y,), shared_mem=48 * 1024 - 32000 + 1)


def test_a_ptx_with_too_much_static_shared_memory_does_not_load(monkeypatch, cache):
    # ptxas refuses > 48 KB of static shared memory in a cubin (NVRTC's error); the driver's JIT
    # refuses the same PTX at load: the fake must too (a device newer than NVRTC gets PTX)
    fake_cupy.install(monkeypatch, cc="200", driver=99990)
    dev = gpu.open_device("cuda")
    src = ('extern "C" __global__ void big(double* y) { __shared__ double b[7000]; '
           'b[threadIdx.x] = y[0]; __syncthreads(); y[0] = b[6999 - threadIdx.x]; }')
    with pytest.raises(DeviceError, match=r"INVALID_PTX: entry function 'big' uses too much "
                                          r"shared data \(0xdac0 bytes, 0xc000 max\)"):
        dev.compile(src)


def test_a_launch_failing_during_capture_surfaces_its_own_error(fake_cuda):
    import cupy  # the fake

    k = fake_cuda.compile(_GRID)["grid"]
    y = fake_cuda.alloc(1, np.float64)
    good, bad = k.record(1, 1, y), k.record(1, 1025, y)
    # the fake itself: a failed launch invalidates the capture, as on CUDA
    s = cupy.cuda.Stream(non_blocking=True)
    s.begin_capture()
    with pytest.raises(RuntimeError, match="block.x = 1025"):
        bad.kernel.handle(bad.grid, bad.block, bad.packed, stream=s)
    with pytest.raises(RuntimeError, match="cudaErrorStreamCaptureInvalidated"):
        s.end_capture()
    # the backend: the launch's error, not end_capture's, and the stream is usable after
    with pytest.raises(RuntimeError, match="block.x = 1025") as e:
        fake_cuda.capture_graph([good, bad])
    assert "Invalidated" not in str(e.value)
    assert fake_cuda.stream.capturing is None
    graph = fake_cuda.capture_graph([good])
    fake_cuda.launch_graph(graph, 1)
    fake_cuda.synchronize()
    assert y.download()[0] == 1.0
