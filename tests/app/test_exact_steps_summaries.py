"""Exact steps move summaries only (issue 47 item 2; no Qt).

On a bit-identical step the pair judges every array where the data is (the device's compare,
and ``same_now`` for the parameters after the update, both through the diff kernel or in
place) and reads a candidate array proven equal from the reference's host copy: only
summaries and the loss cross device → host. A step that is not exact still brings what
provenance needs, and every result (records, provenance, kept states, the Inspector's arrays)
is bit for bit the one the download-everything path gives.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.app.run_provenance import Inject
from tapescope.app.runs import PairRunner, SessionConfig

SUMMARY = 8 * 8  # one diff summary: 6 int64 + 2 float64 (gpu/diff.py)


def _device(cuda_like: bool):
    dev = gpu.open_device("host")
    if cuda_like:  # as on cuda: the device's memory is not the host's (every read a copy)
        dev.host_view = lambda buf: None
    return dev


def _runner(workload: str, cuda_like: bool = False, **kw) -> PairRunner:
    return PairRunner(SessionConfig(workload=workload, device="host"),
                      device=_device(cuda_like), **kw)


def _sizes(r: PairRunner) -> tuple[int, int, int, int]:
    """(parameter bytes, parameters, nodes, loss bytes)."""
    params = [n for n in r.nodes if n.op == "param"]
    return (sum(r.ref.tape.value(n.id).nbytes for n in params), len(params), len(r.nodes),
            r.ref.tape.value(r.ref.loss_id).nbytes)


def _moved(r: PairRunner):
    b0 = r.stats()["bytes_to_host"]
    res = r.step()
    return res, r.stats()["bytes_to_host"] - b0


@pytest.mark.parametrize("workload", ["mlp", "transformer"])
def test_an_exact_step_moves_the_loss_only_on_the_host_backend(workload):
    r = _runner(workload)
    pbytes, _, _, loss = _sizes(r)
    r.step()  # step 1: Adam's moments are made by its first update
    for _ in range(2):
        res, moved = _moved(r)
        assert res.exact and res.provenance and res.introduced == []
        # the host device's equal bits are judged in place: no summary crosses either
        assert moved == loss < pbytes
    # and since the capture: the losses only (the parameters as uploaded judged in place too)
    assert r.stats()["bytes_to_host"] == 3 * loss


@pytest.mark.parametrize("workload", ["mlp", "transformer"])
def test_an_exact_step_moves_summaries_and_the_loss_where_memory_is_not_the_hosts(workload):
    r = _runner(workload, cuda_like=True)
    pbytes, n_params, n_nodes, loss = _sizes(r)
    # at most: a summary per value and gradient (the compare), per parameter after the
    # update, per moment before and after it (Adam: m, v), and the loss itself
    bound = (2 * n_nodes + n_params + 4 * n_params) * SUMMARY + loss
    r.step()
    for _ in range(2):
        res, moved = _moved(r)
        assert res.exact and res.provenance and res.introduced == []
        assert loss < moved <= bound < pbytes, (moved, bound, pbytes)


def _baseline(r: PairRunner) -> PairRunner:
    """``r`` made to fetch every candidate array from the device (the path before issue 47
    item 2): its compare's equal set, the after-update check and the moments' host copies
    are switched off (the compare itself, and so the records, unchanged)."""
    r.cand.equal_bits = lambda ref: frozenset()
    r.cand.same_now = lambda arrays: set()
    r.cand._like = lambda after: {}
    return r


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("cuda_like", [False, True])
def test_a_divergent_step_brings_what_provenance_needs_and_the_same_results(cuda_like):
    node = 5  # a forward node of the mlp, flipped at step 2: steps 2 and 3 diverge
    inject = Inject(node, "value", 2)
    new = _runner("mlp", cuda_like, inject=inject, keep_states=1)
    old = _baseline(_runner("mlp", cuda_like, inject=inject, keep_states=1))
    pbytes = _sizes(new)[0]
    for step in (1, 2, 3):
        a, moved_new = _moved(new)
        b, moved_old = _moved(old)
        assert a.exact == (step == 1) and b.exact == a.exact
        assert a.record.tobytes() == b.record.tobytes()
        assert a.introduced == b.introduced and a.kernels == b.kernels
        assert (a.loss_ref, a.loss_cand) == (b.loss_ref, b.loss_cand)
        if step == 2:
            assert [(e["node"], e["which"]) for e in a.introduced] == [(node, "value")]
        if step == 1:  # (a kept state's moments on a host device: downloaded copies)
            assert moved_new < moved_old and (moved_new < pbytes or not cuda_like)
        else:  # not exact: what differs comes from the device (the rest does not cross)
            assert pbytes < moved_new < moved_old
            store = new.store
            differ = a.record["id"][a.record["v_diff"] > 0]
            assert len(differ) > 0
            for i in differ:  # fetched from the candidate, not the reference's copy
                got = store.cache[("cand", int(i), "value", False)]
                assert got is not store.cache.get(("ref", int(i), "value", False))
        # the kept state (time travel) and the Inspector's arrays: the same bits
        sa, sb = new.states[-1], old.states[-1]
        for n in new.nodes:
            assert _same(sa.value(n.id), sb.value(n.id)), (step, n.id)
            assert _same(sa.grad(n.id), sb.grad(n.id)), (step, n.id)
            got, want = new.arrays(n.id), old.arrays(n.id)
            for side in ("ref", "cand"):
                for w in ("value", "grad"):
                    assert _same(got[side][w], want[side][w]), (step, n.id, side, w)
        pa, pb = new.compare_params(), old.compare_params()
        assert [p.to_json() for p in pa.nodes] == [p.to_json() for p in pb.nodes]


def test_a_moment_the_device_does_not_hold_is_downloaded_not_copied():
    """The host copy of a moment stands in only where the device holds exactly its bits: a
    moment moved on the device (one bit) is what provenance reads, and the update rerun on
    it reproduces the device's (a copy of the reference's would call it introduced)."""
    r = _runner("mlp", cuda_like=True, keep_states=1)
    r.step()
    i = next(iter(r.cand.dopt.moments))
    m = r.cand.dopt.moments[i][0]
    a = m.download()
    a.view(np.uint64)[0] ^= 1
    m.upload(a)
    res = r.step()
    upd = {p.node: p for p in r.states[-1].update.params}
    assert upd[i].m.reshape(-1).tobytes() == a.tobytes()  # the device's bits, downloaded
    assert res.introduced == [] and r.step().introduced == []  # inherited only


@pytest.mark.parametrize("cuda_like", [False, True])
def test_the_final_parameter_comparison_moves_summaries_only(cuda_like):
    """``compare_params`` (what ``parity`` checks after the last update) judges the trained
    parameters on the device, with provenance off too: the same verdicts as downloading."""
    new = _runner("mlp", cuda_like, provenance="off")
    old = _baseline(_runner("mlp", cuda_like, provenance="off"))
    for r in (new, old):
        for _ in range(2):
            r.step()
    b0, o0 = new.stats()["bytes_to_host"], old.stats()["bytes_to_host"]
    got, want = new.compare_params(), old.compare_params()
    moved, pbytes, n_params = new.stats()["bytes_to_host"] - b0, *_sizes(new)[:2]
    assert old.stats()["bytes_to_host"] - o0 == pbytes  # the download path: every parameter
    assert moved == (n_params * SUMMARY if cuda_like else 0)
    assert got.exact and [p.to_json() for p in got.nodes] == [p.to_json() for p in want.nodes]
