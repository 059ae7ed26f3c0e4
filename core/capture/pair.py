"""Two captures, one arbiter (issue 43): run A against run B, both against the exact reference
(numpy only).

**Alignment.** The two runs' ops are matched by identity: per step and per phase (forward,
backward, optimizer: each phase's ops in their recorded order), a sequence alignment over each
op's key — the aten op, its module path, its outputs' and tensor inputs' shapes — that walks
both runs while their keys agree and, where they do not, skips the fewest ops (of one run, the
other, or both) after which three keys agree again (``match``: within 64 ops; beyond,
``difflib.SequenceMatcher`` with its longest common runs as anchors aligns the rest). Dtypes are
not in the key: a run under autocast computes the same ops in another dtype, and that is a
difference to report, not a reason to lose the match. An op of one run only (a fused kernel in
one, its pieces in the other, an extra ``clone``, autocast's casts) is left unmatched and
reported (counts, the first few); the ops around it still match.

**Comparison.** Per matched op, per output: the same bits (the digest the capture stores; two
captures of different digest algorithms: ``core.capture.file.comparable``, the digests of one
recomputed from its stored arrays, or refused; then
``core.parity.compare_arrays`` and its NaN policy where the digests differ: two NaNs are equal
whatever their payload), or parted (ulp, elements; a different dtype parts whatever the values).

**The arbiter.** Each run is judged against the reference on its own
(``core.capture.judge``: introduced / inherited per output). For the first matched op where the
runs part, the report says which run left the reference there: the run whose output the judge
found ``introduced`` (its kernel) or ``inherited`` (an op before it); a run computing in a
narrower dtype than the other (autocast) has left the other's arithmetic whatever its own
verdict; ``neither`` when both are exact on their own inputs, and then the inputs differ: where
they come from (an op of one run only, an RNG draw, a recorded input) is named.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tapescope.core.capture.file import UNINITIALISED_OPS, Capture, comparable, derived_holds
from tapescope.core.capture.judge import RANDOM_OPS, _diff, base_name, judge
from tapescope.core.capture.pair_regions import first_inside, matched_region_node

__all__ = ["align", "compare", "identity", "match", "pair"]

_PHASES = ("forward", "backward", "optimizer")
# float widths, for "which run computes in the narrower dtype"
_WIDTH = {"float64": 64, "complex128": 128, "complex64": 64, "float32": 32, "float16": 16,
          "bfloat16": 16}
_SHOW = 5  # unmatched ops listed per run (the counts are always whole)


def _tensor_ids(a: Any) -> list[int]:
    if isinstance(a, list):
        return [i for x in a for i in _tensor_ids(x)]
    if isinstance(a, dict):
        return [a["T"]] if "T" in a else []
    return []


def inputs_of(cap: Capture, i: int) -> list[int]:
    """Op ``i``'s tensor inputs (value ids), positional then keyword, in order."""
    return _tensor_ids(cap.ops["args"][i]) + _tensor_ids(list(cap.ops["kwargs"][i].values()))


def identity(cap: Capture, i: int) -> tuple:
    """Op ``i``'s key: ``(op, module, output shapes, input shapes)`` (its step and phase are
    the alignment's segments, its order the alignment itself)."""
    sh = cap.shapes
    return (cap.ops["op"][i], cap.ops["module"][i],
            tuple(sh[v] for v in cap.ops["outputs"][i]),
            tuple(sh[v] for v in inputs_of(cap, i)))


def _segments(cap: Capture) -> dict[tuple[int, str], list[int]]:
    seg: dict[tuple[int, str], list[int]] = {}
    ops = cap.ops
    for i in range(cap.n_ops):
        seg.setdefault((ops["step"][i], ops["phase"][i]), []).append(i)
    return seg


_WINDOW = 64  # ops skipped at most on either side before the sequences resynchronise
_CONFIRM = 3  # keys that must agree after a skip for it to count as the resynchronisation


