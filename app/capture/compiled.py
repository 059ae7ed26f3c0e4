"""torch.compile under the recorder (issue 43 item 2): each compiled graph recorded as data and
each call of it as one op, a *compiled region*, with its inputs and outputs.

A dispatch recorder cannot see inside a compiled graph: inductor's C++ kernels run below the
dispatcher. So ``tapescope capture`` wraps ``torch.compile`` in the script's process: the
user's backend is called as it would be, but through a backend of ours that

- for ``inductor`` (the default) calls ``compile_fx`` with the user's mode and options and an
  ``inner_compile`` of ours, which sees each aten graph AOTAutograd hands inductor (forward,
  backward, inference: decomposed, functional), records it as data (``graph_data``: per node
  its name, FX op, target's name, arguments with node references, module path, the aten op it
  came from), then calls inductor's own ``compile_fx_inner`` and hands back its compiled code
  with one change: a call records its inputs and outputs (``Recorder.region``) around the
  unchanged call;
- for an AOTAutograd backend (``aot_eager``...) wraps its forward, backward and inference
  compilers the same way;
- passes any other backend through unwrapped (its graph runs as ops the recorder sees, or is
  not recorded: ``meta.compile`` says which).

The graph is stored as data, never as code: a target is ``str(OpOverload)`` (``aten.mm.default``)
or ``getitem``; the judge maps names to reference forms through its table (core/capture/judge.py),
nothing is evaluated. The recorder's mode tells dynamo to ignore it
(``ignore_compile_internals``) and its module hooks return at once while dynamo traces, so the
compiled run compiles and runs as it would uncaptured (its printed losses are the same bits).
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import re
import warnings
from collections.abc import Callable
from typing import Any

import torch

from tapescope.core.capture.file import COMPILED_OP  # noqa: F401  (the region op's name, one place)

_SELF = re.compile(r"^L\['self'\]")
# the warning torch gives because *our* global module hooks are installed; not the user's
_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


def _target_name(t: Any) -> str:
    if t is operator.getitem:
        return "getitem"
    if isinstance(t, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return str(t)
    return "?" + getattr(t, "__qualname__", type(t).__name__)


def _module_of(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else str(path)


def graph_data(gm: Any, kind: str, backend: str, constant: Callable[[torch.Tensor], int],
               root: str = "") -> dict:
    """An FX graph as data: ``{kind, backend, nodes: {name, op, target, args, kwargs, module,
    original}, outputs}``. A node argument is ``{"N": index}``; a tensor constant (get_attr)
    ``{"T": value id}`` (``constant`` records it); anything else as the recorder encodes it.
    A node's module is dynamo's path under ``root``, the compiled model's name (``GPT.blocks.0``).
    """
    index: dict[Any, int] = {}
    cols: dict[str, list] = {k: [] for k in ("name", "op", "target", "args", "kwargs",
                                            "module", "original")}
    outputs: list = []

    def enc(x: Any, depth: int = 0) -> Any:
        if isinstance(x, torch.fx.Node):
            return {"N": index[x]}
        if isinstance(x, torch.Tensor):
            return {"T": constant(x)}
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"f": str(x)}
        if isinstance(x, (list, tuple)) and depth < 10:
            return [enc(v, depth + 1) for v in x]
        if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(x)
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return {"?": type(x).__name__}  # a symbolic size: not judged (static shapes are)
        return {"?": type(x).__name__}

    for n in gm.graph.nodes:
        if n.op == "output":
            outs = n.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            outputs = [index[o] if isinstance(o, torch.fx.Node) else None for o in outs]
            continue
        if n.op == "get_attr":
            obj = gm
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
            args = [enc(obj)] if isinstance(obj, torch.Tensor) else [{"?": type(obj).__name__}]
            target = "constant"
        elif n.op == "placeholder":
            args, target = [], "input"
        else:
            args, target = enc(list(n.args)), _target_name(n.target)
        index[n] = len(cols["name"])
        cols["name"].append(n.name)
        cols["op"].append(n.op)
        cols["target"].append(target)
        cols["args"].append(args)
        cols["kwargs"].append({k: enc(v) for k, v in n.kwargs.items()}
                              if n.op == "call_function" else {})
        cols["module"].append(module_path(root, _module_of(n)))
        orig = n.meta.get("original_aten")
        cols["original"].append(str(orig) if orig is not None else "")
    return {"kind": kind, "backend": backend, "nodes": cols, "outputs": outputs}


class _Recorded:
    """What the wrapped compilers share: the recorder (looked up when called: a script may
    compile before recording starts or after it ends) and the backend's name."""

    def __init__(self, get_recorder: Callable[[], Any], backend: str) -> None:
        self.get_recorder, self.backend = get_recorder, backend

    def note(self, gm: Any, kind: str) -> int | None:
        """Record graph ``gm`` (before the backend's passes change it); its index or None."""
        rec = self.get_recorder()
        if rec is None or not rec.recording:
            return None
        root = rec.modules[-1][1] if rec.modules else (rec.roots[-1][0] if rec.roots else "")
        return rec.add_graph(lambda constant: graph_data(gm, kind, self.backend, constant,
                                                         root.split(".")[0]))

    def compiler(self, inner: Callable, kind: str | None = None) -> Callable:
        """``inner`` (a graph compiler: ``(gm, example_inputs, **kw) -> callable``) that
        records the graph and returns a recording callable."""
        @functools.wraps(inner)
        def compile_graph(gm: Any, example_inputs: Any, *args: Any, **kw: Any) -> Any:
            k = kind or ("backward" if kw.get("is_backward") else
                         "inference" if kw.get("is_inference") else "forward")
            gid = self.note(gm, k)
            rec = self.get_recorder()
            quiet = rec is not None and rec.recording
            if quiet:
                rec.quiet = True  # compile-time ops on real tensors are not the step's
            try:
                out = inner(gm, example_inputs, *args, **kw)
            finally:
                if quiet:
                    rec.quiet = False
            return out if gid is None else self.calls(out, gid)
        return compile_graph

    def calls(self, compiled: Any, gid: int) -> Any:
        """``compiled`` whose calls are recorded as region ``gid``: inductor's ``OutputCode``
        keeps its class's behaviour (a subclass whose ``__call__`` records around it); any
        other callable is wrapped in a boxed function."""
        get = self.get_recorder
        boxed = bool(getattr(compiled, "_boxed_call", False))

        def run(call: Callable[[list], Any], inputs: list) -> Any:
            rec = get()
            if rec is None or not rec.recording or rec.quiet:
                return call(inputs)
            return rec.region(gid, list(inputs), lambda: call(inputs))

        if hasattr(type(compiled), "current_callable"):  # inductor's CompiledFxGraph
            cls = type(compiled)

            def __call__(self_: Any, inputs: list) -> Any:  # noqa: N807
                return run(lambda xs: cls.__call__(self_, xs), inputs)

            compiled.__class__ = type(f"Recorded{cls.__name__}", (cls,),
                                      {"__call__": __call__})
            return compiled

        def call_boxed(inputs: list) -> Any:
            return run(compiled if boxed else (lambda xs: compiled(*xs)), inputs)

        call_boxed._boxed_call = True  # type: ignore[attr-defined]
        return call_boxed


