"""The cuda backend's Python plumbing, run against a CuPy stand-in (tests/gpu/fake_cupy.py):
NVRTC options (no -ftz=true), the PTX cache, streams, graph capture and replay, transfers."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
from tests.gpu import fake_cupy


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path_factory):
    # one private cache for this module: the library compiles once, not per test
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fakecuda"))
    fake_cupy.install(monkeypatch)
    fake_cupy.seen_options.clear()
    dev = gpu.open_device("auto")
    assert dev.kind == "cuda" and dev.describe() == "device: cuda (CUDA device answered)"
    return dev


def test_graph_episodes_bit_identical_through_the_cuda_path(fake_cuda):
    from tests.gpu.test_workloads import train_side_by_side

    for _, _, _, rep in train_side_by_side(fake_cuda, "transformer", np.float32, 2):
        assert rep.exact, rep.first_divergence
    opts = fake_cupy.seen_options[0]
    assert "--fmad=false" in opts and "-ftz=false" in opts and "-ftz=true" not in opts
    assert "--gpu-architecture=compute_90" in opts


def test_run_episode_replays_one_captured_graph(fake_cuda):
    from core import workloads

    wl = workloads.get("mlp")
    prog = gpu.capture(fake_cuda, wl.tape, wl.record(0))
    opt = gpu.from_core(wl.make_optimizer())
    core_opt = wl.make_optimizer()
    for s in range(3):
        wl.tape.backward(wl.record(s))
        core_opt.step()
        prog.set_input(wl.inputs["x"].id, wl.tape.value(wl.inputs["x"]))
        prog.run_episode(opt)
    graph = prog._graph[1]
    assert len(graph.calls) == prog.stats["launches_per_episode"]
    for i in prog.param_ids():
        assert np.array_equal(prog.read(i).view(np.uint8),
                              np.asarray(wl.tape.value(i)).view(np.uint8))
    # a second device finds the PTX in the cache instead of calling NVRTC again
    n = len(fake_cupy.seen_options)
    gpu.open_device("cuda").compile(
        'extern "C" __global__ void k(double* y) { y[0] = 1.0; }')
    m = gpu.open_device("cuda").compile(
        'extern "C" __global__ void k(double* y) { y[0] = 1.0; }')
    assert len(fake_cupy.seen_options) == n + 1 and not m.built