def _resync(ka: list[int], kb: list[int], i: int, j: int) -> tuple[int, int] | None:
    """The smallest skip ``(da, db)`` (fewest ops left unmatched, then the most even) after
    which ``_CONFIRM`` keys of A and B agree, within ``_WINDOW`` ops of each; failing that, the
    skip after which the most keys (at least two) agree; else None."""
    na, nb = len(ka), len(kb)
    best: tuple[int, int, int] | None = None  # (agreeing keys, da, db)
    for s in range(1, 2 * _WINDOW + 1):
        lo, hi = max(0, s - _WINDOW), min(s, _WINDOW)
        for da in sorted(range(lo, hi + 1), key=lambda d: abs(2 * d - s)):
            ii, jj = i + da, j + s - da
            n = min(_CONFIRM, na - ii, nb - jj)
            if n <= 0:
                continue
            k = 0
            while k < n and ka[ii + k] == kb[jj + k]:
                k += 1
            if k == _CONFIRM:
                return da, s - da
            if k >= 2 and (best is None or k > best[0]):
                best = (k, da, s - da)
    return None if best is None else (best[1], best[2])


def match(ka: list[int], kb: list[int]) -> list[tuple[int, int]]:
    """Matched positions of two key sequences, in order. Equal keys advance both; at a
    mismatch, the nearest resynchronisation (``_resync``) skips the ops of one run only, so a
    periodic sequence (layer after layer of the same ops) never slides by a period; the skipped
    ops of both runs, and the rest where no resynchronisation is near, are aligned by
    ``difflib.SequenceMatcher`` (no junk heuristic: its longest common runs are the anchors)."""
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < len(ka) and j < len(kb):
        if ka[i] == kb[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        skip = _resync(ka, kb, i, j)
        if skip is None:
            pairs += _lcs(ka, kb, i, len(ka), j, len(kb))
            break
        # the ops skipped on both sides may still hold matches (a reordered pair)
        pairs += _lcs(ka, kb, i, i + skip[0], j, j + skip[1])
        i, j = i + skip[0], j + skip[1]
    return pairs


def _lcs(ka: list[int], kb: list[int], a0: int, a1: int, b0: int, b1: int
         ) -> list[tuple[int, int]]:
    if a0 == a1 or b0 == b1:
        return []
    m = difflib.SequenceMatcher(None, ka[a0:a1], kb[b0:b1], autojunk=False)
    return [(a0 + x + t, b0 + y + t) for x, y, n in m.get_matching_blocks() for t in range(n)]


def align(a: Capture, b: Capture) -> dict:
    """Match A's ops to B's: ``{"pairs": [(ia, ib), ...] (in A's order), "only_a": [...],
    "only_b": [...], "segments": [{step, phase, a, b, matched}, ...]}``."""
    sa, sb = _segments(a), _segments(b)
    interned: dict[tuple, int] = {}

    def keys(cap: Capture, idx: list[int]) -> list[int]:
        return [interned.setdefault(identity(cap, i), len(interned)) for i in idx]

    pairs: list[tuple[int, int]] = []
    only_a: list[int] = []
    only_b: list[int] = []
    segments = []
    steps = sorted({s for s, _ in sa} | {s for s, _ in sb})
    for s in steps:
        for ph in _PHASES:
            ia, ib = sa.get((s, ph), []), sb.get((s, ph), [])
            if not ia and not ib:
                continue
            got = match(keys(a, ia), keys(b, ib))
            pairs += [(ia[x], ib[y]) for x, y in got]
            ma, mb = {x for x, _ in got}, {y for _, y in got}
            only_a += [ia[x] for x in range(len(ia)) if x not in ma]
            only_b += [ib[y] for y in range(len(ib)) if y not in mb]
            n = len(got)
            segments.append({"step": s, "phase": ph, "a": len(ia), "b": len(ib), "matched": n})
    pairs.sort()
    return {"pairs": pairs, "only_a": sorted(only_a), "only_b": sorted(only_b),
            "segments": segments}


# view ops whose output's values depend on the input's memory layout, not only on its values
# (explicit strides): a derived value of theirs is compared by its digest alone
_LAYOUT_VIEWS = ("as_strided", "_reshape_alias")


def _scalars(a: Any) -> Any:
    """An op's recorded arguments with each tensor (``{"T": id}``) one placeholder: what two
    calls of one op must share, besides their tensors, to compute the same function."""
    if isinstance(a, list):
        return [_scalars(x) for x in a]
    if isinstance(a, dict):
        return "T" if "T" in a and len(a) == 1 else {k: _scalars(v) for k, v in a.items()}
    return a


class _Producers:
    """Each run's op that made each value (``_producers``), computed once, when a derived
    value (``Capture.derived``) is first compared."""

    def __init__(self, a: Capture, b: Capture) -> None:
        self.a, self.b = a, b
        self.made: tuple[dict[int, int], dict[int, int]] | None = None

    def of(self) -> tuple[dict[int, int], dict[int, int]]:
        if self.made is None:
            self.made = (_producers(self.a), _producers(self.b))
        return self.made


def _same_sources(a: Capture, va: int, b: Capture, vb: int, prod: _Producers,
                  depth: int = 0) -> tuple[int, int] | None:
    """For a value derived in A or B (its elements its source's, rearranged: no digest of its
    bytes), the pair of values to compare instead: the tensor inputs of the view ops that made
    ``va`` and ``vb``, where both are one op with the same arguments but the tensor (the same
    function of the input's values: a bijection, so the outputs are equal iff the inputs
    are), followed while an input is derived itself; None where that does not hold (their
    digests decide)."""
    made_a, made_b = prod.of()
    while depth < 64 and (va in a.derived or vb in b.derived):
        ia, ib = made_a.get(va), made_b.get(vb)
        if ia is None or ib is None:
            return None
        op = a.ops["op"][ia]
        if op != b.ops["op"][ib] or any(n in op for n in _LAYOUT_VIEWS) \
                or _scalars(a.ops["args"][ia]) != _scalars(b.ops["args"][ib]) \
                or _scalars(a.ops["kwargs"][ia]) != _scalars(b.ops["kwargs"][ib]):
            return None
        xa, xb = inputs_of(a, ia), inputs_of(b, ib)
        if len(xa) != 1 or len(xb) != 1 or a.shapes[xa[0]] != b.shapes[xb[0]]:
            return None
        va, vb = xa[0], xb[0]
        depth += 1
    return va, vb


def _laid_out_alike(a: Capture, va: int, b: Capture, vb: int) -> bool:
    """Whether a derived value (no view op to follow: a view first seen as an input) is the
    other run's value, by its source: both derived alike (the same strides) from sources of
    the same digest; or one derived, the other's array stored: that array put back in the
    source's order (the strides are a bijection) has the source's digest."""
    if va in a.derived and vb in b.derived:
        return a.derived_strides[va] == b.derived_strides[vb] \
            and a.shapes[va] == b.shapes[vb] \
            and a.digests[a.derived[va]] == b.digests[b.derived[vb]]
    if vb in b.derived:
        a, va, b, vb = b, vb, a, va
    x = b.arrays[vb]
    if x is None or va not in a.derived or a.digest_algorithm != b.digest_algorithm:
        return False
    return derived_holds(a, va, x)


def _same(a: Capture, va: int, b: Capture, vb: int, prod: _Producers | None = None
          ) -> dict | None:
    """None when value ``va`` of A and ``vb`` of B are the same bits (NaN policy), else how
    they differ: ``{n, n_diff, max_ulp, max_abs, first_index, dtype_a, dtype_b, why}``. A
    derived value (``Capture.derived``: a view op's output recorded by its source) is
    compared through its view op's input (``_same_sources``): a run that recorded it derived
    and one that recorded its bytes agree where the values do."""
    da, db = a.dtypes[va], b.dtypes[vb]
    if da == db and a.digests[va] == b.digests[vb]:
        return None
    if da == db and prod is not None and (va in a.derived or vb in b.derived):
        src = _same_sources(a, va, b, vb, prod)
        if src is not None:
            d = _same(a, src[0], b, src[1])
            if d is None:
                return None
            return {**d, "first_index": None,
                    "why": f"its view op's input differs (A value {src[0]}, B value "
                           f"{src[1]}: {d['why']})"}
        if _laid_out_alike(a, va, b, vb):
            return None
    base = {"dtype_a": da, "dtype_b": db}
    xa, xb = a.arrays[va], b.arrays[vb]
    if da != db:
        d = {"n": int(np.prod(a.shapes[va])), "n_diff": None, "max_ulp": None,
             "max_abs": None, "first_index": None, **base, "why": f"dtype {da} vs {db}"}
        if xa is not None and xb is not None and xa.shape == xb.shape:
            try:
                with np.errstate(all="ignore"):
                    fa, fb = xa.astype(np.float64), xb.astype(np.float64)
                ne = ~((fa == fb) | (np.isnan(fa) & np.isnan(fb)))
                d["n_diff"] = int(ne.sum())
                with np.errstate(all="ignore"):
                    d["max_abs"] = float(np.nanmax(np.abs(fa - fb))) if ne.any() else 0.0
            except (TypeError, ValueError):
                pass
        return d
    if xa is None or xb is None:
        return {"n": int(np.prod(a.shapes[va])), "n_diff": None, "max_ulp": None,
                "max_abs": None, "first_index": None, **base,
                "why": "digests differ (a value over the size budget: no ulp)"}
    d = _diff(np.asarray(xa), np.asarray(xb))
    if not d["n_diff"]:
        return None  # NaNs of other payloads only: equal under the NaN policy
    return {**{k: d[k] for k in ("n", "n_diff", "max_ulp", "max_abs", "first_index")},
            **base, "why": f"{d['n_diff']} of {d['n']} elements, max {d['max_ulp']} ulp"}


def compare(a: Capture, b: Capture, pairs: list[tuple[int, int]]) -> list[dict]:
    """The matched ops whose outputs part, in A's order: ``{a, b, outputs: [{output, ...}]}``."""
    parted = []
    oa, ob = a.ops["outputs"], b.ops["outputs"]
    prod = _Producers(a, b)
    for ia, ib in pairs:
        if base_name(a.ops["op"][ia]) in UNINITIALISED_OPS:
            continue  # uninitialised memory: its bits are no one's result
        outs = []
        for j, (va, vb) in enumerate(zip(oa[ia], ob[ib], strict=True)):
            d = _same(a, va, b, vb, prod)
            if d is not None:
                outs.append({"output": j, "value_a": va, "value_b": vb, **d})
        if outs:
            parted.append({"a": ia, "b": ib, "outputs": outs})
    return parted


def _brief_op(cap: Capture, i: int) -> dict:
    o = cap.ops
    return {"index": i, "op": o["op"][i], "module": o["module"][i], "phase": o["phase"][i],
            "step": o["step"][i], "source": o["source"][i]}


def _producers(cap: Capture) -> dict[int, int]:
    made: dict[int, int] = {}
    for i, outs in enumerate(cap.ops["outputs"]):
        for v in outs:
            made.setdefault(v, i)
    return made


def _origin(cap: Capture, vid: int, made: dict[int, int], unmatched: set[int],
            who: str) -> str:
    """Where value ``vid`` of run ``who`` came from, as a user reads it."""
    i = made.get(vid)
    if i is None:
        return f"a recorded input of {who} (parameters, data or optimizer state) differs"
    o = cap.ops
    base = base_name(o["op"][i])

    where = f"{who}#{i} {o['op'][i]} ({o['module'][i] or 'no module'}, step {o['step'][i]})"
    if i in unmatched:
        dt = cap.dtypes[vid]
        return f"made by {where}, an op of {who} only (its output is {dt})"
    if base in RANDOM_OPS:
        return f"an RNG draw differs: {where}"
    return f"made by {where}"


def _verdict(rep: dict, i: int, j: int) -> dict:
    outs = rep["ops"][i]["outputs"]
    return outs[j] if j < len(outs) else {"verdict": "unjudged"}


def _left(a: Capture, b: Capture, ra: dict, rb: dict, first: dict,
          only_a: set[int], only_b: set[int]) -> dict:
    """Which run left the reference at the first parted op, and the cause."""
    ia, ib = first["a"], first["b"]
    o = first["outputs"][0]
    j = o["output"]
    va, vb = _verdict(ra, ia, j), _verdict(rb, ib, j)
    off = ("introduced", "inherited")
    left = [w for w, v in (("A", va), ("B", vb)) if v["verdict"] in off]
    why = []
    for w, v, r, i in (("A", va, ra, ia), ("B", vb, rb, ib)):
        if v["verdict"] == "introduced":
            ent = next((e for e in r["introduced"] if e["index"] == i and e["output"] == j), {})
            c = ent.get("explain") or {}
            cause = "" if "cause" not in ent else (
                f"; cause: {ent['cause']}" + (f" ({c['variant']})" if c.get("variant") else ""))
            why.append(f"{w}'s kernel introduced it ({v['n_diff']} elements, max "
                       f"{v['max_ulp']} ulp from the reference on {w}'s own inputs{cause})")
        elif v["verdict"] == "inherited":
            why.append(f"{w} inherited it (exact on its own inputs, {v['total_n_diff']} "
                       f"elements, max {v['total_max_ulp']} ulp from the reference's step)")
    wa, wb = _WIDTH.get(o["dtype_a"]), _WIDTH.get(o["dtype_b"])
    if o["dtype_a"] != o["dtype_b"] and wa and wb and wa != wb:
        narrow = "A" if wa < wb else "B"
        if narrow not in left:
            left.append(narrow)
        why.insert(0, f"{narrow} computes in {o['dtype_a'] if narrow == 'A' else o['dtype_b']}"
                      f" where {'B' if narrow == 'A' else 'A'} computes in "
                      f"{o['dtype_b'] if narrow == 'A' else o['dtype_a']}")
    # inputs that differ: where they come from
    ins_a, ins_b = inputs_of(a, ia), inputs_of(b, ib)
    inputs = []
    made_a, made_b = _producers(a), _producers(b)
    prod = _Producers(a, b)
    prod.made = (made_a, made_b)
    for k, (xa, xb) in enumerate(zip(ins_a, ins_b, strict=False)):
        d = _same(a, xa, b, xb, prod)
        if d is None:
            continue
        src_b = _origin(b, xb, made_b, only_b, "B")
        src_a = _origin(a, xa, made_a, only_a, "A")
        inputs.append({"input": k, "value_a": xa, "value_b": xb, "why": d["why"],
                       "from_a": src_a, "from_b": src_b})
    if inputs:
        x = inputs[0]
        src = x["from_b"] if "only" in x["from_b"] or "only" not in x["from_a"] else x["from_a"]
        why.append(("both are exact on their own inputs; " if not left else "")
                   + f"input {x['input']} differs ({x['why']}): {src}")
    elif not left:
        why.append(f"no verdict tells (A: {va['verdict']}, B: {vb['verdict']})")
    left_s = "neither" if not left else ("both" if len(left) == 2 else left[0])
    return {"left": left_s, "verdict_a": va["verdict"], "verdict_b": vb["verdict"],
            "cause": "; ".join(why), "inputs_differ": inputs}


def _settings_differ(a: Capture, b: Capture) -> list[dict]:
    out = []
    skip = {"devices"}
    for k in sorted(set(a.settings) | set(b.settings)):
        if k in skip:
            continue
        x, y = a.settings.get(k), b.settings.get(k)
        if x != y:
            out.append({"setting": k, "a": x, "b": y})
    fa, fb = a.meta.get("applied") or {}, b.meta.get("applied") or {}
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            out.append({"setting": f"applied {k}", "a": fa.get(k), "b": fb.get(k)})
    return out


def pair(a: Capture, b: Capture, *, explain: bool = False,
         judged: tuple[dict, dict] | None = None,
         advance: Callable[[], None] | None = None) -> dict:
    """A against B and each against the reference: the JSON report (``a``, ``b``: each run's
    judgement summary; ``alignment``; ``parted``; ``first_parted``; ``agree``). Captures of
    different digest algorithms: see ``comparable`` (``DigestMismatchError`` when neither can be
    rehashed)."""
    a, b = comparable([a, b])
    t0 = time.perf_counter()
    if judged is None:
        ra = judge(a, explain=explain, advance=advance)
        rb = judge(b, explain=explain, advance=advance)
    else:
        ra, rb = judged
    t1 = time.perf_counter()
    al = align(a, b)
    parted = compare(a, b, al["pairs"])
    only_a, only_b = set(al["only_a"]), set(al["only_b"])
    first = None
    for p in parted:
        p["op_a"], p["op_b"] = _brief_op(a, p["a"]), _brief_op(b, p["b"])
        for o in p["outputs"]:
            o["verdict_a"] = _verdict(ra, p["a"], o["output"])["verdict"]
            o["verdict_b"] = _verdict(rb, p["b"], o["output"])["verdict"]
    if parted:
        p = parted[0]
        node = matched_region_node(a, b, ra, rb, p)  # a compiled graph in both: which node
        first = {"a": p["a"], "b": p["b"], "op": p["op_a"]["op"], "module": p["op_a"]["module"],
                 "phase": p["op_a"]["phase"], "step": p["op_a"]["step"],
                 "source_a": p["op_a"]["source"], "source_b": p["op_b"]["source"],
                 "outputs": p["outputs"],
                 **_left(a, b, ra, rb, p, only_a, only_b)}
        if node is not None:
            first["node"] = node
    # a compiled graph in one run where the other has eager ops: they may part inside it,
    # before any matched op does (core/capture/pair_regions.py)
    inside = first_inside(a, b, ra, rb, only_a, only_b,
                          None if first is None else (first["a"], first["b"]))
    if inside is not None:
        first = inside
    losses = []
    for s in range(1, max(a.steps, b.steps) + 1):
        la = ra["losses"][s - 1] if s <= len(ra["losses"]) else None
        lb = rb["losses"][s - 1] if s <= len(rb["losses"]) else None
        losses.append({"step": s, "a": None if la is None else la["recorded"],
                       "b": None if lb is None else lb["recorded"],
                       "reference_a": None if la is None else la["reference"],
                       "reference_b": None if lb is None else lb["reference"]})

    def summary(r: dict, cap: Capture) -> dict:
        return {"capture": cap.path, "steps": cap.steps, "n_ops": cap.n_ops,
                "exact": r["exact"], "counts": r["counts"],
                "first_divergence": r["first_divergence"],
                "introduced": r["introduced"][:20], "n_introduced": len(r["introduced"]),
                "no_reference": r["no_reference"], "settings": cap.settings,
                "applied": cap.meta.get("applied") or {},
                "judge_seconds": r["judge_seconds"]}

    def shown(cap: Capture, idx: list[int]) -> list[dict]:
        return [_brief_op(cap, i) for i in idx[:_SHOW]]

    agree = not parted and first is None
    return {
        "a": summary(ra, a), "b": summary(rb, b), "agree": agree,
        "settings_differ": _settings_differ(a, b),
        "alignment": {"matched": len(al["pairs"]), "only_a": len(al["only_a"]),
                      "only_b": len(al["only_b"]), "first_only_a": shown(a, al["only_a"]),
                      "first_only_b": shown(b, al["only_b"]), "segments": al["segments"]},
        "first_parted": first, "n_parted": len(parted), "parted": parted[:200],
        "losses": losses,
        "seconds": {"judge": round(t1 - t0, 3), "align_compare": round(time.perf_counter() - t1,
                                                                        3)},
        "reports": (ra, rb),
    }
