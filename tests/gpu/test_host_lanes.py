"""The host backend's fast paths keep every bit: lane kernels (a run of a block's threads in one
vectorised call, host_prelude.h) and the block pool (a launch's blocks on several OS threads)
give the tape's bits, the same bits for 1, 2 and 4 threads and for every thread order, and the
machine code they compile to has no FMA instruction. Which kernels run as lanes is what the code
that wrote the source states (gpu.kernel_facts); tests/gpu/test_kernel_facts.py holds the
statements to the text, SRC_FACTS below included.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import workloads
from tapescope.gpu import fusion
from tapescope.gpu import source as kernel_source
from tapescope.gpu.host import HostDevice
from tapescope.gpu.kernel_facts import BARRIER, LANES, PLAIN
from tapescope.gpu.signature import parse_kernels
from tests.helpers.kernel_text import fma_instructions
from tests.helpers.lane_kernels import GUARD, SQRT_SRC, SRC, SRC_FACTS

# ---- which kernels run as lanes --------------------------------------------------------------

def test_the_library_runs_every_grid_stride_kernel_as_lanes():
    dev = HostDevice("test")
    for math in ("refmath", "platform"):
        src = kernel_source.library_source(math)
        mod = dev.compile(src, kernel_source.library_facts())
        sigs = set(parse_kernels(src))
        not_lanes = {re.sub(r"_f(32|64)$", "", k) for k in sigs - mod.lanes}
        # one thread by index (a row form's total: cross_entropy_total, clip_norm, amp's
        # overflow check); an argmax loop that breaks (maxpool)
        assert not_lanes == {"cross_entropy_total", "clip_norm", "amp_check", "maxpool_fwd"}
        assert {"mm_f64", "adam_f64", "binary_fwd_f32", "zero_many_f64"} <= mod.lanes
    wl = workloads.get("mlp")  # a captured program compiles the library with its facts
    prog = fusion.capture(dev, wl.tape, wl.record(0), fuse=False)
    assert prog.module.lanes == mod.lanes


def test_lanes_are_what_the_facts_say_and_only_that():
    """No facts, no lanes (a --kernel file, a test's source): the text is never read for them;
    a barrier kernel the facts do not name still runs as fibers (its body calls
    __syncthreads); facts naming a kernel the source lacks are a stale table."""
    dev = HostDevice("test")
    assert dev.compile(SRC).lanes == frozenset()
    assert dev.compile(SRC, SRC_FACTS).lanes == {"rowdot", "muladd", "racy"}
    assert dev.compile(SRC, {"muladd": LANES}).lanes == {"muladd"}
    with pytest.raises(gpu.DeviceError, match="facts for kernels the source does not define: "
                                              "nope"):
        dev.compile(SRC, {**SRC_FACTS, "nope": LANES})
    mod = dev.compile(SRC)
    assert {n: (f.lanes, f.barrier) for n, f in mod.facts.items()} == {
        n: (False, False) for n in SRC_FACTS}
    bar = ('extern "C" __global__ void b(double* y) {\n'
           '    y[threadIdx.x] = 1.0; __syncthreads(); y[threadIdx.x] += y[0];\n}\n')
    assert dev.compile(bar).facts["b"] == BARRIER


def test_a_threads_running_count_stays_the_threads():
    """A kernel whose lane loop carries a count is stated PLAIN by its author (the analyser of
    test_kernel_facts.py refuses it as lanes): one thread after another keeps the count each
    thread's."""
    src = GUARD + r"""
extern "C" __global__ void count(double* y, long long n) {
    long long c = 0;
    TS_GRID_STRIDE(i, n) { y[i] = (double)c; c += 1; }
}
"""
    for threads in (1, 2):
        dev = HostDevice("test", orders="both", threads=threads)
        mod = dev.compile(src, {"count": PLAIN})
        assert mod.lanes == frozenset()
        y = dev.alloc(5000, np.float64)
        mod["count"](4, 128, y, 5000)
        assert y.download().tobytes() == (np.arange(5000) // 512).astype(np.float64).tobytes()


# ---- the same bits: lanes, the pool, every order ---------------------------------------------

@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("orders", ["forward", "reverse", "both"])
def test_lane_kernels_give_the_serial_bits(threads, orders):
    dev = HostDevice("test", orders=orders, threads=threads)
    mod = dev.compile(SRC, SRC_FACTS)
    rng = np.random.default_rng(11)
    K = 37
    for grid, block, n in ((3, 128, 5000), (1, 96, 77), (40, 64, 2560), (7, 33, 1)):
        a_h, b_h = rng.standard_normal(n * K), rng.standard_normal(K)
        a, b, y = dev.alloc(n * K, np.float64), dev.alloc(K, np.float64), dev.alloc(n, np.float64)
        a.upload(a_h)
        b.upload(b_h)
        mod["rowdot"](grid, block, a, b, y, n, K)
        want = np.zeros(n)
        for k in range(K):  # acc = acc + a*b, k in order, two roundings each
            want = want + a_h.reshape(n, K)[:, k] * b_h[k]
        assert y.download().tobytes() == want.tobytes(), (grid, block, n)


def _fma_cases(n: int):
    e = 2.0**-30
    rng = np.random.default_rng(7)
    a = np.concatenate([[1 + e, 1 - e], rng.uniform(0.5, 2, n - 2)])
    b = np.concatenate([[1 + e, 1 + e], rng.uniform(0.5, 2, n - 2)])
    return a, b, -(a * b)


@pytest.mark.parametrize("threads", [1, 2])
def test_lanes_round_every_product_and_add_apart(threads):
    dev = HostDevice("test", threads=threads)
    mod = dev.compile(SRC, SRC_FACTS)
    assert "muladd" in mod.lanes
    n = 4099
    a_h, b_h, c_h = _fma_cases(n)
    bufs = [dev.alloc(n, np.float64) for _ in range(5)]
    for buf, arr in zip(bufs, (a_h, b_h, c_h), strict=False):
        buf.upload(arr)
    mod["muladd"](9, 128, *bufs, n)
    assert bufs[3].download().tobytes() == ((a_h * b_h) + c_h).tobytes()
    assert bufs[4].download().tobytes() == ((a_h * c_h) - (b_h * c_h)).tobytes()
    assert fma_instructions(mod.path) == []


def test_lane_objects_are_vectorised_and_have_no_fma():
    """The loop vectoriser is on (packed arithmetic in the objects), the SLP one and every FMA
    off: the library of both math modes as the host builds it."""
    from tapescope.gpu.fusion import capture

    dev = HostDevice("test")
    for math in ("refmath", "platform"):
        wl = workloads.get("mlp", math=math)
        prog = capture(dev, wl.tape, wl.record(0), fuse=False)
        path = prog.module.path
        assert fma_instructions(path) == [], math
        import shutil
        import subprocess

        objdump = shutil.which("objdump")
        if objdump is None:
            pytest.skip("objdump not found")
        asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)],
                             capture_output=True, text=True, timeout=120).stdout
        assert re.search(r"\bv(add|mul)pd\b", asm), "no packed double arithmetic"


