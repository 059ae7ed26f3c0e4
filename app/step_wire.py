"""A ``StepResult`` on a pipe: its scalars as JSON, its step record packed once (no Qt).

The live worker's snapshots (``app.live_worker``) and the remote worker's step replies
(``app.remote``) carry each step this way: ``core.step_record.pack`` of the record (its columns,
deflated, base64) beside the few numbers of the step. The record's layout is this side's own
(``STEP_RECORD``), never read from the wire; its row count is the receiver's node count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tapescope.app.runs import StepResult
from tapescope.core.step_record import CAUSES_MAX, pack, unpack

__all__ = ["step_from_wire", "step_to_wire"]

_FLOATS = ("loss_ref", "loss_cand", "seconds", "provenance_s")


def step_to_wire(res: StepResult, detail: bool = True) -> dict:
    """The step as a JSON object; ``detail`` False leaves out what only an export reads (the
    introduced arrays' list: the record's flags say per node what each introduced), all but
    the explained entries (``--explain``: the Inspector's cause line), at most CAUSES_MAX."""
    out = {"step": res.step, "loss_ref": res.loss_ref, "loss_cand": res.loss_cand,
           "seconds": res.seconds, "exact": res.exact, "first": res.first,
           "provenance": res.provenance, "kernels": res.kernels,
           "provenance_s": res.provenance_s, "produced": res.produced, "roots": res.roots,
           "n": len(res.record), "record": pack(res.record)}
    if detail:
        out["introduced"] = res.introduced
    else:
        out["introduced"] = [e for e in res.introduced if e.get("explain")][:CAUSES_MAX]
    return out


def _int_list(x: Any, what: str) -> list[int]:
    if not isinstance(x, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                          for i in x):
        raise ValueError(f"{what} must be a list of integers")
    return x


def step_from_wire(d: Any, n: int, labels: Sequence = ()) -> StepResult:
    """The inverse of ``step_to_wire`` for a tape of ``n`` compared nodes; a malformed
    message raises ValueError naming the field."""
    if not isinstance(d, dict):
        raise ValueError("a step must be a JSON object")
    try:
        step = d["step"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise ValueError(f"step {step!r} is not a step number")
        nums = [d[k] for k in _FLOATS]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in nums):
            raise ValueError("losses and times must be numbers")
        if d["n"] != n:
            raise ValueError(f"{d['n']!r} nodes, this side compares {n}")
        rec = unpack(d["record"], n, f"step {step}'s record")
        first = d["first"]
        if first is not None and not (isinstance(first, dict) and isinstance(
                first.get("node"), int) and first.get("which") in ("value", "grad")):
            raise ValueError(f"first divergence {first!r:.80}")
        kernels, introduced = d["kernels"], d.get("introduced", [])
        if not isinstance(kernels, list) or not isinstance(introduced, list):
            raise ValueError("kernels and introduced must be lists")
    except KeyError as e:
        raise ValueError(f"a step without {e}") from None
    loss_ref, loss_cand, seconds, prov_s = (float(x) for x in nums)
    return StepResult(step, loss_ref, loss_cand, seconds, bool(d["exact"]), first, rec,
                      _int_list(d.get("roots", []), "roots"), bool(d["provenance"]),
                      introduced, kernels, prov_s, _int_list(d["produced"], "produced"),
                      labels=labels)

