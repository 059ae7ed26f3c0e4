"""Every step of a live session, per node, in a few bytes (no Qt): what the step scrubber shows.

Each step arrives as a ``StepResult`` holding its step record (``core.step_record``: one row per
node, both sides' diffs and the flag bits, decoded from the wire once); the GUI keeps one
``StepHistory`` of the record's columns the views read (``RECORD``: per node the value and
gradient ``n_diff`` and max ulp, NaN-policy counts and the flags) and rebuilds, for any stored
step, what the parity table and the graph colours read (``comparison``, ``overlay``), the
nodes × steps heatmap (``heat``), the first step at which each node (each parameter) differs,
the introduced nodes and the non-finite alarms.

Memory is bounded: about 29 bytes per node per step (a 51-node transformer: 1.5 kB a step,
15 MB for 10,000 steps). Past ``budget_bytes`` every second step of the older half is dropped
(the step numbers say which remain; the first divergence's step is always kept), so a session of
any length and any tape size stays under the budget.

Introduced vs inherited comes from the provenance engine (``core.provenance``) when the step
carries it (``StepResult.provenance``); a step without it has the ``roots`` in its flags: the
differing values whose inputs all agree (``SOURCE_ROOTS``), which is the forward half of the
same rule, judged on the reference's inputs (``app.runs.PairRunner`` sets them).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from tapescope.core.step_record import (
    CAUSES_MAX,
    F_G_INTRO,
    F_G_NAN,
    F_G_ONESIDED,
    F_U_INTRO,
    F_V_INTRO,
    F_V_NAN,
    F_V_ONESIDED,
)
from tapescope.core.summary import worst
from tapescope.views.models.array_stats import nonfinite_flags
from tapescope.views.models.parity_rows import ColumnComparison

__all__ = ["F_G_INTRO", "F_G_NAN", "F_G_ONESIDED", "F_U_INTRO", "F_V_INTRO", "F_V_NAN",
           "F_V_ONESIDED", "RECORD", "SOURCE_PROVENANCE", "SOURCE_ROOTS", "StepHistory",
           "produced_nonfinite", "scan_produced"]

# per node and step, the step record's columns the views read
RECORD = np.dtype([("v_n", "<i4"), ("v_ulp", "<f8"), ("g_n", "<i4"), ("g_ulp", "<f8"),
                   ("nb", "<i4"), ("flags", "u1")])
SOURCE_PROVENANCE = "provenance"
SOURCE_ROOTS = "roots"  # placeholder: differing values whose inputs (reference side) all agree
# what comparison() writes, shared read-only: flag bits → (value n_nan, grad n_nan,
# {"value", "grad", "update"} introduced, alarm), and a side that is all zero
_FLAG_BITS = tuple((int(bool(f & F_V_NAN)), int(bool(f & F_G_NAN)), MappingProxyType({
    "value": bool(f & F_V_INTRO), "grad": bool(f & F_G_INTRO), "update": bool(f & F_U_INTRO)}),
    bool(f & (F_V_ONESIDED | F_G_ONESIDED))) for f in range(256))
_ZERO_VALUE = MappingProxyType({"n_diff": 0, "max_ulp": 0.0, "n_nan": 0, "nan_bits_differ": 0})
_ZERO_GRAD = MappingProxyType({"n_diff": 0, "max_ulp": 0.0, "n_nan": 0})
DEFAULT_BUDGET = 128 << 20
STEP_OVERHEAD = 700  # bytes per stored step beside its records: the array header, its meta dict


def compact(rec: np.ndarray) -> np.ndarray:
    """The history's columns of a ``core.step_record`` record (``RECORD``)."""
    r = np.empty(len(rec), dtype=RECORD)
    r["v_n"], r["v_ulp"], r["g_n"] = rec["v_diff"], rec["v_ulp"], rec["g_diff"]
    r["g_ulp"], r["flags"] = rec["g_ulp"], rec["flags"]
    r["nb"] = rec["v_nb"] + np.maximum(rec["g_nb"], 0)
    return r


