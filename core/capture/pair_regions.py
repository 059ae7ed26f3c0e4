"""Where two runs part inside a compiled graph (issue 43 item 2, numpy only): eager against
``torch.compile``.

A compiled region (one call of a compiled graph, op ``tapescope.compiled_graph``) stands in one
run where the other has the eager ops it replaced, so the alignment leaves it, and them, of one
run only; the first *matched* op that parts (the optimizer reading the gradients) comes long
after the place they really part. ``first_inside`` looks into the regions of one run only,
before that op, in order: the region's judgement (core/capture/judge.py) lists its *departing
nodes* (an output node whose recorded value the reference, run on the run's own known values,
does not reproduce: core/capture/regions.py); the first of them whose bits the other run holds
nowhere in that step (no value of the same dtype, shape and digest) is where the runs part. The
other run's op there is its op of the same aten op the node was decomposed from (its FX
``original_aten``) and module, in the same step and phase, if it has one; its verdict and the
node's say which run left the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapescope.core.capture.file import COMPILED_OP, PHASES, Capture, derived_holds
from tapescope.core.capture.judge import _diff

__all__ = ["first_inside", "matched_region_node"]


def _values_by_step(cap: Capture) -> dict[int, tuple[set[tuple], set[int]]]:
    """Per step, the (dtype, shape, digest) of every value its ops made or read, and which
    of them are derived (``Capture.derived``: their digest a sentinel, not of their bytes)."""
    out: dict[int, tuple[set[tuple], set[int]]] = {}
    ops = cap.ops
    for i in range(cap.n_ops):
        s, derived = out.setdefault(ops["step"][i], (set(), set()))
        ids = list(ops["outputs"][i])
        _ids(ops["args"][i], ids)
        for v in ids:
            s.add((cap.dtypes[v], cap.shapes[v], cap.digests[v]))
            if v in cap.derived:
                derived.add(v)
    return out


def _holds(other: Capture, have: tuple[set[tuple], set[int]], cap: Capture, v: int) -> bool:
    """Whether the other run holds value ``v``'s bits in that step (``have``: its
    ``_values_by_step`` there): a value of its dtype, shape and digest, or a derived value
    whose elements ``v``'s array holds (``derived_holds``: a run that recorded the value
    derived and one that recorded its bytes agree where the values do)."""
    dt, shape = cap.dtypes[v], cap.shapes[v]
    if (dt, shape, cap.digests[v]) in have[0]:
        return True
    x = cap.arrays[v]  # (a departing node's value is stored: the reference was run against it)
    return x is not None and any(
        other.dtypes[w] == dt and other.shapes[w] == shape and derived_holds(other, w, x)
        for w in sorted(have[1]))


def _ids(a: Any, out: list[int]) -> None:
    if isinstance(a, list):
        for x in a:
            _ids(x, out)
    elif isinstance(a, dict) and "T" in a:
        out.append(a["T"])


def _order(cap: Capture, i: int) -> tuple[int, int, int]:
    return cap.ops["step"][i], PHASES.index(cap.ops["phase"][i]), i


def _counterpart(cap: Capture, rep: dict, step: int, phase: str, op: str, module: str,
                 only: set[int]) -> int | None:
    """The other run's op of aten op ``op`` at ``module`` in that step and phase (one of that
    run only: the ops the region replaced), the first with a difference from the reference
    if any does, else the first."""
    cands = [i for i in sorted(only) if cap.ops["step"][i] == step
             and cap.ops["phase"][i] == phase and cap.ops["op"][i] == op
             and cap.ops["module"][i] == module]
    for i in cands:
        if any(o["verdict"] in ("introduced", "inherited") for o in rep["ops"][i]["outputs"]):
            return i
    return cands[0] if cands else None


def first_inside(a: Capture, b: Capture, ra: dict, rb: dict, only_a: set[int],
                 only_b: set[int], before: tuple[int, int] | None) -> dict | None:
    """The first departing node, inside a compiled region of one run only, whose bits the other
    run does not hold (see the module docstring), if it comes before the first parted matched
    op ``before`` = ``(A index, B index)``; else None. Shaped as ``pair``'s ``first_parted``
    (``a``/``b`` the two runs' ops, -1 where a run has none), with ``inside``."""
    cands = []
    for tag, cap, rep, only in (("A", a, ra, only_a), ("B", b, rb, only_b)):
        for i in only:
            if cap.ops["op"][i] == COMPILED_OP and rep["ops"][i].get("departures"):
                cands.append((_order(cap, i), tag, i))
    if not cands:
        return None
    cands.sort()
    held = {"A": None, "B": None}
    for key, tag, i in cands:
        cap, rep = (a, ra) if tag == "A" else (b, rb)
        other, orep, oonly = (b, rb, only_b) if tag == "A" else (a, ra, only_a)
        if before is not None:
            bi = before[0] if tag == "A" else before[1]
            if key >= _order(cap, bi):
                continue
        if held[tag] is None:
            held[tag] = _values_by_step(other)
        step, phase = cap.ops["step"][i], cap.ops["phase"][i]
        have = held[tag].get(step, (set(), set()))
        arg = cap.ops["args"][i]
        graph = cap.graphs[arg[0]]
        by_node = {graph["outputs"][p]: v for p, v in zip(arg[2], cap.ops["outputs"][i],
                                                            strict=True)}
        for d in rep["ops"][i]["departures"]:
            v = by_node.get(d["node"])
            if v is None or _holds(other, have, cap, v):
                continue  # the other run made the same bits: not where they part
            return _shaped(tag, cap, other, rep, orep, i, d, v, graph,
                           _counterpart(other, orep, step, phase, d["original"], d["module"],
                                        oonly))
    return None


def _same_output(other: Capture, j: int, cap: Capture, v: int) -> int | None:
    """The output of the other run's op ``j`` that holds what value ``v`` holds: of its dtype
    and shape, the closest in bits (a layer norm's mean, not its rstd); None if none fits."""
    best: tuple[int, int] | None = None
    x = cap.arrays[v]
    for k, w in enumerate(other.ops["outputs"][j]):
        y = other.arrays[w]
        if x is None or y is None or y.shape != x.shape or y.dtype != x.dtype:
            continue
        n = _diff(np.asarray(y), np.asarray(x))["n_diff"]
        if best is None or n < best[0]:
            best = (n, k)
    return None if best is None else best[1]


def _shaped(tag: str, cap: Capture, other: Capture, rep: dict, orep: dict, i: int, d: dict,
            v: int, graph: dict, j: int | None) -> dict:
    otag = "B" if tag == "A" else "A"
    o = cap.ops
    node = (f"node {d['name']} ({d['target']}"
            + (f" output {d['output']}" if d.get("of") else "")
            + (f", seen at output node {d['seen_at']}" if d.get("seen_at") else "") + ")")
    why = (f"{d['n_diff']} of {d['n']} elements, max {d['max_ulp']} ulp from the reference "
           f"on {tag}'s own values; no value of {otag} in step {o['step'][i]} has its bits")
    inside = {"run": tag, "region": i, "kind": graph["kind"], "backend": graph["backend"],
              "node": d["name"], "target": d["target"],
              "output": d["output"] if d.get("of") else None, "seen_at": d.get("seen_at"),
              "original": d["original"], "module": d["module"], "kernel": d["kernel"],
              "kernel_nodes": d["kernel_nodes"], "value": v, "counterpart": j,
              "cause": d.get("cause"), "eager": d.get("eager")}
    verdict = "introduced"  # a departing node: the compiled code, on its own known values
    left = [tag]
    cause = [f"{tag}'s compiled code introduced it at {node}, in a fused kernel of "
             f"{d['kernel_nodes']} nodes ({d['n_diff']} elements, max {d['max_ulp']} ulp from "
             f"the reference on {tag}'s own values"
             + (f"; cause: {d['cause']}" if d.get("cause") and d["cause"] != "unknown" else "")
             + ")"]
    e = d.get("eager") or {}
    if e.get("ran"):
        cause.append("PyTorch's eager kernels, the graph's nodes run one by one from the same "
                     "values, give "
                     + ("the compiled bits" if e["same_as_compiled"] else
                        "the reference's bits" if e["same_as_reference"] else
                        f"neither ({e['n_diff_compiled']} elements off the compiled, "
                        f"{e['n_diff_reference']} off the reference)"))
    over = "exact"
    if j is not None:
        outs = orep["ops"][j]["outputs"]
        k = _same_output(other, j, cap, v)
        if k is not None:
            dd = _diff(np.asarray(other.arrays[other.ops["outputs"][j][k]]),
                       np.asarray(cap.arrays[v]))
            why += (f"; {otag}#{j}'s output {k} against it: {dd['n_diff']} of {dd['n']} "
                    f"elements differ, max {dd['max_ulp']} ulp")
            inside["counterpart_output"] = k
        bad = [x for x in outs if x["verdict"] in ("introduced", "inherited")]
        if k is not None:  # the output that holds the node's value: its own verdict
            bad = [outs[k]] if outs[k]["verdict"] in ("introduced", "inherited") else []
        over = bad[0]["verdict"] if bad else (outs[k if k is not None else 0]["verdict"]
                                              if outs else "exact")
        oo = other.ops
        where = (f"{otag}#{j} {oo['op'][j]} ({oo['module'][j] or 'no module'}, "
                 f"{oo['phase'][j]})")
        if bad:
            left.append(otag)
            k = outs.index(bad[0])
            pre = "" if bad[0]["verdict"] == "introduced" else "total_"
            n, u = bad[0][f"{pre}n_diff"], bad[0][f"{pre}max_ulp"]
            cause.append(f"{otag}'s op there, {where}, {bad[0]['verdict']} a difference in "
                         f"its output {k} ({n} elements, max {u} ulp)")
        else:
            cause.append(f"{otag}'s op there, {where}, is {over}"
                         + (f" in its output {k}" if k is not None else ""))
    else:
        cause.append(f"{otag} has no {d['original'] or d['target']} at {d['module'] or 'this'} "
                     "module in that step and phase (its ops there are of one run only)")
    left_s = "both" if len(left) == 2 else left[0]
    src = o["source"][i]
    osrc = other.ops["source"][j] if j is not None else ""
    out = {"output": 0, "value_a": v if tag == "A" else None,
           "value_b": v if tag == "B" else None, "n": d["n"], "n_diff": d["n_diff"],
           "max_ulp": d["max_ulp"], "max_abs": d["max_abs"], "first_index": d["first_index"],
           "dtype_a": cap.dtypes[v], "dtype_b": cap.dtypes[v], "why": why,
           "verdict_a": verdict if tag == "A" else over,
           "verdict_b": verdict if tag == "B" else over}
    return {"a": i if tag == "A" else (j if j is not None else -1),
            "b": i if tag == "B" else (j if j is not None else -1),
            "op": d["target"], "module": d["module"], "phase": o["phase"][i],
            "step": o["step"][i], "source_a": src if tag == "A" else osrc,
            "source_b": src if tag == "B" else osrc, "outputs": [out],
            "left": left_s, "verdict_a": out["verdict_a"], "verdict_b": out["verdict_b"],
            "cause": "; ".join(cause), "inputs_differ": [], "inside": inside}


def matched_region_node(a: Capture, b: Capture, ra: dict, rb: dict, p: dict) -> dict | None:
    """Where a compiled graph's call that both runs made (matched) parts: ``p``'s parted
    outputs put in graph order (the earliest node first, in place) and that node named, with
    whether each run's compiled code departs from the reference there (its judgement's
    departing nodes); None when ``p`` is no compiled graph's call."""
    ia, ib = p["a"], p["b"]
    if a.ops["op"][ia] != COMPILED_OP or b.ops["op"][ib] != COMPILED_OP:
        return None
    ga = a.graphs[a.ops["args"][ia][0]]
    pos = a.ops["args"][ia][2]
    p["outputs"].sort(key=lambda o: ga["outputs"][pos[o["output"]]])
    node = ga["outputs"][pos[p["outputs"][0]["output"]]]
    cols = ga["nodes"]
    out = {"node": node, "name": cols["name"][node], "target": cols["target"][node],
           "module": cols["module"][node], "original": cols["original"][node]}
    for tag, rep, i in (("a", ra, ia), ("b", rb, ib)):
        d = next((d for d in rep["ops"][i].get("departures") or [] if d["node"] == node), None)
        out[f"departs_{tag}"] = d
    return out
