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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tapescope.app.compares import COMPARES  # the names, where the CLI's parser reads them
from tapescope.app.run_sides import CpuRun, DeviceRun, Run, RunSpec, StepArrays, open_runs
from tapescope.core.step_record import F_V_INTRO, entries, record_of, set_introduced, worst
from tapescope.core.step_record import roots as record_roots

__all__ = ["COMPARES", "CpuRun", "DeviceRun", "PairRunner", "Run", "RunSpec", "SessionConfig",
           "StepError", "StepResult", "host_compare", "roots"]


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
    worker_timeout: float | None = None  # seconds per worker request (None: env or default)
    worker_open_timeout: float | None = None  # the same for hello, device and open
    worker_hello_timeout: float | None = None  # hello's own (at most the open one's)
    kernels: tuple[str, ...] = ()  # --kernel OP=FILE.cu / NODE=FILE.cu (gpu.user_kernels)
    explain: bool = False  # core.explain: a cause on every introduced value / gradient
    amp: str | None = None  # --amp float16|bfloat16: mixed precision (core.amp); sets dtype
    loss_scale: float | None = None  # --loss-scale S with --amp float16 (None: dynamic)
    # --device torch (app.torch_run): its settings (None: PyTorch's defaults)
    torch_threads: int | None = None
    tf32: bool | None = None
    deterministic: bool = False
    torch_optimizer: str = "tape"  # "tape": the tape's update in torch ops; "torch": torch.optim
    optimizer: str | None = None  # --optimizer, --lr, --schedule...: core.optim_config's text

    @property
    def torch_target(self) -> str | None:
        """"cpu" or "cuda" for ``device`` torch / torch:cpu / torch:cuda; None otherwise."""
        d = self.device
        if d == "torch":
            return "cpu"
        if d.startswith("torch:"):
            return d.split(":", 1)[1]
        return None

    def __post_init__(self) -> None:
        if self.compare not in COMPARES:
            raise ValueError(f"compare must be one of {', '.join(COMPARES)}, not {self.compare!r}")
        if self.dtype not in ("float64", "float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float64, float32, float16 or bfloat16, not "
                             f"{self.dtype!r}")
        if self.amp is not None:
            if self.amp not in ("float16", "bfloat16"):
                raise ValueError(f"amp must be float16 or bfloat16, not {self.amp!r}")
            if self.dtype != self.amp:
                object.__setattr__(self, "dtype", self.amp)  # the half type computes
            if self.compare == "f64-device":
                raise ValueError("--amp with --compare f64-device: the float64 reference has "
                                 "no mixed precision")
        if self.loss_scale is not None and self.amp != "float16":
            raise ValueError("--loss-scale goes with --amp float16 (bfloat16 needs no scale)")
        if self.math not in ("refmath", "platform"):
            raise ValueError(f"math must be refmath or platform, not {self.math!r}")
        if self.kernels and self.compare == "cpu-platform":
            raise ValueError("--kernel replaces a device kernel: --compare cpu-platform has no "
                             "device side")
        if self.kernels and self.worker is not None:
            raise ValueError("--kernel compiles your file on this machine: it cannot go with "
                             "--worker")
        self._check_torch()
        if self.optimizer is not None:
            from tapescope.core.optim_config import OptimConfig

            OptimConfig.parse(self.optimizer)  # a bad combination: its one line here

    def _check_torch(self) -> None:
        target = self.torch_target
        if target is None:
            if (self.torch_threads is not None or self.tf32 is not None or self.deterministic
                    or self.torch_optimizer != "tape"):
                raise ValueError("--torch-threads, --tf32, --deterministic and "
                                 "--torch-optimizer set the torch candidate: add --device torch")
            return
        if target not in ("cpu", "cuda"):
            raise ValueError(f"--device {self.device!r}: expected torch, torch:cpu or "
                             "torch:cuda")
        if self.compare == "cpu-platform":
            raise ValueError("--compare cpu-platform compares two CPU runs: it has no place "
                             "for --device torch")
        if self.compare == "unfused-fused" or self.fuse:
            raise ValueError("--fuse replays tapescope's fused kernels: not with --device "
                             "torch (PyTorch runs its own ops)")
        if self.kernels:
            raise ValueError("--kernel replaces a tapescope kernel: not with --device torch")
        if self.torch_optimizer not in ("tape", "torch"):
            raise ValueError(f"--torch-optimizer must be tape or torch, not "
                             f"{self.torch_optimizer!r}")
        if self.math != "refmath":
            raise ValueError("--math picks the device replay's libm: PyTorch uses its own, "
                             "drop --math with --device torch")
        if self.torch_threads is not None and (isinstance(self.torch_threads, bool) or
                                               not isinstance(self.torch_threads, int) or
                                               self.torch_threads < 1):
            raise ValueError(f"--torch-threads must be a whole number >= 1, not "
                             f"{self.torch_threads!r}")

    def pair(self) -> tuple[RunSpec, RunSpec]:
        """(reference, candidate). The reference is always refmath: it defines the bits."""
        amp = {"amp": self.amp is not None, "loss_scale": self.loss_scale}
        dev = RunSpec("device", self.math, self.dtype, self.fuse, tuple(self.kernels), **amp)
        if self.torch_target is not None:
            dev = RunSpec("torch", "torch", self.dtype, target=self.torch_target,
                          threads=self.torch_threads, tf32=self.tf32,
                          deterministic=self.deterministic, optimizer=self.torch_optimizer,
                          **amp)
        if self.compare == "cpu-device":
            return RunSpec("cpu", "refmath", self.dtype, **amp), dev
        if self.compare == "cpu-platform":
            return (RunSpec("cpu", "refmath", self.dtype, **amp),
                    RunSpec("cpu", "platform", self.dtype, **amp))
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
    """One step of a pair: losses, the step record (``core.step_record``), timing.

    Steps are numbered from 1 (the first step is step 1) everywhere a user reads them.
    """

    step: int
    loss_ref: float
    loss_cand: float
    seconds: float
    exact: bool
    first: dict | None  # {"node", "op", "which"} of this step, or None
    record: np.ndarray  # core.step_record.STEP_RECORD: per compared node, both sides' diffs
    roots: list[int] = field(default_factory=list)  # differing values whose inputs all agree
    # provenance (core.provenance; docs/reports.md): computed this step or not, then every
    # introduced array {"node", "op", "which", "n_diff", "max_ulp", "max_abs", "first_index",
    # "n_nan", +"by" | "part"} in execution order, and each fused kernel judged whole. The
    # record's F_*_INTRO flags say what each node introduced (without provenance: the roots)
    provenance: bool = False
    introduced: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    provenance_s: float = 0.0  # seconds provenance took (included in ``seconds``)
    produced: list[int] = field(default_factory=list)  # made a NaN/inf (the live scan)
    labels: Sequence = ()  # the compared nodes (op, name), for ``nodes``; never sent
    # arrays made from ``record`` ahead of their readers (app.qt.live's reader thread fills it:
    # "max_ulp", app.step_history's "history" columns), so the GUI thread finds them made
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def nodes(self) -> list[dict]:
        """The export form (``NodeParity.to_json`` per node, with "introduced" when provenance
        ran): for ``--json``, reports and tests; the record is what everything else reads."""
        return entries(self.record, self.labels or None, introduced=self.provenance)

    def node_max_ulp(self) -> np.ndarray:
        """Per compared node, the worst ulp of value and gradient (-1 for a NaN mismatch)."""
        got = self.derived.get("max_ulp")
        return worst(self.record) if got is None else got


