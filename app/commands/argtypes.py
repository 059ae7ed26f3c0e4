"""argparse types the commands share (a helper module: no ``register``).

Here, not in app.cli: app.cli imports the commands, so a command importing app.cli closed a
cycle (tests/test_import_cycles.py).
"""

from __future__ import annotations

import argparse
from typing import Any


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (``--steps``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


DEVICES = ("auto", "host", "cuda", "torch", "torch:cpu", "torch:cuda")


def add_candidate_args(p: Any, device_default: str = "auto", kernel: bool = True) -> None:
    """The candidate's flags that ``parity``, ``report`` and ``gui --live`` share (registered
    here once): --device (the device replay or PyTorch), the torch settings, --kernel (not
    for ``gui``: ``kernel=False``) and --explain."""
    p.add_argument("--device", default=device_default, choices=list(DEVICES),
                   help="the candidate: tapescope's replay on host | cuda | auto, or PyTorch "
                        "eager: torch (its CPU), torch:cuda (docs/candidates.md)")
    add_torch_args(p)
    if kernel:
        _kernel_arg(p)
    p.add_argument("--explain", action="store_true",
                   help="for every introduced node, the first documented variant of the "
                        "reference order (fma, reciprocal, libm, reassociation, accumulator, "
                        "ftz) that reproduces the candidate's bits (docs/candidates.md)")
    add_optimizer_args(p)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None


def add_optimizer_args(p: Any) -> None:
    """The episode's optimizer (``train``, and through ``add_candidate_args`` ``parity``,
    ``report``, ``gui --live``): core.optim_config's flags, the workload's own optimizer when
    none is given (docs/workloads.md, "Optimizer")."""
    # a parser gets its own group; a group (gui's --live flags) takes them as they are (argparse
    # deprecates nested groups)
    g = p if isinstance(p, argparse._ArgumentGroup) else p.add_argument_group(
        "optimizer (default: the workload's own; docs/workloads.md)")
    g.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default=None,
                   help="sgd: torch.optim.SGD's step (momentum, nesterov, weight decay); adam: "
                        "the tape's Adam; adamw: torch.optim.AdamW's step")
    g.add_argument("--lr", type=_number, default=None, metavar="LR",
                   help="the learning rate (default: the workload's)")
    g.add_argument("--weight-decay", type=_number, default=None, metavar="WD",
                   help="sgd: added to the gradient; adamw: decoupled (default 0.01)")
    g.add_argument("--momentum", type=_number, default=None, metavar="M", help="sgd's momentum")
    g.add_argument("--nesterov", action="store_true", help="sgd: Nesterov momentum")
    g.add_argument("--schedule", choices=["constant", "step", "cosine"], default="constant",
                   help="the lr per step, as torch.optim.lr_scheduler computes it: StepLR, "
                        "CosineAnnealingLR over the steps after the warmup")
    g.add_argument("--warmup", type=_count, default=0, metavar="N",
                   help="first N steps: LinearLR from --warmup-start x lr up to lr")
    g.add_argument("--warmup-start", type=_number, default=None, metavar="F",
                   help="the warmup's first factor (default 1/3, LinearLR's)")
    g.add_argument("--step-size", type=_count, default=None, metavar="N",
                   help="--schedule step: multiply the lr by --gamma every N steps (default 1)")
    g.add_argument("--gamma", type=_number, default=None, metavar="G",
                   help="--schedule step: the factor (default 0.1)")


def optimizer_text(args: argparse.Namespace) -> str | None:
    """The optimizer flags as core.optim_config's JSON text (None: none given); ValueError (one
    line) on a bad combination."""
    from tapescope.core.optim_config import OptimConfig

    kw = {"kind": getattr(args, "optimizer", None), "lr": getattr(args, "lr", None),
          "weight_decay": getattr(args, "weight_decay", None),
          "momentum": getattr(args, "momentum", None),
          "nesterov": bool(getattr(args, "nesterov", False)),
          "schedule": getattr(args, "schedule", None) or "constant",
          "warmup": getattr(args, "warmup", 0) or 0,
          "warmup_start": getattr(args, "warmup_start", None),
          "step_size": getattr(args, "step_size", None), "gamma": getattr(args, "gamma", None),
          "steps": getattr(args, "steps", None)}
    cfg = OptimConfig(**kw)
    return cfg.text() if cfg.given else None


def add_against_arg(p: Any) -> None:
    """--against B (``parity``, ``report``: app/commands/against.py; with ``--capture A``, a
    second capture: app/commands/capture_pair.py)."""
    p.add_argument("--against", metavar="B", default=None,
                   help="a second candidate (e.g. --device torch --against host): both against "
                        "the reference per node, and where they part from each other; with "
                        "--capture A, a second capture FILE of the same script (issue 43). "
                        f"Candidates: {', '.join(DEVICES)}")


def check_against(args: Any) -> None:
    """--against B without --capture names a candidate (a capture file needs --capture A)."""
    b = getattr(args, "against", None)
    if b is not None and not getattr(args, "capture", None) and b not in DEVICES:
        raise ValueError(f"--against {b!r}: not a candidate ({', '.join(DEVICES)}); to compare "
                         "two captures give --capture A --against B")


def _kernel_arg(p: Any) -> None:
    p.add_argument("--kernel", action="append", metavar="OP=FILE.cu",
                   help="run your kernel file in place of the stock kernels of every OP node "
                        "(NODE=FILE.cu: one node, by id or name); repeatable. The file is code "
                        "and is compiled and run because you name it (docs/kernels.md)")


def add_torch_args(p: Any) -> None:
    """--torch-threads, --tf32, --deterministic, --torch-optimizer (a parser or a group)."""
    p.add_argument("--torch-threads", type=positive_int, default=None, metavar="N",
                   help="--device torch: torch.set_num_threads(N) (default: PyTorch's)")
    p.add_argument("--tf32", choices=["on", "off"], default=None,
                   help="--device torch:cuda: TF32 matmul and cuDNN (default: PyTorch's)")
    p.add_argument("--deterministic", action="store_true",
                   help="--device torch: torch.use_deterministic_algorithms(True)")
    p.add_argument("--torch-optimizer", choices=["tape", "torch"], default="tape",
                   help="--device torch: the update as the tape's optimizer in torch ops "
                        "(tape, the default) or PyTorch's own torch.optim (torch)")


def candidate_config(args: argparse.Namespace) -> dict:
    """``add_candidate_args``' flags as ``SessionConfig`` keywords."""
    tf32 = getattr(args, "tf32", None)
    return {"device": args.device, "kernels": tuple(getattr(args, "kernel", None) or ()),
            "explain": bool(getattr(args, "explain", False)),
            "torch_threads": getattr(args, "torch_threads", None),
            "tf32": None if tf32 is None else tf32 == "on",
            "deterministic": bool(getattr(args, "deterministic", False)),
            "torch_optimizer": getattr(args, "torch_optimizer", None) or "tape",
            "optimizer": optimizer_text(args)}
