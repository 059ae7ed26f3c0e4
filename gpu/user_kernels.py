"""Your own kernel for an op: a user's file compiled in place of the stock kernels of the nodes
it names (docs/kernels.md; the template it starts from: gpu/kernel_template.py). Device-neutral:
the device's own ``compile`` does the work.

``compile_overrides(device, specs, nodes, dtype, math)`` compiles each user file the way the
library is compiled (the same ``instantiate`` for the tape's dtype and math, the same
``device.compile``: HOST_FLAGS behind the host prelude, or NVRTC's flags) and checks that it
defines every stock kernel of its op with the stock parameter types. ``Overlay`` is a module that
answers those kernel names from the user's module and every other from the library's: the
program hands it to the launch builders of exactly the nodes the user named, so the
substitution is by compiled kernel name, whatever the builders look like.

SECURITY: a user file is code and runs on this machine; it is compiled only because the user
named it on the command line (``--kernel``), as a workload script is run (docs/security.md).
"""

from __future__ import annotations

import mmap
import os
import re
import signal
import struct
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tapescope.gpu.device import CompileLimitError, DeviceError, Kernel, Module, limited

__all__ = ["KernelSpec", "NameSpy", "Overlay", "UserKernelError", "compile_overrides",
           "parse_spec", "trial_run"]


MAX_KERNEL_BYTES = 4 << 20  # a kernel file's size, checked before it is read
# the host compiler's bounds for a user's file (gpu.host_compiler.limited): the stock templates
# take ~65 MB and half a second; `#include "/dev/zero"` would take gigabytes
USER_COMPILE_BYTES, USER_COMPILE_S = 1 << 30, 120.0
TRIAL_S = 120.0  # a trial episode that runs longer is ended and not held against the file
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]*)[>"]', re.M)


class UserKernelError(ValueError):
    """A ``--kernel`` file that cannot stand in for the stock kernel: one line, file and line."""


@dataclass(frozen=True)
class KernelSpec:
    """``OP=FILE.cu`` (every node of the op) or ``NODE=FILE.cu`` (one node, by id or name)."""

    text: str  # as the user wrote it
    key: str  # the op name, or the node id / name
    path: Path


def parse_spec(spec: str) -> KernelSpec:
    """``KEY=FILE.cu`` → KernelSpec; the file must exist (its text is read at compile)."""
    key, sep, path = spec.partition("=")
    if not sep or not key.strip() or not path.strip():
        raise UserKernelError(f"--kernel {spec!r}: expected OP=FILE.cu or NODE=FILE.cu")
    p = Path(path.strip())
    if not p.is_file():
        raise UserKernelError(f"--kernel {spec!r}: no file {str(p)!r}")
    size = p.stat().st_size
    if size > MAX_KERNEL_BYTES:  # read whole into memory and into the compiler: bounded first
        raise UserKernelError(f"--kernel {spec!r}: {p} is {size} bytes (a kernel file may have "
                              f"{MAX_KERNEL_BYTES})")
    return KernelSpec(spec, key.strip(), p)


# ---- compiling the user's files ----------------------------------------------------------------
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_GCC_ERR = re.compile(r"^(?P<f>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$",
                      re.M)
_NVRTC_ERR = re.compile(r"^(?P<f>[^(\n]+)\((?P<line>\d+)\): (?:catastrophic )?error: "
                        r"(?P<msg>.*)$", re.M)


def _user_source(spec: KernelSpec, dtype: np.dtype, math: str) -> tuple[str, str]:
    """(the source the device compiles, the file name its #line directive gives)."""
    from tapescope.gpu.source import STORAGE, instantiate

    try:
        text = spec.path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UserKernelError(f"--kernel {spec.text!r}: cannot read {spec.path}: {e}") from None
    tag = _SAFE.sub("_", spec.path.name) or "user.cu"
    # TS_USER_KERNEL: the library's host-only bodies (mm_T's) step aside, so a user's edit of
    # the kernel text they see runs on the host backend too
    # a half episode's storage types and RND (gpu/kernels/half.cuh), as the library has them
    half = '#include "half.cuh"\n' if np.dtype(dtype) in STORAGE else ""
    src = ('#include "refmath.cuh"\n' + half + '#define TS_USER_KERNEL 1\n' + f'#line 1 "{tag}"\n'
           + instantiate(text, dtype, math))
    return src, tag


def _check_includes(spec: KernelSpec, text: str) -> None:
    """Refuse an ``#include`` of what is not a regular file of at most MAX_KERNEL_BYTES
    (/dev/zero, a FIFO, /dev/stdin: a compiler reading it never ends); looked up as the
    compiler would, beside the file, then on the kernel include path. (An include through a
    macro is not seen here: on the host backend the compiler's limits bound it.)"""
    from tapescope.gpu.device import INCLUDE_DIRS

    for m in _INCLUDE.finditer(text):
        name = m[2].strip()
        dirs = ([spec.path.parent] if m[1] == '"' else []) + [Path(d) for d in INCLUDE_DIRS]
        for cand in [Path(name)] if os.path.isabs(name) else [d / name for d in dirs]:
            if not os.path.lexists(cand):
                continue
            line = text.count("\n", 0, m.start()) + 1
            try:
                st = cand.stat()
            except OSError as e:
                raise UserKernelError(f"--kernel {spec.text!r}: {spec.path}:{line}: cannot "
                                      f"include {name!r}: {e.strerror or e}") from None
            if not os.path.isfile(cand) or st.st_size > MAX_KERNEL_BYTES:
                what = ("is not a regular file" if not os.path.isfile(cand)
                        else f"has {st.st_size} bytes (at most {MAX_KERNEL_BYTES})")
                raise UserKernelError(f"--kernel {spec.text!r}: {spec.path}:{line}: includes "
                                      f"{name!r}, which {what}")
            break


def _compile_error(spec: KernelSpec, tag: str, err: DeviceError) -> UserKernelError:
    if isinstance(err, CompileLimitError):  # its words, not a line of the file
        return UserKernelError(f"--kernel {spec.text!r}: {spec.path}: does not compile: "
                               f"{err}")
    text = str(err)
    for pat in (_GCC_ERR, _NVRTC_ERR):
        for m in pat.finditer(text):
            if Path(m["f"].strip()).name == tag:
                return UserKernelError(f"--kernel {spec.text!r}: {spec.path}:{m['line']}: "
                                       f"{m['msg'].strip()}")
    last = [ln for ln in text.splitlines() if "error" in ln] or text.splitlines() or [""]
    return UserKernelError(f"--kernel {spec.text!r}: {spec.path}: does not compile: "
                           f"{last[0].strip()[:300]}")


def _line_of(text: str, name: str) -> int:
    for k, ln in enumerate(text.splitlines(), 1):
        if re.search(rf"\b{re.escape(name)}\s*\(", ln):
            return k
    return 1


class NameSpy(Module):
    """The library module, remembering every kernel name a launch builder asks it for."""

    def __init__(self, base: Module) -> None:
        super().__init__(base.kernels, base.path, base.built)
        self.seen: set[str] = set()

    def __getitem__(self, name: str) -> Kernel:
        self.seen.add(name)
        return super().__getitem__(name)


class Overlay(Module):
    """The library module with some kernel names answered by a user's module."""

    def __init__(self, base: Module, user: Module, names: set[str], spec: KernelSpec) -> None:
        super().__init__(base.kernels, base.path, base.built)
        self.base, self.user, self.names, self.spec = base, user, names, spec
        for attr in ("lanes", "lib", "replay"):  # the host module's extras, as the library's
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))

    def __getitem__(self, name: str) -> Kernel:
        if name in self.names:
            return self.user[name]
        return self.base[name]


