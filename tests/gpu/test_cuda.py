"""The cuda backend against the tape (and the host): skipped with the reason when no device."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core.ops import REGISTRY
from tapescope.gpu.cuda import cuda_unavailable_reason

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def cuda():
    why = cuda_unavailable_reason()
    if why is not None:
        pytest.skip(f"cuda backend unavailable: {why}")
    return gpu.open_device("cuda")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_every_op_on_cuda(cuda, monkeypatch, dtype):
    from tests.helpers.op_parity import NN_OPS, NON_LEAF, run_case

    for d in NN_OPS:
        monkeypatch.setitem(REGISTRY, d.name, d)
    for op in NON_LEAF:
        for i, (xs, attrs) in enumerate(REGISTRY[op].sample(np.random.default_rng(7),
                                                            np.dtype(dtype))):
            _, _, rep = run_case(cuda, op, xs, attrs, dtype, seed=i)
            assert rep.exact, f"{op} case {i}: first divergence {rep.first_divergence}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_workloads_on_cuda(cuda, name, dtype):
    from tests.helpers.workloads import train_side_by_side

    for step, _, _, rep in train_side_by_side(cuda, name, dtype, 5):
        assert rep.exact, f"{name} step {step}: first divergence {rep.first_divergence}"


def test_native_code_for_this_device(cuda):
    # a cubin for the device's own sm (PTX only when NVRTC does not know the device)
    cc = cuda.cc
    m = cuda.compile('extern "C" __global__ void k(double* y) { y[0] = 1.0; }')
    assert cuda.target.kind == "cubin", cuda.target.why
    assert cuda.target.arch == f"sm_{cc}" and m.path.suffix == ".cubin"


def test_graph_replay_equals_eager(cuda):
    from tapescope.core import workloads

    runs = []
    for graph in (False, True):
        wl = workloads.get("transformer")
        prog = gpu.capture(cuda, wl.tape, wl.record(0))
        opt = gpu.from_core(wl.make_optimizer())
        for _ in range(3):
            if graph:
                prog.run_episode(opt)
            else:
                prog.forward()
                prog.backward()
                prog.step(opt)
        runs.append([prog.read(i) for i in prog.param_ids()])
        assert prog.graph_captures == int(graph)  # one capture for all three episodes
    for a, b in zip(*runs, strict=True):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_float32_subnormals_on_cuda(cuda, host):
    src = r"""
    extern "C" __global__ void sub32(const float* a, const float* b, float* y) {
        y[0] = __fsub_rn(a[0], b[0]);
        y[1] = __fmul_rn(a[0], 0.25f);
    }"""
    out = []
    for dev in (cuda, host):
        m = dev.compile(src)
        a, b, y = dev.alloc(1, np.float32), dev.alloc(1, np.float32), dev.alloc(2, np.float32)
        tiny = np.finfo(np.float32).tiny
        a.upload(np.array([tiny * 1.5], np.float32))
        b.upload(np.array([tiny], np.float32))
        m["sub32"](1, 1, a, b, y)
        dev.synchronize()
        out.append(y.download())
    assert out[0][0] != 0 and np.array_equal(out[0].view(np.int32), out[1].view(np.int32))
