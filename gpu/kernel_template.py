"""The stock kernels of an op as one standalone, editable file (``tapescope kernels --template
OP``; docs/kernels.md): the kernels the op's launch builders record, found by capturing a
one-node tape of the op, with every helper and macro they use, in the kernel templates' dialect
(``real_t``, ``ADD``/``MUL``/``DIV``, ``EXP``, names ending ``_T``: gpu/source.py), exactly as
the library has them. ``--kernel OP=FILE.cu`` runs such a file: gpu/user_kernels.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from tapescope.gpu.device import DeviceError, Kernel, Module
from tapescope.gpu.user_kernels import UserKernelError

__all__ = ["op_kernels", "source_only_device", "template"]


# ---- which kernels an op launches --------------------------------------------------------------
def source_only_device() -> Any:
    """A host-memory device that parses kernels but never builds or runs them: enough to capture
    a tape and plan its fusion (generated text), with no compiler at all (``tapescope kernels``
    and the op templates)."""
    from tapescope.gpu.host import HostDevice
    from tapescope.gpu.signature import parse_kernels

    class SourceOnly(HostDevice):
        def compile(self, source: str, facts: Any = None) -> Module:
            return Module({n: Kernel(self, s, None) for n, s in parse_kernels(source).items()},
                          None, False)

        def _pack(self, launch: Any) -> None:
            launch.packed = None

        def run(self, launches: list) -> None:
            raise DeviceError("the source-only device runs nothing")

    return SourceOnly("source only")


@cache
def op_kernels(op: str) -> tuple[str, ...]:
    """The template names (``softmax_fwd_T``) of every kernel the op's launch builders record,
    forward and backward, over the op table's samples; UserKernelError for an op without
    kernels."""
    from tapescope.core.optable.registry import REGISTRY
    from tapescope.core.tape import Tape
    from tapescope.gpu.library import KERNELS, LEAF
    from tapescope.gpu.program import capture

    d = REGISTRY.get(op)
    if d is None or op not in KERNELS or KERNELS[op].fwd == LEAF or d.sample is None:
        known = sorted(o for o, k in KERNELS.items() if k.fwd != LEAF)
        raise UserKernelError(f"op {op!r} has no stock kernels to replace (ops: "
                              f"{', '.join(known)})")
    dev = source_only_device()
    names: list[str] = []
    rng = np.random.default_rng(0)
    for xs, attrs in d.sample(rng, np.dtype(np.float64)):
        t = Tape(np.float64)
        vs = [t.const(x) if (k in d.nondiff_inputs or np.asarray(x).dtype.kind != "f")
              else t.param(x) for k, x in enumerate(xs)]
        y = t.record(op, vs, attrs)
        # a sum on top, always: the loss's seed (a fill) is then not the op's launch
        loss = t.record("sum", [y], {"axis": None, "keepdims": False})
        prog = capture(dev, t, loss)
        for steps in prog.phases.values():
            for s in steps:
                if s.node == y.id:
                    n = re.sub(r"_f64$", "_T", s.launch.kernel.name)
                    if n not in names:
                        names.append(n)
    return tuple(names)


# ---- the template: the kernels, their helpers, their macros ------------------------------------
@dataclass(frozen=True)
class _Chunk:
    name: str | None  # a function's name; None: a preprocessor block
    text: str
    source: str  # the library template it comes from


_FUNC_NAME = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_NAMES = {"extern", "__global__", "__device__", "__forceinline__", "static", "inline",
              "void", "if", "for", "while", "return", "sizeof"}


def _chunks(text: str, source: str) -> list[_Chunk]:
    """Top-level pieces of a kernel template: preprocessor blocks and functions (each with
    the comment right above it)."""
    out: list[_Chunk] = []
    lines = text.splitlines(keepends=True)
    i, pending = 0, ""
    while i < len(lines):
        s = lines[i].strip()
        if not s:
            i += 1
            pending = ""
            continue
        if s.startswith("/*"):
            j = i
            while "*/" not in lines[j]:
                j += 1
            pending = "".join(lines[i:j + 1])
            i = j + 1
            continue
        if s.startswith("#"):
            j, depth = i, 0
            while True:
                t = lines[j].strip()
                if re.match(r"#\s*if", t):
                    depth += 1
                elif re.match(r"#\s*endif", t):
                    depth -= 1
                if depth <= 0 and not lines[j].rstrip().endswith("\\"):
                    break
                j += 1
            out.append(_Chunk(None, pending + "".join(lines[i:j + 1]), source))
            pending, i = "", j + 1
            continue
        j, depth, opened = i, 0, False
        while j < len(lines):
            code = re.sub(r"/\*.*?\*/|//.*", "", lines[j])
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if (opened and depth == 0) or (not opened and code.rstrip().endswith(";")):
                break
            j += 1
        body = "".join(lines[i:j + 1])
        head = body.split("{", 1)[0]
        names = [m for m in _FUNC_NAME.findall(head) if m not in _NOT_NAMES]
        out.append(_Chunk(names[0] if names else None, pending + body, source))
        pending, i = "", j + 1
    return out


def template(op: str, half: bool = False) -> str:
    """The standalone, editable file of ``op``'s stock kernels (module docstring); ``half``:
    as a float16 / bfloat16 library has them (a row op's kernels without the stash, which
    would round a kept term to the storage type)."""
    from tapescope.gpu.source import LIBRARY
    from tapescope.gpu.source import template as library_template

    wanted = op_kernels(op)
    chunks: list[_Chunk] = []
    for name in LIBRARY:
        chunks += _chunks(library_template(name, half), name)
    by_name = {c.name: c for c in chunks if c.name}
    missing = [k for k in wanted if k not in by_name]
    if missing:
        raise UserKernelError(f"op {op!r}: kernels {missing} not found in the library source")
    keep: set[str] = set()
    todo = list(wanted)
    while todo:  # the helpers the kernels call, transitively
        k = todo.pop()
        if k in keep:
            continue
        keep.add(k)
        used = set(re.findall(r"\b[A-Za-z_]\w*\b", by_name[k].text))
        todo += [n for n in used if n in by_name and n not in keep]
    files = sorted({by_name[k].source for k in keep}, key=LIBRARY.index)
    head = (f"/* {op}: the stock kernels of tapescope's library, as one editable file.\n"
            f" * Kernels of this op (replaced when you pass --kernel {op}=THIS_FILE.cu):\n"
            + "".join(f" *   {k}\n" for k in wanted)
            + " * Keep their names and parameter types (the launch contract: docs/kernels.md);\n"
            " * everything else here is a helper you may change. The text is the kernel\n"
            " * templates' dialect (gpu/source.py): real_t is the tape's float type, ADD/SUB/\n"
            " * MUL/DIV/SQRT are the correctly rounded operations, EXP/LOG/... the math mode's\n"
            " * transcendentals, a name ending _T gets the dtype suffix. Plain C works too:\n"
            " * fma(a, b, c), a * (1 / s). From: " + ", ".join(f"gpu/kernels/{f}.cu"
                                                            for f in files) + ". */\n\n")
    body = [c.text.rstrip("\n") + "\n" for c in chunks
            if (c.name is None and c.source in files) or c.name in keep]
    return head + "\n".join(body)