def compile_overrides(device: Any, specs: list[KernelSpec], nodes: tuple, dtype: Any,
                      math: str, base: Module,
                      kernel_names: Callable[[int], set[str]]) -> dict[int, Overlay]:
    """Per node id, the module its launch builders get (module docstring); a file that does not
    compile or does not define the node's kernels (``kernel_names(node_id)``: the names its
    builders record) with the stock parameters raises UserKernelError (one line: the spec, the
    file, the line, the compiler's words)."""
    from tapescope.core.optable.registry import REGISTRY
    dt = np.dtype(dtype)
    sfx = "f64" if dt == np.float64 else "f32"
    out: dict[int, Overlay] = {}
    for spec in specs:
        key = spec.key
        if key in REGISTRY:
            targets = [n.id for n in nodes if n.op == key]
        elif key.lstrip("-").isdigit():
            i = int(key)
            if not 0 <= i < len(nodes):
                raise UserKernelError(f"--kernel {spec.text!r}: no node #{i} "
                                      f"(ids 0..{len(nodes) - 1})")
            targets = [i]
        else:
            targets = [n.id for n in nodes if n.name == key]
            if len(targets) != 1:
                raise UserKernelError(f"--kernel {spec.text!r}: {key!r} is neither an op nor "
                                      f"the name of one node ({len(targets)} nodes have it)")
        if not targets:
            raise UserKernelError(f"--kernel {spec.text!r}: no node of op {key!r} in this "
                                  "episode")
        op = nodes[targets[0]].op
        if any(nodes[i].op != op for i in targets):
            raise UserKernelError(f"--kernel {spec.text!r}: the nodes named differ in op")
        names: set[str] = set()
        for i in targets:
            names |= kernel_names(i)
        src, tag = _user_source(spec, dt, math)
        raw = spec.path.read_text()
        _check_includes(spec, raw)
        try:
            with limited(USER_COMPILE_BYTES, USER_COMPILE_S):  # (host: g++ in a child)
                user = device.compile(src)
        except DeviceError as e:
            raise _compile_error(spec, tag, e) from None
        except (TypeError, ValueError) as e:  # a parameter list the launcher cannot pass
            raise UserKernelError(f"--kernel {spec.text!r}: {spec.path}: {e}") from None
        for n in sorted(names):
            stock = base.kernels[n].sig
            mine = user.kernels[n].sig if n in user else None
            tname = re.sub(rf"_{sfx}$", "_T", n)
            if mine is None:
                want_t = sorted(re.sub(rf"_{sfx}$", "_T", k) for k in names)
                raise UserKernelError(f"--kernel {spec.text!r}: {spec.path}: defines no kernel "
                                      f"{tname} (the {op} kernels: {', '.join(want_t)})")
            want = [(p.ctype, p.pointer, p.const) for p in stock.params]
            got = [(p.ctype, p.pointer, p.const) for p in mine.params]
            if want != got:
                raise UserKernelError(
                    f"--kernel {spec.text!r}: {spec.path}:{_line_of(raw, tname)}: {tname} "
                    f"takes ({', '.join(map(str, mine.params))}), the launch passes "
                    f"({', '.join(map(str, stock.params))})")
        for i in targets:
            out[i] = Overlay(base, user, names, spec)
    return out


