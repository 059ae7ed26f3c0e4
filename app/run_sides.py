"""The sides of a comparison (no Qt): the ``Run`` protocol and the runs that implement it.

A run is one side of a pair: the CPU tape (``CpuRun``: the reference in refmath, or platform
math) or a device replay of it (``DeviceRun``: host or cuda, fused or not). ``app.runs.PairRunner``
steps any two of them together through ``Run`` alone, never asking which kind a run is; a new
kind of candidate (PyTorch, a user's kernel) is one more class with these methods. A pair
whose both sides run elsewhere is ``app.remote.RemotePair`` (the whole pair in the worker).

``StepArrays`` is the one store of a step's arrays: each (side, node, which) fetched from its
run at most once per step, read by provenance, the NaN scan, ``PairRunner.arrays`` (the
Inspector) and the live worker's tensor window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tapescope.core.precision import HALF

__all__ = ["CpuRun", "DeviceRun", "Run", "RunSpec", "StepArrays"]


@dataclass(frozen=True)
class RunSpec:
    """One side of a comparison: where it runs, its math, dtype and fusion."""

    side: str  # "cpu" | "device" | "torch"
    math: str = "refmath"
    dtype: str = "float64"
    fuse: bool = False
    kernels: tuple[str, ...] = ()  # --kernel specs: the user's files replacing stock kernels
    # a torch run (app.torch_run): where, and the settings that change its bits
    target: str = "cpu"  # "cpu" | "cuda"
    threads: int | None = None  # torch.set_num_threads (None: PyTorch's default)
    tf32: bool | None = None  # TF32 matmul / cuDNN on CUDA (None: PyTorch's default)
    deterministic: bool = False  # torch.use_deterministic_algorithms(True)
    optimizer: str = "tape"  # "tape": core.optim's update in torch ops; "torch": torch.optim
    amp: bool = False  # mixed precision: float32 masters, dtype (a half type) computes
    loss_scale: float | None = None  # --amp float16: a static scale (None: dynamic)

    def label(self) -> str:
        """A short human name, e.g. ``device fused float32 platform``."""
        if self.side == "torch":
            extra = [f"{self.threads} threads"] if self.threads else []
            extra += [f"tf32 {'on' if self.tf32 else 'off'}"] if self.tf32 is not None else []
            extra += ["deterministic"] if self.deterministic else []
            extra += ["torch.optim"] if self.optimizer == "torch" else []
            dt = (f"amp {self.dtype} (float32 masters, torch's own accumulators)" if self.amp
                  else f"{self.dtype} (torch's own accumulators)"
                  if self.dtype in ("float16", "bfloat16") else self.dtype)
            return " ".join([f"torch {self.target}", dt, *extra])
        parts = ["CPU" if self.side == "cpu" else "device"]
        if self.side == "device":
            parts.append("fused" if self.fuse else "unfused")
        if self.amp:  # what each side stores and accumulates in (issue 28)
            parts.append(f"amp {self.dtype} (float32 masters, float32 accumulate)")
        elif self.dtype in ("float16", "bfloat16"):
            parts.append(f"{self.dtype} (float32 accumulate)")
        else:
            parts.append(self.dtype)
        parts.append(self.math)
        if self.kernels:
            parts.append("+ " + ", ".join(self.kernels))
        return " ".join(parts)

    @property
    def is_numpy_reference(self) -> bool:
        """The CPU tape in refmath: the bits every other run is held to."""
        return self.side == "cpu" and self.math == "refmath"


@runtime_checkable
class Run(Protocol):
    """One side of a comparison, stepped by ``PairRunner`` (module docstring)."""

    spec: RunSpec
    plan: Any  # the fusion plan (``to_json()``, ``segments``) of a fused run, else None

    @property
    def tape(self) -> Any:
        """The CPU tape this run records or replays (its nodes are the compared ones)."""

    @property
    def loss_id(self) -> int:
        """The loss node's id."""

    def advance(self, step: int) -> None:
        """Step ``step`` (from 1, as messages print it): forward and backward; idempotent
        within a step."""

    def update(self) -> None:
        """The optimizer step, after the comparison."""

    def loss(self) -> float:
        """This step's loss."""

    def array(self, i: int, which: str) -> np.ndarray | None:
        """Node ``i``'s "value" or "grad" as this run holds it now (fetched on request)."""

    def compare(self, ref: Run, nodes: tuple) -> Any:
        """This run against ``ref`` where its data is (a ``core.parity.ParityReport``), or
        None: then the pair compares ``array`` by ``array`` on the host."""

    def optimizer_arrays(self, after: bool) -> dict | None:
        """The optimizer's settings and moments around its update (provenance), or None."""

    def leaf_value(self, i: int) -> np.ndarray | None:
        """What this run was fed for leaf ``i`` this step (None: not judged)."""

    def set_inject(self, inject: Any) -> None:
        """Take a one-bit fault (``app.run_provenance.Inject``); ValueError if it cannot."""

    def stats(self) -> dict | None:
        """Launch and transfer counts of a device program, or None."""

    # optional: ``describe() -> str``, a run's own device line where no gpu device says it
    # (app.torch_run.TorchRun); PairRunner.describe_device reads it when present;
    # ``optimizer_views(after) -> dict | None``, ``optimizer_arrays`` without copies (valid
    # until the run's next update or launch: a numpy reference's, CpuRun, lets provenance
    # judge an update on its reference's own bits; a host device's saves the downloads);
    # ``equal_bits(ref) -> set``, the (node, which) its last ``compare`` against ``ref`` found
    # bit-equal, until its next launch (provenance's update skip then reads them once; the
    # step's store reads those from ``ref`` instead); ``same_now(arrays) -> set``, which
    # ``(node, which)`` keys of ``arrays`` it holds now with those host arrays' bits, judged
    # where its data is (the store's parameters after the update): on an exact step only
    # summaries and the loss cross


