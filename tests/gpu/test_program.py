"""The replay engine: capture errors, inputs and reads, device optimizers, episodes, stats."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops, optim
from tapescope.core.parity import compare_arrays
from tapescope.gpu.library import KERNELS


def _net(tape: Tape, rng, with_unused: bool = False):
    w1 = tape.param(rng.standard_normal((4, 6)) * 0.5, name="W1")
    b1 = tape.param(np.zeros(6), name="b1")
    w2 = tape.param(rng.standard_normal((6, 3)) * 0.5, name="W2")
    unused = tape.param(np.ones(3), name="unused") if with_unused else None
    mark = tape.mark()

    def episode(x, t):
        xv = tape.const(x, name="x")
        tv = tape.const(t, name="t")
        h = ops.tanh(ops.add_bias(xv @ w1, b1))
        return ops.mse(h @ w2, tv, name="loss"), xv, tv

    return mark, episode, unused


def _bits_equal(a, b):
    return compare_arrays(np.asarray(a), np.asarray(b)).exact


def test_capture_errors_name_the_node(host, monkeypatch):
    tape = Tape()
    x = tape.param(np.ones((2, 3)))
    y = ops.relu(x)
    with pytest.raises(gpu.CaptureError, match="must be a scalar"):
        gpu.capture(host, tape, y)
    loss = ops.sum(y)
    monkeypatch.delitem(KERNELS, "relu")
    with pytest.raises(gpu.CaptureError, match=r"node 1 relu .*no device kernel"):
        gpu.capture(host, tape, loss)
    monkeypatch.undo()
    ops.add(x, tape.const(np.ones((4, 4))))  # poisons the tape
    with pytest.raises(gpu.CaptureError, match="poisoned.*add"):
        gpu.capture(host, tape, loss)
    other = Tape()
    with pytest.raises(gpu.CaptureError, match="another tape"):
        gpu.capture(host, other, loss)


def test_inputs_reads_and_errors(host):
    rng = np.random.default_rng(0)
    tape = Tape()
    _, episode, unused = _net(tape, rng, with_unused=True)
    loss, xv, tv = episode(rng.standard_normal((5, 4)), rng.standard_normal((5, 3)))
    prog = gpu.capture(host, tape, loss)
    with pytest.raises(ValueError, match=r"shape \(2, 4\) given, \(5, 4\) captured"):
        prog.set_input(xv, np.zeros((2, 4)))
    with pytest.raises(ValueError, match="only leaves"):
        prog.set_input(loss, np.zeros(()))
    with pytest.raises(KeyError, match="named 'nope'"):
        prog.set_input("nope", np.zeros(1))
    prog.set_input("x", np.ones((5, 4)))  # by scoped name
    prog.forward()
    prog.backward()
    assert prog.read(unused, "grad") is None  # backward never reaches it, as on the tape
    assert prog.read(xv, "grad") is None  # consts get no gradient
    with pytest.raises(ValueError, match="which must be"):
        prog.read(loss, "both")
    # pointer tables: one address per node, 0 where there is no gradient buffer
    assert prog.value_ptrs.shape == (len(prog.nodes),) and np.all(prog.value_ptrs != 0)
    assert prog.grad_ptrs[xv.id] == 0 and prog.grad_ptrs[loss.id] != 0
    assert np.array_equal(prog.vtab.download(), prog.value_ptrs)


def test_cross_entropy_targets_checked(host):
    tape = Tape()
    logits = tape.param(np.zeros((3, 4)))
    t = tape.const(np.array([0.0, 3.0, 1.0]), name="targets")
    loss = ops.cross_entropy(logits, t)
    prog = gpu.capture(host, tape, loss)
    with pytest.raises(ValueError, match=r"integers in \[0, 4\)"):
        prog.set_input(t, np.array([0.0, 4.0, 1.0]))
    with pytest.raises(ValueError, match="integers"):
        prog.set_input(t, np.array([0.5, 1.0, 1.0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_device_optimizers_mirror_core(host, kind, dtype):
    rng = np.random.default_rng(1)
    tape = Tape(dtype)
    mark, episode, unused = _net(tape, rng, with_unused=True)
    if kind == "sgd":
        opt = optim.SGD(tape, lr=0.1, clip=0.05)  # a small clip: it engages every step
    else:
        opt = optim.Adam(tape, lr=0.05, clip=0.5)
    ps = tape.params()
    opt.add(ps[0], l2=0.01)
    opt.add(ps[1])
    opt.add(ps[2], l2=0.001)
    opt.add(unused, l2=0.1)  # never reached: skipped, not decayed
    data = [(rng.standard_normal((5, 4)), rng.standard_normal((5, 3))) for _ in range(6)]
    tape.reset_to(mark)
    prog = gpu.capture(host, tape, episode(*data[0])[0])
    dopt = gpu.from_core(opt)
    for x, t in data:
        tape.reset_to(mark)
        loss, xv, tv = episode(x, t)
        tape.backward(loss)
        opt.step()
        prog.set_input(xv, x)
        prog.set_input(tv, t)
        prog.forward()
        prog.backward()
        prog.step(dopt)
        for p in ps:
            assert _bits_equal(tape.value(p), prog.read(p)), f"{kind} param {p.name}"
    assert _bits_equal(prog.read(unused), np.ones(3, dtype))
    assert dopt.t == opt.t == 6


def test_episode_and_sync(host):
    rng = np.random.default_rng(2)
    tape = Tape()
    mark, episode, _ = _net(tape, rng)
    x, t = rng.standard_normal((5, 4)), rng.standard_normal((5, 3))
    loss, _, _ = episode(x, t)
    a = gpu.capture(host, tape, loss)
    b = gpu.capture(host, tape, loss)
    oa, ob = gpu.Adam(lr=0.01), gpu.Adam(lr=0.01)
    oa.add_all(a)
    ob.add_all(b)
    for _ in range(3):
        a.forward()
        a.backward()
        a.step(oa)
        b.run_episode(ob)  # the same launches as one list (a CUDA graph on cuda)
    for i in a.param_ids():
        assert _bits_equal(a.read(i), b.read(i))
    before = host.stats.bytes_to_host
    a.sync_params_to(tape)
    for i in a.param_ids():
        assert _bits_equal(tape.value(i), a.read(i))
    assert host.stats.bytes_to_host > before
    st = a.stats
    assert st["launches_per_episode"] == (st["launches_forward"] + st["launches_backward"]
                                          + st["launches_optimizer"])
    assert st["launches_optimizer"] == len(a.param_ids())
    assert st["launches_forward"] == sum(1 for n in a.nodes if n.op not in ("param", "const"))


def test_only_summaries_cross_to_the_host(host):
    rng = np.random.default_rng(3)
    tape = Tape()
    _, episode, _ = _net(tape, rng)
    loss, _, _ = episode(rng.standard_normal((64, 4)), rng.standard_normal((64, 3)))
    tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    gpu.parity.compare(tape, prog)  # first call sets the reference buffers up
    before = host.stats.bytes_to_host
    rep = gpu.parity.compare(tape, prog)
    moved = host.stats.bytes_to_host - before
    n_tensors = sum(1 for n in rep.nodes) + sum(1 for n in rep.nodes if n.grad is not None)
    assert rep.exact and n_tensors > 0
    assert moved == 0  # the host device's equal bits are judged in place: nothing crosses
    # a tensor that differs goes through the diff kernel: its summary crosses, nothing else
    nid = rep.nodes[-2].id
    planted = prog.values[nid].download().copy()
    planted[0] = np.nextafter(planted[0], np.inf)
    prog.values[nid].upload(planted)
    before = host.stats.bytes_to_host
    rep2 = gpu.parity.compare(tape, prog)
    assert not rep2.exact and rep2.nodes[-2].value.n_diff == 1
    assert host.stats.bytes_to_host - before == 8 * 8  # 6 int64 + 2 float64, one tensor
    js = rep.to_json()
    assert js["exact"] and js["first_divergence"] is None and len(js["nodes"]) == len(rep.nodes)
    assert js["nodes"][-1]["grad"]["n"] == 1 and js["nodes"][0]["value"]["n_diff"] == 0
    assert 'extern "C" __global__ void mm_f64' in prog.source
    assert moved < sum(n.value.n for n in rep.nodes) * 8


def test_mirror_a_core_adam_mid_training(host):
    from tapescope.core import workloads

    wl = workloads.get("mlp")
    opt = wl.make_optimizer()
    for s in range(3):  # the core optimizer already has moments and t = 3
        wl.tape.backward(wl.record(s))
        opt.step()
    prog = gpu.capture(host, wl.tape, wl.record(3))
    dopt = gpu.from_core(opt)
    for s in range(3, 6):
        wl.tape.backward(wl.record(s))
        opt.step()
        prog.set_input(wl.inputs["x"].id, wl.tape.value(wl.inputs["x"]))
        prog.run_episode(dopt)
    for i in prog.param_ids():
        assert _bits_equal(wl.tape.value(i), prog.read(i))
    # another optimizer on the same program gets its own launches (no stale replay list)
    sgd = gpu.SGD(lr=0.0)
    sgd.add_all(prog)
    before = [prog.read(i) for i in prog.param_ids()]
    prog.run_episode(sgd)
    for i, b in zip(prog.param_ids(), before, strict=True):
        assert _bits_equal(prog.read(i), b)  # lr 0: nothing moves (Adam would have)


def test_gather_indices_checked_and_read_at_run_time(host, monkeypatch):
    nn = pytest.importorskip("tapescope.core.ops.nn", reason="core/ops/nn.py is absent")
    from tapescope.core.ops import REGISTRY

    for d in nn.NN_OPS:
        monkeypatch.setitem(REGISTRY, d.name, d)
    tape = Tape()
    emb = tape.param(np.arange(12.0).reshape(4, 3))
    idx = tape.const(np.array([0.0, 3.0, 3.0]), name="ids")
    loss = ops.sum(tape.record("gather", [emb, idx], {"axis": 0}))
    prog = gpu.capture(host, tape, loss)
    with pytest.raises(ValueError, match=r"gather indices must be integers in \[-4, 4\)"):
        prog.set_input(idx, np.array([0.0, 4.0, 1.0]))
    prog.set_input(idx, np.array([1.0, -1.0, 1.0]))  # new indices, same program
    prog.forward()
    prog.backward()
    assert prog.loss() == 3.0 + 4.0 + 5.0 + 9.0 + 10.0 + 11.0 + 3.0 + 4.0 + 5.0
    np.testing.assert_array_equal(prog.read(emb, "grad"), [[0] * 3, [2] * 3, [0] * 3, [1] * 3])


def test_compare_names_the_pairs_whose_bits_are_equal_not_those_only_exact(host):
    """``compare(equal=)``: every (node, value | grad) the device holds bit for bit; a NaN of
    another payload is exact by the NaN policy and not bit-equal, a one-ulp change neither."""
    tape = Tape()
    x = tape.param(np.array([np.nan, 1.0, 2.0]), name="x")
    w = tape.param(np.array([0.5, -1.0, 3.0]), name="w")
    loss = ops.sum(ops.mul(x, w), name="loss")
    tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    every = {(n.id, "value") for n in prog.nodes} | {
        (n.id, "grad") for n in prog.nodes if tape.grad(n.id) is not None}
    rep = gpu.parity.compare(tape, prog, equal=(eq := set()))
    exact = {(n.id, k) for n in rep.nodes for k, d in (("value", n.value), ("grad", n.grad))
             if d is not None and d.exact}
    assert rep.exact and eq == exact == every
    nan2 = prog.values[x.id].download().copy()
    nan2.view(np.uint64)[0] ^= 1  # still a NaN, another payload
    prog.values[x.id].upload(nan2)
    gw = prog.grads[w.id].download().copy()
    gw[1] = np.nextafter(gw[1], np.inf)
    prog.grads[w.id].upload(gw)
    rep = gpu.parity.compare(tape, prog, equal=(eq := set()))
    assert rep.nodes[x.id].value.exact and not rep.nodes[w.id].grad.exact
    assert eq == every - {(x.id, "value"), (w.id, "grad")}
