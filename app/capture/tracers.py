"""Tracers under the recorder: ``torch.jit.trace``, ``torch.export.export``, ``torch.onnx.export``
(docs/capture.md, "The recorder only reads").

A tracer and a Python dispatch mode do not go together. With any mode on (an empty one too),
``torch.jit.trace`` fails ("Cannot insert a Tensor that requires grad as a constant") or bakes
the example's sizes into the graph (a model traced on one example then ran every batch as the
example's: "Expected input batch_size (1) to match target batch_size (4)"); ``torch.export`` and
``torch.onnx.export`` (a checkpoint exported mid-training) run their fake tensors through it,
and recording stopped at the first ("Cannot access data pointer of Tensor (e.g. FakeTensor)").
So while a script traces or exports, the dispatch modes are off (ours and any above it), and put
back after: the tracer's own runs are not recorded (setup, not a step); a traced module's calls
are. ``meta["traced"]`` counts them by entry point (``jit.trace``, ``export.export`` ...).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["install"]

# (module, attribute): the entry points wrapped; ``trace`` of a module calls ``trace_module``,
# ``onnx.export`` calls ``export.export``: one count (the outermost)
_ENTRIES = (("torch.jit", "trace"), ("torch.jit", "trace_module"), ("torch.export", "export"),
            ("torch.onnx", "export"))


# the captures on in this process, innermost last (each one's meta), and the entry points
# wrapped: (module, name, torch's own, ours); the wrappers count into the innermost capture's
# meta and are taken away when the last capture ends
_METAS: list[dict[str, Any]] = []
_WRAPPED: list[tuple[Any, str, Callable, Callable]] = []


def install(meta: dict[str, Any]) -> Callable[[], None]:
    """Wrap the tracers' entry points in this process (once) for a capture whose meta is
    ``meta``; returns what ends it (the wrappers go when no capture is left)."""
    if not _WRAPPED:
        _wrap()
    _METAS.append(meta)

    def restore() -> None:
        for i in range(len(_METAS) - 1, -1, -1):
            if _METAS[i] is meta:
                del _METAS[i]
                break
        if not _METAS:
            for mod, name, orig, w in _WRAPPED:
                if getattr(mod, name, None) is w:
                    setattr(mod, name, orig)
            _WRAPPED.clear()
    return restore


_DEPTH = [0]  # (a trace inside a trace: ``trace`` of a module calls ``trace_module``)


def _wrap() -> None:
    from torch.utils._python_dispatch import _disable_current_modes

    depth = _DEPTH
    for modname, name in _ENTRIES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        orig = getattr(mod, name, None)
        while getattr(orig, "_tapescope_orig", None) is not None:  # (one of ours left there)
            orig = orig._tapescope_orig
        if orig is None:
            continue

        def make(orig: Callable, what: str) -> Callable:
            @functools.wraps(orig)
            def traced(*args: Any, **kwargs: Any) -> Any:
                if depth[0] or not _METAS:
                    return orig(*args, **kwargs)
                counts = _METAS[-1].setdefault("traced", {})
                counts[what] = counts.get(what, 0) + 1
                depth[0] += 1
                try:
                    with _disable_current_modes():
                        return orig(*args, **kwargs)
                finally:
                    depth[0] -= 1
            traced._tapescope_orig = orig  # type: ignore[attr-defined]
            return traced
        w = make(orig, f"{modname.removeprefix('torch.')}.{name}")
        setattr(mod, name, w)
        _WRAPPED.append((mod, name, orig, w))
