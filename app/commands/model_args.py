"""``--model M.onnx [--reinit]`` for the commands that train a workload (parity, report, gui):
the model becomes the workload spec ``onnx:PATH`` (core.onnx.workload), so PairRunner, the live
worker and every command take it the same way."""

from __future__ import annotations

import argparse
import os


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Add ``--model`` and ``--reinit``."""
    p.add_argument("--model", metavar="M.onnx", default=None,
                   help="train an ONNX model instead of --workload (inference models get a "
                        "default loss: docs/workloads.md)")
    p.add_argument("--reinit", action="store_true",
                   help="with --model: seeded He/Glorot weights instead of the file's")


def resolve_workload(args: argparse.Namespace, default: str | None = "mlp") -> str | None:
    """The workload spec the arguments name (``--model`` wins over ``--workload``)."""
    model = getattr(args, "model", None)
    if model:
        # onnx is imported only when a model is named: the GPU image may not have it
        from core.onnx.workload import model_spec

        if getattr(args, "workload", None):
            raise ValueError("give --model or --workload, not both")
        return model_spec(os.path.abspath(model), bool(getattr(args, "reinit", False)))
    if getattr(args, "reinit", False):
        raise ValueError("--reinit needs --model M.onnx")
    return absolute_spec(getattr(args, "workload", None)) or default


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
    float32 episodes), else float64. A half-precision model without ``--dtype`` is refused
    with the way out (half precision on the tape is its own issue)."""
    if given:
        return given
    if workload:
        from core.onnx.workload import is_model_spec, model_dtype, parse_spec

        if is_model_spec(workload):
            dt = model_dtype(parse_spec(workload)[0])
            if dt in ("float16", "bfloat16"):
                raise ValueError(f"the model is {dt}; the tape trains float32 or float64: "
                                 "give --dtype float32")
            if dt in ("float32", "float64"):
                return dt
    return "float64"
