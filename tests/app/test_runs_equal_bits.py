"""The device compare's bit-equal pairs feed the update check (issue 29, target 2; no Qt).

``DeviceRun.equal_bits(ref)``: what this step's ``gpu.parity.compare`` found bit for bit the
reference's, until the device's next launch; ``StepProbe`` hands them to
``core.provenance.same_inputs``, which then does not read those w, g a second time.
"""

from __future__ import annotations

import tapescope.app.run_provenance as rp
import tapescope.core.provenance as cp
from tapescope.app.runs import PairRunner, SessionConfig


def _pair(**kw) -> PairRunner:
    return PairRunner(SessionConfig(workload="mlp", device="host", dtype="float32"), **kw)


def test_the_compares_pairs_reach_same_inputs_and_go_stale_at_the_next_launch(monkeypatch):
    r = _pair()
    r.step()
    seen = []

    def spy(cand, ref, known=()):
        seen.append(set(known))
        return cp.same_inputs(cand, ref, known)

    monkeypatch.setattr(rp, "same_inputs", spy)
    real_update = r.cand.update
    at_update = []

    def update():
        at_update.append(set(r.cand.equal_bits(r.ref)))
        real_update()

    monkeypatch.setattr(r.cand, "update", update)
    res = r.step()
    params = [n.id for n in r.nodes if n.op == "param"]
    assert res.exact and res.introduced == []
    assert seen[0] == at_update[0] >= {(i, w) for i in params for w in ("value", "grad")}
    assert r.cand.equal_bits(r.ref) == set()  # the update launched: nothing known now
    r.cand.advance(r.step_index + 1)
    assert r.cand.equal_bits(r.ref) == set()


def test_a_reference_it_did_not_compare_against_gets_nothing():
    r = _pair()
    r.step()
    r.cand.advance(2)
    assert r.cand.compare(r.ref, r.nodes) is not None and r.cand.equal_bits(r.ref)
    assert r.cand.equal_bits(r.cand) == set()  # not the run it compared against
    assert r.cand.compare(r.cand, r.nodes) is None  # not its feed: the host compares
    assert r.cand.equal_bits(r.ref) == set()  # and that compare forgot the last one


def test_an_injected_gradient_fault_is_not_known_equal_and_reruns_that_update(monkeypatch):
    r = _pair()
    p = next(n.id for n in r.nodes if n.op == "param")
    r = _pair(inject=f"{p}:grad@2")
    reruns: list[int] = []
    real = cp.reference_update
    monkeypatch.setattr(cp, "reference_update",
                        lambda opt: reruns.append(len(opt.params)) or real(opt))
    r.step()
    del reruns[:]
    res = r.step()
    assert not res.exact and reruns == [1]  # that parameter's update reran, on its own inputs
    assert (p, "grad") in {(e["node"], e["which"]) for e in res.introduced}
    assert [e for e in res.introduced if e["which"] == "update"] == []
