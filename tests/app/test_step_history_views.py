"""What time travel shows of a step, built from its records, answers exactly as the per-node
dicts and loops it replaced (the oracles: the old ``comparison`` loop, ``core.parity``'s
``entry_worst``/``entry_differs`` and ``app.session.parity_colors``)."""

from __future__ import annotations

import numpy as np

from tapescope.app.runs import StepResult
from tapescope.app.session import parity_colors, worst_colors
from tapescope.app.step_history import (
    F_G_INTRO,
    F_G_NAN,
    F_G_ONESIDED,
    F_U_INTRO,
    F_V_INTRO,
    F_V_NAN,
    F_V_ONESIDED,
    StepHistory,
)
from tapescope.core.parity import entry_differs, entry_worst
from tapescope.core.step_record import STEP_RECORD


def oracle_comparison(h: StepHistory, step: int) -> list[dict]:
    """The record-tuple loop ``StepHistory.comparison`` was."""
    r = h.record(step)
    out = []
    for (nid, op, name), e in zip(h.nodes, r.tolist(), strict=True):
        v_n, v_ulp, g_n, g_ulp, nb, flags = e
        out.append({"id": nid, "op": op, "name": name,
                    "value": {"n_diff": v_n, "max_ulp": v_ulp,
                              "n_nan": int(bool(flags & F_V_NAN)), "nan_bits_differ": nb},
                    "grad": None if g_n < 0 else {"n_diff": g_n, "max_ulp": g_ulp,
                                                  "n_nan": int(bool(flags & F_G_NAN))},
                    "introduced": {"value": bool(flags & F_V_INTRO),
                                   "grad": bool(flags & F_G_INTRO),
                                   "update": bool(flags & F_U_INTRO)},
                    "alarm": bool(flags & (F_V_ONESIDED | F_G_ONESIDED))})
    return out


class _Node:
    def __init__(self, i: int) -> None:
        self.id, self.op, self.name = i, ("matmul", "add", "param")[i % 3], f"b{i // 7}/x{i}"


def _history(seed: int, n: int = 300, steps: int = 4) -> StepHistory:
    rng = np.random.default_rng(seed)
    h = StepHistory([_Node(i) for i in range(n)])
    for step in range(1, steps + 1):
        v = rng.integers(0, 3, n) * (rng.random(n) < 0.3)
        g = np.where(rng.random(n) < 0.2, -1, rng.integers(0, 3, n) * (rng.random(n) < 0.3))
        # max ulp is a count (uint64): 0 with a signed zero, up to across the whole line
        vu = np.where(v > 0, rng.choice(np.array([0, 1, 3, 2**30, 2**53 + 1, 2**64 - 1],
                                                 dtype=np.uint64), n),
                      rng.choice(np.array([0, 0, 2], dtype=np.uint64), n))  # (a 0 count: any)
        gu = np.where(g > 0, rng.choice(np.array([0, 1, 7, 2**21, 2**63], dtype=np.uint64), n),
                      np.uint64(0))
        f = rng.integers(0, 128, n) * (rng.random(n) < 0.5)
        rec = np.zeros(n, STEP_RECORD)
        rec["id"] = np.arange(n)
        rec["v_diff"], rec["v_ulp"], rec["g_diff"], rec["g_ulp"] = v, vu, g, gu
        rec["g_n"] = np.where(g < 0, -1, 8)
        rec["v_nb"] = rng.integers(0, 2, n)
        rec["flags"] = f
        h.add(StepResult(step, 1.0, 1.0, 0.0, False, None, rec))
    return h


def _plain(x):
    """Mappings as dicts (the shared read-only sides), every leaf with its type."""
    from collections.abc import Mapping

    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return (type(x).__name__, repr(x))  # repr: NaN == NaN, -0.0 apart from 0.0


def _same(a, b) -> bool:
    return _plain(a) == _plain(b)


def test_comparison_is_the_record_loop():
    for seed in range(4):
        h = _history(seed)
        for step in h.step_nums:
            got, want = list(h.comparison(step)), oracle_comparison(h, step)
            assert _same(got, want)
            assert all(isinstance(e, dict) for e in got)  # each entry its own


def test_overlay_is_entry_worst_and_entry_differs_and_its_colours_are_parity_colors():
    for seed in range(4):
        h = _history(seed)
        ids = [nid for nid, _, _ in h.nodes]
        for step in h.step_nums:
            comp = oracle_comparison(h, step)
            worst, differ, intro = h.overlay(step)
            assert worst.tolist() == [entry_worst(e) for e in comp]
            assert differ.tolist() == [entry_differs(e) for e in comp]
            assert np.flatnonzero(intro).tolist() == h.introduced(step)
            assert worst_colors(ids, worst) == parity_colors(comp)
            assert (worst < 0).any() and (worst > 1).any() and (worst == 0).any()


def test_the_table_reads_the_columns_as_it_reads_the_dicts():
    from tapescope.views.models.parity_rows import build_rows

    for seed in range(3):
        h = _history(seed)
        nodes = [_Node(i) for i in range(len(h.nodes))]
        for nd in nodes:
            nd.shape = (nd.id % 4 + 1,)
        for step in h.step_nums:
            cols = build_rows(nodes, h.comparison(step))  # the live path: no dicts
            dicts = build_rows(nodes, oracle_comparison(h, step))  # a file's path
            assert cols.cols is not None and dicts.cols is None
            assert [cols[k] for k in range(len(cols))] == [dicts[k] for k in range(len(dicts))]
            for c in range(8):
                assert cols.sort_keys(c).tolist() == dicts.sort_keys(c).tolist(), c
            assert cols.differs().tolist() == dicts.differs().tolist()
            assert cols.differs().any() and (cols.sort_keys(6) == -1).any()


