"""Step records for tests, made from per-node dicts (``NodeParity.to_json`` entries, missing
fields zero), the way ``core.step_record.record_of`` lays them out."""

from __future__ import annotations

import numpy as np

from tapescope.core.step_record import (
    F_G_INTRO,
    F_U_INTRO,
    F_V_INTRO,
    FIELDS,
    STEP_RECORD,
    TENSOR_DIFF_FIELDS,
    set_nan_flags,
)


def record(nodes: list[dict]) -> np.ndarray:
    """The record of ``nodes`` (``"introduced"`` dicts become the F_*_INTRO flags)."""
    rec = np.zeros(len(nodes), STEP_RECORD)
    rec["id"] = [e["id"] for e in nodes]
    for s, key in (("v", "value"), ("g", "grad")):
        for f, td in zip(FIELDS, TENSOR_DIFF_FIELDS, strict=True):
            default = -1 if f == "first" or (s == "g" and f in ("n", "diff")) else 0
            rec[f"{s}_{f}"] = [default if e.get(key) is None
                               else (e[key].get(td) if e[key].get(td) is not None
                                     else (-1 if f == "first" else 0))
                               for e in nodes]
    set_nan_flags(rec)
    bits = {"value": F_V_INTRO, "grad": F_G_INTRO, "update": F_U_INTRO}
    for k, e in enumerate(nodes):
        for which, b in bits.items():
            if (e.get("introduced") or {}).get(which):
                rec["flags"][k] |= b
    return rec