def wrap_backend(backend: Any, mode: Any, options: Any, dynamic: Any, name: Any,
                 get_recorder: Callable[[], Any]) -> tuple[Any, str]:
    """``(backend to give torch.compile, what was done)``: a recording backend for inductor and
    AOTAutograd backends; ``backend`` itself (unrecorded graphs) for any other."""
    from torch._dynamo.backends.common import AotAutograd
    from torch._dynamo.backends.registry import lookup_backend

    label = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
    if backend is None or backend == "inductor":
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        wrapper = torch._TorchCompileInductorWrapper(mode, options, dynamic, name)
        inner = _Recorded(get_recorder, "inductor").compiler(compile_fx_inner)

        def inductor(gm: Any, example_inputs: Any, **kw: Any) -> Any:
            # the AOTAutograd cache would hand back compiled code without calling
            # inner_compile (no graph to record); inductor's own FX graph cache still serves
            with torch._functorch.config.patch(enable_autograd_cache=False):
                return compile_fx(gm, example_inputs, inner_compile=inner,
                                  config_patches={**wrapper.config, **kw.get("config_patches",
                                                                              {})},
                                  compile_region_name=wrapper.name)

        return inductor, "inductor"
    found = lookup_backend(backend) if isinstance(backend, str) else backend
    if callable(found) and not isinstance(found, AotAutograd) and mode is None \
            and not options and {"fw_compiler", "bw_compiler"} <= set(
                inspect.signature(found).parameters):
        # aot_eager and its kind: a function that takes the compilers
        from torch._dynamo.backends.debugging import boxed_nop

        r = _Recorded(get_recorder, label)
        fw, bw = r.compiler(boxed_nop, "forward"), r.compiler(boxed_nop, "backward")

        def aot(gm: Any, example_inputs: Any, **kw: Any) -> Any:
            return found(gm, example_inputs, fw_compiler=kw.pop("fw_compiler", None) or fw,
                         bw_compiler=kw.pop("bw_compiler", None) or bw, **kw)

        return aot, label
    if isinstance(found, AotAutograd) and mode is None and not options:
        kw = dict(found.kwargs)
        r = _Recorded(get_recorder, label)
        fw = kw["fw_compiler"]
        kw["fw_compiler"] = r.compiler(fw, "forward")
        kw["bw_compiler"] = r.compiler(kw.get("bw_compiler") or fw, "backward")
        kw["inference_compiler"] = r.compiler(kw.get("inference_compiler") or fw, "inference")
        return AotAutograd(**kw), label
    return backend, f"{label} (not recorded: not an inductor or AOTAutograd backend)"