def test_a_race_between_lanes_is_still_caught():
    dev = HostDevice("test", orders="both", threads=2)
    mod = dev.compile(SRC, SRC_FACTS)
    x, y = dev.alloc(3000, np.float64), dev.alloc(7, np.float64)
    x.upload(np.arange(3000.0))
    with pytest.raises(gpu.DeviceError, match="racy.*order threads run in"):
        mod["racy"](4, 128, x, y, 3000)


def test_a_kernel_kept_thread_by_thread_still_runs_each_thread():
    for threads in (1, 2):
        dev = HostDevice("test", orders="both", threads=threads)
        mod = dev.compile(SRC, SRC_FACTS)
        assert "by_thread" not in mod.lanes
        y = dev.alloc(4096, np.float64)
        mod["by_thread"](8, 128, y, 4096)
        got = y.download()
        want = np.ones(4096)
        want[3::128] = 0  # thread 3 of each block returned before its elements
        assert got.tobytes() == want.tobytes()


def _episodes(name: str, dims: dict, threads: int, orders: str, steps: int, fuse: bool):
    wl = workloads.get(name, **dims)
    opt = wl.make_optimizer()
    dev = HostDevice("test", orders=orders, threads=threads)
    prog = fusion.capture(dev, wl.tape, wl.record(0), fuse=fuse)
    dopt = gpu.from_core(opt)
    for s in range(steps):
        loss = wl.record(s)
        wl.tape.backward(loss)
        opt.step()
        for v in wl.inputs.values():
            prog.set_input(v.id, wl.tape.value(v))
        prog.run_episode(dopt)
    # the parameters after `steps` updates on both sides, and every node of the last step
    assert gpu.parity.compare(wl.tape, prog).exact
    for i in prog.param_ids():
        assert wl.tape.value(i).tobytes() == prog.read(i).tobytes()
    return {i: prog.read(i).tobytes() for i in range(len(prog.nodes))}


BIG = {"dims": (784, 128, 32, 128, 784), "batch_size": 64}


def test_big_mlp_episodes_are_the_tapes_bits_for_every_thread_count_and_order():
    """The benchmark's network: 3 Adam steps equal the tape bit for bit, with 1, 2 and 4 OS
    threads, forward and reverse (and "both", which compares the schedules itself)."""
    seen = {}
    for threads in (1, 2, 4):
        for orders in ("forward", "reverse"):
            seen[threads, orders] = _episodes("mlp", BIG, threads, orders, 3, fuse=False)
    _episodes("mlp", BIG, 2, "both", 2, fuse=False)
    first = next(iter(seen.values()))
    assert all(v == first for v in seen.values())


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_fused_workloads_with_lanes_and_the_pool(name):
    for threads in (1, 4):
        _episodes(name, {}, threads, "both", 2, fuse=True)


