"""Ranks: a data-parallel step captured once per rank, judged together (numpy only; issue 43
item 4, docs/capture.md "Ranks").

``tapescope capture --out OUT -- torchrun ... train.py`` writes one capture per rank,
``OUT.rank0.capture``, ``OUT.rank1.capture`` ... (``rank_path``), each with its rank, the world
size and the run's id in its ``meta.rank``. Every collective (``c10d.allreduce_``, DDP's bucket
all-reduce among them; ``allgather_``, ``broadcast_``; the functional ``all_reduce``) is a
recorded op with this rank's inputs and outputs.

**Loading** (``load_ranks``) refuses, in one line naming the file: a capture without a rank, a
rank missing or given twice, world sizes or step counts that differ, a rank file of another run
(its run id), and ranks whose collectives differ (their count, or the k-th collective's op or
shapes): the k-th collective of every rank is one collective, so they must be the same
sequence. Other ops may differ from rank to rank (rank 0 alone printing ``loss.item()``).

**The reference of a collective** is a stated fixed order over every rank's recorded inputs
(``core.capture.collective_ref``; docs/reference-order.md, "Collectives"): an all-reduce SUM is
``((x0 + x1) + x2) + ...`` in rank order. Per collective and per rank: the output against the
reference on the ranks' recorded inputs (``exact`` / ``introduced``), and whether the ranks hold
the same bits after it (``agree``, where the collective replicates its result); ``--explain``
names the order that reproduces an introduced all-reduce (``ring``, ``tree``, ``reverse``,
``layout``).

**Each rank** is then judged as every capture is (``core.capture.judge``), its collectives'
reference taken from here (``override``): the introduced check on every rank's recorded inputs;
the whole-step chain with this rank's own chained input and the other ranks' recorded ones. So a
rank whose collective handed back different bits is *introduced* there, and DDP's ``as_strided``
views of its bucket *inherit* (``_bucket_view``: a view of a flat bucket from the start of its
storage, checked on the recorded values).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tapescope.core.capture.aten_ref_table import NoReference
from tapescope.core.capture.collective_ref import (
    REPLICATED,
    CollectiveNoRef,
    collective_reference,
    explain_collective,
    strided,
)
from tapescope.core.capture.file import Capture, CaptureFileError, comparable, load
from tapescope.core.capture.judge import COLLECTIVES, _diff, judge

__all__ = ["RankSet", "judge_ranks", "load_ranks", "optimizer_agreement", "out_rank_files",
           "rank_files", "rank_path"]

_RANK_FILE = re.compile(r"^(?P<stem>.*)\.rank(?P<rank>\d{1,6})\.capture$")
# not collectives: the functional collectives' plumbing (an identity on the data)
_PLUMBING = ("_c10d_functional.wait_tensor", "_c10d_functional._wrap_tensor_autograd")


def rank_path(out: str | os.PathLike, rank: int) -> str:
    """Rank ``rank``'s file for ``capture --out OUT``: ``OUT.rankN.capture`` (a ``.capture``
    suffix of OUT is not repeated)."""
    s = os.fspath(out)
    stem = s[:-len(".capture")] if s.endswith(".capture") else s
    return f"{stem}.rank{rank}.capture"


def rank_files(path: str | os.PathLike) -> list[str]:
    """The rank files of one run, by rank: ``path`` is a rank file (its siblings) or the
    ``--out`` given to capture (``OUT`` or ``OUT.capture``, itself no file). [] when none."""
    s = os.fspath(path)
    m = _RANK_FILE.match(os.path.basename(s))
    if m:
        return out_rank_files(os.path.join(os.path.dirname(s), m.group("stem")))
    if os.path.exists(s):
        return []
    return out_rank_files(s)


def out_rank_files(out: str | os.PathLike) -> list[str]:
    """Every ``OUT.rankN.capture`` there is for ``capture --out OUT``, by rank."""
    s = os.fspath(out)
    stem = s[:-len(".capture")] if s.endswith(".capture") else s
    folder, base = os.path.split(stem)
    found: dict[int, str] = {}
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    for name in names:
        m = _RANK_FILE.match(name)
        if m and m.group("stem") == base:
            found[int(m.group("rank"))] = os.path.join(folder, name)
    return [found[r] for r in sorted(found)]


def is_collective(op: str) -> bool:
    return op.startswith(COLLECTIVES) and not op.startswith(_PLUMBING)


@dataclass
class RankSet:
    """The loaded rank files of one run: ``caps[r]`` is rank r's capture, ``coll[r]`` the op
    indices of its collectives (the k-th of every rank is one collective)."""

    caps: list[Capture]
    run: str
    coll: list[list[int]]
    notes: list[str] = field(default_factory=list)

    @property
    def world(self) -> int:
        return len(self.caps)


def _rank_meta(cap: Capture) -> tuple[int, int, str]:
    m = cap.meta.get("rank")
    if not (isinstance(m, dict) and isinstance(m.get("rank"), int)
            and isinstance(m.get("world_size"), int) and isinstance(m.get("run"), str)
            and 0 <= m["rank"] < m["world_size"] <= 1 << 20):
        raise CaptureFileError(f"{cap.path}: not a rank capture (no rank, world size and run "
                               "in its meta: captured without torch.distributed?)")
    return m["rank"], m["world_size"], m["run"]


def _shapes(cap: Capture, i: int) -> list:
    return [list(cap.shapes[v]) for v in cap.ops["outputs"][i]]


def load_ranks(paths: list[str]) -> RankSet:
    """Load and check the rank files of one run (any order); ``CaptureFileError`` (one line,
    naming the file) when they are not one complete run."""
    if not paths:
        raise CaptureFileError("no rank files given")
    caps = [load(p) for p in paths]
    by_rank: dict[int, Capture] = {}
    world = run = None
    first = None
    for cap in caps:
        r, n, rid = _rank_meta(cap)
        if world is None:
            world, run, first = n, rid, cap
        elif n != world:
            raise CaptureFileError(f"{cap.path}: world size {n}, but {first.path} has {world}")
        elif rid != run:
            raise CaptureFileError(f"{cap.path}: a rank file of another run (run {rid[:12]}; "
                                   f"{first.path} is of run {run[:12]})")
        if r in by_rank:
            raise CaptureFileError(f"{cap.path}: rank {r} is given twice (also "
                                   f"{by_rank[r].path})")
        by_rank[r] = cap
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        want = rank_path(re.sub(r"\.rank\d+\.capture$", "", first.path), missing[0])
        raise CaptureFileError(f"{first.path}: rank {missing[0]} of {world} is missing "
                               f"(no {want})")
    # digests of one algorithm across the ranks (their outputs are compared by digest)
    ordered = comparable([by_rank[r] for r in range(world)])
    steps = {c.steps for c in ordered}
    if len(steps) != 1:
        raise CaptureFileError(f"{ordered[-1].path}: {ordered[-1].steps} steps, but "
                               f"{ordered[0].path} has {ordered[0].steps}")
    coll = [[i for i, op in enumerate(c.ops["op"]) if is_collective(op)] for c in ordered]
    c0 = coll[0]
    for r in range(1, world):
        cr, cap = coll[r], ordered[r]
        for k, (i0, ir) in enumerate(zip(c0, cr, strict=False)):
            a = (ordered[0].ops["op"][i0], _shapes(ordered[0], i0), ordered[0].ops["step"][i0])
            b = (cap.ops["op"][ir], _shapes(cap, ir), cap.ops["step"][ir])
            if a != b:
                raise CaptureFileError(
                    f"{cap.path}: its collective {k + 1} (op #{ir} {b[0]} {b[1]}, step {b[2]}) "
                    f"is not rank 0's (op #{i0} {a[0]} {a[1]}, step {a[2]}): the ranks made "
                    "different collectives")
        if len(cr) != len(c0):
            raise CaptureFileError(
                f"{cap.path}: {len(cr)} collectives ({cap.n_ops} ops), but rank 0 made "
                f"{len(c0)} ({ordered[0].n_ops} ops): the ranks made different collectives")
    notes = []
    n_ops = [c.n_ops for c in ordered]
    if len(set(n_ops)) > 1:
        notes.append("the ranks made different numbers of ops (" + ", ".join(
            f"rank {r}: {n}" for r, n in enumerate(n_ops)) + "); their collectives match")
    return RankSet(ordered, run, coll, notes)


def _decoded(cap: Capture, i: int) -> list:
    def dec(a: Any) -> Any:
        if isinstance(a, list):
            return [dec(x) for x in a]
        if isinstance(a, dict) and "T" in a:
            x = cap.arrays[a["T"]]
            if x is None:
                raise NoReference(f"{cap.path}: value {a['T']} is over the capture's size "
                                  "budget")
            return x
        return a
    return dec(cap.ops["args"][i])


def _outputs(cap: Capture, i: int) -> list:
    return [cap.arrays[v] for v in cap.ops["outputs"][i]]


def judge_ranks(rs: RankSet, *, explain: bool = False,
                advance: Callable[[], None] | None = None) -> dict:
    """The rank files judged together: per collective, the ranks' outputs against the fixed
    order and against each other; per rank, the capture's judgement with its collectives'
    reference from every rank."""
    world = rs.world
    colls: list[dict] = []
    first = None
    ref_cache: dict[int, list[list] | str] = {}

    def reference_of(k: int) -> list[list] | str:
        """Collective k's reference outputs per rank (on recorded inputs), or why none."""
        if k not in ref_cache:
            op = rs.caps[0].ops["op"][rs.coll[0][k]]
            try:
                args = [_decoded(rs.caps[r], rs.coll[r][k]) for r in range(world)]
                ref_cache[k] = collective_reference(op, args, world)
            except (CollectiveNoRef, NoReference) as e:
                ref_cache[k] = str(e)
            except (IndexError, TypeError, ValueError, KeyError) as e:
                ref_cache[k] = f"the reference failed: {type(e).__name__}: {e}"[:300]
        return ref_cache[k]

    for k in range(len(rs.coll[0])):
        i0 = rs.coll[0][k]
        cap0 = rs.caps[0]
        op = cap0.ops["op"][i0]
        entry = {"collective": k + 1, "op": op, "step": cap0.ops["step"][i0],
                 "phase": cap0.ops["phase"][i0], "module": cap0.ops["module"][i0],
                 "source": cap0.ops["source"][i0], "index": [rs.coll[r][k] for r in range(world)],
                 "elements": int(sum(np.prod(cap0.shapes[v], dtype=np.int64)
                                     for v in cap0.ops["outputs"][i0])), "ranks": []}
        a0 = cap0.ops["args"][i0]
        red = next((a["r"] for a in a0 if isinstance(a, dict) and "r" in a), None)
        if red is None and op.startswith("_c10d_functional.all_reduce") and len(a0) > 1:
            red = str(a0[1]).upper()
        if red is not None:
            entry["reduce"] = red
        outs = [_outputs(rs.caps[r], rs.coll[r][k]) for r in range(world)]
        digests = [[rs.caps[r].digests[v] for v in rs.caps[r].ops["outputs"][rs.coll[r][k]]]
                   for r in range(world)]
        # every rank holds the same bits after it, where the collective replicates its result
        # (not a reduce-scatter: each rank its own chunk; not an unknown collective)
        entry["agree"] = all(d == digests[0] for d in digests) \
            if op.split(".")[1] in REPLICATED else None
        ref = reference_of(k)
        for r in range(world):
            e: dict[str, Any] = {"rank": r}
            if isinstance(ref, str):
                e.update(verdict="no-reference", reason=ref)
            elif any(o is None for o in outs[r]):
                e.update(verdict="unjudged", reason="an output is over the size budget")
            else:
                ds = [_diff(np.asarray(g), o) for g, o in zip(ref[r], outs[r], strict=True)]
                nd = sum(d["n_diff"] for d in ds)
                e.update(verdict="introduced" if nd else "exact", n_diff=nd,
                         max_ulp=max((d["max_ulp"] for d in ds), default=0),
                         n=sum(d["n"] for d in ds))
                if nd and explain:
                    e["cause"] = explain_collective(
                        op, [_decoded(rs.caps[s], rs.coll[s][k]) for s in range(world)],
                        outs[r])
            entry["ranks"].append(e)
        bad = [e["rank"] for e in entry["ranks"] if e["verdict"] == "introduced"]
        entry["exact"] = not bad
        if first is None and (bad or entry["agree"] is False):
            first = {"collective": k + 1, "op": op, "step": entry["step"],
                     "phase": entry["phase"], "source": entry["source"],
                     "introduced_by": bad, "agree": entry["agree"],
                     "index": entry["index"]}
        colls.append(entry)

    def override_for(r: int) -> Callable[[int, str, list, dict], list | None]:
        cap = rs.caps[r]
        pos = {i: k for k, i in enumerate(rs.coll[r])}
        made = {v for i in rs.coll[r] for v in cap.ops["outputs"][i]}  # collectives' outputs

        def override(i: int, op: str, args: list, kwargs: dict) -> list | None:
            if op.startswith(_PLUMBING):
                return [np.array(args[0])]
            if op == "aten.as_strided.default":
                a0 = cap.ops["args"][i][0]
                if isinstance(a0, dict) and a0.get("T") in made:
                    return _bucket_view(cap, i, args)
                return None
            k = pos.get(i)
            if k is None:
                return None
            ref = reference_of(k)
            if isinstance(ref, str):
                raise NoReference(ref)
            mine = _decoded(rs.caps[r], i)
            if _same_arrays(args, mine):  # the introduced check: every rank as recorded
                return ref[r]
            others = [_decoded(rs.caps[s], rs.coll[s][k]) if s != r else args
                      for s in range(world)]
            return collective_reference(op, others, world)[r]  # the chain: this rank's own
        return override

    per_rank = []
    for r in range(world):
        rep = judge(rs.caps[r], explain=explain, advance=advance, override=override_for(r))
        per_rank.append(rep)
    agree = all(c["agree"] is not False for c in colls)
    exact_coll = all(c["exact"] for c in colls)
    return {"ranks": world, "run": rs.run, "files": [c.path for c in rs.caps],
            "steps": rs.caps[0].steps, "notes": rs.notes, "collectives": colls,
            "first_collective": first, "agree": agree, "collectives_exact": exact_coll,
            "exact": agree and exact_coll and all(p["exact"] for p in per_rank),
            "optimizer_steps": optimizer_agreement(rs), "per_rank": per_rank}


