"""PyTorch as a candidate run (``--device torch``, ``torch:cuda``): the episode in PyTorch eager.

Each node of the step's tape runs through its PyTorch spelling (``core.ops.torch_forms``: one
table, one spelling per op) on this run's own tensors: its inputs are what PyTorch itself
computed for the nodes before (the parameters are its own, updated by its own optimizer step;
the data leaves are the episode's), so provenance judges every node on PyTorch's own inputs
(introduced vs inherited, per node). Backward is PyTorch's autograd of those ops; every node
whose tape gradient exists keeps its autograd gradient (``retain_grad``), so each tape gradient
has its torch counterpart to compare. By default the update is the tape's optimizer (core.optim:
clipping, L2, SGD / Adam with the host-computed scalars) written in torch tensor ops, one IEEE
operation each; the clipping norm is ``torch.sum`` per parameter. ``--torch-optimizer torch`` runs
PyTorch's own ``torch.optim`` instead (``_TorchOptim``).

Half precision (issue 28): ``--dtype float16|bfloat16`` runs every node on ``torch.float16`` /
``torch.bfloat16`` tensors (PyTorch's own half kernels: where they accumulate, in float32 or in
the half type, is theirs; ``--explain`` names the ``accumulator``); the tape's optimizer widens
``w, g, m, v`` to float32, updates there and rounds ``m, v, w`` once each, as core.optim does.
``--amp float16|bfloat16``: float32 master weights and moments (the feed's own initial
masters), the nodes in the half type on the masters rounded once, backward seeded with the
loss scale, the gradients unscaled in float32, an overflowing step skipped and the scale
updated by the same rule (core.amp.LossScaler, GradScaler's); this run keeps its own scaler.

The settings a user changes to see what moves (``RunSpec``): the target ("cpu" or "cuda"),
``threads`` (``torch.set_num_threads``), ``tf32`` (matmul and cuDNN TF32 on CUDA; None leaves
PyTorch's default), ``deterministic`` (``torch.use_deterministic_algorithms``). They are
process-wide in PyTorch: the run sets them when it opens.

torch is optional (the ``torch`` extra) and imported only here, when a torch run opens.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["TorchRun", "describe_torch", "import_torch", "torch_available", "torch_scheduler"]

INSTALL = 'pip install -e ".[torch]"'


def import_torch() -> Any:
    """The torch module, or ValueError saying how to get it (one line)."""
    try:
        import torch
    except ImportError:
        raise ValueError(f"--device torch needs PyTorch, which is not installed: {INSTALL}"
                         ) from None
    return torch


def torch_available(cuda: bool = False) -> bool:
    """Whether torch imports here (and, with ``cuda``, whether torch.cuda has a device); never
    raises, never imports torch when it is absent."""
    import importlib.util

    try:
        if importlib.util.find_spec("torch") is None:
            return False
    except (ImportError, ValueError):
        return False
    if not cuda:
        return True
    try:
        return bool(import_torch().cuda.is_available())
    except Exception:  # noqa: BLE001 — a broken install is "not available"
        return False


def describe_torch(spec: Any) -> str:
    """The device line of a torch run: version, target, dtype and the settings in force."""
    torch = import_torch()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    where = spec.target
    if spec.target == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(0)})"
    dt = (f"amp {spec.dtype} (float32 masters and optimizer)" if getattr(spec, "amp", False)
          else spec.dtype)
    return (f"device: torch {torch.__version__} on {where}, {dt}, "
            f"{torch.get_num_threads()} threads, tf32 {'on' if tf32 else 'off'} (matmul), "
            f"deterministic {'on' if torch.are_deterministic_algorithms_enabled() else 'off'}")


def _apply_settings(torch: Any, spec: Any) -> None:
    if spec.target == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device torch:cuda: torch.cuda has no device here (torch "
                         f"{torch.__version__}); use --device torch for the CPU")
    if spec.threads is not None:
        torch.set_num_threads(int(spec.threads))
    if spec.tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = bool(spec.tf32)
        torch.backends.cudnn.allow_tf32 = bool(spec.tf32)
    if spec.deterministic:
        if spec.target == "cuda":  # cuBLAS needs its workspace fixed before its first call
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)


class TorchRun:
    """The episode in PyTorch eager (module docstring); ``feed`` is the CPU run whose tape
    (the step's nodes and data) it follows."""

    plan = None

    def __init__(self, spec: Any, feed: Any) -> None:
        torch = self.torch = import_torch()
        _apply_settings(torch, spec)
        from tapescope.core.ops.torch_forms import spelling

        self.spell = spelling
        self.spec, self.feed = spec, feed
        self.dtype = {"float64": torch.float64, "float32": torch.float32,
                      "float16": torch.float16, "bfloat16": torch.bfloat16}[spec.dtype]
        self.dev = torch.device(spec.target)
        tape = feed.wl.tape
        # its own parameters: the initial values, then only its own updates
        self.params = {p.id: self._tensor(tape.value(p.id)).requires_grad_(True)
                       for p in tape.params()}
        self.scaler = None
        masters = None
        if spec.amp:  # float32 masters: the feed's, before any step (its initial weights)
            import copy

            self.scaler = copy.copy(feed.opt.amp)
            masters = {s.var.id: torch.tensor(np.asarray(s.master, np.float32),
                                              device=self.dev) for s in feed.opt.slots}
        self.opt = (_TorchOptim(torch, feed.opt, self.params, masters, self.scaler)
                    if spec.optimizer == "torch"
                    else _TorchOptimizer(torch, feed.opt, self.params, masters, self.scaler))
        self.values: list[Any] = []
        self.grads: dict[int, Any] = {}
        self._fed: dict[int, np.ndarray] = {}
        self._at: int | None = None

    def _tensor(self, a: np.ndarray) -> Any:
        from tapescope.core.precision import widen

        # a half array through float32 (exact: torch takes no ml_dtypes bfloat16), then back
        return self.torch.tensor(widen(np.asarray(a)), dtype=self.dtype, device=self.dev)

    @property
    def tape(self) -> Any:
        """The feed's tape (the episode this run computes in torch)."""
        return self.feed.wl.tape

    @property
    def loss_id(self) -> int:
        """The loss node's id."""
        return self.feed.loss_id

    def describe(self) -> str:
        """The device line."""
        return describe_torch(self.spec)

    def advance(self, step: int) -> None:
        """The feed records step ``step`` (its data); every node in torch on this run's own
        tensors, then autograd from the loss. Once per step."""
        if self._at == step:
            return
        torch = self.torch
        self.feed.advance(step, backward=False)
        tape = self.feed.wl.tape
        nodes = tape.nodes[: self.loss_id + 1]
        vals: list[Any] = []
        self._fed = {}
        for p in self.params.values():
            p.grad = None
        for n in nodes:
            if n.op == "param":
                t = self.params[n.id]
            elif n.op == "const":
                self._fed[n.id] = a = np.array(tape.value(n.id), copy=True)
                t = self._tensor(a)
            else:
                try:
                    t = self.spell(n.op)(torch, [vals[j] for j in n.inputs], n.attrs)
                except Exception as e:
                    raise ValueError(f"torch could not run node #{n.id} {n.op}: "
                                     f"{type(e).__name__}: {e}") from e
                if tuple(t.shape) != tuple(n.shape):
                    raise ValueError(f"torch's {n.op} at node #{n.id} made shape "
                                     f"{tuple(t.shape)}, the tape's is {n.shape}")
                if t.dtype != self.dtype:  # (a spelling that promotes: a bug in the table)
                    raise ValueError(f"torch's {n.op} at node #{n.id} made {t.dtype}, "
                                     f"not {self.dtype}")
                if t.requires_grad:
                    t.retain_grad()
            vals.append(t)
        loss = vals[self.loss_id]
        if loss.requires_grad:  # (mixed precision: seeded with this run's loss scale)
            seed = None if self.scaler is None else torch.full_like(loss, self.scaler.scale)
            loss.backward(seed)
        self.grads = {n.id: vals[n.id].grad for n in nodes
                      if vals[n.id].requires_grad and vals[n.id].grad is not None}
        self.values = vals
        self._at = step

    def update(self) -> None:
        """The tape's optimizer step, in torch ops."""
        self.opt.step(self.grads)

    def loss(self) -> float:
        """This step's loss."""
        return float(self.values[self.loss_id].detach().cpu().item())

    def array(self, i: int, which: str) -> np.ndarray | None:
        """Node ``i``'s value or autograd gradient, as a numpy copy (a parameter's value is
        updated in place: a copy keeps what the step computed with)."""
        if which == "value":
            t = self.params[i] if i in self.params else self.values[i]
        else:
            t = self.grads.get(i)
            if t is None:
                return None
        return _numpy(t)

    def compare(self, ref: Any, nodes: tuple) -> Any:
        """Nothing of its own: the host compares."""
        return None

    def optimizer_arrays(self, after: bool) -> dict | None:
        """The optimizer's settings and moments around its update (provenance; None under
        --amp, as the other runs: the update check does not model mixed precision yet)."""
        if self.spec.amp:
            return None
        return self.opt.arrays(after, self.grads)

    def leaf_value(self, i: int) -> np.ndarray | None:
        """The data it was fed for a const leaf this step."""
        return self._fed.get(i)

    def set_inject(self, inject: Any) -> None:
        """No faults: --inject is the device replay's."""
        raise ValueError("--inject flips a bit in the device replay: not with --device torch")

    def stats(self) -> dict | None:
        """No device program."""
        return None


class _TorchOptim:
    """``--torch-optimizer torch``: PyTorch's own ``torch.optim.SGD`` / ``Adam`` (single-tensor
    loops, ``foreach=False``) with the workload's settings, one parameter group per L2
    coefficient (``weight_decay``: PyTorch adds it to the gradient, as core.optim's L2), and
    ``torch.nn.utils.clip_grad_norm_`` for clipping. Its formulas are PyTorch's, not the tape's
    (Adam's eps is added to sqrt(v) / sqrt(1 - b2^t); m is a lerp; the clip coefficient is
    clip / (norm + 1e-6)): provenance shows where its update leaves the tape's. A half
    parameter keeps its state in its own type (torch's rule); under --amp the optimizer steps
    the float32 masters, given the unscaled gradients, only when none overflowed (as
    ``GradScaler.step``), and the parameters become the masters rounded once."""

    def __init__(self, torch: Any, core_opt: Any, params: dict[int, Any],
                 masters: dict[int, Any] | None = None, scaler: Any = None) -> None:
        from tapescope.core import optim

        self.torch, self.params = torch, params
        self.masters, self.scaler, self.found_inf = masters, scaler, False
        self.stepped = masters if masters is not None else params  # what torch.optim holds
        self.adam = type(core_opt) is optim.Adam
        self.kind = core_opt.kind
        self.core = core_opt
        self.lr, self.clip, self.t = core_opt.lr, core_opt.clip, 0
        self.slots = [(s.var.id, s.l2) for s in core_opt.slots]
        groups: dict[float, list] = {}
        for i, l2 in self.slots:
            groups.setdefault(l2, []).append(self.stepped[i])
        pg = [{"params": ps, "weight_decay": l2} for l2, ps in groups.items()]
        if isinstance(core_opt, (optim.AdamW, optim.SGDMomentum)):
            if any(l2 != 0.0 for _, l2 in self.slots):
                raise ValueError(f"--torch-optimizer torch: {core_opt.kind}'s weight_decay is "
                                 f"torch.optim's own; the workload's per-parameter L2 has no "
                                 f"place beside it")
            pg = [{"params": [self.stepped[i] for i, _ in self.slots]}]
        if isinstance(core_opt, optim.AdamW):
            self.opt = torch.optim.AdamW(pg, lr=core_opt.lr, betas=(core_opt.b1, core_opt.b2),
                                         eps=core_opt.eps, weight_decay=core_opt.weight_decay,
                                         foreach=False, fused=False)
        elif isinstance(core_opt, optim.SGDMomentum):
            self.opt = torch.optim.SGD(pg, lr=core_opt.lr, momentum=core_opt.momentum,
                                       dampening=core_opt.dampening,
                                       nesterov=core_opt.nesterov,
                                       weight_decay=core_opt.weight_decay, foreach=False)
        elif self.adam:
            self.opt = torch.optim.Adam(pg, lr=core_opt.lr, betas=(core_opt.b1, core_opt.b2),
                                        eps=core_opt.eps, foreach=False)
        else:
            self.opt = torch.optim.SGD(pg, lr=core_opt.lr, foreach=False)
        self.sched = torch_scheduler(torch, self.opt, core_opt.schedule)

    def step(self, grads: dict[int, Any]) -> None:
        """clip_grad_norm_ (when the workload clips), then the optimizer's step."""
        if self.scaler is not None:
            live, self.found_inf = _unscaled(self.torch, self.scaler, self.slots, grads)
            for i, _, g in live:
                self.masters[i].grad = g
            if not self.found_inf:
                self.t += 1
                self._opt_step()
                with self.torch.no_grad():
                    for i, _, _ in live:
                        self.params[i].copy_(self.masters[i].to(self.params[i].dtype))
            self.scaler.update(self.found_inf)
            return
        self.t += 1
        live = [self.params[i] for i, _ in self.slots if i in grads]
        if self.clip is not None and live:
            self.torch.nn.utils.clip_grad_norm_(live, self.clip, foreach=False)
        self._opt_step()

    def _opt_step(self) -> None:
        """The optimizer's step, then its scheduler's (PyTorch's order: the next step's lr)."""
        self.opt.step()
        if self.sched is not None:
            self.sched.step()

    def arrays(self, after: bool, grads: dict[int, Any]) -> dict:
        """Settings and per stepped parameter ``(id, l2, m, v)`` (exp_avg, exp_avg_sq)."""
        def moments(i: int) -> tuple | None:
            st = self.opt.state.get(self.stepped[i], {})
            if st.get("momentum_buffer") is not None:  # SGD with momentum
                return (st["momentum_buffer"], None)
            return None if "exp_avg" not in st else (st["exp_avg"], st["exp_avg_sq"])

        return _optimizer_arrays(self, after, grads, moments)


class _TorchOptimizer:
    """core.optim's update (its docstring's order) in torch ops on the run's parameters: the
    same scalars rounded once to the dtype, one IEEE operation per line. A half parameter
    updates as core.optim's half rule: ``w, g, m, v`` widened to float32, the lines in float32
    (float32 scalars), the new ``m, v, w`` rounded once each to the half type; under --amp the
    float32 masters and moments update, on unscaled gradients, and an overflowing step is
    skipped (core.amp)."""

    def __init__(self, torch: Any, core_opt: Any, params: dict[int, Any],
                 masters: dict[int, Any] | None = None, scaler: Any = None) -> None:
        from tapescope.core import optim

        self.torch = torch
        self.adam = type(core_opt) is optim.Adam
        self.kind = core_opt.kind
        if self.kind not in ("sgd", "adam", "sgdm", "adamw"):
            raise ValueError(f"--device torch: no torch form of the {type(core_opt).__name__} "
                             f"optimizer")
        self.core = core_opt  # (its settings and step_scalars only; its state is the CPU's)
        self.lr, self.clip, self.t = core_opt.lr, core_opt.clip, 0
        self.slots = [(s.var.id, s.l2) for s in core_opt.slots]
        self.params = params
        self.masters, self.scaler, self.found_inf = masters, scaler, False
        self.moments: dict[int, tuple[Any, Any]] = {}

    def _s(self, p: Any, v: float) -> Any:
        return self.torch.tensor(float(v), dtype=p.dtype, device=p.device)

    def step(self, grads: dict[int, Any]) -> None:
        """One update of every parameter its gradient reached."""
        torch = self.torch
        with torch.no_grad():
            if self.scaler is not None:
                live, self.found_inf = _unscaled(torch, self.scaler, self.slots, grads)
                if not self.found_inf:
                    self.t += 1
                    for i, new in self._update(live, self.masters, torch.float32):
                        self.masters[i] = new
                        self.params[i].copy_(new.to(self.params[i].dtype))
                self.scaler.update(self.found_inf)
                return
            self.t += 1
            live = [(i, l2, grads[i].detach()) for i, l2 in self.slots if i in grads]
            half = next(iter(self.params.values())).dtype in (torch.float16, torch.bfloat16) \
                if self.params else False
            if half:  # the half rule: everything below in float32
                live = [(i, l2, g.float()) for i, l2, g in live]
            if self.clip is not None and live:
                g0 = live[0][2]
                acc = self._s(g0, 0.0)
                for _, _, g in live:
                    acc = acc + torch.sum(g * g)
                norm = torch.sqrt(acc)
                if bool(norm > self._s(g0, self.clip)):
                    s = self._s(g0, self.clip) / norm
                    live = [(i, l2, g * s) for i, l2, g in live]
            ws = {i: (self.params[i].float() if half else self.params[i]) for i, _, _ in live}
            store = self.params[live[0][0]].dtype if live else None
            for i, new in self._update(live, ws, store):
                self.params[i].copy_(new.to(self.params[i].dtype) if half else new)

    def _update(self, live: list, ws: dict[int, Any], store: Any) -> list:
        """``(id, new weight)`` of each stepped parameter from weights ``ws`` (the compute
        type); the moments kept in ``store``."""
        import copy

        torch = self.torch
        # the host scalars of this step, as core.optim computes them (a copy: the CPU
        # optimizer's own step count is not ours to move)
        at = copy.copy(self.core)
        at.t = self.t
        k = at.step_scalars() if hasattr(at, "step_scalars") else None
        out = []
        for i, l2, g in live:
            w = ws[i]
            if l2 != 0.0:
                g = g + self._s(w, l2) * w
            if self.kind in ("sgdm", "adamw"):
                out.append((i, self._torch_form(at, k, i, w, g, store)))
                continue
            if not self.adam:
                out.append((i, w - self._s(w, at.step_lr()) * g))
                continue
            m, v = self.moments.get(i) or (torch.zeros_like(w), torch.zeros_like(w))
            m, v = m.to(w.dtype), v.to(w.dtype)
            m = m * self._s(w, k["b1"]) + self._s(w, k["omb1"]) * g
            v = v * self._s(w, k["b2"]) + (g * g) * self._s(w, k["omb2"])
            den = torch.sqrt(v) + self._s(w, k["eps"])
            out.append((i, w - (m / den) * self._s(w, k["lr_t"])))
            self.moments[i] = (m.to(store), v.to(store))
        return out

    def _torch_form(self, at: Any, k: dict | None, i: int, w: Any, g: Any, store: Any) -> Any:
        """core.optim.SGDMomentum / AdamW's step in the torch ops whose roundings it copies
        (add with alpha, lerp and addcmul: one fused multiply-add each on ATen's CPU)."""
        torch = self.torch
        m, v = self.moments.get(i) or (None, None)
        if self.kind == "sgdm":
            c = at
            if c.weight_decay != 0.0:
                g = torch.add(g, w, alpha=c.weight_decay)
            if c.momentum != 0.0:
                m = g.clone() if m is None else torch.add(m.to(w.dtype) * c.momentum, g,
                                                          alpha=1.0 - c.dampening)
                self.moments[i] = (m.to(store), None)
                g = torch.add(g, m, alpha=c.momentum) if c.nesterov else m
            return torch.add(w, g, alpha=-at.step_lr())
        assert k is not None
        m = torch.zeros_like(w) if m is None else m.to(w.dtype)
        v = torch.zeros_like(w) if v is None else v.to(w.dtype)
        if at.weight_decay != 0.0:
            w = w * k["decay"]
        m = torch.lerp(m, g, k["omb1"])
        v = torch.addcmul(v * k["b2"], g, g, value=k["omb2"])
        den = torch.sqrt(v) / k["bc2s"] + k["eps"]
        self.moments[i] = (m.to(store), v.to(store))
        return torch.addcdiv(w, m, den, value=k["nstep"])

    def arrays(self, after: bool, grads: dict[int, Any]) -> dict:
        """Settings and per stepped parameter ``(id, l2, m, v)`` (numpy copies)."""
        return _optimizer_arrays(self, after, grads, self.moments.get)


def torch_scheduler(torch: Any, opt: Any, s: Any) -> Any:
    """torch.optim.lr_scheduler's form of a core.schedule.Schedule on ``opt`` (None: constant):
    StepLR / CosineAnnealingLR, after a LinearLR warmup through SequentialLR."""
    if s is None or s.constant:
        return None
    sch = torch.optim.lr_scheduler
    warm = sch.LinearLR(opt, s.warmup_start, 1.0, s.warmup) if s.warmup else None
    main = (sch.StepLR(opt, s.step_size, s.gamma) if s.kind == "step" else
            sch.CosineAnnealingLR(opt, s.t_max, s.eta_min) if s.kind == "cosine" else None)
    if warm is None or main is None:
        return warm or main
    return sch.SequentialLR(opt, [warm, main], [s.warmup])


def _numpy(t: Any) -> np.ndarray:
    """A torch tensor as a numpy copy; bfloat16 (which ``.numpy()`` refuses) through float32,
    exactly, to ``ml_dtypes.bfloat16``."""
    t = t.detach().cpu()
    if str(t.dtype) == "torch.bfloat16":
        from tapescope.core.precision import BFLOAT16

        return t.float().numpy().astype(BFLOAT16)
    return np.array(t.numpy(), copy=True)


def _unscaled(torch: Any, scaler: Any, slots: list, grads: dict[int, Any]) -> tuple[list, bool]:
    """Mixed precision: ``(id, l2, g)`` per stepped parameter, each gradient widened to
    float32 and multiplied by float32(1 / S) (exact), and whether any is inf or NaN."""
    inv = torch.tensor(np.float32(1.0 / scaler.scale))
    live = [(i, l2, grads[i].detach().float() * inv.to(grads[i].device))
            for i, l2 in slots if i in grads]
    found = scaler.skips and any(not bool(torch.isfinite(g).all()) for _, _, g in live)
    return live, found


def _optimizer_arrays(opt: Any, after: bool, grads: dict[int, Any], moments: Any) -> dict:
    """Either torch optimizer's settings and, per stepped parameter, ``(id, l2, m, v)`` as
    numpy copies (``moments(i)``: its two torch tensors, or None before its first step)."""
    from tapescope.app.run_provenance import TORCH_STEP_SETTINGS

    t = opt.t if after else opt.t + 1
    out: dict = {"kind": opt.kind, "lr": opt.core.lr_at(t), "clip": opt.clip, "t": t,
                 "params": []}
    if opt.kind in ("adam", "adamw"):
        out.update(b1=opt.core.b1, b2=opt.core.b2, eps=opt.core.eps)
    out.update({k: getattr(opt.core, k) for k in TORCH_STEP_SETTINGS if hasattr(opt.core, k)})
    for i, l2 in opt.slots:
        if i not in grads:
            continue
        mv = moments(i)
        m, v = (None, None) if mv is None else (None if t is None else _numpy(t) for t in mv)
        out["params"].append((i, l2, m, v))
    return out