def install(meta: dict[str, Any], get_recorder: Callable[[], Any]) -> Callable[[], None]:
    """Wrap ``torch.compile`` in this process: each call's backend becomes a recording one
    (``wrap_backend``); ``meta["compile_called"]`` and ``meta["compile"]`` (backends) say so.
    Returns what puts ``torch.compile`` back (the Python API's block ends)."""
    orig = torch.compile
    if getattr(orig, "_tapescope_watch", False):
        return lambda: None

    @functools.wraps(orig)
    def compile(model: Any = None, **kwargs: Any) -> Any:  # noqa: A001 — torch's own name
        meta["compile_called"] = True
        if model is None:  # @torch.compile(...) with arguments: a decorator
            return lambda m: compile(m, **kwargs)
        warnings.filterwarnings("ignore", message=_HOOK_WARNING, category=UserWarning)
        backend = kwargs.pop("backend", "inductor")
        mode, options = kwargs.pop("mode", None), kwargs.pop("options", None)
        try:
            ours, what = wrap_backend(backend, mode, options, kwargs.get("dynamic"),
                                      kwargs.get("name"), get_recorder)
        except Exception as e:  # noqa: BLE001 — the user's compile as it is, said in meta
            meta.setdefault("compile", []).append(
                f"{backend} (not recorded: {type(e).__name__}: {e})"[:200])
            return orig(model, backend=backend, mode=mode, options=options, **kwargs)
        meta.setdefault("compile", []).append(what)
        if ours is backend:
            return orig(model, backend=backend, mode=mode, options=options, **kwargs)
        return orig(model, backend=ours, **kwargs)

    compile._tapescope_watch = True  # type: ignore[attr-defined]
    torch.compile = compile

    def restore() -> None:
        if torch.compile is compile:
            torch.compile = orig
    return restore


def module_path(root: str, fx_path: str) -> str:
    """dynamo's module path (``L['self'].blocks.0.ln1``) under the region's module (``GPT``)."""
    if not fx_path:
        return root
    return _SELF.sub(lambda m: root or "self", fx_path) if _SELF.match(fx_path) else fx_path
