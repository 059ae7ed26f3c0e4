"""Two runs of one episode, stepped together and compared node by node (no Qt).

A run is the CPU tape (``refmath`` or ``platform`` math, float64 or float32) or a device replay
of it (``gpu.capture``, optionally fused). ``PairRunner.step()`` advances both by one minibatch
(record, backward, set inputs, forward, backward, compare, optimizer steps) and returns a
``StepResult``: both losses, per-node parity, the first divergence, the step time. It is the one
episode loop: ``tapescope parity``, ``tapescope report`` and the live session all step a
``PairRunner``. The metrics are ``gpu.parity`` (on the device) or ``core.parity`` (on the host,
in the narrower dtype when the two runs differ), never recomputed here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

COMPARES = {
    "cpu-device": "CPU ↔ device",
    "cpu-platform": "CPU ↔ CPU platform math",
    "unfused-fused": "device unfused ↔ fused",
    "f64-device": "CPU float64 ↔ device",
}


@dataclass(frozen=True)
class RunSpec:
    """One side of a comparison: where it runs, its math, dtype and fusion."""

    side: str  # "cpu" | "device"
    math: str = "refmath"
    dtype: str = "float64"
    fuse: bool = False
    kernels: tuple[str, ...] = ()  # --kernel specs: the user's files replacing stock kernels

    def label(self) -> str:
        """A short human name, e.g. ``device fused float32 platform``."""
        parts = ["CPU" if self.side == "cpu" else "device"]
        if self.side == "device":
            parts.append("fused" if self.fuse else "unfused")
        parts += [self.dtype, self.math]
        if self.kernels:
            parts.append("+ " + ", ".join(self.kernels))
        return " ".join(parts)


@dataclass(frozen=True)
class SessionConfig:
    """What a live session or a report runs; ``pair()`` gives the two RunSpecs."""

    workload: str = "mlp"
    device: str = "host"
    fuse: bool = False
    dtype: str = "float64"
    math: str = "refmath"
    compare: str = "cpu-device"
    seed: int = 0
    worker: str | None = None  # a command that serves the device side (app.remote), or here
    kernels: tuple[str, ...] = ()  # --kernel OP=FILE.cu / NODE=FILE.cu (gpu.user_kernels)
    explain: bool = False  # core.explain: a cause on every introduced value / gradient

    def __post_init__(self) -> None:
        if self.compare not in COMPARES:
            raise ValueError(f"compare must be one of {', '.join(COMPARES)}, not {self.compare!r}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be float64 or float32, not {self.dtype!r}")
        if self.math not in ("refmath", "platform"):
            raise ValueError(f"math must be refmath or platform, not {self.math!r}")
        if self.kernels and self.compare == "cpu-platform":
            raise ValueError("--kernel replaces a device kernel: --compare cpu-platform has no "
                             "device side")
        if self.kernels and self.worker is not None:
            raise ValueError("--kernel compiles your file on this machine: it cannot go with "
                             "--worker")

    def pair(self) -> tuple[RunSpec, RunSpec]:
        """(reference, candidate). The reference is always refmath: it defines the bits."""
        dev = RunSpec("device", self.math, self.dtype, self.fuse, tuple(self.kernels))
        if self.compare == "cpu-device":
            return RunSpec("cpu", "refmath", self.dtype), dev
        if self.compare == "cpu-platform":
            return RunSpec("cpu", "refmath", self.dtype), RunSpec("cpu", "platform", self.dtype)
        if self.compare == "unfused-fused":
            return replace(dev, fuse=False), replace(dev, fuse=True)
        return RunSpec("cpu", "refmath", "float64"), dev

    def with_(self, **kw: Any) -> SessionConfig:
        """A copy with some fields changed (the toolbar's restart)."""
        return replace(self, **kw)


class StepError(RuntimeError):
    """A run failed during step ``step`` (numbered from 1); the original error is the cause."""

    def __init__(self, step: int, cause: BaseException) -> None:
        text = " ".join(str(cause).split())
        super().__init__(f"step {step}: {type(cause).__name__}: {text}" if text
                         else f"step {step}: {type(cause).__name__}")
        self.step = step


@dataclass
class StepResult:
    """One step of a pair: losses, per-node parity (``ParityReport.to_json`` nodes), timing.

    Steps are numbered from 1 (the first step is step 1) everywhere a user reads them.
    """

    step: int
    loss_ref: float
    loss_cand: float
    seconds: float
    exact: bool
    first: dict | None  # {"node", "op", "which"} of this step, or None
    nodes: list[dict]
    roots: list[int] = field(default_factory=list)  # differing values whose inputs all agree
    # provenance (core.provenance; docs/reports.md): computed this step or not, then every
    # introduced array {"node", "op", "which", "n_diff", "max_ulp", "max_abs", "first_index",
    # "n_nan", +"by" | "part"} in execution order, and each fused kernel judged whole. When
    # computed, every entry of ``nodes`` also has "introduced": {"value", "grad", "update"}.
    provenance: bool = False
    introduced: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    provenance_s: float = 0.0  # seconds provenance took (included in ``seconds``)

    def node_max_ulp(self) -> np.ndarray:
        """Per compared node, the worst ulp of value and gradient (-1 for a NaN mismatch)."""
        if self.exact:
            return np.zeros(len(self.nodes), dtype=np.float64)
        from core.parity import entry_worst

        return np.array([entry_worst(e) for e in self.nodes], dtype=np.float64)


class CpuRun:
    """The workload trained on the CPU tape."""

    def __init__(self, spec: RunSpec, workload: str, seed: int) -> None:
        from core import workloads

        self.spec = spec
        self.wl = workloads.get(workload, dtype=spec.dtype, math=spec.math, seed=seed)
        self.opt = self.wl.make_optimizer()
        self.loss_id = self.wl.record(0).id

    def advance(self, step: int, backward: bool = True) -> None:
        """Record minibatch ``step`` (and run backward)."""
        loss = self.wl.record(step)
        self.loss_id = loss.id
        if backward:
            self.wl.tape.backward(loss)

    def update(self) -> None:
        """The optimizer step after the comparison."""
        self.opt.step()

    def loss(self) -> float:
        """This step's loss."""
        return float(self.wl.tape.value(self.loss_id))

    def array(self, i: int, which: str) -> np.ndarray | None:
        """A node's value or gradient."""
        t = self.wl.tape
        return t.value(i) if which == "value" else t.grad(i)

    def optimizer_arrays(self, after: bool) -> dict:
        """The optimizer's settings and moments around its update (provenance)."""
        from app.run_provenance import core_optimizer_arrays

        return core_optimizer_arrays(self.opt, self.wl.tape, after)


class DeviceRun:
    """The episode replayed on a device; ``feed`` is the CPU run whose inputs it takes."""

    def __init__(self, spec: RunSpec, device: Any, feed: CpuRun) -> None:
        import gpu

        self.spec, self.feed = spec, feed
        wl = feed.wl
        loss = wl.record(0)
        math = spec.math if spec.math != wl.tape.math else None
        specs = None
        if spec.kernels:
            from gpu.user_kernels import parse_spec

            specs = [parse_spec(k) for k in spec.kernels]
        self.prog = gpu.capture(device, wl.tape, loss, math=math, kernels=specs)
        self.plan = None
        if spec.fuse:
            from gpu.fusion import apply

            self.plan = apply(self.prog)
        self.dopt = gpu.from_core(feed.opt)
        self.inject: Any = None  # app.run_provenance.Inject: a one-bit fault at one step

    def advance(self, step: int) -> None:
        """Upload the feed's inputs of this step; forward and backward on the device."""
        tape = self.feed.wl.tape
        for v in self.feed.wl.inputs.values():
            self.prog.set_input(v.id, tape.value(v))
        f = self.inject
        if f is None or f.step != step + 1:
            self.prog.forward()
            self.prog.backward()
            return
        # the fault lands right after the device computes the array, between two launches
        phase, k = self.prog.completed_at(f.node, f.which)
        for name in ("forward", "backward"):
            hooks = {k: lambda: self._flip(f.node, f.which)} if name == phase else {}
            self.prog.run_phase_hooked(name, hooks)

    def _flip(self, i: int, which: str) -> None:
        from app.run_provenance import flip_lowest_bit

        buf = self.prog.values[i] if which == "value" else self.prog.grads[i]
        buf.upload(flip_lowest_bit(buf.download()))

    def optimizer_arrays(self, after: bool) -> dict:
        """The device optimizer's settings and moments around its update (provenance)."""
        from app.run_provenance import device_optimizer_arrays

        return device_optimizer_arrays(self.dopt, self.prog, after)

    def update(self) -> None:
        """The device optimizer step."""
        self.prog.step(self.dopt)

    def loss(self) -> float:
        """This step's loss (one scalar crosses to the host)."""
        return self.prog.loss()

    def array(self, i: int, which: str) -> np.ndarray | None:
        """A node's value or gradient, downloaded."""
        return self.prog.read(i, which)

    def compare(self, tape: Any) -> Any:
        """Every node against the same node of ``tape``, summarised on the device."""
        import gpu

        return gpu.parity.compare(tape, self.prog)


def _copy(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.array(a, copy=True)


def _narrow(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    # NOTE: ulp is measured in the narrower type: the float64 reference is rounded to float32
    # (nearest), so "exact" means the device produced the correctly rounded reference
    return a if a.dtype == dt else a.astype(dt)


class PairRunner:
    """Steps a reference and a candidate run together and compares them every step."""

    def __init__(self, config: SessionConfig, device: Any | None = None,
                 provenance: str = "every", inject: Any = None, keep_states: int = 0,
                 explain: bool = False) -> None:
        """``provenance``: "every" step or "off" (then ``step(provenance=True)`` asks for one);
        ``inject``: an ``app.run_provenance.Inject`` fault (or its ``NODE[:grad]@STEP`` text)
        for the (unfused) device candidate;
        ``keep_states``: how many recent steps' ``core.provenance.StepState`` snapshots to keep
        in ``states`` (every array of the candidate: for provenance on demand)."""
        self.explain = explain or config.explain  # core.explain: a cause per introduced array
        if provenance not in ("every", "off"):
            raise ValueError(f"provenance must be 'every' or 'off', not {provenance!r}")
        self.config = config
        ref, cand = config.pair()
        self.ref_spec, self.cand_spec = ref, cand
        self.device = device
        make_run: Any = DeviceRun
        if device is None and "device" in (ref.side, cand.side) and config.worker is not None:
            from app.remote import RemoteDevice, RemoteRun

            self.device = RemoteDevice(config.worker, config.device, config.workload,
                                       config.seed)
            make_run = RemoteRun  # the device side runs in the worker; the CPU stays here
        elif device is None and "device" in (ref.side, cand.side):
            import gpu

            self.device = gpu.open_device(config.device)
        runs: list[Any] = []
        cpu_by_spec: dict[tuple, CpuRun] = {}
        for spec in (ref, cand):
            if spec.side == "cpu":
                r = CpuRun(spec, config.workload, config.seed)
                cpu_by_spec[(spec.dtype, spec.math)] = r
                runs.append(r)
            else:
                runs.append(None)
        self.feeds: list[CpuRun] = []
        for k, spec in enumerate((ref, cand)):
            if spec.side == "device":
                # the device replays the CPU tape of its dtype (refmath: math overrides capture)
                feed = cpu_by_spec.get((spec.dtype, "refmath"))
                if feed is None:
                    feed = CpuRun(RunSpec("cpu", "refmath", spec.dtype), config.workload,
                                  config.seed)
                    cpu_by_spec[(spec.dtype, "refmath")] = feed
                    self.feeds.append(feed)
                runs[k] = make_run(spec, self.device, feed)
        self.ref, self.cand = runs
        self.step_index = 0
        first = self.cand.prog if isinstance(self.cand, DeviceRun) else None
        self.prog = first or (self.ref.prog if isinstance(self.ref, DeviceRun) else None)
        tape = (self.ref.feed if isinstance(self.ref, DeviceRun) else self.ref).wl.tape
        self.nodes = tape.nodes[: self._loss_id() + 1]
        self._setup_provenance(provenance, inject, keep_states)

    def _setup_provenance(self, mode: str, inject: Any, keep: int) -> None:
        from collections import deque

        from app.run_provenance import StepProbe

        self.provenance_mode = mode
        self.states: deque = deque(maxlen=max(int(keep), 0))
        cand, ref = self.cand, self.ref
        if isinstance(inject, str):
            from app.run_provenance import parse_inject

            inject = parse_inject(inject, self.nodes)
        if inject is not None:
            if not isinstance(cand, DeviceRun):
                raise ValueError("--inject needs a device candidate")
            if cand.plan is not None:
                raise ValueError("--inject works on the unfused replay: drop --fuse (a fused "
                                 "kernel computes many nodes in one launch)")
            cand.prog.completed_at(inject.node, inject.which)  # no gradient: raises here
            cand.inject = inject
        # the skip hints hold when the reference run is the numpy reference in the same dtype
        hints = (isinstance(ref, CpuRun) and ref.spec.math == "refmath"
                 and ref.spec.dtype == cand.spec.dtype)
        self.probe = StepProbe(self.nodes, self._loss_id(), cand, self.plan, hints)

    def _loss_id(self) -> int:
        r = self.ref
        return r.prog.loss_id if isinstance(r, DeviceRun) else r.loss_id

    @property
    def plan(self) -> Any:
        """The fusion plan of the fused side, or None."""
        for r in (self.cand, self.ref):
            if isinstance(r, DeviceRun) and r.plan is not None:
                return r.plan
        return None

    def describe_device(self) -> str:
        """The device line, or ``no device`` for a CPU-only pair."""
        return self.device.describe() if self.device is not None else "device: none (CPU only)"

    def step(self, provenance: bool | None = None) -> StepResult:
        """Advance both runs one minibatch, compare, update both; return the step's result
        (with provenance when ``provenance`` is True, or None and the runner's mode is "every").

        Anything that fails on the way (the user's workload, a device) raises ``StepError``
        naming the step (from 1) with the original error as its cause.
        """
        if provenance is None:
            provenance = self.provenance_mode == "every"
        try:
            return self._step(provenance)
        except Exception as e:
            raise StepError(self.step_index + 1, e) from e

    def _step(self, with_provenance: bool = False) -> StepResult:
        t0 = time.perf_counter()
        s = self.step_index  # the workload API counts minibatches from 0
        for f in self.feeds:
            f.advance(s, backward=False)
        for r in (self.ref, self.cand):
            if isinstance(r, CpuRun):
                r.advance(s)
        for r in (self.ref, self.cand):
            if isinstance(r, DeviceRun):
                r.advance(s)
        report = self._compare()
        js = report.to_json()
        t1 = time.perf_counter()
        st = self.probe.before_update(s + 1, js["nodes"]) if with_provenance else None
        tp = time.perf_counter() - t1
        self.ref.update()
        self.cand.update()
        loss_ref, loss_cand = self.ref.loss(), self.cand.loss()
        prov = None
        if st is not None:
            from core.provenance import provenance

            t1 = time.perf_counter()
            if self.states.maxlen:  # before after_update moves the leaves' expectations on
                self.states.append(st.snapshot())  # (its update is filled in just below)
            self.probe.after_update(st)
            prov = provenance(st, explain=self.explain)
            for e, f in zip(js["nodes"], prov.flags(len(js["nodes"])), strict=True):
                e["introduced"] = f
            tp += time.perf_counter() - t1
        else:
            self.probe.skip()
        dt = time.perf_counter() - t0
        self.step_index += 1
        return StepResult(s + 1, loss_ref, loss_cand, dt, report.exact, js["first_divergence"],
                          js["nodes"], roots(self.nodes, js["nodes"]), prov is not None,
                          [e.to_json() for e in prov.introduced] if prov else [],
                          prov.kernels if prov else [], tp)

    def compare_params(self) -> Any:
        """The parameters' values on both sides after the last update, as a ``ParityReport``
        (``step()`` compares them before its update; this covers the last one)."""
        params = tuple(n for n in self.nodes if n.op == "param")
        return host_compare(params, self.ref.array, self.cand.array, which=("value",))

    def arrays(self, node_id: Any) -> dict:
        """One compared node's value and gradient on both sides, as the last step left them.

        ``{"step", "ref": {"value", "grad"}, "cand": {...}}`` (``step`` counts from 1, as
        ``StepResult.step`` does). Intermediate nodes hold what
        that step computed (and compared); a parameter's value is already past its update.
        """
        if isinstance(node_id, bool) or not isinstance(node_id, int):
            raise TypeError(f"node must be an integer id, not {node_id!r}")
        if not 0 <= node_id < len(self.nodes):
            raise IndexError(f"node #{node_id} is not compared (ids 0..{len(self.nodes) - 1})")
        if self.step_index == 0:
            raise ValueError("no step has run yet")
        out: dict = {"step": self.step_index}
        for key, r in (("ref", self.ref), ("cand", self.cand)):
            # a copy: the CPU tape hands out views that the next step overwrites
            out[key] = {w: _copy(r.array(node_id, w)) for w in ("value", "grad")}
        return out

    def _compare(self) -> Any:
        ref, cand = self.ref, self.cand
        if (isinstance(ref, CpuRun) and isinstance(cand, DeviceRun) and cand.feed is ref):
            return cand.compare(ref.wl.tape)  # summaries computed on device
        return host_compare(self.nodes, ref.array, cand.array)


def host_compare(nodes: tuple, ref_array: Any, cand_array: Any,
                 which: tuple[str, ...] = ("value", "grad")) -> Any:
    """Per-node ``core.parity`` diffs of two runs (any sides), as a ``core.parity.ParityReport``
    (``which``: the arrays compared; the others are None)."""
    from core.parity import NodeParity, ParityReport, compare_arrays

    out = []
    for n in nodes:
        diffs: dict = {"value": None, "grad": None}
        for w in which:
            a, b = ref_array(n.id, w), cand_array(n.id, w)
            if a is None or b is None:
                continue
            dt = min(a.dtype, b.dtype, key=lambda d: d.itemsize)
            diffs[w] = compare_arrays(_narrow(a, dt), _narrow(b, dt))
        out.append(NodeParity(n.id, n.op, n.name, diffs["value"], diffs["grad"]))
    return ParityReport.of(out)  # the same first-divergence rule as the device comparison


def roots(nodes: tuple, parity: list[dict]) -> list[int]:
    """Nodes whose value differs although every input's value agrees: where drift starts."""
    from core.parity import entry_differs

    bad = {e["id"] for e in parity if entry_differs(e, "value")}
    return sorted(i for i in bad if not any(j in bad for j in nodes[i].inputs))
