"""The fusion plan: segments, generated kernels, launch counts; and applying it to a program."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tapescope.core.optable.registry import REGISTRY
from tapescope.gpu.fusion import codegen
from tapescope.gpu.fusion.analysis import Segment, find_segments
from tapescope.gpu.fusion.optimizer import OPTIMIZER_FACTS, OPTIMIZER_TEXT, FusionRuntime
from tapescope.gpu.fusion.serial import find_tail, tail_backward, tail_forward
from tapescope.gpu.kernel_facts import KernelFacts
from tapescope.gpu.program import Program, Step
from tapescope.gpu.source import STORAGE, SUFFIX, instantiate

__all__ = ["FusionError", "FusedKernel", "SegmentPlan", "FusionPlan", "plan", "apply"]

_MAX_GRID = 4096


class FusionError(RuntimeError):
    """A plan cannot be made or applied (already fused, a plan of another program)."""


@dataclass(frozen=True)
class FusedKernel:
    """One generated kernel: final name, role, its segment, its CUDA C text, launch shape."""

    name: str
    role: str  # "forward" | "backward" | "params" | "optimizer"
    segment: int | None
    source: str
    grid: int
    block: int


@dataclass(frozen=True)
class SegmentPlan:
    """One fused run of row-local nodes and the kernels that replace its per-node launches."""

    index: int
    lo: int
    hi: int
    rows: int
    node_ids: tuple[int, ...]
    ops: tuple[str, ...]
    forward: str
    backward: str | None
    params: str | None
    launches_replaced: tuple[int, int]  # per-node launches removed (forward, backward)
    kind: str = "row"  # "row": block = row; "serial": the scalar loss tail, one thread
    backward_ids: tuple[int, ...] = ()  # nodes whose gradient contributions the bwd kernels add


@dataclass
class FusionPlan:
    """Everything the fusion engine decided for one program; ``describe()`` prints it."""

    plan_id: str
    dtype: np.dtype
    math: str
    n_nodes: int
    segments: list[SegmentPlan]
    kernels: list[FusedKernel]
    source: str
    launches_before: dict[str, int]
    launches_after: dict[str, int]
    layout: codegen.Layout = field(repr=False)
    _segs: list[Segment] = field(repr=False, default_factory=list)
    #: what the host launcher needs of each kernel of ``source`` (gpu.kernel_facts), as the
    #: generators stated it: the row kernels' barriers; the optimizer's threads one by one
    facts: dict[str, KernelFacts] = field(repr=False, default_factory=dict)

    def kernel(self, name: str) -> FusedKernel:
        """A generated kernel by name."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"plan {self.plan_id} has no kernel {name!r}")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (sources included)."""
        return {"plan_id": self.plan_id, "dtype": self.dtype.name, "math": self.math,
                "segments": [{**s.__dict__, "node_ids": list(s.node_ids), "ops": list(s.ops),
                              "launches_replaced": list(s.launches_replaced),
                              "backward_ids": list(s.backward_ids)}
                             for s in self.segments],
                "kernels": [k.__dict__ for k in self.kernels],
                "launches_before": self.launches_before, "launches_after": self.launches_after}

    def describe(self, sources: bool = False) -> str:
        """A human-readable account: segments, kernels, launches per episode before/after."""
        out = [f"fusion plan {self.plan_id} ({self.dtype.name}, math={self.math}, "
               f"{self.n_nodes} nodes, {len(self.segments)} segments)"]
        for s in self.segments:
            shape = "serial loss tail" if s.kind == "serial" else f"{s.rows} rows"
            out.append(f"  segment {s.index}: nodes {s.lo}..{s.hi} ({len(s.node_ids)} ops, "
                       f"{shape}): {' '.join(s.ops)}")
            out.append(f"    forward  {s.forward}   replaces {s.launches_replaced[0]} launches")
            out.append(f"    backward {s.backward or '-'} + {s.params or '-'}   replaces "
                       f"{s.launches_replaced[1]} launches")
        opt = ", ".join(k.name for k in self.kernels if k.role == "optimizer")
        out.append(f"  optimizer: {opt} (one launch over a parameter table)")
        b, a = self.launches_before, self.launches_after
        out.append(f"  {'launches':<22}{'unfused':>9}{'fused':>8}")
        for key in ("forward", "backward", "optimizer", "episode"):
            out.append(f"  {key:<22}{b[key]:>9}{a[key]:>8}")
        if sources:
            for k in self.kernels:
                out.append(f"\n/* ---- {k.name} ({k.role}, grid {k.grid}, block {k.block}) */")
                out.append(k.source)
        return "\n".join(out)