class CpuRun:
    """The workload trained on the CPU tape."""

    plan = None

    def __init__(self, spec: RunSpec, workload: str, seed: int,
                 optimizer: str | None = None) -> None:
        from tapescope.core import workloads

        self.spec = spec
        self.wl = workloads.get(workload, dtype=spec.dtype, math=spec.math, seed=seed)
        self.opt = self.wl.make_optimizer()
        if optimizer:  # --optimizer, --lr, --schedule... (core.optim_config)
            from tapescope.core.optim_config import OptimConfig

            self.opt = OptimConfig.parse(optimizer).build(self.opt)
        if spec.amp:  # float32 masters: the float32 episode's own initial weights (core.amp)
            workloads.enable_amp(self.wl, self.opt, workload, seed, spec.loss_scale)
        self._loss = self.wl.record(0)
        self._at: int | None = None  # the step recorded last (None: only step 0's probe)
        self._backward = False

    @property
    def tape(self) -> Any:
        """The tape."""
        return self.wl.tape

    @property
    def loss_id(self) -> int:
        """The loss node's id."""
        return self._loss.id

    def advance(self, step: int, backward: bool = True) -> None:
        """Record step ``step`` (from 1, as messages print it; and run backward); a second call
        of the same step only adds what the first left out (a feed records once for every run
        it feeds)."""
        if self._at != step:
            self._loss = self.wl.record(step)
            self._at, self._backward = step, False
        if backward and not self._backward:
            amp = self.opt.amp
            self.wl.tape.backward(self._loss, seed=1.0 if amp is None else amp.scale)
            self._backward = True

    def update(self) -> None:
        """The optimizer step after the comparison."""
        self.opt.step()

    def loss(self) -> float:
        """This step's loss."""
        return float(self.wl.tape.value(self._loss.id))

    def array(self, i: int, which: str) -> np.ndarray | None:
        """A node's value or gradient (a read-only view the next step overwrites)."""
        t = self.wl.tape
        return t.value(i) if which == "value" else t.grad(i)

    def compare(self, ref: Run, nodes: tuple) -> Any:
        """Nothing of its own: the host compares."""
        return None

    def optimizer_arrays(self, after: bool) -> dict:
        """The optimizer's settings and moments around its update (provenance)."""
        from tapescope.app.run_provenance import core_optimizer_arrays

        if self.spec.amp or not self.opt.modeled:
            return None  # the update check does not model mixed precision (nor torch.optim's
        return core_optimizer_arrays(self.opt, self.wl.tape, after)  # steps, schedules) yet

    def optimizer_views(self, after: bool) -> dict | None:
        """``optimizer_arrays`` without copies: the optimizer's own moments, which its next
        update rewrites in place (read them before it; provenance's update skip)."""
        from tapescope.app.run_provenance import core_optimizer_arrays

        if self.spec.amp or not self.opt.modeled:
            return None
        return core_optimizer_arrays(self.opt, self.wl.tape, after, copy=False)

    def leaf_value(self, i: int) -> np.ndarray | None:
        """Not judged: the tape's leaves are its own inputs."""
        return None

    def set_inject(self, inject: Any) -> None:
        """A CPU run takes no fault."""
        raise ValueError("--inject needs a device candidate")

    def stats(self) -> dict | None:
        """No device program."""
        return None