def produced_nonfinite(nodes: Iterable, value: Any, grad: Any = None,
                       flags: tuple[np.ndarray, np.ndarray] | None = None) -> list[int]:
    """Nodes that *made* a NaN or inf: a value with one from all-finite input values, or a
    gradient with one while every consumer's gradient is finite. A leaf holding -inf (the
    transformer's causal mask) is data, and what only flows on from it is not an alarm.
    ``flags``: the per-node (values, gradients) ``nonfinite_flags`` when already scanned."""
    nodes = list(nodes)
    if flags is None:  # one batched scan per side (views.models.array_stats), not a call per array
        flags = (nonfinite_flags([value(n.id) for n in nodes]),
                 nonfinite_flags([grad(n.id) for n in nodes]) if grad is not None
                 else np.zeros(len(nodes), dtype=bool))
    bad_v, bad_g = flags
    hit_v, hit_g = np.flatnonzero(bad_v).tolist(), np.flatnonzero(bad_g).tolist()
    if not hit_v and not hit_g:  # the usual case: nothing to look at per node
        return []
    nonfin_v = {nodes[k].id for k in hit_v}  # an input outside ``nodes`` counts as finite
    nonfin_g = {nodes[k].id for k in hit_g}
    out = set()
    for k in hit_v:
        n = nodes[k]
        if n.inputs and not any(j in nonfin_v for j in n.inputs):
            out.add(n.id)
    if nonfin_g:
        bad_consumer: set[int] = set()  # nodes with a consumer whose gradient is not finite
        for n in nodes:
            if n.id in nonfin_g:
                bad_consumer.update(n.inputs)
        out.update(i for i in nonfin_g if i not in bad_consumer)
    return sorted(out)


def _finite(a: Any) -> bool:
    if a is None:
        return True
    a = np.asarray(a)
    return a.dtype.kind != "f" or bool(np.isfinite(a).all())


SCAN_EVERY = 16  # the full non-finite scan runs at least every this many steps


def scan_produced(runner: Any, res: Any) -> list[int]:
    """The nodes that produced a NaN/inf on the reference side this step (``res.produced``),
    read from the step's one store (``runner.store``: what the Inspector and the tensor window
    read too, each array fetched once).

    NOTE: the full scan costs ~0.6 ms a step on the transformer (6 % of its step); it runs when
    the loss or a parameter's gradient is not finite (where a NaN made anywhere ends up), and
    every ``SCAN_EVERY`` steps for what vanished on the way (an inf that exp(-inf) turned to 0).
    """
    st = runner.store
    try:
        params = [n.id for n in runner.nodes if n.op == "param"]
        clean = (math.isfinite(res.loss_ref) and all(
            _finite(st.get("ref", i, "grad", after=True)) for i in params))
        if clean and res.step % SCAN_EVERY:
            return []
        return produced_nonfinite(runner.nodes,
                                  lambda i: st.get("ref", i, "value", after=True),
                                  lambda i: st.get("ref", i, "grad", after=True))
    except Exception:  # noqa: BLE001 — an alarm scan must never fail a step
        return []




def _causes(intro: Iterable | None) -> list[list]:
    """The explained introduced arrays (core.explain) as ``[node, which, cause, text, n_diff,
    max_ulp]``, for the Inspector's provenance line."""
    from tapescope.core.explain import cause_text

    out = []
    for e in intro or ():
        if isinstance(e, Mapping) and e.get("explain") and len(out) < CAUSES_MAX:
            out.append([int(e["node"]), str(e.get("which", "")), str(e["cause"]),
                        cause_text(e["explain"]), int(e.get("n_diff", 0)),
                        int(e.get("max_ulp", 0))])
    return out


