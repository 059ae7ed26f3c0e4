"""Built-in workloads: each builds parameters on a tape and records one episode per minibatch.

Protocol (devices and the app rely on it): ``wl = get("mlp")``; ``loss = wl.record(step)`` resets
the tape to the mark taken after the parameters and records one episode on ``wl.batch(step)``;
``wl.inputs`` maps each per-batch data leaf's name to its Var in the current episode;
``wl.make_optimizer()`` returns the configured ``core.optim`` optimizer. The node structure is
identical every step, so a device capture of one episode replays all of them.
"""

from __future__ import annotations

from typing import Any

from core.workload import Workload
from core.workloads.mlp import MLP
from core.workloads.transformer import Transformer
from core.workloads.user import WorkloadError, load_file

WORKLOADS: dict[str, type[Workload]] = {"mlp": MLP, "transformer": Transformer}


def get(name: str, **kwargs: Any) -> Workload:
    """A new workload by name (``mlp``, ``transformer``), from a user's ``PATH.py``, or an ONNX
    model (``onnx:PATH``, ``onnx+reinit:PATH``, ``PATH.onnx``: core.onnx.workload)."""
    if name.endswith(".py"):
        return load_file(name, **kwargs)
    if name.startswith(("onnx:", "onnx+reinit:")) or name.lower().endswith(".onnx"):
        from core.onnx.errors import OnnxError
        from core.onnx.workload import load_model

        try:
            return load_model(name, **kwargs)
        except OnnxError as e:  # a model that cannot train: one line naming the node and op
            raise WorkloadError(str(e)) from None
    try:
        cls = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; built-in: {', '.join(WORKLOADS)}") from None
    return cls(**kwargs)


__all__ = ["MLP", "WORKLOADS", "Transformer", "Workload", "WorkloadError", "get", "load_file"]