class DeviceRun:
    """The episode replayed on a device; ``feed`` is the CPU run whose inputs it takes."""

    def __init__(self, spec: RunSpec, device: Any, feed: CpuRun) -> None:
        from tapescope import gpu

        self.spec, self.feed = spec, feed
        wl = feed.wl
        loss = wl.record(0)
        math = spec.math if spec.math != wl.tape.math else None
        specs = None
        if spec.kernels:  # the user's kernel files (gpu.user_kernels), compiled because named
            from tapescope.gpu.user_kernels import parse_spec

            specs = [parse_spec(k) for k in spec.kernels]
        self.prog = gpu.capture(device, wl.tape, loss, math=math, kernels=specs)
        self.plan = None
        if spec.fuse:
            from tapescope.gpu.fusion import apply

            self.plan = apply(self.prog)
        self.dopt = gpu.from_core(feed.opt)
        self.inject: Any = None  # app.run_provenance.Inject: a one-bit fault at one step
        self._equal: tuple[Run, set] | None = None  # this step's compare: (ref, bit-equal)

    @property
    def tape(self) -> Any:
        """The feed's tape (the episode this program replays)."""
        return self.feed.wl.tape

    @property
    def loss_id(self) -> int:
        """The loss node's id."""
        return self.prog.loss_id

    def advance(self, step: int) -> None:
        """Record the feed's step (once, whoever it feeds), upload its inputs; forward and
        backward on the device."""
        self._equal = None
        self.feed.advance(step, backward=False)
        tape = self.feed.wl.tape
        for v in self.feed.wl.inputs.values():
            self.prog.set_input(v.id, tape.value(v))
        if self.spec.amp:  # this run's own loss scale (its scaler saw its own overflows)
            self.prog.set_seed(self.dopt.scaler.scale)
        f = self.inject
        if f is None or f.step != step:
            self.prog.forward()
            self.prog.backward()
            return
        # the fault lands right after the device computes the array, between two launches
        phase, k = self.prog.completed_at(f.node, f.which)
        for name in ("forward", "backward"):
            hooks = {k: lambda: self._flip(f.node, f.which)} if name == phase else {}
            self.prog.run_phase_hooked(name, hooks)

    def _flip(self, i: int, which: str) -> None:
        from tapescope.app.run_provenance import flip_lowest_bit

        buf = self.prog.values[i] if which == "value" else self.prog.grads[i]
        buf.upload(flip_lowest_bit(buf.download()))

    def optimizer_arrays(self, after: bool) -> dict:
        """The device optimizer's settings and moments around its update (provenance)."""
        from tapescope.app.run_provenance import device_optimizer_arrays

        if self.spec.amp or not self.feed.opt.modeled:
            return None  # the update check does not model mixed precision yet
        return device_optimizer_arrays(self.dopt, self.prog, after, **self._like(after))

    def optimizer_views(self, after: bool) -> dict | None:
        """``optimizer_arrays`` with the moments as the device's own memory where it is the
        host's (no download; valid until the next launch), else downloaded."""
        from tapescope.app.run_provenance import device_optimizer_arrays

        if self.spec.amp or not self.feed.opt.modeled:
            return None
        return device_optimizer_arrays(self.dopt, self.prog, after, True, **self._like(after))

    def _like(self, after: bool) -> dict:
        """Where the device's memory is not the host's (cuda): ``like``, the feed's optimizer
        moments (views), which a device replaying the numpy reference bit for bit holds too:
        ``device_optimizer_arrays`` judges that on the device and copies them on the host
        instead of downloading. A host device's moments are read in place: nothing."""
        if self.prog.device.host_view(self.prog.values[self.prog.loss_id]) is not None:
            return {}
        return {"like": lambda: self.feed.optimizer_views(after)}

    def update(self) -> None:
        """The device optimizer step (mixed precision: then the scaler's update)."""
        self._equal = None
        self.prog.step(self.dopt)
        if self.spec.amp:
            self.dopt.after_step(self.prog)

    def loss(self) -> float:
        """This step's loss (one scalar crosses to the host)."""
        return self.prog.loss()

    def array(self, i: int, which: str) -> np.ndarray | None:
        """A node's value or gradient, downloaded."""
        return self.prog.read(i, which)

    def compare(self, ref: Run, nodes: tuple) -> Any:
        """Against the very run that feeds it: every node summarised on the device (the diff
        kernel), so only summaries cross; any other reference: None (the host compares)."""
        self._equal = None
        if ref is not self.feed or self.prog.dtype in HALF:  # no half diff kernel: host
            return None
        from tapescope import gpu

        equal: set = set()
        rep = gpu.parity.compare(self.feed.wl.tape, self.prog, equal=equal)
        self._equal = (ref, equal)
        return rep

    def equal_bits(self, ref: Run) -> frozenset | set:
        """The ``(node, "value" | "grad")`` that this step's ``compare`` against ``ref`` found
        bit for bit the same on both sides, valid until this run's next launch (``advance``
        and ``update`` forget them); empty when it did not compare against ``ref``."""
        got = self._equal
        return got[1] if got is not None and got[0] is ref else frozenset()

    def same_now(self, arrays: dict) -> set:
        """Which ``(node, "value" | "grad")`` keys of ``arrays`` this run holds now with
        exactly that host array's bits, judged on the device (``gpu.parity.same_bits``: only
        summaries cross); none for a half program (no half diff kernel)."""
        if self.prog.dtype in HALF:
            return set()
        from tapescope import gpu

        return gpu.parity.same_bits(self.prog, arrays)

    def leaf_value(self, i: int) -> np.ndarray | None:
        """The feed's input (a device replays its feed's inputs)."""
        return self.feed.wl.tape.value(i)

    def set_inject(self, inject: Any) -> None:
        """The fault for the unfused replay (a fused kernel computes many nodes at once)."""
        if self.plan is not None:
            raise ValueError("--inject works on the unfused replay: drop --fuse (a fused "
                             "kernel computes many nodes in one launch)")
        self.prog.completed_at(inject.node, inject.which)  # no gradient: raises here
        self.inject = inject

    def stats(self) -> dict:
        """The program's launch and transfer counts."""
        return self.prog.stats


