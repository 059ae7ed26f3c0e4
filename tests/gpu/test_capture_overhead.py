"""What the capture's per-launch fast paths keep: the argument check's words and bounds, the
collector's state (gpu.program.gc_paused), the argument pack's addresses."""

import ctypes
import gc

import numpy as np
import pytest

from tapescope.core import workloads
from tapescope.gpu.backends import open_device
from tapescope.gpu.host_launcher import pack_args
from tapescope.gpu.program import capture, gc_paused
from tapescope.gpu.signature import KernelArgError, check_args, parse_kernels

SIG = parse_kernels('extern "C" __global__ void k(const double* x, int n, long long m, '
                    'unsigned long long u, double s) { }')["k"]


class Buf:
    def __init__(self, dtype, ptr=0):
        self.dtype, self.ptr = np.dtype(dtype), ptr


@pytest.mark.parametrize("i, value, words", [
    (1, 2**31, "kernel k argument 1 (int n): 2147483648 does not fit int"),
    (1, -2**31 - 1, "kernel k argument 1 (int n): -2147483649 does not fit int"),
    (2, 2**63, "kernel k argument 2 (long long m): 9223372036854775808 does not fit long long"),
    (3, -1, "kernel k argument 3 (unsigned long long u): -1 does not fit unsigned long long"),
    (1, np.int64(3), "kernel k argument 1 (int n): int64 given where int is declared"),
    (4, 2, "kernel k argument 4 (double s): int given where double is declared"),
    (2, True, "kernel k argument 2 (long long m): bool given"),
])
def test_a_refused_argument_is_named_with_its_kernel_index_and_declaration(i, value, words):
    args = [Buf(np.float64), 1, 2, 3, 1.5]
    args[i] = value
    with pytest.raises(KernelArgError) as e:
        check_args(SIG, tuple(args), Buf)
    assert str(e.value) == words


def test_a_pointer_refusal_names_the_argument_too():
    with pytest.raises(KernelArgError) as e:
        check_args(SIG, (Buf(np.float32), 1, 2, 3, 1.5), Buf)
    assert str(e.value) == ("kernel k argument 0 (const double* x): buffer dtype float32 does "
                            "not match double")
    with pytest.raises(KernelArgError, match=r"argument 0 \(const double\* x\): expected a "
                                             "device buffer, got list"):
        check_args(SIG, ([], 1, 2, 3, 1.5), Buf)


def test_the_integer_bounds_are_inclusive():
    out = check_args(SIG, (Buf(np.float64), 2**31 - 1, -2**63, 2**64 - 1, 0.5), Buf)
    assert [type(v) for v in out[1:]] == [np.int32, np.int64, np.uint64, np.float64]
    assert [int(v) for v in out[1:4]] == [2**31 - 1, -2**63, 2**64 - 1]
    out = check_args(SIG, (Buf(np.float64), -2**31, 2**63 - 1, 0, 0.5), Buf)
    assert [int(v) for v in out[1:4]] == [-2**31, 2**63 - 1, 0]


def test_the_pack_holds_each_values_address():
    store, argv = pack_args(SIG, [Buf(np.float64, ptr=4096), np.int32(-7), np.int64(2**40),
                                  np.uint64(2**64 - 1), np.float64(0.25)])
    assert [argv[i] for i in range(5)] == [ctypes.addressof(s) for s in store]
    assert ctypes.c_void_p.from_address(argv[0]).value == 4096
    assert ctypes.c_int.from_address(argv[1]).value == -7
    assert ctypes.c_longlong.from_address(argv[2]).value == 2**40
    assert ctypes.c_ulonglong.from_address(argv[3]).value == 2**64 - 1
    assert ctypes.c_double.from_address(argv[4]).value == 0.25


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_paused_restores_the_collectors_state(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with gc_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(ZeroDivisionError), gc_paused():
            raise ZeroDivisionError
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_capture_builds_with_the_collector_off_and_leaves_it_on(monkeypatch):
    import tapescope.gpu.program as program

    wl = workloads.get("mlp", seed=0)
    loss = wl.record(0)
    wl.tape.backward(loss)
    seen = []
    real = program.Program

    class Watched(real):
        def __init__(self, *a, **k):
            seen.append(gc.isenabled())
            super().__init__(*a, **k)

    monkeypatch.setattr(program, "Program", Watched)
    assert gc.isenabled()
    prog = capture(open_device("host"), wl.tape, loss)
    assert isinstance(prog, real) and seen == [False] and gc.isenabled()

    class Fails(real):
        def __init__(self, *a, **k):
            raise MemoryError("planted")

    monkeypatch.setattr(program, "Program", Fails)
    with pytest.raises(MemoryError, match="planted"):
        capture(open_device("host"), wl.tape, loss)
    assert gc.isenabled()
