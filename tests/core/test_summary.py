"""core.summary owns a node's summary (issue 47 item 1): one worst-ulp rule with one NaN rule,
one merge over steps, one JSON form; every columnar and dict form of the worst is that rule."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tapescope.core import summary
from tapescope.core.parity import NodeParity, TensorDiff
from tapescope.core.step_record import entries, record_of
from tapescope.core.summary import (
    NODE_KEYS,
    SIDE_KEYS,
    entries_worst,
    entry_worst,
    fold,
    merge_side,
    node_summary,
    severity,
    worst,
    worst_of,
)


def _w(v, g=(0, 0.0, 0)):
    """worst of one node: (n_diff, max_ulp, n_nan) per side."""
    return float(worst(*(np.array([x]) for x in (*v, *g)))[0])


def test_the_worst_rule_on_its_edges():
    assert _w((0, 0.0, 0)) == 0.0  # exact
    assert _w((0, 99.0, 0)) == 0.0  # a side that does not differ counts 0, whatever its ulp
    assert _w((1, 0.0, 0)) == 1.0  # a signed zero: differs, no ulp distance, counts 1
    assert _w((1, -0.0, 0)) == 1.0
    assert math.copysign(1.0, _w((0, -0.0, 0))) == 1.0  # exact is +0, never -0
    assert _w((3, 7.0, 0), (2, 9.0, 0)) == 9.0  # the larger side
    assert _w((3, math.inf, 0)) == math.inf
    # the NaN rule: a NaN max_ulp is an unknown distance: the side counts 1 (np.fmax), never
    # NaN and never hides the other side's number
    assert _w((2, math.nan, 0)) == 1.0
    assert _w((2, math.nan, 0), (1, 5.0, 0)) == 5.0
    # a NaN against a number wins over any ulp, on either side, only where that side differs
    assert _w((3, 1e9, 0), (1, 0.0, 1)) == -1.0
    assert _w((1, 0.0, 1), (3, 1e9, 0)) == -1.0
    assert _w((0, 0.0, 1)) == 0.0
    # no gradient entry: a step record's g_diff -1
    assert _w((2, 4.0, 0), (-1, 0.0, 0)) == 4.0
    empty = worst(*(np.zeros(0),) * 6)
    assert empty.shape == (0,) and empty.dtype == np.float64


def test_entry_worst_reads_dicts_with_missing_and_none_fields():
    assert entry_worst({"value": None, "grad": None}) == 0.0
    assert entry_worst({"value": {"n_diff": 2, "max_ulp": None}}) == 1.0
    assert entry_worst({"value": {"n_diff": 2, "max_ulp": 6}, "grad": None}) == 6.0
    assert entry_worst({"value": {"n_diff": 2, "max_ulp": 6, "n_nan": 1}}) == -1.0
    assert entries_worst([]).shape == (0,)


def _random_nodes(rng, n):
    out = []
    for i in range(n):
        sides = []
        for _ in range(2):
            if rng.random() < 0.2:
                sides.append(None)
                continue
            size = int(rng.integers(1, 50))
            nd = int(rng.integers(0, size + 1)) if rng.random() < 0.6 else 0
            nan = int(rng.integers(0, nd + 1)) if nd and rng.random() < 0.2 else 0
            ulp = int(rng.choice([0, 1, 3, 1 << 20, (1 << 62) + 1])) if nd else 0
            sides.append(TensorDiff(size, nd, ulp, float(ulp), 0.5, 0 if nd else None, nan,
                                    int(nd and rng.random() < 0.3), int(rng.integers(0, 2))))
        if sides[0] is None:
            sides[0] = TensorDiff(4, 0, 0, 0.0, 0.0, None)
        out.append(NodeParity(i, "add", f"n{i}", sides[0], sides[1]))
    return out


def test_every_form_of_the_worst_is_the_one_rule():
    """The step record's columns, the export dicts and the live history's compact columns (NaN
    as a flag bit) give the same worst for every node: one rule, three inputs."""
    from tapescope.app.step_history import StepHistory, compact
    from tapescope.core.step_record import worst as record_worst

    rng = np.random.default_rng(47)
    nodes = _random_nodes(rng, 300)
    rec = record_of(nodes)
    want = np.array([entry_worst(n.to_json()) for n in nodes])
    assert (want < 0).any() and (want > 2.0 ** 40).any() and (want == 1).any()  # every case
    assert np.array_equal(record_worst(rec), want)
    assert np.array_equal(entries_worst(entries(rec, None)), want)
    h = StepHistory()
    h.add(SimpleNamespace(record=rec, step=1, first=None, loss_ref=0.0, loss_cand=0.0,
                          exact=False, provenance=False, kernels=[], produced=[],
                          introduced=[], derived={"history": compact(rec)}))
    assert np.array_equal(h.worst_ulp(1), want)
    assert np.array_equal(h.overlay(1)[0], want)


def test_worst_of_and_severity_put_a_nan_mismatch_first():
    assert worst_of([]) == 0.0
    assert worst_of([0.0, 3.0, 2.0]) == 3.0
    assert worst_of([5.0, -1.0, 1e9]) == -1.0
    assert worst_of(np.array([math.nan, 4.0])) == 4.0  # the NaN rule: a NaN is skipped
    # per column (the --against table: A, B and A-B of each node)
    cols = worst_of(np.array([[0.0, 2.0, 7.0], [-1.0, 9.0, 0.0], [4.0, 1.0, math.nan]]), axis=0)
    assert cols.tolist() == [-1.0, 9.0, 7.0]
    assert worst_of(np.zeros((3, 0)), axis=0).shape == (0,)
    keys = sorted([0.0, 1e6, -1.0, 3.0], key=severity)
    assert keys == [-1.0, 1e6, 3.0, 0.0]


def test_merge_keeps_the_worst_of_every_count_and_the_latest_n():
    a = {"n": 8, "n_diff": 2, "max_ulp": 5, "max_abs": 0.5, "n_nan": 0, "nan_bits_differ": 1,
         "max_rel": 3.0}
    b = {"n": 9, "n_diff": 1, "max_ulp": 7, "max_abs": 0.25, "n_nan": 2, "nan_bits_differ": 0}
    m = merge_side(merge_side(None, a), b)
    assert m == {"n": 9, "n_diff": 2, "max_ulp": 7, "max_abs": 0.5, "n_nan": 2,
                 "nan_bits_differ": 1}
    assert tuple(m) == SIDE_KEYS and isinstance(m["max_ulp"], int)
    # the NaN rule, in either order: the number is kept
    nan = {**b, "max_abs": math.nan}
    assert merge_side(merge_side(None, a), nan)["max_abs"] == 0.5
    assert merge_side(merge_side(None, nan), a)["max_abs"] == 0.5
    # a side without the NaN fields (an older file) reads them as 0
    assert merge_side(None, {"n": 1, "n_diff": 0, "max_ulp": 0, "max_abs": 0.0})["n_nan"] == 0


def test_fold_over_steps_and_the_json_form():
    def entry(step_ulp, grad=True):
        d = {"n": 4, "n_diff": int(step_ulp > 0), "max_ulp": step_ulp, "max_abs": 0.0,
             "n_nan": 0, "nan_bits_differ": 0}
        return {"id": 3, "op": "mul", "name": "h", "value": d, "grad": dict(d) if grad else None}

    per: dict[int, dict] = {}
    for step, ulp in ((1, 0), (2, 0), (3, 6), (4, 2)):
        fold(per, [entry(ulp)], step)
    e = per[3]
    assert e["first_step_differing"] == 3  # steps count from 1; the first that differs
    assert e["value"]["max_ulp"] == 6 and e["value"]["n_diff"] == 1
    node = SimpleNamespace(id=3, op="mul", name="h", shape=(2, 2), inputs=(1, 2))
    js = node_summary(node, e["value"], e["grad"], e["first_step_differing"])
    assert tuple(js) == NODE_KEYS and tuple(js["value"]) == SIDE_KEYS
    assert js["shape"] == [2, 2] and js["inputs"] == [1, 2] and js["grad"]["max_ulp"] == 6
    assert node_summary({"id": 3, "op": "mul", "name": "h", "shape": [2, 2], "inputs": [1, 2]},
                        e["value"], e["grad"], 3) == js
    assert node_summary(node, e["value"], None, None)["grad"] is None


@pytest.mark.parametrize("name", ["entry_worst", "entry_differs"])
def test_core_parity_reexports_the_one_definition(name):
    from tapescope.core import parity

    assert getattr(parity, name) is getattr(summary, name)