def _narrow(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    # NOTE: ulp is measured in the narrower type: the float64 reference is rounded to float32
    # (nearest), so "exact" means the device produced the correctly rounded reference
    return a if a.dtype == dt else a.astype(dt)


class PairRunner:
    """Steps a reference and a candidate run (any two ``Run``s) together and compares them
    every step."""

    def __init__(self, config: SessionConfig, device: Any | None = None,
                 provenance: str = "every", inject: Any = None, keep_states: int = 0,
                 runs: tuple[Run, Run] | None = None, scan_nonfinite: bool = False,
                 explain: bool = False) -> None:
        """``provenance``: "every" step or "off" (then ``step(provenance=True)`` asks for one);
        ``inject``: an ``app.run_provenance.Inject`` fault (or its ``NODE[:grad]@STEP`` text)
        for the (unfused) device candidate;
        ``keep_states``: how many recent steps' ``core.provenance.StepState`` snapshots to keep
        in ``states`` (every array of the candidate: for provenance on demand);
        ``runs``: the (reference, candidate) to compose, else ``config.pair()``'s on
        ``device`` (opened from ``config.device`` when a side needs one);
        ``scan_nonfinite``: each step's ``produced`` (the live NaN alarm,
        ``app.step_history.scan_produced``). A config with a ``worker`` runs the whole pair
        there: ``app.pairs.open_pair``; ``explain`` (or ``config.explain``): a cause on each
        introduced array (``core.explain``)."""
        self.explain = explain or config.explain
        if provenance not in ("every", "off"):
            raise ValueError(f"provenance must be 'every' or 'off', not {provenance!r}")
        self.config = config
        self.ref_spec, self.cand_spec = config.pair() if runs is None else (runs[0].spec,
                                                                           runs[1].spec)
        self.device = device
        if runs is None:
            if device is None and "device" in (self.ref_spec.side, self.cand_spec.side):
                from tapescope import gpu

                self.device = gpu.open_device(config.device)
            runs = open_runs(config, self.device)
        self.ref, self.cand = runs
        self.scan_nonfinite = scan_nonfinite
        self.step_index = 0
        self.nodes = self.ref.tape.nodes[: self.ref.loss_id + 1]
        self.params = frozenset(n.id for n in self.nodes if n.op == "param")
        self.store = StepArrays(0, self.ref, self.cand, self.params)
        self._setup_provenance(provenance, inject, keep_states)

    def _setup_provenance(self, mode: str, inject: Any, keep: int) -> None:
        from collections import deque

        from tapescope.app.run_provenance import StepProbe

        self.provenance_mode = mode
        self.states: deque = deque(maxlen=max(int(keep), 0))
        if isinstance(inject, str):
            from tapescope.app.run_provenance import parse_inject

            inject = parse_inject(inject, self.nodes)
        if inject is not None:
            self.cand.set_inject(inject)
        self.inject = inject
        # the skip hints hold when the reference run is the numpy reference in the same dtype
        hints = self.ref_spec.is_numpy_reference and self.ref_spec.dtype == self.cand_spec.dtype
        self.probe = StepProbe(self.nodes, self.ref.loss_id, self.cand, self.plan, hints,
                               self.ref)

    @property
    def plan(self) -> Any:
        """The fusion plan of the fused side, or None."""
        return self.cand.plan if self.cand.plan is not None else self.ref.plan

    def stats(self) -> dict | None:
        """The device program's launch and transfer counts (the candidate's first)."""
        got = self.cand.stats()
        return got if got is not None else self.ref.stats()

    @property
    def device_kind(self) -> str:
        """The device's kind ("host", "cuda", "torch", "torch:cuda"), or "none" for a CPU-only
        pair."""
        if self.device is not None:
            return self.device.kind
        if self.cand_spec.side == "torch":
            t = self.cand_spec.target
            return "torch" if t == "cpu" else f"torch:{t}"
        return "none"

    def close(self) -> None:
        """Nothing to let go of here (a ``RemotePair`` ends its worker)."""

    def describe_device(self) -> str:
        """The device line (a run's own, as a torch run's), or ``no device`` for a CPU-only
        pair."""
        if self.device is not None:
            return self.device.describe()
        for run in (self.cand, self.ref):  # a run's own line (optional: a torch run's)
            own = getattr(run, "describe", None)
            if own is not None:
                return own()
        return "device: none (CPU only)"

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
        s = self.step_index + 1  # from 1: what batch(step) receives and every message says
        self.ref.advance(s)
        self.cand.advance(s)
        store = self.store = StepArrays(s, self.ref, self.cand, self.params)
        rep = self.cand.compare(self.ref, self.nodes)
        eq = getattr(self.cand, "equal_bits", None)  # what that compare found bit-equal
        if rep is not None and eq is not None:  # (then never fetched from the candidate)
            store.same = eq(self.ref)
        if rep is None:
            rep = host_compare(self.nodes, lambda i, w: store.get("ref", i, w),
                               lambda i, w: store.get("cand", i, w))
        rec = record_of(rep.nodes)
        t1 = time.perf_counter()
        # a state not kept is judged this step: the candidate's moments are read in place
        st = (self.probe.before_update(s, rec, store.side("cand"),
                                       views=not self.states.maxlen) if with_provenance
              else None)
        tp = time.perf_counter() - t1
        self.ref.update()
        self.cand.update()
        store.mark_updated()
        if st is not None and st.update is not None and self.probe.ref is not None:
            # the parameters provenance reads next, against the numpy reference's host copies
            store.match_after([(p.node, "value") for p in st.update.params])
        loss_ref, loss_cand = self.ref.loss(), self.cand.loss()
        prov = None
        rts = roots(self.nodes, rec)
        if st is not None:
            from tapescope.core.provenance import provenance

            t1 = time.perf_counter()
            if self.states.maxlen:  # before after_update moves the leaves' expectations on
                self.states.append(self._kept(st, store))  # (its update: filled in below)
            # (not kept: the moments after the update in place too, judged before the next
            # launch)
            self.probe.after_update(st, lambda i: store.get("cand", i, "value", after=True),
                                    views=not self.states.maxlen,
                                    ref_after=lambda i: store.get("ref", i, "value", after=True))
            prov = provenance(st, explain=self.explain)
            self.probe.release(st)
            set_introduced(rec, prov.flags(len(rec)))
            tp += time.perf_counter() - t1
        else:
            self.probe.skip()
            # PLACEHOLDER until a step carries provenance: where value drift starts
            rec["flags"][np.isin(rec["id"], rts)] |= np.uint8(F_V_INTRO)
        dt = time.perf_counter() - t0
        self.step_index += 1
        first = rep.first_divergence
        first_d = None if first is None else {"node": first[0], "op": self.nodes[first[0]].op,
                                              "which": first[1]}
        res = StepResult(s, loss_ref, loss_cand, dt, rep.exact, first_d, rec, rts,
                         prov is not None,
                         [e.to_json() for e in prov.introduced] if prov else [],
                         prov.kernels if prov else [], tp, labels=self.nodes)
        if self.scan_nonfinite:
            from tapescope.app.step_history import (
                scan_produced,  # (views' numpy helpers: live only)
            )

            res.produced = scan_produced(self, res)
        return res

    def _kept(self, st: Any, store: StepArrays) -> Any:
        """``st`` made to outlive the step: its arrays are the step's store, completed (not a
        second copy of them); only the leaves, which the next step overwrites, are copied."""
        side = store.side("cand")
        for n in self.nodes:
            side.value(n.id)
            side.grad(n.id)
        leaves = None
        if st.leaf is not None:
            got = {n.id: st.leaf(n.id) for n in self.nodes if not n.inputs}
            leaves = {i: None if a is None else np.array(a, copy=True)
                      for i, a in got.items()}.get
        return replace(st, leaf=leaves, exact_value=None if st.exact_value is None
                        else list(st.exact_value), exact_grad=None if st.exact_grad is None
                        else list(st.exact_grad), kernels=[dict(k) for k in st.kernels])

    def compare_params(self) -> Any:
        """The parameters' values on both sides after the last update, as a ``ParityReport``
        (``step()`` compares them before its update; this covers the last one)."""
        params = tuple(n for n in self.nodes if n.op == "param")
        st = self.store
        if self.probe.ref is not None and st.updated:  # judged on the device: the ones equal
            st.match_after([(n.id, "value") for n in params])  # are the reference's copies
        return host_compare(params, lambda i, w: st.get("ref", i, w, after=True),
                            lambda i, w: st.get("cand", i, w, after=True), which=("value",))

    def arrays(self, node_id: Any) -> dict:
        """One compared node's value and gradient on both sides, as the last step left them.

        ``{"step", "ref": {"value", "grad"}, "cand": {...}}`` (``step`` counts from 1, as
        ``StepResult.step`` does). Intermediate nodes hold what
        that step computed (and compared); a parameter's value is already past its update.
        Read from the step's one store (``StepArrays``): each array fetched once.
        """
        if isinstance(node_id, bool) or not isinstance(node_id, int):
            raise TypeError(f"node must be an integer id, not {node_id!r}")
        if not 0 <= node_id < len(self.nodes):
            raise IndexError(f"node #{node_id} is not compared (ids 0..{len(self.nodes) - 1})")
        if self.step_index == 0:
            raise ValueError("no step has run yet")
        st = self.store
        return {"step": self.step_index,
                **{side: {w: st.get(side, node_id, w, after=True) for w in ("value", "grad")}
                   for side in ("ref", "cand")}}


def host_compare(nodes: tuple, ref_array: Any, cand_array: Any,
                 which: tuple[str, ...] = ("value", "grad")) -> Any:
    """Per-node ``core.parity`` diffs of two runs (any sides), as a ``core.parity.ParityReport``
    (``which``: the arrays compared; the others are None)."""
    from tapescope.core.parity import NodeParity, ParityReport, compare_arrays

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


def roots(nodes: tuple, parity: Any) -> list[int]:
    """Nodes whose value differs although every input's value agrees: where drift starts
    (``parity``: a step record, or ``NodeParity.to_json`` entries)."""
    if isinstance(parity, np.ndarray):
        return record_roots(parity, nodes)
    from tapescope.core.parity import entry_differs

    bad = {e["id"] for e in parity if entry_differs(e, "value")}
    return sorted(i for i in bad if not any(j in bad for j in nodes[i].inputs))