def optimizer_agreement(rs: RankSet) -> list[dict]:
    """Per step, whether every rank's optimizer step wrote the same bits as rank 0's: the
    ranks' optimizer-phase ops after the step's last collective compared in order, output by
    output (digests). Data-parallel
    ranks (DDP) update replicated parameters and hold the same bits after each step; ranks
    whose optimizer ops differ (a sharded optimizer, other shapes) are not compared. Told, not
    judged: a sharded optimizer's shards differ by design."""
    out = []
    for step in range(1, rs.caps[0].steps + 1):
        # after the step's last collective: what comes before it is each rank's own (its
        # gradients before they are reduced, a hand-written reduction's local ops)
        starts = [max((i + 1 for i in coll if c.ops["step"][i] == step), default=0)
                  for c, coll in zip(rs.caps, rs.coll, strict=True)]
        seqs = [[i for i in range(start, c.n_ops) if c.ops["step"][i] == step
                 and c.ops["phase"][i] == "optimizer"] for c, start in zip(rs.caps, starts,
                                                                            strict=True)]
        keys = [[(c.ops["op"][i], [c.shapes[v] for v in c.ops["outputs"][i]]) for i in seq]
                for c, seq in zip(rs.caps, seqs, strict=True)]
        e: dict[str, Any] = {"step": step, "ops": len(seqs[0])}
        if not seqs[0] or any(k != keys[0] for k in keys[1:]):
            e.update(agree=None, why="the ranks' optimizer ops differ" if seqs[0] else
                     "no optimizer op")
            out.append(e)
            continue
        e["agree"] = True
        for j in range(len(seqs[0])):
            d0 = [rs.caps[0].digests[v] for v in rs.caps[0].ops["outputs"][seqs[0][j]]]
            parted = [r for r in range(1, rs.world) if [rs.caps[r].digests[v] for v in
                      rs.caps[r].ops["outputs"][seqs[r][j]]] != d0]
            if parted:
                i0 = seqs[0][j]
                e.update(agree=False, index=[seqs[r][j] for r in range(rs.world)],
                         op=rs.caps[0].ops["op"][i0], module=rs.caps[0].ops["module"][i0],
                         ranks=parted)
                break
        out.append(e)
    return out