def open_runs(config: Any, device: Any) -> tuple[Run, Run]:
    """(reference, candidate) of a ``SessionConfig`` (``config.pair()``), on ``device``. Device
    runs replay the CPU tape of their dtype, one feed shared by every run of that dtype."""
    ref, cand = config.pair()
    feeds: dict[str, CpuRun] = {}
    opt = getattr(config, "optimizer", None)
    if ref.side == "cpu" and ref.math == "refmath":
        feeds[ref.dtype] = r = CpuRun(ref, config.workload, config.seed, opt)
        first: Run | None = r
    else:
        first = None
    out: list[Run] = []
    for spec in (ref, cand):
        if spec is ref and first is not None:
            out.append(first)
        elif spec.side == "cpu":
            out.append(CpuRun(spec, config.workload, config.seed, opt))
        else:
            feed = feeds.get(spec.dtype)
            if feed is None:
                feed = feeds[spec.dtype] = CpuRun(RunSpec("cpu", "refmath", spec.dtype,
                                                          amp=spec.amp,
                                                          loss_scale=spec.loss_scale),
                                                  config.workload, config.seed, opt)
            if spec.side == "torch":
                from tapescope.app.torch_run import (
                    TorchRun,  # (torch is imported only for a torch run)
                )

                out.append(TorchRun(spec, feed))
            else:
                out.append(DeviceRun(spec, device, feed))
    return out[0], out[1]


