""""Copy repro": one node's reference op on the candidate's inputs, as files a user can attach
to a bug report (no Qt).

``write_repro(folder, ...)`` writes ``input0.npy`` ... (the candidate's input values),
``candidate.npy`` (what the candidate computed), ``reference.npy`` (the reference side's
output, when known), ``node.json`` (op, attributes, shape, dtype, step, labels) and
``repro.py``, a fixed script: it reads ``node.json``, runs ``core.ops``' reference forward
(refmath) on the inputs and compares bit for bit with ``candidate.npy`` (exit 0 identical,
1 differs). SECURITY: the script's text never contains anything from the tape (names, ops,
attributes are data in ``node.json``, looked up in the op table), so a hostile tape cannot
write code into it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tapescope.core.atomic import write_all

SCRIPT = '''"""Re-run one tapescope node's reference op on the candidate's inputs (by tapescope).

    python repro.py        # exit 0: the candidate is bit-identical, 1: it differs
"""

import json
import sys
from pathlib import Path

import numpy as np

from tapescope.core import mathlib
from tapescope.core.optable.registry import REGISTRY

HERE = Path(__file__).resolve().parent


def tuples(v):
    return tuple(tuples(x) for x in v) if isinstance(v, list) else v


def main():
    node = json.loads((HERE / "node.json").read_text())
    xs = [np.load(HERE / f"input{k}.npy", allow_pickle=False) for k in range(node["n_inputs"])]
    attrs = {k: tuples(v) for k, v in node["attrs"].items()}
    dtype = np.dtype(node["dtype"])
    with np.errstate(all="ignore"):  # inf and NaN are data, as on the tape
        y = REGISTRY[node["op"]].forward(mathlib.get("refmath"), xs, attrs)
    y = np.asarray(y, dtype=dtype).reshape(node["shape"])
    cand = np.load(HERE / "candidate.npy", allow_pickle=False)
    sint = np.int64 if dtype == np.float64 else np.int32
    both_nan = np.isnan(y) & np.isnan(cand)
    differ = (y.view(sint) != cand.view(sint)) & ~both_nan
    n = int(differ.sum())
    print(f"node #{node['id']} {node['op']} at step {node['step']}: reference op on the "
          f"candidate's inputs vs the candidate: {n} of {y.size} elements differ")
    if n:
        k = int(np.flatnonzero(differ.reshape(-1))[0])
        print(f"first differing element {k}: reference {y.reshape(-1)[k]!r} "
              f"candidate {cand.reshape(-1)[k]!r}")
    np.save(HERE / "reference_on_candidate_inputs.npy", y)
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _jsonable(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def write_repro(folder: str | Path, node: dict, inputs: list[np.ndarray],
                candidate: np.ndarray, reference: np.ndarray | None = None) -> Path:
    """Write the repro files into ``folder`` (created); returns the script's path.

    ``node``: ``{"id", "op", "attrs", "shape", "dtype", "step", "reference", "candidate"}``
    (the last two are the runs' labels).
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)

    def npy(a: np.ndarray):
        return lambda f: np.save(f, np.asarray(a), allow_pickle=False)

    files: list[tuple[Path, object]] = [(out / f"input{k}.npy", npy(a))
                                        for k, a in enumerate(inputs)]
    files.append((out / "candidate.npy", npy(candidate)))
    if reference is not None:
        files.append((out / "reference.npy", npy(reference)))
    meta = {"id": int(node["id"]), "op": str(node["op"]),
            "attrs": {str(k): _jsonable(v) for k, v in dict(node.get("attrs") or {}).items()},
            "shape": [int(s) for s in node["shape"]],
            "dtype": np.dtype(node.get("dtype", np.asarray(candidate).dtype)).name,
            "step": node.get("step"), "n_inputs": len(inputs),
            "reference": node.get("reference", ""), "candidate": node.get("candidate", "")}
    script = out / "repro.py"
    files += [(out / "node.json", json.dumps(meta, indent=1)), (script, SCRIPT)]
    # the files belong together: all replace the old ones or none does (core.atomic)
    write_all(files)  # type: ignore[arg-type]
    return script
