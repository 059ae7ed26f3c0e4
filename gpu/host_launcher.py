"""The host backend's launchers: the C it appends to a kernel source, one ``ts_launch_<name>``
per kernel, that unpacks a launch's argument pointers and hands the body to host_prelude.h's
grid runner (``ts_run_grid``) with the kernel's schedule (gpu.kernel_facts: lanes, barrier), and
the launch records (``LaunchRecord``) the prelude's replay loop reads.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Mapping
from typing import Any

from tapescope.gpu.kernel_facts import KernelFacts
from tapescope.gpu.signature import KernelSig

__all__ = ["CTYPES", "LaunchRecord", "launcher", "launchers", "pack_args"]

#: a kernel's scalar parameter types as ctypes take them
CTYPES = {
    "double": ctypes.c_double,
    "float": ctypes.c_float,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "int": ctypes.c_int,
}


class LaunchRecord(ctypes.Structure):
    """host_prelude.h's launch record: the launcher, grid and block, the packed arguments."""

    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("g", ctypes.c_longlong * 3),
        ("b", ctypes.c_longlong * 3),
        ("args", ctypes.c_void_p),
    ]



def launcher(sig: KernelSig, facts: KernelFacts) -> str:
    """The C launcher of one kernel: ``facts.lanes`` runs runs of its threads in one call,
    ``facts.barrier`` its block's threads as fibers."""
    casts = []
    for i, p in enumerate(sig.params):
        ctype = f"{'const ' if p.const else ''}{p.ctype}{'*' if p.pointer else ''}"
        casts.append(f"*({ctype}*)a[{i}]")
    call = f"{sig.name}({', '.join(casts)});"
    # A kernel with a barrier runs its block's threads as fibers, a lane kernel runs runs of
    # threads in one call (host_prelude.h)
    return (
        f"static void ts_body_{sig.name}(void** a) {{ (void)a; {call} }}\n"
        f'extern "C" int ts_launch_{sig.name}(long long gx, long long gy, long long gz,'
        " long long bx, long long by, long long bz, void** a, int order, int nthreads) {\n"
        f"  return ts_run_grid(ts_body_{sig.name}, a, gx, gy, gz, bx, by, bz,"
        f" {int(facts.barrier)}, {int(facts.lanes)}, order, nthreads);\n"
        "}\n"
    )


def launchers(sigs: Iterable[KernelSig], facts: Mapping[str, KernelFacts]) -> str:
    """The text appended to a kernel source: every kernel's launcher (``facts``: each one's)."""
    return "\n\n/* generated host launchers */\n" + "".join(
        launcher(s, facts[s.name]) for s in sigs)


def pack_args(sig: KernelSig, args: list[Any]) -> tuple[list, Any]:
    """(the ctypes values, the void* array of pointers to them) a launcher takes: a buffer's
    device pointer, a scalar as its C type. Both must live as long as the launch."""
    store = []
    for p, a in zip(sig.params, args, strict=True):
        if p.pointer:
            store.append(ctypes.c_void_p(a.ptr))
        else:
            store.append(CTYPES[p.ctype](a.item()))
    # each slot holds the address of its value (what ``cast(pointer(s), c_void_p)`` gives,
    # without the two ctypes objects per argument)
    argv = (ctypes.c_void_p * max(len(store), 1))(*[ctypes.addressof(s) for s in store])
    return store, argv
