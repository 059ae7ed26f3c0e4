"""core.step_record: the columns hold exactly what the per-node diffs held, and the rules on
them (first divergence, worst ulp, roots) are core.parity's, checked against the dict forms."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tapescope.core.parity import (
    NodeParity,
    ParityReport,
    compare_arrays,
    entry_differs,
    entry_worst,
)
from tapescope.core.step_record import (
    F_G_NAN,
    F_G_ONESIDED,
    F_V_NAN,
    F_V_ONESIDED,
    check,
    entries,
    exact,
    first_divergence,
    node_parity,
    pack,
    record_of,
    unpack,
    worst,
)


class _N:
    def __init__(self, i: int, inputs=()):
        self.id, self.op, self.name, self.inputs = i, ("mul", "exp")[i % 2], f"n{i}", inputs


def _diffs(seed: int, n: int = 60) -> list[NodeParity]:
    rng = np.random.default_rng(seed)
    out = []
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-308, 5e-324])
    for i in range(n):
        dt = (np.float64, np.float32)[i % 2]
        a = rng.standard_normal(int(rng.integers(1, 9))).astype(dt)
        b = a.copy()
        if rng.random() < 0.5:  # a few ulps, a NaN, an inf, a signed zero here and there
            k = rng.integers(0, a.size)
            b[k] = np.nextafter(b[k], dt(np.inf)) if rng.random() < 0.6 else dt(
                rng.choice(specials))
        g = None
        if i % 3:
            g = compare_arrays(b, a[::-1].copy() if rng.random() < 0.3 else b)
        out.append(NodeParity(i, ("mul", "exp")[i % 2], f"n{i}", compare_arrays(a, b), g))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_record_is_the_diffs_and_its_rules_are_core_parity(seed):
    nodes = _diffs(seed)
    rep = ParityReport.of(nodes)
    rec = record_of(nodes)
    labels = [_N(i) for i in range(len(nodes))]
    want = [n.to_json() for n in nodes]
    assert json.dumps(entries(rec, labels)) == json.dumps(want)  # every field, every type
    assert node_parity(rec, labels) == list(nodes)
    assert first_divergence(rec) == rep.first_divergence and exact(rec) == rep.exact
    assert worst(rec).tolist() == [entry_worst(e) for e in want]
    for k, e in enumerate(want):  # the NaN / one-sided bits from the diffs' own fields
        f = int(rec["flags"][k])
        for side, one, nan in (("value", F_V_ONESIDED, F_V_NAN), ("grad", F_G_ONESIDED,
                                                                 F_G_NAN)):
            d = e[side]
            assert bool(f & nan) == bool(d and d["n_diff"] and d["n_nan"])
            assert bool(f & one) == bool(d and d["n_diff"] and (
                d["n_nan"] or np.isinf(d["max_abs"])))
    assert any(entry_differs(e) for e in want) and not all(entry_differs(e) for e in want)
    # packed and back: the same bytes, and what a comparison makes passes the check
    assert unpack(pack(rec), len(rec)).tobytes() == rec.tobytes()
    check(rec, [n.value.n for n in nodes], [n.grad is not None for n in nodes])


def test_check_names_the_row_and_the_field():
    nodes = _diffs(0, 8)
    sizes, grads = [n.value.n for n in nodes], [n.grad is not None for n in nodes]
    for field, value, says in (("v_diff", -1, "v_diff out of 0..n"),
                               ("v_n", 10**6, "value n is not"), ("g_n", 3, "grad n is not"),
                               ("v_first", 0, "v_first where nothing differs"),
                               ("v_rel", -2.0, "v_abs or v_rel < 0"),
                               ("flags", 255, "unknown flag bits")):
        rec = record_of(nodes)
        k = next(k for k in range(len(rec)) if rec["v_diff"][k] == 0 and grads[k])
        rec[field][k] = value
        with pytest.raises(ValueError, match=f"node #{k}: {says}"):
            check(rec, sizes, grads)
    with pytest.raises(ValueError, match="rows for"):
        check(record_of(nodes)[:-1], sizes, grads)