def test_first_steps_is_first_step_differing():
    h = _history(5)
    fs = h.first_steps()
    assert {i: int(s) for i, s in enumerate(fs.tolist()) if s >= 0} == h.first_step_differing()
    fs[:] = 99  # a copy: the history keeps its own
    assert h.first_steps().max() < 99


# ---- the Kernels dock's per-kernel parity of a step without provenance (issue 48) ------------

def _kernel_parity(h: StepHistory, plan: dict, step: int) -> dict:
    from types import SimpleNamespace

    from tapescope.app.qt.time_travel import TimeTravel

    tt = SimpleNamespace(ctl=SimpleNamespace(kernels=SimpleNamespace(plan=plan)), history=h)
    return TimeTravel.kernel_parity(tt, step)


def _oracle_kernel_parity(h: StepHistory, plan: dict, step: int) -> dict:
    """The plain loop over the dicts: a forward kernel is its segment's worst value, a
    backward kernel its worst gradient (first node of the worst; each node's worst on that
    side by entry_worst: 1 ulp at least, a NaN mismatch -1 and worse than any ulp)."""
    comp = {e["id"]: e for e in oracle_comparison(h, step)}
    intro = set(h.introduced(step))
    out = {}
    for k in plan["kernels"]:
        if k["role"] not in ("forward", "backward"):
            continue
        side = "value" if k["role"] == "forward" else "grad"
        worst, node = 0.0, None
        for i in plan["segments"][k["segment"]]["node_ids"]:
            w = entry_worst({side: comp[i][side]})
            if w != 0 and (node is None or (w < 0) > (worst < 0)
                           or (w > worst and worst >= 0)):
                worst, node = w, i
        out[k["name"]] = {"worst": worst, "node": node,
                          "introduced": None if node is None else node in intro}
    return out


def test_each_kernel_without_provenance_is_judged_by_its_own_side():
    plan = {"segments": [{"node_ids": list(range(s, s + 30))} for s in range(0, 300, 30)],
            "kernels": [{"name": f"s{s}_{r}", "segment": s, "role": role}
                        for s in range(10) for r, role in (("fwd", "forward"),
                                                           ("bwd", "backward"))]
            + [{"name": "adam", "segment": None, "role": "update"}]}
    swapped = 0
    for seed in range(3):
        h = _history(seed)
        for step in h.step_nums:
            got = _kernel_parity(h, plan, step)
            want = _oracle_kernel_parity(h, plan, step)
            assert got == want, step
            swapped += sum(want[f"s{s}_fwd"] != want[f"s{s}_bwd"] for s in range(10))
    assert swapped > 0  # values and gradients differ apart: a swap of the two would show
    # a segment whose values differ and gradients do not, and the reverse
    h = StepHistory([_Node(i) for i in range(4)])
    rec = np.zeros(4, STEP_RECORD)
    rec["id"] = np.arange(4)
    rec["g_n"] = 8
    rec["v_diff"][1], rec["v_ulp"][1] = 2, 5
    rec["g_diff"][2], rec["g_ulp"][2] = 1, 70
    rec["flags"][2] = F_G_INTRO
    h.add(StepResult(3, 1.0, 1.0, 0.0, False, None, rec))
    small = {"segments": [{"node_ids": [0, 1, 2, 3]}],
             "kernels": [{"name": "f", "segment": 0, "role": "forward"},
                         {"name": "b", "segment": 0, "role": "backward"}]}
    assert _kernel_parity(h, small, 3) == {
        "f": {"worst": 5.0, "node": 1, "introduced": False},
        "b": {"worst": 70.0, "node": 2, "introduced": True}}
    # a step that carries provenance's kernel verdicts shows those, not the segments' worst
    h.add(StepResult(4, 1.0, 1.0, 0.0, False, None, rec, provenance=True, kernels=[
        {"kernel": "b", "n_diff": 3, "max_ulp": 9, "first_node": 3, "introduced": True}]))
    assert _kernel_parity(h, small, 4) == {"b": {"worst": 9.0, "node": 3, "introduced": True}}
    # a gradient that differs by a NaN ranks above any ulp (-1, the Kernels dock's violet); a
    # kernel provenance judged different by a signed zero alone is 1 ulp, never "exact"
    rec2 = rec.copy()
    rec2["g_diff"][3], rec2["g_nan"][3], rec2["flags"][3] = 1, 1, F_G_NAN
    h.add(StepResult(5, 1.0, 1.0, 0.0, False, None, rec2))
    assert _kernel_parity(h, small, 5)["b"] == {"worst": -1.0, "node": 3, "introduced": False}
    assert _kernel_parity(h, small, 5)["f"]["worst"] == 5.0
    h.add(StepResult(6, 1.0, 1.0, 0.0, False, None, rec, provenance=True, kernels=[
        {"kernel": "b", "n_diff": 2, "max_ulp": 0, "first_node": 2, "introduced": True}]))
    assert _kernel_parity(h, small, 6) == {"b": {"worst": 1.0, "node": 2, "introduced": True}}
