"""``--model M.onnx [--reinit]`` for the commands that train a workload (parity, report, gui):
the model becomes the workload spec ``onnx:PATH`` (core.onnx.workload), so PairRunner, the live
worker and every command take it the same way."""

from __future__ import annotations

import argparse


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
        return model_spec(model, bool(getattr(args, "reinit", False)))
    if getattr(args, "reinit", False):
        raise ValueError("--reinit needs --model M.onnx")
    return getattr(args, "workload", None) or default