def _block(cols: int) -> int:
    b = 32
    while b < cols and b < 128:
        b *= 2
    return b


def plan(prog: Program, min_nodes: int = 2) -> FusionPlan:
    """Analyse a captured (unfused) program and generate its fused kernels (nothing runs)."""
    if prog.fusion is not None:
        raise FusionError("this program is already fused; plan the unfused capture")
    nodes, dt = prog.nodes, np.dtype(prog.dtype)
    segs = find_segments(nodes, min_nodes)
    # a node running the user's kernel (--kernel) stays unfused: so does its segment
    own = set(getattr(prog, "user_kernels", None) or ())
    segs = [s for s in segs if not own & set(s.ids)]
    lay = codegen.Layout(len(nodes))
    texts: list[tuple[codegen.KernelText, str, int | None, int, int]] = []
    seg_names = []
    for k, seg in enumerate(segs):
        base = f"fzPLANID_s{k}"
        block = _block(max(n.cols for n in seg.nodes))
        grid = min(seg.rows, _MAX_GRID)
        f = codegen.row_forward(f"{base}_fwd_T", seg, nodes, lay, dt)
        b = codegen.row_backward(f"{base}_bwd_T", seg, nodes, prog.reached, lay, dt)
        p = codegen.param_grads(f"{base}_par_T", seg, nodes, prog.reached, lay, dt)
        texts.append((f, "forward", k, grid, block))
        if b is not None:
            texts.append((b, "backward", k, grid, block))
        if p is not None:
            slots = sum(nodes[j].size for j in _whole_targets(seg, nodes, prog.reached))
            texts.append((p, "params", k, max(1, min(-(-slots // 128), _MAX_GRID)), 128))
        seg_names.append((f.name, b.name if b else None, p.name if p else None))
    tail = find_tail(nodes, prog.loss_id)
    if tail is not None and own & set(tail.ids):
        tail = None
    if tail is not None:
        k = len(segs)
        f = tail_forward(f"fzPLANID_s{k}_ser_T", tail, nodes, lay, dt)
        b = tail_backward(f"fzPLANID_s{k}_serb_T", tail, nodes, prog.reached, lay, dt)
        texts += [(f, "forward", k, 1, 1), (b, "backward", k, 1, 1)]
        seg_names.append((f.name, b.name, None))
        segs.append(Segment(tail.lo, tail.hi, 1))
    body = "\n".join(t[0].text for t in texts) + "\n" + OPTIMIZER_TEXT
    raw = ('#include "half.cuh"\n' if dt in STORAGE else "") + codegen.HEADER + body
    sfx = SUFFIX[dt]
    digest = hashlib.sha256(f"{sfx}|{prog.math}|{raw}".encode()).hexdigest()[:10]
    pid = f"{digest}{sfx[1:]}"

    def final(name: str | None) -> str | None:
        return None if name is None else instantiate(name.replace("PLANID", pid), dt, prog.math)

    kernels = [FusedKernel(final(t.name), role, k, instantiate(t.text.replace("PLANID", pid), dt,
                                                                 prog.math), grid, block)
               for t, role, k, grid, block in texts]
    n_live = sum(1 for i in prog.param_ids() if prog.grads[i] is not None)
    for oname in ("adam", "sgd"):  # grid: one block per updated parameter
        kernels.append(FusedKernel(final(f"fzPLANID_{oname}_T"), "optimizer", None,
                                   _one_kernel(instantiate(OPTIMIZER_TEXT.replace(
                                       "PLANID", pid), dt, prog.math), oname),
                                   max(1, min(n_live, _MAX_GRID)), 128))
    source = instantiate(raw.replace("PLANID", pid), dt, prog.math)
    facts = {final(t.name): t.facts for t, *_ in texts}
    facts.update({final(n): f for n, f in OPTIMIZER_FACTS.items()})
    fwd_b = len(prog.phases["forward"])
    bwd_b = len(prog.phases["backward"])
    seg_plans, fwd_a, bwd_a = [], fwd_b, bwd_b
    for k, seg in enumerate(segs):
        ids = set(range(seg.lo, seg.hi + 1))
        rf = sum(1 for s in prog.phases["forward"] if s.node in ids)
        rb = sum(1 for s in prog.phases["backward"] if s.node in ids)
        fn, bn, pn = (final(x) for x in seg_names[k])
        fwd_a += 1 - rf
        bwd_a += (bn is not None) + (pn is not None) - rb
        serial = tail is not None and k == len(segs) - 1
        node_ids = tail.ids if serial else tuple(seg.ids)
        pushing = tuple(i for i in reversed(node_ids) if codegen.pushes(nodes, prog.reached, i))
        seg_plans.append(SegmentPlan(k, seg.lo, seg.hi, seg.rows, node_ids,
                                     tuple(nodes[i].op for i in node_ids), fn, bn, pn, (rf, rb),
                                     "serial" if serial else "row", pushing))
    before = {"forward": fwd_b, "backward": bwd_b, "optimizer": n_live}
    after = {"forward": fwd_a, "backward": bwd_a, "optimizer": min(n_live, 1)}
    before["episode"] = sum(before.values())
    after["episode"] = sum(after.values())
    return FusionPlan(pid, dt, prog.math, len(nodes), seg_plans, kernels, source, before, after,
                      lay, segs, facts)


def _one_kernel(text: str, which: str) -> str:
    start = text.index(f"_{which}_")
    start = text.rfind('extern "C"', 0, start)
    end = text.find('extern "C"', start + 1)
    return text[start:end if end > 0 else len(text)].strip() + "\n"


def _whole_targets(seg: Segment, nodes: tuple, reached: list[bool]) -> set[int]:
    out = set()
    for info in seg.nodes:
        for k in codegen.pushes(nodes, reached, info.id):
            if info.kinds[k] == "whole":
                out.add(nodes[info.id].inputs[k])
    return out


def _table(prog: Program, p: FusionPlan) -> tuple[np.ndarray, list]:
    n = len(prog.nodes)
    keep = []
    tab = np.zeros(2 * n + len(p.layout.extras), dtype=np.int64)
    tab[:n] = prog.value_ptrs
    tab[n:2 * n] = prog.grad_ptrs
    for (i, key), slot in p.layout.extras.items():
        node = prog.nodes[i]
        f = REGISTRY[node.op].row
        if key == "s_seed":  # the loss seed of a half episode (Program.seed_buf)
            buf = prog.seed_buf
        elif key.startswith("k_"):  # a kept row value: one per row
            buf = prog.device.alloc(max(node.size // node.shape[-1], 1), prog.compute_dtype)
        else:  # a host table of the row form ("t_<name>")
            arrays = f.make_tables(node.shape, node.attrs, prog.compute_dtype)
            arr = np.ascontiguousarray(arrays[f.tables.index(key[2:])]).reshape(-1)
            buf = prog.device.alloc(arr.size, prog.compute_dtype)
            buf.upload(arr)
        keep.append(buf)
        tab[slot] = buf.ptr
    return tab, keep


def _splice(steps: list[Step], ids: set[int], new: list[Step]) -> list[Step]:
    at = next((k for k, s in enumerate(steps) if s.node in ids), None)
    if at is None:
        return steps
    rest = [s for s in steps if s.node not in ids]
    return rest[:at] + new + rest[at:]


def apply(prog: Program, p: FusionPlan | None = None) -> FusionPlan:
    """Fuse a captured program in place: its phases launch the plan's kernels from now on.

    Every node still writes its own value and gradient buffers, so ``read``, ``set_input`` and
    parity work unchanged; the optimizer passed to ``step``/``run_episode`` updates every
    parameter in one launch. Returns the plan (also kept as ``prog.fusion``).
    """
    p = p or plan(prog)
    if prog.fusion is not None:
        raise FusionError("this program is already fused")
    if p.n_nodes != len(prog.nodes):
        raise FusionError(f"plan {p.plan_id} was made for {p.n_nodes} nodes, the program has "
                          f"{len(prog.nodes)}")
    module = prog.device.compile(p.source, p.facts)
    tab, keep = _table(prog, p)
    tbuf = prog.device.alloc(tab.size, np.int64)
    tbuf.upload(tab)
    by_name = {k.name: k for k in p.kernels}

    def launch(name: str, rows: int, node: int) -> Step:
        k = by_name[name]
        return Step(node, module[name].record(k.grid, k.block, tbuf, np.int64(rows)))

    fwd, bwd = prog.phases["forward"], prog.phases["backward"]
    for s in p.segments:
        ids = set(range(s.lo, s.hi + 1))
        fwd = _splice(fwd, ids, [launch(s.forward, s.rows, s.lo)])
        bwd = _splice(bwd, ids, [launch(n, s.rows, s.hi) for n in (s.backward, s.params)
                                 if n is not None])
    prog.attach_fusion(p, {"forward": fwd, "backward": bwd}, FusionRuntime(module, tbuf, keep))
    return p