class StepArrays:
    """One step's arrays of both sides, each fetched from its run at most once (module
    docstring). An entry is ``(side, node, which)``, side "ref" or "cand", owned (a copy of
    a CPU tape's view, which the next step overwrites). A parameter has two moments: as the
    step computed with it (read before the optimizer update: provenance) and as the update
    left it (``after``: the Inspector and the tensor window, after the step)."""

    def __init__(self, step: int, ref: Run, cand: Run, params: frozenset[int]) -> None:
        self.step, self.runs, self.params = step, {"ref": ref, "cand": cand}, params
        self.cache: dict[tuple, np.ndarray | None] = {}
        self.updated = False
        self.fetches = 0  # how many arrays came from the runs (each at most once)
        # (node, which) whose candidate array is the reference's bits, judged where the
        # candidate's data is (its compare; ``match_after`` for the parameters after the
        # update): read from the reference's (host) copy, so an exact array never crosses
        self.same: frozenset | set = frozenset()
        self.same_after: set = set()

    def get(self, side: str, i: int, which: str, after: bool = False) -> np.ndarray | None:
        """``side``'s array of node ``i``: as the step computed it, or ``after`` the update."""
        late = after and self.updated and i in self.params
        key = (side, i, which, late)
        if key not in self.cache and side == "cand" and self._same(i, which, late):
            # the same bits as the reference's: its copy, shared (never written to)
            self.cache[key] = self.get("ref", i, which, after)
        if key not in self.cache:
            a = self.runs[side].array(i, which)
            if a is not None and not a.flags.writeable:  # a CPU tape's view: the next step
                a = np.array(a, copy=True)  # overwrites it (a download is ours already)
            self.cache[key] = a
            self.fetches += 1
        return self.cache[key]

    def _same(self, i: int, which: str, late: bool) -> bool:
        if late:
            return (i, which) in self.same_after
        # the compare's verdict holds for what the step computed; a parameter's value and
        # gradient as the step computed them are only read before the update
        return (i, which) in self.same and not (self.updated and i in self.params)

    def match_after(self, keys: list[tuple[int, str]]) -> None:
        """After the update: which of ``keys`` the candidate now holds with the reference's
        bits (this store's copies of them), judged where its data is (``same_now``, a
        device's diff; none for a run without it); those are then read from the reference,
        not fetched from the candidate."""
        judge = getattr(self.runs["cand"], "same_now", None)
        if judge is not None and self.updated and keys:
            self.same_after |= judge({(i, w): self.get("ref", i, w, after=True)
                                      for i, w in keys})

    def mark_updated(self) -> None:
        """The optimizer ran: a parameter read ``after`` now gets what its update left (what
        the step computed with stays for provenance)."""
        self.updated = True

    def side(self, side: str) -> _Side:
        """A ``value(i)`` / ``grad(i)`` view of one side as the step computed it (what
        ``core.provenance.StepState`` reads)."""
        return _Side(self, side)

    @property
    def nbytes(self) -> int:
        """Bytes the fetched arrays hold (an array both sides share counts once per side)."""
        return sum(a.nbytes for a in self.cache.values() if a is not None)


class _Side:
    def __init__(self, store: StepArrays, side: str) -> None:
        self.store, self.name = store, side

    def value(self, i: int) -> np.ndarray | None:
        return self.store.get(self.name, i, "value")

    def grad(self, i: int) -> np.ndarray | None:
        return self.store.get(self.name, i, "grad")
