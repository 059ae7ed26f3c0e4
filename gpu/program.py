"""The replay engine: `capture(device, tape, loss)` mirrors one recorded episode on a device.

A Program holds a value buffer per node and a gradient buffer per node that backward reaches,
and the episode as launch lists per phase (`phases["forward"]`, `phases["backward"]`, each a
list of `Step(node_id, Launch)`): the host backend replays them in one call per phase, the
cuda backend captures forward + backward + optimizer as one CUDA graph. `value_ptrs` /
`grad_ptrs` (node id → device address, 0 = none) and their device copies `vtab` / `gtab` are
the pointer tables generated (fused) kernels read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tapescope.core import precision
from tapescope.core.gcpause import gc_paused
from tapescope.core.optable.registry import REGISTRY, grad_inputs, reached_nodes
from tapescope.core.tape import Tape, Var
from tapescope.gpu.device import Buffer, Device, Launch
from tapescope.gpu.library import KERNELS, LEAF, BuildCtx
from tapescope.gpu.source import STORAGE, SUFFIX, library_facts, library_source

__all__ = ["CaptureError", "Program", "Step", "capture", "gc_paused", "reached_nodes"]


class CaptureError(RuntimeError):
    """The tape cannot be mirrored: poisoned, an op or dtype without kernels, a bad loss."""


@dataclass(frozen=True)
class Step:
    """One launch of a phase and the tape node it belongs to (-1: bookkeeping)."""

    node: int
    launch: Launch


def _node_id(tape: Tape, v: Var | int) -> int:
    if isinstance(v, Var):
        if v.tape is not tape:
            raise CaptureError("the loss Var belongs to another tape")
        return v.id
    return int(v)


def capture(device: Device, tape: Tape, loss: Var | int, math: str | None = None,
            kernels: list | None = None) -> Program:
    """Mirror the episode [0, loss] of `tape` on `device` (values uploaded for the leaves).

    `math` overrides the tape's math mode on the device: replaying a refmath tape with
    math="platform" shows exactly where and how far the platform libm drifts. Fusion is
    ``gpu.capture(..., fuse=True)`` (gpu/__init__.py): it builds on this Program. ``kernels``:
    ``gpu.user_kernels.KernelSpec`` files run in place of the stock kernels of their nodes.
    """
    if math is not None and math not in ("refmath", "platform"):
        raise CaptureError(f"math must be 'refmath' or 'platform', not {math!r}")
    if not tape.ok:
        raise CaptureError(f"cannot capture a poisoned tape: {tape.error}")
    li = _node_id(tape, loss)
    nodes = tape.nodes
    if not 0 <= li < len(nodes):
        raise CaptureError(f"loss node {li} is not on the tape ({len(nodes)} nodes)")
    if nodes[li].size != 1:
        raise CaptureError(f"node {li} {nodes[li].op}: the loss must be a scalar, "
                           f"shape {nodes[li].shape}")
    if tape.dtype not in SUFFIX:
        raise CaptureError(f"tape dtype {tape.dtype} has no kernels (float64, float32, "
                           "float16, bfloat16)")
    for n in nodes[: li + 1]:
        if n.op not in KERNELS:
            raise CaptureError(f"node {n.id} {n.op} ({n.name or 'unnamed'}): no device kernel "
                               f"for op {n.op!r}")
        if n.dtype != tape.dtype:
            raise CaptureError(f"node {n.id} {n.op}: dtype {n.dtype} differs from the tape's")
    with gc_paused():
        return Program(device, tape, li, math, kernels)


class Program:
    """A captured episode on a device; see the module docstring."""

    def __init__(self, device: Device, tape: Tape, loss: int, math: str | None = None,
                 kernels: list | None = None) -> None:
        self.device = device
        self.dtype = np.dtype(tape.dtype)
        # scalars, scratch, optimizer settings: float32 in a half episode
        self.compute_dtype = precision.compute_dtype(self.dtype)
        self.math = math or tape.math
        self.loss_id = loss
        self.nodes = tape.nodes[: loss + 1]
        # the CUDA C both backends compile (a half episode: its own dtype's kernels only), and
        # the facts of the same kernels (the host's lanes and barriers)
        if self.dtype in STORAGE:
            self.source = library_source(self.math, (self.dtype,))
            self.module = device.compile(self.source, library_facts((self.dtype,)))
        else:
            self.source = library_source(self.math)
            self.module = device.compile(self.source, library_facts())
        # --kernel: per node id, a module answering its op's kernel names from the user's file
        self.user_kernels: dict[int, Any] = {}
        self.reached = reached_nodes(self.nodes, loss)
        dev = device
        self.values: list[Buffer] = [dev.alloc(n.size, self.dtype) for n in self.nodes]
        self.grads: list[Buffer | None] = [
            dev.alloc(n.size, self.dtype) if r else None
            for n, r in zip(self.nodes, self.reached, strict=True)
        ]
        for n in self.nodes:
            if n.op in ("param", "const"):
                self.values[n.id].upload(np.ascontiguousarray(tape.value(n.id)).reshape(-1))
        # the loss seed of a half episode comes from this buffer (the loss scale under --amp,
        # set per step: set_seed); float64/float32 episodes fill it with 1 in the launch
        self.seed_buf: Buffer | None = None
        if self.dtype in STORAGE:
            self.seed_buf = dev.alloc(1, self.compute_dtype)
            self.seed_buf.upload(np.ones(1, self.compute_dtype))
        self.value_ptrs = np.array([b.ptr for b in self.values], dtype=np.int64)
        self.grad_ptrs = np.array([b.ptr if b else 0 for b in self.grads], dtype=np.int64)
        self.vtab = dev.alloc(len(self.nodes), np.int64)
        self.vtab.upload(self.value_ptrs)
        self.gtab = dev.alloc(len(self.nodes), np.int64)
        self.gtab.upload(self.grad_ptrs)
        self.ctx = BuildCtx(dev, self.module, self.dtype, self.nodes, self.values, self.grads)
        if kernels:
            from tapescope.gpu.user_kernels import compile_overrides

            self.user_kernels = compile_overrides(device, list(kernels), self.nodes, self.dtype,
                                                  self.math, self.module, self._kernel_names)
        self.phases: dict[str, list[Step]] = {
            "forward": self._build_forward(),
            "backward": self._build_backward(),
        }
        if self.user_kernels:  # a user kernel that crashes: one line, not a dead process
            from tapescope.gpu.user_kernels import trial_run

            trial_run(self)
        self._lists: dict[Any, Any] = {}
        self.fusion: Any = None  # the FusionPlan once gpu.fusion.apply attached one
        self.fusion_runtime: Any = None  # what the fused kernels need alive (gpu.fusion)
        self._graph: tuple[Any, Any, int] | None = None
        self.graph_captures = 0  # CUDA graphs captured by run_episode (once per configuration)
        self.bytes_to_host_start = dev.stats.bytes_to_host

    # ---- building ----------------------------------------------------------------------------
    def _kernel_names(self, i: int) -> set[str]:
        """The kernel names node ``i``'s launch builders record (a dry build: what a user's
        kernel file must define to stand in for them)."""
        from tapescope.gpu.user_kernels import NameSpy

        spy = NameSpy(self.module)
        self.ctx.module = spy
        try:
            n = self.nodes[i]
            if KERNELS[n.op].fwd != LEAF:
                KERNELS[n.op].fwd(self.ctx, n)
                if self.reached[i]:
                    for k in grad_inputs(self.nodes, i):
                        KERNELS[n.op].bwd(self.ctx, n, k)
        finally:
            self.ctx.module = self.module
        return spy.seen

    def _build_forward(self) -> list[Step]:
        steps = []
        for n in self.nodes:
            fwd = KERNELS[n.op].fwd
            if fwd == LEAF:
                continue
            self.ctx.module = self.user_kernels.get(n.id, self.module)
            steps += [Step(n.id, ln) for ln in fwd(self.ctx, n)]
        self.ctx.module = self.module
        return steps

    def _build_backward(self) -> list[Step]:
        ctx = self.ctx
        live = [i for i, g in enumerate(self.grads) if g is not None]
        table = np.array([[self.grad_ptrs[i], self.nodes[i].size] for i in live],
                         dtype=np.int64).reshape(-1)
        steps = [Step(-1, ctx.module[f"zero_many_{ctx.sfx}"].record(
                     max(len(live), 1), 128, ctx.aux(-1, "zero_table", table), len(live))),
                 Step(self.loss_id, ctx.launch("fill", 1, self.grads[self.loss_id],
                                               ctx.real(1.0), 1) if self.seed_buf is None else
                      ctx.launch("fill_from", 1, self.grads[self.loss_id], self.seed_buf, 1))]
        for i in range(self.loss_id, -1, -1):
            if not self.reached[i]:
                continue
            n = self.nodes[i]
            ctx.module = self.user_kernels.get(i, self.module)
            for k in grad_inputs(self.nodes, i):
                steps += [Step(i, ln) for ln in KERNELS[n.op].bwd(ctx, n, k)]
        ctx.module = self.module
        return steps

    # ---- running -----------------------------------------------------------------------------
    def _run_phase(self, *names: str, extra: list[Launch] | None = None) -> None:
        key = names + (id(extra) if extra else 0,)
        hit = self._lists.get(key)
        # the extra list is held with its prebuilt replay: an id alone could be reused
        if hit is None or hit[0] is not extra:
            launches = [s.launch for name in names for s in self.phases[name]] + (extra or [])
            hit = self._lists[key] = (extra, self.device.launch_list(launches))
        hit[1].replay()

    def invalidate(self) -> None:
        """Forget prebuilt launch lists and graphs (call after editing `phases`)."""
        self._lists.clear()
        self._graph = None

    def forward(self) -> None:
        """Recompute every node's value from the current leaves."""
        self._run_phase("forward")

    def completed_at(self, node: int, which: str = "value") -> tuple[str, int]:
        """(phase, launch index) right after which the device holds ``node``'s value or
        gradient in full; index -1: before the phase's first launch (a leaf's value).

        Unfused programs only: a fused kernel computes many nodes in one launch.
        """
        if self.fusion is not None:
            raise ValueError("a fused program computes many nodes per launch: per-node hooks "
                             "need the unfused replay")
        i = self.node_id(node)
        if which == "value":
            idx = [k for k, s in enumerate(self.phases["forward"]) if s.node == i]
            return "forward", idx[-1] if idx else -1
        if which != "grad":
            raise ValueError(f"which must be 'value' or 'grad', not {which!r}")
        if self.grads[i] is None:
            raise ValueError(f"node {i} {self.nodes[i].op}: backward never reaches it, it has "
                             "no gradient")
        steps = self.phases["backward"]
        if i == self.loss_id:  # the seed: the fill launch, before the loss's own backward
            return "backward", next(k for k, s in enumerate(steps) if s.node == i)
        # its last contribution comes from its smallest consumer (backward runs in decreasing id)
        by = [n.id for n in self.nodes[i + 1:] if self.reached[n.id]
              and any(n.inputs[k] == i for k in grad_inputs(self.nodes, n.id))]
        last = min(by)
        return "backward", max(k for k, s in enumerate(steps) if s.node == last)

    def run_phase_hooked(self, name: str, hooks: dict[int, Any]) -> None:
        """Run phase ``name`` calling ``hooks[k]()`` right after its launch ``k`` (-1: before
        the first): fault injection and probes between launches (slow: lists built per call)."""
        steps = self.phases[name]
        start = 0
        for k in sorted(hooks):
            if k >= start:
                self.device.launch_list([s.launch for s in steps[start:k + 1]]).replay()
                start = k + 1
            self.device.synchronize()
            hooks[k]()
        if start < len(steps):
            self.device.launch_list([s.launch for s in steps[start:]]).replay()

    def backward(self) -> None:
        """Zero every gradient, seed the loss with 1, run the backward launches."""
        self._run_phase("backward")

    def attach_fusion(self, plan: Any, phases: dict[str, list[Step]], runtime: Any) -> None:
        """Adopt a fusion plan (``gpu.fusion.apply``): its ``phases`` replace these, and
        ``runtime.optimizer_launches(self, opt, stock)`` replaces the per-parameter updates."""
        if self.fusion is not None:
            raise ValueError("this program is already fused")
        self.phases.update(phases)
        self.invalidate()
        self.fusion, self.fusion_runtime = plan, runtime

    def optimizer_launches(self, opt: Any) -> list:
        """The launches of one update by ``opt`` (gpu.SGD / gpu.Adam); one launch when fused."""
        stock = opt.prepare(self)  # binds once, advances t, uploads this step's scalars
        if self.fusion_runtime is None:
            return stock
        launches = self.fusion_runtime.optimizer_launches(self, opt, stock)
        self._opt_launches = len(launches)
        return launches

    def set_seed(self, seed: float) -> None:
        """The loss gradient's seed for the next backward (a half episode's loss scale)."""
        if self.seed_buf is None:
            raise ValueError(f"a {self.dtype} program seeds backward with 1 (no loss scale)")
        self.seed_buf.upload(np.full(1, seed, self.compute_dtype))

    def step(self, opt: Any) -> None:
        """One optimizer update on the device (opt: gpu.SGD / gpu.Adam)."""
        self._run_phase(extra=self.optimizer_launches(opt))

    def run_episode(self, opt: Any | None = None) -> None:
        """forward + backward (+ optimizer): one CUDA graph replay on cuda, one list on host."""
        launches = self.optimizer_launches(opt) if opt is not None else []
        if self.device.kind == "cuda":
            # captured once; replayed every episode until the optimizer's launches or the
            # phases change (`invalidate`). The key holds the launches, so their ids stay valid.
            key = tuple(map(id, launches))
            if self._graph is None or self._graph[0][0] != key:
                seq = [s.launch for p in ("forward", "backward") for s in self.phases[p]]
                seq += launches
                self._graph = ((key, launches), self.device.capture_graph(seq), len(seq))
                self.graph_captures += 1
            self.device.launch_graph(self._graph[1], self._graph[2])
        else:
            self._run_phase("forward", "backward", extra=launches)

    # ---- data in and out ---------------------------------------------------------------------
    def node_id(self, v: Var | int | str) -> int:
        """A node id from a Var, an id, or a (scoped) node name."""
        if isinstance(v, str):
            hits = [n.id for n in self.nodes if n.name == v]
            if len(hits) != 1:
                raise KeyError(f"{len(hits)} captured nodes are named {v!r}")
            return hits[0]
        i = v.id if isinstance(v, Var) else int(v)
        if not 0 <= i < len(self.nodes):
            raise KeyError(f"node {i} is not in this program ({len(self.nodes)} nodes)")
        return i

    def set_input(self, v: Var | int | str, array: Any) -> None:
        """Upload new data into a leaf (const or param); shape must match the captured node."""
        i = self.node_id(v)
        n = self.nodes[i]
        if n.op not in ("const", "param"):
            raise ValueError(f"node {i} {n.op}: only leaves take inputs")
        a = np.asarray(array)
        if a.shape != n.shape:
            raise ValueError(f"node {i} {n.name or n.op}: shape {a.shape} given, "
                             f"{n.shape} captured")
        a = np.ascontiguousarray(a, dtype=self.dtype)
        for c in self.nodes:  # an index out of range would read outside a buffer
            row = REGISTRY[c.op].row
            for k, (_, kind) in enumerate(row.ins if row is not None else ()):
                if kind != "index" or c.inputs[k] != i:
                    continue
                x = c.inputs[[kd for _, kd in row.ins].index("row")]
                ncls = self.nodes[x].shape[-1]  # a column of the row input
                if not np.all((a >= 0) & (a < ncls) & (a == np.floor(a))):
                    raise ValueError(f"node {i} {n.name or n.op}: {c.op} targets must "
                                     f"be integers in [0, {ncls})")
            if c.op == "gather" and c.inputs[1] == i:
                xs = self.nodes[c.inputs[0]].shape
                dim = xs[int(c.attrs.get("axis", 0)) % len(xs)]
                if not np.all((a >= -dim) & (a < dim) & (a == np.floor(a))):
                    raise ValueError(f"node {i} {n.name or n.op}: gather indices must be "
                                     f"integers in [{-dim}, {dim})")
        self.values[i].upload(a.reshape(-1))

    def read(self, v: Var | int | str, which: str = "value") -> np.ndarray | None:
        """Download a node's value or gradient (None: backward never reaches it)."""
        i = self.node_id(v)
        if which not in ("value", "grad"):
            raise ValueError(f"which must be 'value' or 'grad', not {which!r}")
        buf = self.values[i] if which == "value" else self.grads[i]
        if buf is None:
            return None
        self.device.synchronize()
        return buf.download().reshape(self.nodes[i].shape)

    def loss(self) -> float:
        """The loss value (one scalar crosses to the host)."""
        return float(self.read(self.loss_id)[()])

    def param_ids(self) -> list[int]:
        """Parameter node ids in tape order."""
        return [n.id for n in self.nodes if n.op == "param"]

    def sync_params_to(self, tape: Tape) -> None:
        """Write the device's parameter values back into the tape's parameters."""
        for i in self.param_ids():
            tn = tape.node(i)
            if tn.op != "param" or tuple(tn.shape) != tuple(self.nodes[i].shape):
                raise ValueError(f"node {i}: the tape's {tn.op} {tn.shape} is not the "
                                 f"captured param {self.nodes[i].shape}")
            tape.assign(i, self.read(i))

    @property
    def stats(self) -> dict[str, int]:
        """Launch counts per phase and per episode; bytes moved to the host since capture."""
        fwd, bwd = len(self.phases["forward"]), len(self.phases["backward"])
        opt = getattr(self, "_opt_launches", 0)
        return {
            "launches_forward": fwd,
            "launches_backward": bwd,
            "launches_optimizer": opt,
            "launches_per_episode": fwd + bwd + opt,
            "launches_total": self.device.stats.launches,
            "bytes_to_host": self.device.stats.bytes_to_host - self.bytes_to_host_start,
        }
