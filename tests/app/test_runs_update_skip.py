"""A pair's update check on the reference's own arrays (issue 29, target 2; no Qt).

``StepProbe`` compares the candidate's update inputs with the numpy reference's before the
update (``core.provenance.same_inputs``) and hands provenance the reference's after-update
arrays where they match: no rerun of the reference optimizer. Planted faults in what the
device's optimizer reports show each verdict is the one the rerun gives.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapescope.app.run_provenance as rp
import tapescope.core.provenance as cp
from tapescope.app.runs import PairRunner, SessionConfig


@pytest.fixture
def reruns(monkeypatch):
    """How many parameters each step's update check reran the reference optimizer on."""
    seen: list[int] = []
    real = cp.reference_update

    def counted(opt):
        seen.append(len(opt.params))
        return real(opt)

    monkeypatch.setattr(cp, "reference_update", counted)
    return seen


def _pair(**kw) -> PairRunner:
    return PairRunner(SessionConfig(workload="mlp", device="host", dtype="float32"), **kw)


def _flip0(a: np.ndarray) -> np.ndarray:
    out = np.array(a, copy=True)
    out.reshape(-1).view(np.uint32)[0] ^= 1
    return out


def _plant(monkeypatch, when: bool, node_of: list) -> None:
    """Element 0 of the first stepped parameter's m, as the device's optimizer reports it
    after its update (``when``) or before: after, one bit off; before, moved enough that the
    update's outputs move (the device's memory is untouched)."""
    real = rp.device_optimizer_arrays  # what DeviceRun's optimizer_arrays / _views read

    def planted(dopt, prog, after: bool, views: bool = False):
        info = real(dopt, prog, after, views)
        if info is not None and after == when and info["params"]:
            i, l2, m, v = info["params"][0]
            if m is not None:
                if after:
                    m = _flip0(m)
                else:
                    m = np.array(m, copy=True)
                    m.reshape(-1)[0] = m.reshape(-1)[0] * 1.5 + 1.0
                info["params"][0] = (i, l2, m, v)
                node_of.append(i)
        return info

    monkeypatch.setattr(rp, "device_optimizer_arrays", planted)


def test_a_pair_keeping_no_state_reads_the_moments_after_the_update_in_place(monkeypatch):
    r = _pair()
    r.step()
    seen = []
    real = rp.device_optimizer_arrays

    def spy(dopt, prog, after, views=False):
        seen.append((after, views))
        return real(dopt, prog, after, views)

    monkeypatch.setattr(rp, "device_optimizer_arrays", spy)
    assert r.step().introduced == []
    assert seen == [(False, True), (True, True)]
    kept = _pair(keep_states=1)
    kept.step()
    del seen[:]
    kept.step()
    assert seen == [(False, False), (True, False)]  # a kept state owns its arrays


def test_moments_read_in_place_are_copied_before_the_update_where_a_rerun_needs_them(
        reruns):
    """The device's own m differs from the reference's (planted in its memory between two
    steps): that parameter is rerun on the m the device updated from, so the update is
    inherited, not introduced; read in place and not copied, the rerun would see the m the
    update left."""
    r = _pair()
    r.step()
    dopt = r.cand.dopt
    i = dopt.params[0][0]
    bm = dopt.moments[i][0]
    m = bm.download()
    m[0] = m[0] * 1.5 + 1.0
    bm.upload(m)
    del reruns[:]
    res = r.step()
    assert reruns == [1]
    assert [e for e in res.introduced if e["which"] == "update"] == []


def test_an_exact_pair_judges_its_updates_without_a_rerun(reruns):
    r = _pair(keep_states=1)
    r.step()  # the first update: the device's zero moments against the reference's none
    del reruns[:]
    res = r.step()
    assert res.exact and res.provenance and res.introduced == []
    assert reruns == [0]  # every parameter judged on the reference's own after arrays
    kept = r.states[-1]
    # the reference's views are gone from what outlives the step (its next update rewrites
    # them): judged again, the kept state reruns the update, with the same verdict
    assert kept.update.reference is None
    assert cp.provenance(kept).introduced == []
    assert reruns == [0, len(kept.update.params)]


def test_a_planted_difference_in_the_update_output_is_introduced_with_the_skip(monkeypatch,
                                                                              reruns):
    r = _pair()
    r.step()
    node: list = []
    _plant(monkeypatch, when=True, node_of=node)
    del reruns[:]
    res = r.step()
    assert reruns == [0]  # the inputs were the reference's: no rerun
    assert [(e["node"], e["which"], e["part"]) for e in res.introduced] == [
        (node[-1], "update", "m")]


def test_a_planted_difference_in_an_input_is_judged_by_the_rerun(monkeypatch, reruns):
    r = _pair()
    r.step()
    node: list = []
    _plant(monkeypatch, when=False, node_of=node)
    del reruns[:]
    res = r.step()
    assert reruns == [1]  # that parameter only (no clip): the others were the reference's
    # the device updated from its true m: from the planted m the rerun's w (judged first)
    # differs from what the device left
    got = [(e["node"], e["which"], e["part"]) for e in res.introduced]
    assert got == [(node[-1], "update", "param")]


def test_a_reference_that_is_not_the_numpy_one_reruns_every_update(reruns):
    r = PairRunner(SessionConfig(workload="mlp", device="host", dtype="float32",
                                 compare="f64-device"))
    assert r.probe.ref is None  # float64 reference, float32 candidate: no skip hints
    r.step()
    del reruns[:]
    r.step()
    assert reruns and reruns[0] > 0