class StepHistory:
    """Per-node columns of every step (bounded); ``add`` takes a ``StepResult``."""

    def __init__(self, nodes: list | tuple = (), budget_bytes: int = DEFAULT_BUDGET) -> None:
        self.nodes = [(int(n.id), str(n.op), n.name or "") for n in nodes]
        self.budget_bytes = budget_bytes
        self.step_nums: list[int] = []
        self.records: list[np.ndarray] = []
        self.meta: list[dict] = []  # per stored step: losses, exact, first, src, kernels
        self.first: dict | None = None  # the session's first divergence {"step", "node", ...}
        self._first_step = np.full(len(self.nodes), -1, dtype=np.int64)
        self.thinned = 0
        self._bytes = 0  # running total of nbytes (summed once per add, not over every step)

    def __len__(self) -> int:
        return len(self.step_nums)

    @property
    def nbytes(self) -> int:
        """Bytes the summaries hold (records and their per-step overhead, roughly)."""
        return self._bytes

    def add(self, res: Any) -> None:
        """Append one step (a ``StepResult``: its record, losses, first, kernels, ...)."""
        rec = res.record
        n = len(rec)
        if self.nodes and n != len(self.nodes):
            raise ValueError(f"step {res.step}: {n} nodes, the history has {len(self.nodes)}")
        if not self.nodes:
            self.nodes = [(i, "", "") for i in range(n)]
            self._first_step = np.full(n, -1, dtype=np.int64)
        r = getattr(res, "derived", {}).get("history")  # (made by the reader thread)
        if r is None or len(r) != n:
            r = compact(rec)
        step = int(res.step)
        if self.step_nums and step <= self.step_nums[-1]:
            raise ValueError(f"step {step} after step {self.step_nums[-1]}")
        differs = (r["v_n"] > 0) | (r["g_n"] > 0)
        new = differs & (self._first_step < 0)
        self._first_step[new] = step
        if self.first is None and res.first:
            self.first = {"step": step, **res.first}
        self.step_nums.append(step)
        self.records.append(r)
        self._bytes += r.nbytes + STEP_OVERHEAD
        self.meta.append({"losses": [res.loss_ref, res.loss_cand], "exact": bool(res.exact),
                          "first": res.first,
                          "src": SOURCE_PROVENANCE if res.provenance else SOURCE_ROOTS,
                          "kernels": res.kernels or [], "produced": list(res.produced or []),
                          "causes": _causes(res.introduced if res.provenance else None)})
        if self.nbytes > self.budget_bytes:
            self._thin()

    def _thin(self) -> None:
        # drop every second step of the older half; the first divergence's step stays
        half = len(self.records) // 2
        keep_first = self.first["step"] if self.first else None
        drop = {k for k in range(1, half, 2) if self.step_nums[k] != keep_first}
        for name in ("step_nums", "records", "meta"):
            lst = getattr(self, name)
            setattr(self, name, [x for k, x in enumerate(lst) if k not in drop])
        self.thinned += len(drop)
        self._bytes = sum(r.nbytes + STEP_OVERHEAD for r in self.records)

    # ---- reading ----------------------------------------------------------------------------
    def index_of(self, step: int) -> int:
        """Index of the stored step nearest ``step`` (-1 when empty)."""
        if not self.step_nums:
            return -1
        k = bisect.bisect_left(self.step_nums, step)  # (a list: no array made per call)
        if k >= len(self.step_nums):
            return len(self.step_nums) - 1
        if k > 0 and step - self.step_nums[k - 1] < self.step_nums[k] - step:
            return k - 1
        return k

    def nearest(self, step: int) -> int:
        """The stored step nearest ``step`` (steps count from 1; -1 when empty)."""
        k = self.index_of(step)
        return -1 if k < 0 else self.step_nums[k]

    def record(self, step: int) -> np.ndarray:
        """The per-node record array of a stored step (KeyError if not stored)."""
        k = self.index_of(step)
        if k < 0 or self.step_nums[k] != step:
            raise KeyError(f"step {step} is not in the history")
        return self.records[k]

    def source(self, step: int) -> str:
        """Where a step's introduced flags come from: SOURCE_PROVENANCE or SOURCE_ROOTS."""
        return self.meta[self.index_of(step)]["src"]

    def step_meta(self, step: int) -> dict:
        """losses, exact, first (of that step), src, kernels."""
        return self.meta[self.index_of(step)]

    def node_ids(self) -> list[int]:
        """The nodes' ids, in order (one list while ``nodes`` is the same: a 100k-node list
        per snapshot cost ~50 ms of the GUI thread)."""
        got = getattr(self, "_ids_of", None)
        if got is None or got[0] is not self.nodes or len(got[1]) != len(self.nodes):
            got = self._ids_of = (self.nodes, [nid for nid, _, _ in self.nodes])
        return got[1]

    def node_id_array(self) -> np.ndarray:
        """``node_ids`` as a read-only int64 array (made once while ``nodes`` is the same)."""
        got = getattr(self, "_id_array_of", None)
        if got is None or got[0] is not self.nodes or got[1].size != len(self.nodes):
            a = np.array(self.node_ids(), dtype=np.int64)
            a.setflags(write=False)
            got = self._id_array_of = (self.nodes, a)
        return got[1]

    def comparison(self, step: int) -> ColumnComparison:
        """One step as the parity table reads it: its columns (``views.models.parity_rows``), each
        node's dict (the list-of-dicts form) made only when that entry is read."""
        r = self.record(step)
        ids = self.node_ids()
        cols = {k: r[k] for k in ("v_n", "v_ulp", "g_n", "g_ulp", "nb", "flags")}
        return ColumnComparison(ids, cols, lambda k: self._entry(r, k))

    def _entry(self, r: np.ndarray, k: int) -> dict:
        nid, op, name = self.nodes[k]
        v_n, v_ulp, g_n, g_ulp, nb, fl = r[k].tolist()
        v_nan, g_nan, intro, alarm = _FLAG_BITS[fl]
        # the sides that are all zero (most nodes: exact) share one read-only mapping
        zv = v_n == 0 and v_ulp == 0 and math.copysign(1.0, v_ulp) > 0 and nb == 0 and not v_nan
        zg = g_n == 0 and g_ulp == 0 and math.copysign(1.0, g_ulp) > 0 and not g_nan
        return {"id": nid, "op": op, "name": name,
                "value": _ZERO_VALUE if zv else {"n_diff": v_n, "max_ulp": v_ulp, "n_nan": v_nan,
                                                 "nan_bits_differ": nb},
                "grad": None if g_n < 0 else _ZERO_GRAD if zg else {
                    "n_diff": g_n, "max_ulp": g_ulp, "n_nan": g_nan},
                "introduced": intro, "alarm": alarm}

    def overlay(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node (as ``comparison(step)`` lists them): ``core.summary.worst`` (0
        exact, >= 1 ulp, -1 a NaN), ``entry_differs``, and whether it introduced error: what
        the graph colours need, without the dicts."""
        r = self.record(step)
        f = r["flags"]
        intro = (f & (F_V_INTRO | F_G_INTRO | F_U_INTRO)) > 0
        return _worst(r), (r["v_n"] > 0) | (r["g_n"] > 0), intro

    def first_steps(self) -> np.ndarray:
        """Per node, the first step at which its value or gradient differed (-1: never)."""
        return self._first_step.copy()

    def causes(self, step: int, node: int) -> list[list]:
        """The explained introduced arrays of ``node`` at ``step`` (``summarize``'s
        ``causes`` rows); empty when the step was not explained or is not stored."""
        if step not in self.step_nums:
            return []
        meta = self.meta[self.step_nums.index(step)]
        return [c for c in meta.get("causes") or () if c[0] == node]

    def introduced(self, step: int) -> list[int]:
        """Node ids that introduced error (value, gradient or update) at ``step``."""
        f = self.record(step)["flags"]
        return np.flatnonzero(f & (F_V_INTRO | F_G_INTRO | F_U_INTRO)).tolist()

    def alarms(self, step: int) -> list[int]:
        """Node ids with a non-finite value or gradient only one side has, or one the node
        produced from finite inputs (same-bits infinities passed along are data)."""
        f = self.record(step)["flags"]
        one = np.flatnonzero(f & (F_V_ONESIDED | F_G_ONESIDED)).tolist()
        return sorted(set(one) | set(self.step_meta(step)["produced"]))

    def worst_ulp(self, step: int) -> np.ndarray:
        """Per node, the worst ulp of value and gradient (-1 for a NaN mismatch)."""
        return _worst(self.record(step))

    def columns(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Stored step number ``k`` (an index): per node worst ulp (-1 NaN), and the same
        keeping only what each node introduced (the heatmap's two modes)."""
        r = self.records[k]
        w = _worst(r)
        return w, np.where(r["flags"] & (F_V_INTRO | F_G_INTRO | F_U_INTRO), w, 0.0)

    def first_step_differing(self) -> dict[int, int]:
        """node id → the first step at which its value or gradient differed (only those)."""
        return {i: int(s) for i, s in enumerate(self._first_step.tolist()) if s >= 0}

    def heat(self, introduced_only: bool = False, last: int | None = None) -> tuple[
            np.ndarray, list[int]]:
        """(nodes × steps worst ulp, -1 for NaN; the steps) of the last ``last`` stored steps;
        ``introduced_only`` zeroes what a node only inherited."""
        recs = self.records if last is None else self.records[-last:]
        steps = self.step_nums if last is None else self.step_nums[-last:]
        if not recs:
            return np.zeros((len(self.nodes), 0)), []
        cols = []
        for r in recs:
            w = _worst(r)
            if introduced_only:
                w = np.where(r["flags"] & (F_V_INTRO | F_G_INTRO | F_U_INTRO), w, 0.0)
            cols.append(w)
        return np.stack(cols, axis=1), list(steps)


def _worst(r: np.ndarray) -> np.ndarray:
    # the one rule (core.summary.worst) on the history's columns: the NaN flags stand for n_nan
    return worst(r["v_n"], r["v_ulp"], r["flags"] & F_V_NAN, r["g_n"], r["g_ulp"],
                 r["flags"] & F_G_NAN)
