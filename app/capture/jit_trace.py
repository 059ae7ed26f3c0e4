"""``torch.jit.trace`` under the recorder (docs/capture.md, "The recorder only reads").

The tracer and a Python dispatch mode do not go together: with any mode on (an empty one too),
``torch.jit.trace`` fails ("Cannot insert a Tensor that requires grad as a constant") or bakes
the example's sizes into the graph (a model traced on one example then ran every batch as the
example's: "Expected input batch_size (1) to match target batch_size (4)"). So while a script
traces, the dispatch modes are off (ours and any above it), and put back after: the trace's own
run of the example is not recorded (it is setup, not a step), the traced module's calls are.
``meta["jit_trace"]`` counts the traces.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["install"]

_NAMES = ("trace", "trace_module")


def install(meta: dict[str, Any]) -> Callable[[], None]:
    """Wrap ``torch.jit.trace`` and ``torch.jit.trace_module`` in this process; returns what
    puts them back."""
    from torch.utils._python_dispatch import _disable_current_modes

    jit = torch.jit
    origs = {n: getattr(jit, n, None) for n in _NAMES}
    wrapped: dict[str, Callable] = {}
    depth = [0]  # (``trace`` of a module calls ``trace_module``: one trace)
    for name, orig in origs.items():
        if orig is None or getattr(orig, "_tapescope_watch", False):
            continue

        def make(orig: Callable) -> Callable:
            @functools.wraps(orig)
            def traced(*args: Any, **kwargs: Any) -> Any:
                if depth[0]:
                    return orig(*args, **kwargs)
                meta["jit_trace"] = meta.get("jit_trace", 0) + 1
                depth[0] += 1
                try:
                    with _disable_current_modes():
                        return orig(*args, **kwargs)
                finally:
                    depth[0] -= 1
            traced._tapescope_watch = True  # type: ignore[attr-defined]
            return traced
        wrapped[name] = make(orig)
        setattr(jit, name, wrapped[name])

    def restore() -> None:
        for name, w in wrapped.items():
            if getattr(jit, name, None) is w:
                setattr(jit, name, origs[name])
    return restore