# ---- -fno-math-errno: the square root is the one instruction, with the same bits -------------


def _sqrt_cases(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    bits = np.uint64 if dtype == np.float64 else np.uint32
    nan_payload = (np.array([0x7FF0000000000123, 0xFFF8000000000456], dtype=np.uint64)
                   if dtype == np.float64 else
                   np.array([0x7F800123, 0xFFC00456], dtype=np.uint32)).view(dtype)
    special = np.array([-1.0, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, info.tiny,
                        -info.tiny, info.smallest_subnormal, -info.smallest_subnormal,
                        info.max, -info.max, 2.0, 0.25], dtype=dtype)
    rng = np.random.default_rng(5)
    rand = rng.standard_normal(4000).astype(dtype) * np.array(10.0, dtype) ** rng.integers(
        -30, 30, 4000).astype(dtype)
    out = np.concatenate([special, nan_payload, rand]).astype(dtype)
    assert out.view(bits).size == out.size
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_sqrt_of_negative_nan_and_inf_keeps_its_bits(threads):
    """The host compiles with -fno-math-errno (gpu/host_compiler.py): sqrt of a negative number, -0,
    NaN (payload and sign), +-inf, subnormals and ordinary numbers give the bits numpy's
    square root gives, in lanes and thread by thread, and the library calls no libm sqrt."""
    x, xf = _sqrt_cases(np.float64), _sqrt_cases(np.float32)
    n = x.size
    with np.errstate(invalid="ignore"):
        want, wantf = np.sqrt(x), np.sqrt(xf)
    for orders in ("forward", "both"):
        dev = HostDevice("test", orders=orders, threads=threads)
        mod = dev.compile(SQRT_SRC, {"sqrts": LANES})
        assert "sqrts" in mod.lanes
        bx, by = dev.alloc(n, np.float64), dev.alloc(n, np.float64)
        bxf, byf = dev.alloc(n, np.float32), dev.alloc(n, np.float32)
        bx.upload(x)
        bxf.upload(xf)
        mod["sqrts"](5, 128, bx, by, bxf, byf, n)
        assert by.download().tobytes() == want.tobytes(), orders
        assert byf.download().tobytes() == wantf.tobytes(), orders


def test_adam_is_vectorised_and_calls_no_libm_sqrt(tmp_path, monkeypatch):
    """Adam's loop runs as packed square roots (its clip-scale load is not behind the branch,
    the alias checks cover its six pointers, and no errno path is kept), and the library the
    host backend builds on this machine calls no libm sqrt.

    Whether gcc's cost model takes the packed loop depends on the CPU -march=native names: with
    AVX-512 masks it does, on AVX2 (e.g. znver3) it keeps the scalar loop. So the vector check
    builds the same library for a pinned AVX-512 target (icelake-server; disassembled, never
    run), and the native build is held to what holds everywhere: no libm call."""
    import platform
    import shutil
    import subprocess

    from tapescope.gpu import host_compiler
    from tapescope.gpu.source import library_facts, library_source

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("reads x86-64 machine code")
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump not found")

    def disassemble(path) -> str:
        return subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)],
                              capture_output=True, text=True, timeout=120).stdout

    dev = HostDevice("test")
    wl = workloads.get("mlp")
    prog = fusion.capture(dev, wl.tape, wl.record(0), fuse=False)
    asm = disassemble(prog.module.path)
    assert re.search(r"<adam_f64>:\n", asm)
    assert not re.search(r"call.*<sqrt", asm), "a libm sqrt call is left in the library"

    native_flags = host_compiler.host_flags

    def pinned(cxx: str) -> tuple[str, ...]:
        return tuple("-march=icelake-server" if f == "-march=native" else f
                     for f in native_flags(cxx))

    if "-march=native" not in native_flags(host_compiler.find_compiler()):
        pytest.skip("this g++ takes no -march (the pinned AVX-512 build needs one)")
    monkeypatch.setattr(host_compiler, "host_flags", pinned)
    module = HostDevice("test", cache_root=tmp_path).compile(library_source(), library_facts())
    asm = disassemble(module.path)
    adam = re.search(r"<adam_f64>:\n(.*?)\n\n", asm, re.S)
    assert adam is not None
    assert re.search(r"\bv?sqrtpd\b", adam.group(1)), "adam_f64 is not vectorised"
    assert not re.search(r"call.*<sqrt", asm), "a libm sqrt call is left in the library"
