"""The host backend runs kernels with their real block shapes: a barrier kernel's threads are
fibers meeting at __syncthreads(), __shared__ memory belongs to the block, and every launch
list can run with blocks and threads in forward and in reverse order (orders="both"), which
must give the same bits. A planted missing barrier is caught by running it, not by reading it.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops, workloads
from tapescope.gpu import fusion
from tapescope.gpu.device import INCLUDE_DIRS
from tapescope.gpu.host import HostDevice
from tapescope.gpu.host_compiler import host_flags
from tapescope.gpu.signature import parse_kernels
from tests.helpers.fusion import bits_equal, diff_nodes

# A shared-memory tree sum per block (the classic reduction: a barrier after every level),
# a neighbour read across threads, and a thread-index map for 2-D blocks.
SRC = r"""
extern "C" __global__ void tree_sum(const double* x, double* out, double* y) {
    __shared__ double buf[1024];
    long long t = threadIdx.x, i = blockIdx.x * (long long)blockDim.x + t;
    buf[t] = x[i];
    __syncthreads();
    for (long long s = blockDim.x / 2; s > 0; s /= 2) {
        if (t < s) buf[t] = __dadd_rn(buf[t], buf[t + s]);
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
    y[i] = buf[0];  /* every thread reads the block's result: shared by the block */
}
extern "C" __global__ void rotate(const double* x, double* y) {
    __shared__ double buf[256];
    long long t = threadIdx.x, i = blockIdx.x * (long long)blockDim.x + t;
    buf[t] = x[i];
    __syncthreads();
    y[i] = buf[(t + 1) % blockDim.x];
}
extern "C" __global__ void rotate_no_barrier(const double* x, double* y) {
    __shared__ double buf[256];
    long long t = threadIdx.x, i = blockIdx.x * (long long)blockDim.x + t;
    buf[t] = x[i];
    y[i] = buf[(t + 1) % blockDim.x];  /* planted: the __syncthreads() is missing */
}
extern "C" __global__ void ids2d(int* out) {
    __syncthreads();
    long long t = (threadIdx.z * (long long)blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    long long b = blockIdx.x * (long long)blockDim.x * blockDim.y * blockDim.z;
    out[b + t] = (int)(threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z);
}
extern "C" __global__ void early_exit(double* y) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    y[threadIdx.x] = 1.0;
}
"""


def _tree_sum_reference(x: np.ndarray, block: int) -> np.ndarray:
    """The same tree order in numpy: level s adds buf[t + s] into buf[t] for t < s."""
    out = []
    for row in x.reshape(-1, block):
        buf = row.copy()
        s = block // 2
        while s > 0:
            buf[:s] = buf[:s] + buf[s:2 * s]
            s //= 2
        out.append(buf[0])
    return np.array(out)


@pytest.fixture(scope="module", params=["forward", "reverse", "both"])
def dev(request):
    return HostDevice("test", orders=request.param)


@pytest.fixture(scope="module")
def both():
    return HostDevice("test", orders="both")


def test_barrier_kernel_runs_threads_that_meet_at_each_barrier(dev):
    mod = dev.compile(SRC)
    rng = np.random.default_rng(1)
    for block in (1, 2, 64, 256):
        x_h = rng.standard_normal(3 * block)
        x, out, y = dev.alloc(x_h.size, np.float64), dev.alloc(3, np.float64), dev.alloc(
            x_h.size, np.float64)
        x.upload(x_h)
        launch = mod["tree_sum"].record(3, block, x, out, y)
        assert launch.block == (block, 1, 1)
        dev.run([launch])
        want = _tree_sum_reference(x_h, block)
        assert bits_equal(out.download(), want), f"block {block}"
        assert bits_equal(y.download(), np.repeat(want, block)), f"block {block}"


def test_shared_memory_is_the_blocks_and_threads_read_each_others(dev):
    mod = dev.compile(SRC)
    x_h = np.arange(4 * 32, dtype=np.float64)
    x, y = dev.alloc(x_h.size, np.float64), dev.alloc(x_h.size, np.float64)
    x.upload(x_h)
    mod["rotate"](4, 32, x, y)
    assert bits_equal(y.download(), np.roll(x_h.reshape(4, 32), -1, axis=1).reshape(-1))


def test_multi_dimensional_blocks_index_their_threads(dev):
    mod = dev.compile(SRC)
    out = dev.alloc(2 * 4 * 3 * 2, np.int32)
    mod["ids2d"](2, (4, 3, 2), out)
    tx, ty, tz = np.meshgrid(np.arange(4), np.arange(3), np.arange(2), indexing="ij")
    one = (tx + 100 * ty + 10000 * tz).transpose(2, 1, 0).reshape(-1)
    np.testing.assert_array_equal(out.download(), np.tile(one, 2))


def test_a_barrier_only_some_threads_reach_is_an_error(dev):
    mod = dev.compile(SRC)
    y = dev.alloc(8, np.float64)
    with pytest.raises(gpu.DeviceError, match="early_exit.*only some threads"):
        mod["early_exit"](1, 8, y)


def test_the_largest_cuda_block_runs():
    dev = HostDevice("test", orders="forward")
    mod = dev.compile(SRC)
    x_h = np.random.default_rng(2).standard_normal(2 * 1024)
    x, out, y = (dev.alloc(n, np.float64) for n in (x_h.size, 2, x_h.size))
    x.upload(x_h)
    mod["tree_sum"](2, 1024, x, out, y)
    assert bits_equal(out.download(), _tree_sum_reference(x_h, 1024))


# ---- planted missing barriers ---------------------------------------------------------------

def test_planted_missing_barrier_in_a_handwritten_kernel_is_caught(both):
    mod = both.compile(SRC)
    x_h = np.arange(2 * 16, dtype=np.float64)
    x, y = both.alloc(x_h.size, np.float64), both.alloc(x_h.size, np.float64)
    x.upload(x_h)
    with pytest.raises(gpu.DeviceError, match="rotate_no_barrier.*order threads run in"):
        mod["rotate_no_barrier"](2, 16, x, y)
    # and each order alone gives a wrong answer somewhere (forward reads stale neighbours)
    want = np.roll(x_h.reshape(2, 16), -1, axis=1).reshape(-1)
    got = {}
    for orders in ("forward", "reverse"):
        d = HostDevice("test", orders=orders)
        m = d.compile(SRC)
        xo, yo = d.alloc(x_h.size, np.float64), d.alloc(x_h.size, np.float64)
        xo.upload(x_h)
        m["rotate_no_barrier"](2, 16, xo, yo)
        got[orders] = yo.download()
    assert not bits_equal(got["forward"], got["reverse"])
    assert not bits_equal(got["forward"], want)


def _softmax_tape() -> tuple[Tape, object]:
    """x -> mul by a leaf -> softmax -> mul: softmax reads its whole input row, written by
    every thread of the block in the node before it, so it needs the barrier in between."""
    rng = np.random.default_rng(3)
    t = Tape()
    x = t.const(rng.uniform(-1, 1, (6, 40)), name="x")
    w = t.param(rng.uniform(0.5, 1.5, (40,)), name="w")
    y = ops.softmax(ops.mul(x, w))
    loss = ops.mean(ops.mul(y, y))
    t.backward(loss)
    return t, loss


def _drop_barrier_before_softmax(p: fusion.FusionPlan) -> str:
    fwd = next(k for k in p.kernels if k.role == "forward" and "softmax" in k.source)
    head, tail = fwd.source.split("softmax */", 1)
    cut = head.rindex("__syncthreads();")
    planted = head[:cut] + head[cut + len("__syncthreads();"):] + "softmax */" + tail
    assert planted.count("__syncthreads();") == fwd.source.count("__syncthreads();") - 1
    p.source = p.source.replace(fwd.source, planted)
    return fwd.name


def test_fused_softmax_kernel_runs_with_its_block_under_both_orders(both):
    t, loss = _softmax_tape()
    prog = fusion.capture(both, t, loss, fuse=True)
    assert any(k.block > 1 and "__syncthreads" in k.source for k in prog.fusion.kernels)
    prog.forward()
    prog.backward()
    assert gpu.parity.compare(t, prog).exact


def test_planted_missing_barrier_in_a_fused_kernel_is_caught(both):
    t, loss = _softmax_tape()
    prog = gpu.capture(both, t, loss)
    p = fusion.plan(prog)
    name = _drop_barrier_before_softmax(p)
    fusion.apply(prog, p)
    with pytest.raises(gpu.DeviceError, match=f"{name}.*order threads run in"):
        prog.forward()
    # run in one order only, the planted kernel gives wrong bits against the tape
    fwd = HostDevice("test", orders="forward")
    prog = gpu.capture(fwd, t, loss)
    p = fusion.plan(prog)
    _drop_barrier_before_softmax(p)
    fusion.apply(prog, p)
    prog.forward()
    assert not gpu.parity.compare(t, prog, grads=False).exact


@pytest.mark.parametrize("name, dtype", [("mlp", "float64"), ("transformer", "float64"),
                                         ("mlp", "float32"), ("transformer", "float32")])
def test_fused_workloads_give_the_same_bits_under_both_orders(both, name, dtype):
    """Every fused kernel of both workloads, run forward and reverse each episode, over 3
    training steps, equals the unfused program bit for bit."""
    out = []
    for fuse in (False, True):
        wl = workloads.get(name, dtype=dtype)
        prog = fusion.capture(both, wl.tape, wl.record(0), fuse=fuse)
        out.append((wl, prog, gpu.from_core(wl.make_optimizer())))
    (wa, pa, oa), (wb, pb, ob) = out
    assert any(k.block > 1 and "__syncthreads" in k.source for k in pb.fusion.kernels)
    for step in range(3):
        for wl, prog, opt in out:
            wl.record(step)
            for v in wl.inputs.values():
                prog.set_input(v.id, wl.tape.value(v))
            prog.run_episode(opt)
        assert diff_nodes(pa, pb) == [], f"step {step}"


# ---- the portable fiber fallback (ucontext) -------------------------------------------------

def test_ucontext_fallback_gives_the_same_bits(tmp_path):
    """Where the hand-written x86-64 switch does not apply, POSIX ucontext runs the fibers."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not found")
    from tapescope.gpu.host_launcher import launcher
    from tapescope.gpu.kernel_facts import KernelFacts

    text = SRC + "".join(launcher(s, KernelFacts(barrier=s.barrier))
                         for s in parse_kernels(SRC).values())
    src = tmp_path / "k.cu"
    src.write_text(text)
    so = tmp_path / "k.so"
    cmd = [cxx, *host_flags(cxx), "-DTS_HOST_UCONTEXT", *(f"-I{d}" for d in INCLUDE_DIRS),
           "-include", "host_prelude.h", str(src), "-o", str(so)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lib = ctypes.CDLL(str(so))
    fn = lib.ts_launch_tree_sum
    ll = ctypes.c_longlong
    fn.argtypes = [ll, ll, ll, ll, ll, ll, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    x = np.random.default_rng(5).standard_normal(2 * 64)
    for order in (0, 1):
        out, y = np.zeros(2), np.zeros(x.size)
        ptrs = [ctypes.c_void_p(a.ctypes.data) for a in (x, out, y)]
        argv = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(p), ctypes.c_void_p)
                                      for p in ptrs])
        assert fn(2, 1, 1, 64, 1, 1, argv, order, 2) == 0  # 2 OS threads where forward
        assert bits_equal(out, _tree_sum_reference(x, 64))