def _bucket_view(cap: Capture, i: int, args: list) -> list:
    """Op ``i``, an ``as_strided`` view of a collective's output (DDP's reduced bucket, handed
    to the gradients through such views): the view of ``args[0]`` read as its storage from
    element 0 — what DDP allocates, a flat bucket — checked on the recorded values (the view of
    the recorded bucket must be the recorded view, else the bucket did not start its storage:
    no reference)."""
    a = cap.ops["args"][i]
    size, stride = a[1], a[2]
    offset = a[3] if len(a) > 3 and a[3] is not None else cap.ops["kwargs"][i].get(
        "storage_offset", 0) or 0
    if not (isinstance(size, list) and isinstance(stride, list) and isinstance(offset, int)):
        raise NoReference("as_strided with arguments not recorded as integers")
    rec_in, (rec_out,) = cap.arrays[a[0]["T"]], _outputs(cap, i)
    if rec_in is None or rec_out is None:
        raise NoReference("as_strided of a value over the capture's size budget")
    check = strided(rec_in.reshape(-1) if rec_in.ndim == 1 else rec_in, size, stride, offset)
    if check is None or check.dtype != rec_out.dtype or check.shape != rec_out.shape \
            or check.tobytes() != np.ascontiguousarray(rec_out).tobytes():
        raise NoReference("as_strided of a collective's output that is not a flat bucket at "
                          "the start of its storage (its view of the recorded values is not "
                          "the recorded view)")
    return [strided(np.asarray(args[0]), size, stride, offset)]


def _same_arrays(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_arrays(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b
    return True
