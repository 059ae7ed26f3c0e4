"""Fusion on the host backend: fused == unfused (bit for bit) on the workloads over 20 training
steps, the launch accounting, and a graph that fuses nothing runs as before."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops, workloads
from tapescope.gpu import fusion
from tests.helpers.fusion import bits_equal, diff_nodes


def _pair(host, name: str, dtype: str = "float64"):
    out = []
    for fuse in (False, True):
        wl = workloads.get(name, dtype=dtype)
        prog = gpu.capture(host, wl.tape, wl.record(0))
        if fuse:
            fusion.apply(prog)
        out.append((wl, prog, gpu.from_core(wl.make_optimizer())))
    return out


@pytest.mark.parametrize("name, dtype", [("mlp", "float64"), ("transformer", "float64"),
                                         ("mlp", "float32")])
def test_workload_fused_equals_unfused_over_20_steps(host, name, dtype):
    (wa, pa, oa), (wb, pb, ob) = _pair(host, name, dtype)
    assert pb.fusion.segments, "the workload must actually fuse something"
    for step in range(20):
        for wl, prog in ((wa, pa), (wb, pb)):
            wl.record(step)
            for v in wl.inputs.values():
                prog.set_input(v.id, wl.tape.value(v))
            prog.forward()
            prog.backward()
        assert diff_nodes(pa, pb) == [], f"step {step}"
        pa.step(oa)
        pb.step(ob)
    for i in pa.param_ids():
        assert bits_equal(pa.read(i), pb.read(i)), f"param {i} after 20 updates"


def test_fused_program_matches_the_tape(host):
    wl = workloads.get("transformer")
    loss = wl.record(0)
    wl.tape.backward(loss)
    prog = fusion.capture(host, wl.tape, loss)
    prog.forward()
    prog.backward()
    rep = gpu.parity.compare(wl.tape, prog)
    assert rep.exact, rep.first_divergence


def test_mlp_episode_launches(host):
    (wa, pa, oa), (wb, pb, ob) = _pair(host, "mlp")
    counted = {}
    for key, prog, opt in (("unfused", pa, oa), ("fused", pb, ob)):
        host.stats.reset()
        prog.run_episode(opt)
        counted[key] = host.stats.launches  # what the device really ran
    assert counted["fused"] <= 8 < counted["unfused"]
    assert pb.stats["launches_per_episode"] == counted["fused"] == \
        pb.fusion.launches_after["episode"]
    assert pa.stats["launches_per_episode"] == counted["unfused"] == \
        pb.fusion.launches_before["episode"]
    # forward: one row kernel + the serial loss tail; backward: zero-fill, tail, rows, params
    assert pb.fusion.launches_after == {"forward": 2, "backward": 4, "optimizer": 1,
                                        "episode": 7}
    assert [s.kind for s in pb.fusion.segments] == ["row", "serial"]


def test_run_episode_equals_stepwise(host):
    (wa, pa, oa), (wb, pb, ob) = _pair(host, "mlp")
    for step in range(3):
        for wl, prog in ((wa, pa), (wb, pb)):
            wl.record(step)
            for v in wl.inputs.values():
                prog.set_input(v.id, wl.tape.value(v))
        pa.forward()
        pa.backward()
        pa.step(oa)
        pb.run_episode(ob)
    for i in pa.param_ids():
        assert bits_equal(pa.read(i), pb.read(i))


def test_sgd_with_clip_and_l2_fused_optimizer(host):
    progs = []
    for fuse in (False, True):
        t = Tape()
        rng = np.random.default_rng(3)
        w = t.param(rng.standard_normal((5, 4)), name="W")
        b = t.param(rng.standard_normal(4), name="b")
        x = t.const(rng.standard_normal((6, 5)), name="x")
        loss = ops.mean(ops.mul(ops.tanh(ops.add(x @ w, b)), 3.0))
        prog = gpu.capture(host, t, loss)
        if fuse:
            fusion.apply(prog)
        opt = gpu.SGD(0.5, clip=0.01)
        opt.add(w, l2=0.1)
        opt.add(b)
        for _ in range(3):
            prog.run_episode(opt)
        progs.append((prog, opt))
    (pa, _), (pb, ob) = progs
    assert pb.stats["launches_optimizer"] == 2  # clip norm + one table update
    for i in pa.param_ids():
        assert bits_equal(pa.read(i), pb.read(i))


def test_a_graph_that_fuses_nothing_runs_as_before(host):
    t = Tape()
    w = t.param(np.arange(6.0).reshape(2, 3) / 7, name="W")
    y = ops.reshape(ops.exp(ops.transpose(w)), (1, 6))  # movement, a unary on its own
    loss = ops.matmul(y, t.const(np.linspace(-1, 1, 6).reshape(6, 1)))  # 1 row: not fused
    prog = gpu.capture(host, t, loss)
    before = {k: [s.launch for s in v] for k, v in prog.phases.items()}
    p = fusion.plan(prog)
    assert p.segments == []
    fusion.apply(prog, p)
    after = {k: [s.launch for s in v] for k, v in prog.phases.items()}
    assert all(len(before[k]) == len(after[k]) and all(a is b for a, b in zip(
        before[k], after[k], strict=True)) for k in before)
    assert {k: v for k, v in p.launches_after.items() if k != "optimizer" and k != "episode"} \
        == {k: v for k, v in p.launches_before.items() if k != "optimizer" and k != "episode"}
    prog.forward()
    prog.backward()
    t.backward(loss)
    assert gpu.parity.compare(t, prog).exact


def test_apply_twice_and_foreign_plans_are_refused(host):
    wl = workloads.get("mlp")
    prog = gpu.capture(host, wl.tape, wl.record(0))
    p = fusion.plan(prog)
    fusion.apply(prog, p)
    with pytest.raises(fusion.FusionError, match="already fused"):
        fusion.apply(prog)
    with pytest.raises(fusion.FusionError, match="already fused"):
        fusion.plan(prog)
    other = workloads.get("transformer")
    prog2 = gpu.capture(host, other.tape, other.record(0))
    with pytest.raises(fusion.FusionError, match="made for 23 nodes"):
        fusion.apply(prog2, p)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_fused_equals_unfused_on_cuda(name):
    """The twin of the host tests on a real device (graph replay, NVRTC --fmad=false)."""
    from tapescope.gpu.cuda import cuda_unavailable_reason

    why = cuda_unavailable_reason()
    if why is not None:
        pytest.skip(f"no CUDA device: {why}")
    dev = gpu.open_device("cuda")
    (wa, pa, oa), (wb, pb, ob) = _pair(dev, name)
    for step in range(5):
        for wl, prog, opt in ((wa, pa, oa), (wb, pb, ob)):
            wl.record(step)
            for v in wl.inputs.values():
                prog.set_input(v.id, wl.tape.value(v))
            prog.run_episode(opt)
        assert diff_nodes(pa, pb) == [], f"step {step}"


def test_fused_episode_through_the_cuda_path(monkeypatch, tmp_path_factory):
    """The fused program on the cuda backend's plumbing (CuPy stand-in): one graph per
    episode holding the fused kernels and the one-launch optimizer, parameters == the tape."""
    from tests.gpu import fake_cupy

    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(fake_cupy.session_cache(tmp_path_factory)))
    fake_cupy.install(monkeypatch)
    dev = gpu.open_device("cuda")
    wl = workloads.get("mlp")
    prog = fusion.capture(dev, wl.tape, wl.record(0))
    opt = gpu.from_core(wl.make_optimizer())
    core_opt = wl.make_optimizer()
    for s in range(3):
        wl.tape.backward(wl.record(s))
        core_opt.step()
        prog.set_input(wl.inputs["x"].id, wl.tape.value(wl.inputs["x"]))
        prog.run_episode(opt)
    assert len(prog._graph[1].calls) == prog.stats["launches_per_episode"] == 7
    for i in prog.param_ids():
        assert bits_equal(prog.read(i), wl.tape.value(i))
