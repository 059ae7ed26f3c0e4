"""Built-in workloads: each builds parameters on a tape and records one episode per minibatch.

Protocol (devices and the app rely on it): ``wl = get("mlp")``; ``loss = wl.record(step)`` resets
the tape to the mark taken after the parameters and records one episode on ``wl.batch(step)``;
``wl.inputs`` maps each per-batch data leaf's name to its Var in the current episode;
``wl.make_optimizer()`` returns the configured ``core.optim`` optimizer. The node structure is
identical every step, so a device capture of one episode replays all of them.
"""

from __future__ import annotations

from typing import Any

from tapescope.core.workload import Workload
from tapescope.core.workloads.mlp import MLP
from tapescope.core.workloads.transformer import Transformer
from tapescope.core.workloads.user import WorkloadError, load_file

WORKLOADS: dict[str, type[Workload]] = {"mlp": MLP, "transformer": Transformer}


def get(name: str, **kwargs: Any) -> Workload:
    """A new workload by name (``mlp``, ``transformer``), from a user's ``PATH.py``, or an ONNX
    model (``onnx:PATH``, ``onnx+reinit:PATH``, ``PATH.onnx``: core.onnx.workload)."""
    if name.endswith(".py"):
        return load_file(name, **kwargs)
    if name.startswith(("onnx:", "onnx+reinit:")) or name.lower().endswith(".onnx"):
        from tapescope.core.onnx.errors import OnnxError
        from tapescope.core.onnx.workload import load_model

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


def enable_amp(wl: Workload, opt: Any, name: str, seed: int,
               loss_scale: float | None = None) -> None:
    """Turn a half workload's optimizer into mixed precision (core.amp): its float32 masters
    are the float32 episode's own initial weights (workload ``name`` at float32, same seed), so
    the half tape's parameters are float32 values rounded once, as under torch autocast."""
    import numpy as np

    from tapescope.core.amp import LossScaler

    w32 = get(name, dtype="float32", math=wl.tape.math, seed=seed)
    masters = {p.id: np.array(q.value) for p, q in zip(wl.tape.params(), w32.tape.params(),
                                                      strict=True)}
    opt.enable_amp(LossScaler.for_dtype(wl.tape.dtype.name, loss_scale), masters)
