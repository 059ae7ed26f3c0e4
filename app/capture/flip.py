"""Settings flipped in the child before the user's script runs (``tapescope capture --set``,
``tapescope sweep``; issue 43 item 3). Imports torch: the child side only, like the recorder.

    threads=N        torch.set_num_threads(N)
    deterministic    torch.use_deterministic_algorithms(True)
    autocast[=DT]    every top-level module's forward (the model's ``model(x)``) runs inside
                     ``torch.autocast("cpu", dtype=DT)`` (bfloat16 by default): global module
                     forward hooks enter it at the outermost forward and leave it after; the
                     loss computed outside the model and the backward run as the script has them
    matmul=P         torch.set_float32_matmul_precision(P) (highest | high | medium)
    compile[=B]      every outermost module call (the model's ``model(x)``) runs compiled:
                     the module's own ``compile(backend=B)`` (inductor by default, or
                     aot_eager) on its first call, through the capture's recording
                     ``torch.compile`` (app/capture/compiled.py)

A script that sets the same thing itself wins (its call comes after ours); the capture's
``settings`` say what was in force when recording started, its ``meta.applied`` what was flipped.
"""

from __future__ import annotations

from typing import Any

KNOWN = ("threads", "deterministic", "autocast", "matmul", "compile")


def parse(text: str) -> tuple[str, Any]:
    """``threads=2`` -> ``("threads", 2)``; ``deterministic`` -> ``("deterministic", True)``;
    ``autocast`` -> ``("autocast", "bfloat16")``. A bad one raises ValueError (one line)."""
    name, eq, value = text.partition("=")
    name = name.strip()
    if name not in KNOWN:
        raise ValueError(f"--set {text!r}: unknown setting (known: {', '.join(KNOWN)})")
    if name == "threads":
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"--set {text!r}: threads needs a count, e.g. threads=1")
        return name, int(value)
    if name == "deterministic":
        v = (value or "on").strip().lower()
        if v not in ("on", "off", "true", "false", "1", "0"):
            raise ValueError(f"--set {text!r}: deterministic is on or off")
        return name, v in ("on", "true", "1")
    if name == "autocast":
        v = (value or "bfloat16").strip()
        if v not in ("bfloat16", "float16", "off"):
            raise ValueError(f"--set {text!r}: autocast is bfloat16, float16 or off")
        return name, v
    if name == "compile":
        v = (value or "inductor").strip()
        if v not in ("inductor", "aot_eager"):
            raise ValueError(f"--set {text!r}: compile is inductor or aot_eager")
        return name, v
    v = value.strip()
    if v not in ("highest", "high", "medium"):
        raise ValueError(f"--set {text!r}: matmul is highest, high or medium")
    return name, v


class _Autocast:
    """Global forward hooks: the outermost module forward runs under CPU autocast."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype
        self.depth = 0
        self.ctx: list[Any] = []

    def pre(self, mod: Any, args: Any) -> None:
        import torch

        if self.depth == 0:
            c = torch.autocast("cpu", dtype=self.dtype)
            c.__enter__()
            self.ctx.append(c)
        self.depth += 1

    def post(self, mod: Any, args: Any, out: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.ctx:
            self.ctx.pop().__exit__(None, None, None)


_HOOKS: list[Any] = []


def apply(spec: dict[str, Any]) -> dict[str, Any]:
    """Flip each setting of ``spec`` in this process; what was applied (for the capture's
    meta)."""
    import torch

    done: dict[str, Any] = {}
    for name, value in spec.items():
        if name == "threads":
            torch.set_num_threads(int(value))
        elif name == "deterministic":
            torch.use_deterministic_algorithms(bool(value))
        elif name == "matmul":
            torch.set_float32_matmul_precision(value)
        elif name == "autocast":
            if value == "off":
                continue
            from torch.nn.modules import module as nn_module

            ac = _Autocast(getattr(torch, value))
            _HOOKS.append(nn_module.register_module_forward_pre_hook(ac.pre))
            _HOOKS.append(nn_module.register_module_forward_hook(ac.post))
        elif name == "compile":
            _compile_outermost(str(value))
        else:
            raise ValueError(f"unknown setting {name!r}")
        done[name] = value
    return done


def _compile_outermost(backend: str) -> None:
    """``nn.Module.__call__`` wrapped: an outermost module call (not while dynamo traces, not
    inside another module) goes through ``torch.compile(module, backend=backend)``, made once
    per module (as a script that compiles its model calls it)."""
    import torch

    orig = torch.nn.Module.__call__
    depth = [0]
    compiled: dict[int, Any] = {}

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return orig(self, *args, **kwargs)
        target = self
        if depth[0] == 0 and type(self).__name__ != "OptimizedModule":
            target = compiled.get(id(self))
            if target is None or target._orig_mod is not self:
                target = compiled[id(self)] = torch.compile(self, backend=backend)
        depth[0] += 1
        try:
            return orig(target, *args, **kwargs)
        finally:
            depth[0] -= 1

    torch.nn.Module.__call__ = call
