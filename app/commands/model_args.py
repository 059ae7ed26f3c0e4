"""``--model M.onnx [--reinit]`` for the commands that train a workload (parity, report, gui):
the model becomes the workload spec ``onnx:PATH`` (core.onnx.workload), so PairRunner, the live
worker and every command take it the same way."""

from __future__ import annotations

import argparse
import os


def add_model_args(p: argparse.ArgumentParser, limits: bool = True) -> None:
    """Add ``--model`` and ``--reinit`` (and, with ``limits``, ``--max-elements`` and
    ``--max-bytes``: a command that has the onnx budgets already, gui, passes False)."""
    p.add_argument("--model", metavar="M.onnx", default=None,
                   help="train an ONNX model instead of --workload (inference models get a "
                        "default loss: docs/workloads.md)")
    p.add_argument("--reinit", action="store_true",
                   help="with --model: seeded He/Glorot weights instead of the file's")
    p.add_argument("--input", dest="model_inputs", action="append", default=[],
                   metavar="NAME=FILE.npy",
                   help="with --model: input NAME from this .npy: one batch every step, "
                        "or a stack [steps, ...] (step i takes slice i), or a folder of .npy "
                        "files, one per step by name; targets=F.npy: the default loss's classes "
                        "(repeatable)")
    p.add_argument("--shape", dest="model_shapes", action="append", default=[],
                   metavar="NAME=d0,d1,...",
                   help="with --model: the dims of input NAME (dynamic axes are 1 otherwise)")
    p.add_argument("--weights", dest="model_weights", default=None, metavar="FILE.safetensors",
                   help="with --model: your weights, a state_dict by PyTorch's names (the "
                        "names the graph shows) or by initializer name (safetensors)")
    if not limits:
        return
    from tapescope.app.commands.onnx_cmd import _count

    p.add_argument("--max-elements", dest="max_elements", type=_count, default=None,
                   metavar="N", help="with --model: elements in any one tensor of the import "
                                     "(default 2**27, as tapescope onnx)")
    p.add_argument("--max-bytes", dest="max_bytes", type=_count, default=None, metavar="N",
                   help="with --model: bytes the import may hold, its values and their "
                        "gradients on the tape, e.g. 4G (default: as tapescope onnx)")


def resolve_workload(args: argparse.Namespace, default: str | None = "mlp") -> str | None:
    """The workload spec the arguments name (``--model`` wins over ``--workload``)."""
    model = getattr(args, "model", None)
    if model:
        # onnx is imported only when a model is named: the GPU image may not have it
        from tapescope.core.onnx.workload import model_spec

        if getattr(args, "workload", None):
            raise ValueError("give --model or --workload, not both")
        spec = model_spec(os.path.abspath(model), bool(getattr(args, "reinit", False)))
        return _with_model_options(spec, args)
    if getattr(args, "reinit", False):
        raise ValueError("--reinit needs --model M.onnx")
    for flag, dest in (("--input", "model_inputs"), ("--shape", "model_shapes"),
                       ("--weights", "model_weights")):
        if getattr(args, dest, None):
            raise ValueError(f"{flag} needs --model M.onnx")
    return absolute_spec(getattr(args, "workload", None)) or default


def _pair(text: str, flag: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise ValueError(f"{flag} {text!r}: write {flag} NAME=VALUE")
    return name, value


def _with_model_options(spec: str, args: argparse.Namespace) -> str:
    """``spec`` carrying --input / --shape / --weights (absolute paths)."""
    from tapescope.core.onnx.workload import parse_dims, with_options

    inputs = dict(_pair(t, "--input") for t in getattr(args, "model_inputs", None) or [])
    inputs = {k: os.path.abspath(v) for k, v in inputs.items()}
    for k, v in inputs.items():
        if not (os.path.isfile(v) or os.path.isdir(v)):
            why = "not a regular file or a folder" if os.path.exists(v) else "no such file"
            raise ValueError(f"--input {k}={v}: {why}")
    shapes = {k: parse_dims(v, k) for k, v in (
        _pair(t, "--shape") for t in getattr(args, "model_shapes", None) or [])}
    weights = getattr(args, "model_weights", None)
    if weights:
        weights = os.path.abspath(weights)
        if not os.path.isfile(weights):
            raise ValueError(f"--weights {weights}: no such file")
    limits = {k: getattr(args, k) for k in ("max_elements", "max_bytes")
              if getattr(args, k, None) is not None}
    # a stack of per-step batches must cover --steps (parity, report): checked at the build
    return with_options(spec, inputs, shapes, weights, limits, getattr(args, "steps", None))


def absolute_spec(spec: str | None) -> str | None:
    """A workload spec whose file part is absolute (``rel.py``, ``onnx:rel.onnx``), so a live
    worker started in another directory (the repository root) finds the same file."""
    if not spec:
        return spec
    for prefix in ("onnx+reinit:", "onnx:"):
        if spec.startswith(prefix):
            return prefix + os.path.abspath(spec[len(prefix):])
    if spec.lower().endswith((".py", ".onnx")):
        return os.path.abspath(spec)
    return spec


def resolve_dtype(given: str | None, workload: str | None) -> str:
    """``--dtype``, else the model's own precision for a model workload (float32 model ->
    float32 episodes, float16 / bfloat16 model -> a half episode: docs/reference-order.md,
    "Half precision"), else float64."""
    if given:
        return given
    if workload:
        from tapescope.core.onnx.workload import (
            is_model_spec,
            model_dtype,
            parse_spec,
            split_options,
        )

        if is_model_spec(workload):
            dt = model_dtype(parse_spec(split_options(workload)[0])[0])
            if dt in ("float32", "float64", "float16", "bfloat16"):
                return dt
    return "float64"


def add_amp_args(p) -> None:
    """``--amp float16|bfloat16`` and ``--loss-scale S`` (mixed precision: core.amp)."""
    p.add_argument("--amp", default=None, choices=["float16", "bfloat16"],
                   help="mixed precision: float32 master weights and optimizer, the episode in "
                        "this half type (float16: a dynamic loss scale; docs/reference-order.md)")
    p.add_argument("--loss-scale", default=None, metavar="S",
                   help="with --amp float16: a static loss scale (a power of two up to 2**15) "
                        "instead of the dynamic one")


def amp_kwargs(args) -> dict:
    """SessionConfig's amp and loss_scale from the flags; --dtype must agree with --amp."""
    amp = getattr(args, "amp", None)
    ls = getattr(args, "loss_scale", None)
    if amp is None:
        if ls is not None:
            raise ValueError("--loss-scale goes with --amp float16")
        return {}
    if getattr(args, "dtype", None) not in (None, amp):
        raise ValueError(f"--amp {amp} computes in {amp}: drop --dtype {args.dtype}")
    if ls is not None:
        try:
            ls = float(ls)
        except ValueError:
            raise ValueError(f"--loss-scale {ls!r}: not a number") from None
    return {"amp": amp, "loss_scale": ls}
