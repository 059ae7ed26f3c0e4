"""PyTorch's own eager kernel for one recorded aten call (imports torch: app side only).

``run(target, args, kwargs)`` is what ``core.capture.judge`` calls as ``eager`` for a compiled
graph's departing node (core/capture/regions.py): does eager aten, on the same inputs, give the
compiled code's bits, the reference's, or neither?

The target is a name from a capture file, so it is looked up, never evaluated: only a name that
has a reference form (``core.capture.aten_ref.has_reference``: the table is the allow-list) and
is ``aten.<op>.<overload>`` or ``prims.<op>.<overload>`` of identifiers; it is resolved through
``torch.ops`` attribute by attribute and must be an ``OpOverload``. Arguments are numpy arrays
(copied into fresh tensors), numbers, lists, None and torch's names of dtypes, layouts and
memory formats (looked up in ``_NAMED``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch

__all__ = ["run"]

_NAME = re.compile(r"(aten|prims)\.((?!__)[A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z][A-Za-z0-9_]*)")
_NAMED = {str(x): x for x in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    torch.strided, torch.contiguous_format, torch.preserve_format, torch.channels_last)}


def _op(target: str) -> Any:
    from tapescope.core.capture.aten_ref import has_reference

    m = _NAME.fullmatch(target)
    if m is None or not has_reference(target):
        raise ValueError(f"{target!r} is not an aten op with a reference form")
    op = getattr(getattr(getattr(torch.ops, m.group(1)), m.group(2)), m.group(3))
    if not isinstance(op, torch._ops.OpOverload):
        raise ValueError(f"{target!r} is not an aten op")
    return op


def _to_torch(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.name == "bfloat16":
            return torch.from_numpy(np.ascontiguousarray(x).view(np.int16).copy()).view(
                torch.bfloat16)
        return torch.from_numpy(np.array(x, copy=True))
    if isinstance(x, list):
        return [_to_torch(v) for v in x]
    if isinstance(x, str) and x in _NAMED:
        return _NAMED[x]
    return x


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.detach().contiguous().numpy().copy()


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    return []


def run(target: str, args: list, kwargs: dict) -> list[np.ndarray]:
    """``target`` run by PyTorch's eager kernel on ``args``/``kwargs``: its returned tensors,
    flattened, as numpy (the reference table's convention)."""
    op = _op(target)
    with torch.no_grad():
        out = op(*[_to_torch(a) for a in args], **{k: _to_torch(v) for k, v in kwargs.items()})
    return [_to_numpy(t) for t in _flat(out)]