def trial_run(prog: Any) -> None:
    """One forward and backward episode of ``prog`` (a host program with user kernels) in a
    forked child, before anything runs here: a user kernel that crashes (a write through
    NULL) is one line naming its file and op, not a tapescope killed by SIGSEGV with no word.

    The child runs the launches one at a time on one thread, writing the index of the launch
    it starts into a shared page; when it dies of a signal the page says whose launch it was.
    An episode longer than TRIAL_S is ended and not held against the files; other errors are
    left to the real run to report. CUDA (an illegal address is an error there, not a signal)
    and systems without fork are not tried.
    """
    if not prog.user_kernels or prog.device.kind != "host" or not hasattr(os, "fork"):
        return
    steps = [st for p in ("forward", "backward") for st in prog.phases[p]]
    page = mmap.mmap(-1, 8)  # shared with the child (MAP_SHARED, anonymous)
    page[:8] = struct.pack("<q", -1)
    parent = os.getpid()
    with warnings.catch_warnings():  # (3.12 warns on fork with threads: the child runs none)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns, never runs atexit or flushes the parent's files
        code = 0
        try:
            import faulthandler

            faulthandler.disable()  # its traceback would only repeat what the line says
            if sys.platform.startswith("linux"):  # it dies with us (a worker killed with -9)
                import ctypes

                ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:
                raise SystemExit
            dev = prog.device
            dev.threads, dev.orders = 1, "forward"  # the pool's threads are the parent's
            for k, st in enumerate(steps):
                page[:8] = struct.pack("<q", k)
                dev.launch_list([st.launch]).replay()
            page[:8] = struct.pack("<q", len(steps))
        except BaseException:  # noqa: BLE001 — the real run reports it, with its words
            code = 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + TRIAL_S
    status = None
    try:
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            else:
                time.sleep(0.01)
    except BaseException:  # Ctrl-C: the child goes too
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        raise
    if not os.WIFSIGNALED(status):
        return
    sig = os.WTERMSIG(status)
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    k = struct.unpack("<q", page[:8])[0]
    node = steps[k].node if 0 <= k < len(steps) else -1
    mine = prog.user_kernels.get(node)
    if mine is not None:
        raise UserKernelError(f"--kernel {mine.spec.text!r}: kernel {mine.spec.path} (op "
                              f"{prog.nodes[node].op}) crashed with {name} at node #{node} in "
                              "a trial run of one episode (in a child process; nothing ran "
                              "here)")
    ran = sorted({str(o.spec.path) for i, o in prog.user_kernels.items()
                  if any(s.node == i for s in steps[:max(k, 0)])})
    where = f"node #{node} ({prog.nodes[node].op})" if 0 <= node < len(prog.nodes) else "a launch"
    raise UserKernelError(f"--kernel: a trial run of one episode crashed with {name} in the "
                          f"stock kernel of {where}"
                          + (f", after your kernel {', '.join(ran)} ran (did it write out of "
                             "bounds?)" if ran else ""))
