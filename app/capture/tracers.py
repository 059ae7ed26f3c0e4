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


def install(meta: dict[str, Any]) -> Callable[[], None]:
    """Wrap the tracers' entry points in this process; returns what puts them back."""
    from torch.utils._python_dispatch import _disable_current_modes

    depth = [0]
    done: list[tuple[Any, str, Callable, Callable]] = []
    for modname, name in _ENTRIES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        orig = getattr(mod, name, None)
        if orig is None or getattr(orig, "_tapescope_watch", False):
            continue

        def make(orig: Callable, what: str) -> Callable:
            @functools.wraps(orig)
            def traced(*args: Any, **kwargs: Any) -> Any:
                if depth[0]:
                    return orig(*args, **kwargs)
                counts = meta.setdefault("traced", {})
                counts[what] = counts.get(what, 0) + 1
                depth[0] += 1
                try:
                    with _disable_current_modes():
                        return orig(*args, **kwargs)
                finally:
                    depth[0] -= 1
            traced._tapescope_watch = True  # type: ignore[attr-defined]
            return traced
        w = make(orig, f"{modname.removeprefix('torch.')}.{name}")
        setattr(mod, name, w)
        done.append((mod, name, orig, w))

    def restore() -> None:
        for mod, name, orig, w in done:
            if getattr(mod, name, None) is w:
                setattr(mod, name, orig)
    return restore
