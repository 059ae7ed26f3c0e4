"""Pairs of runs of one episode (no Qt): what differs, where drift starts, which dtype counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tapescope.app.runs import PairRunner, SessionConfig, StepError, roots
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.parity import compare_arrays

BRANCHES = str(Path(__file__).parent / "data" / "branches.py")


def descendants(nodes, start: set[int]) -> set[int]:
    out = set(start)
    for n in nodes:
        if any(i in out for i in n.inputs):
            out.add(n.id)
    return out


@pytest.mark.parametrize("compare", ["cpu-platform", "cpu-device"])
def test_platform_math_drift_starts_exactly_at_transcendental_nodes(compare):
    r = PairRunner(SessionConfig(workload=BRANCHES, compare=compare, math="platform",
                                 device="host"))
    res = r.step()
    ops = {n.id: n.op for n in r.nodes}
    trans = {i for i, op in ops.items() if REGISTRY[op].transcendental}
    differ = {e["id"] for e in res.nodes if e["value"]["n_diff"]}
    # the first divergences (differing values whose inputs all agree) are exactly the
    # transcendental nodes: here both independent branches, exp and tanh
    assert set(res.roots) == trans == {i for i in differ if ops[i] in ("exp", "tanh")}
    assert res.first == {"node": min(trans), "op": ops[min(trans)], "which": "value"}
    # everything else that differs is downstream of them; the relu branch stays bit-exact
    assert differ <= descendants(r.nodes, trans)
    relu = next(i for i, op in ops.items() if op == "relu")
    assert relu not in differ


def test_refmath_pairs_are_bit_identical_and_platform_transformer_roots_are_transcendental():
    exact = PairRunner(SessionConfig(workload="transformer", compare="cpu-device",
                                     device="host"))
    assert all(exact.step().exact for _ in range(2))
    r = PairRunner(SessionConfig(workload="transformer", compare="cpu-platform"))
    res = r.step()
    assert res.roots and all(REGISTRY[r.nodes[i].op].transcendental for i in res.roots)


def test_float32_device_against_float64_reference_counts_ulp_in_float32():
    r = PairRunner(SessionConfig(workload="mlp", compare="f64-device", dtype="float32",
                                 device="host"))
    assert r.ref_spec.dtype == "float64" and r.cand_spec.dtype == "float32"
    res = r.step()
    assert not res.exact
    # recompute one node by hand: the float64 reference rounded to float32, then core.parity
    e = next(e for e in res.nodes if e["op"] == "matmul" and e["value"]["n_diff"])
    ref = r.ref.array(e["id"], "value").astype(np.float32)
    dev = r.cand.prog.read(e["id"])
    assert compare_arrays(ref, dev).to_json() == e["value"]
    assert e["value"]["max_ulp"] < 2 ** 10  # float32 ulps: a float64 count would be ~2**29


def test_unfused_vs_fused_compares_two_device_runs():
    r = PairRunner(SessionConfig(workload="transformer", compare="unfused-fused",
                                 device="host"))
    assert r.plan is not None and r.plan.segments
    res = r.step()
    assert res.exact, res.first
    assert len(res.nodes) == len(r.nodes)


def test_roots_rule():
    class N:
        def __init__(self, i, inputs):
            self.id, self.inputs = i, inputs

    nodes = (N(0, ()), N(1, (0,)), N(2, (1,)), N(3, (0,)))
    par = [{"id": i, "value": {"n_diff": int(i in (1, 2, 3))}} for i in range(4)]
    assert roots(nodes, par) == [1, 3]


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="compare must be one of"):
        SessionConfig(compare="gpu-gpu")
    with pytest.raises(ValueError, match="dtype"):
        SessionConfig(dtype="float8")


RUNS_DRY = """
import numpy as np

from tapescope.core import ops
from tapescope.core.workloads import Workload


class RunsDry(Workload):
    name = "runs-dry"

    def build(self):
        self.w = self.tape.param(self.init(4, 3), name="w")

    def batch(self, step):
        if step >= 3:  # steps count from 1, in batch() as in every message: the third fails
            raise KeyError("batch")
        return {"x": np.ones((2, 4))}

    def episode(self, data):
        return ops.mean(data["x"] @ self.w, name="loss")
"""


def test_steps_are_numbered_from_1_and_a_failing_step_names_itself(tmp_path):
    wl = tmp_path / "runs_dry.py"
    wl.write_text(RUNS_DRY)
    r = PairRunner(SessionConfig(workload=str(wl), device="host"))
    assert [r.step().step for _ in range(2)] == [1, 2]
    assert r.arrays(0)["step"] == 2  # what the last step left, by the same number
    with pytest.raises(StepError, match=r"^step 3: KeyError: 'batch'$") as e:
        r.step()
    assert e.value.step == 3 and isinstance(e.value.__cause__, KeyError)


def test_compare_params_covers_the_last_update():
    r = PairRunner(SessionConfig(workload=BRANCHES, device="host", math="platform"))
    r.step()
    rep = r.compare_params()
    params = [n.id for n in r.nodes if n.op == "param"]
    assert [n.id for n in rep.nodes] == params and all(n.grad is None for n in rep.nodes)
    for n in rep.nodes:  # the values after the update, as both runs hold them now
        d = compare_arrays(r.ref.array(n.id, "value"), r.cand.array(n.id, "value"))
        assert (n.value.n_diff, n.value.max_ulp) == (d.n_diff, d.max_ulp)
    # platform exp/tanh in the candidate: its gradients, and so its updated weights, differ
    assert not rep.exact and rep.first_divergence == (params[0], "value")
