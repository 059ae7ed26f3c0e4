"""`compare(tape, prog)`: per-node parity of values and gradients, computed on the device.

The tape's arrays are uploaded into reference buffers the program keeps, the device diff kernel
reduces every (reference, device) pair to a summary, and only the summaries come back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapescope.core.bits import same_bytes
from tapescope.core.parity import (
    NodeParity,
    ParityReport,
    TensorDiff,
    compare_arrays,
    first_divergence,
)
from tapescope.core.precision import HALF
from tapescope.core.tape import Tape
from tapescope.gpu.diff import DeviceDiff, identical
from tapescope.gpu.program import Program

# the parity types are device-agnostic (core.parity); re-exported for gpu.parity's users
__all__ = ["NodeParity", "ParityReport", "compare", "first_divergence", "same_bits",
           "same_bits_of"]


def _refs(prog: Program) -> tuple[list, list, DeviceDiff]:
    if not hasattr(prog, "_parity_refs"):
        dev = prog.device
        vals = [dev.alloc(n.size, prog.dtype) for n in prog.nodes]
        grads = [dev.alloc(n.size, prog.dtype) if g is not None else None
                 for n, g in zip(prog.nodes, prog.grads, strict=True)]
        prog._parity_refs = (vals, grads, DeviceDiff(dev))
    return prog._parity_refs


def _host_compare(tape: Tape, prog: Program, grads: bool) -> ParityReport:
    prog.device.synchronize()
    out = []
    for n in prog.nodes:
        tn = tape.node(n.id)
        if tn.op != n.op or tuple(tn.shape) != tuple(n.shape):
            raise ValueError(f"node {n.id}: the tape has {tn.op} {tn.shape}, the program "
                             f"captured {n.op} {n.shape}: not the same episode")
        v = compare_arrays(tape.value(n.id).reshape(-1), prog.values[n.id].download())
        g = None
        tg = tape.grad(n.id) if grads else None
        if tg is not None:
            if prog.grads[n.id] is None:
                g = TensorDiff(n.size, n.size, 0, float("inf"), float("inf"), 0)
            else:
                g = compare_arrays(tg.reshape(-1), prog.grads[n.id].download())
        out.append(NodeParity(n.id, n.op, n.name, v, g))
    return ParityReport.of(out)


_UINT = {np.dtype(np.float64): np.uint64, np.dtype(np.float32): np.uint32}


def _same_bits(ref: np.ndarray, buf, dev) -> bool:
    """True when the device holds exactly ``ref``'s bits, judged on the host without a copy
    (a host device's memory is the host's); False where that cannot be said here."""
    mem = dev.host_view(buf)
    u = _UINT.get(ref.dtype)
    if mem is None or u is None or mem.dtype != ref.dtype or mem.size != ref.size:
        return False
    return same_bytes(ref, mem)


def same_bits(prog: Program, arrays: dict[tuple[int, str], Any]) -> set:
    """The keys ``(node id, "value" | "grad")`` of ``arrays`` whose device array holds exactly
    that host array's bits now (``same_bits_of``); a node without that buffer is not."""
    keys, pairs = [], []
    for (i, which), a in arrays.items():
        buf = prog.values[i] if which == "value" else prog.grads[i]
        if buf is not None and a is not None:
            keys.append((i, which))
            pairs.append((buf, a))
    return {k for k, same in zip(keys, same_bits_of(prog, pairs), strict=True) if same}


def same_bits_of(prog: Program, pairs: list[tuple[Any, Any]]) -> list[bool]:
    """Per ``(device buffer, host array)`` pair: the buffer holds exactly the array's bits now
    (NaN payloads and zero signs included), judged where the data is: in place where the
    device's memory is the host's, else the host array uploaded and the pair reduced by the
    diff kernel, so only its summary crosses (``gpu.diff.identical``). An array of another
    dtype or size (or a half one: no half diff kernel) is not the same."""
    dev = prog.device
    dev.synchronize()
    out = [False] * len(pairs)
    todo = []
    for k, (buf, a) in enumerate(pairs):
        a = np.asarray(a)
        if a.dtype != buf.dtype or a.size != buf.n or a.dtype not in _UINT:
            continue
        mem = dev.host_view(buf)
        if mem is not None:  # (dtype and size checked above: one memcmp)
            out[k] = same_bytes(a, mem)
        else:
            todo.append((k, buf, a))
    if todo:
        scratch = prog.__dict__.setdefault("_same_scratch", {})
        diff = _refs(prog)[2]
        pairs_dev = []
        for slot, (_, buf, a) in enumerate(todo):
            key = (slot, buf.n, a.dtype.str)
            if key not in scratch:
                scratch[key] = dev.alloc(buf.n, a.dtype)
            scratch[key].upload(np.ascontiguousarray(a).reshape(-1))
            pairs_dev.append((scratch[key], buf))
        dev.synchronize()
        for (k, _, _), d in zip(todo, diff.summarize(pairs_dev), strict=True):
            out[k] = identical(d)
    return out


def compare(tape: Tape, prog: Program, grads: bool = True,
            equal: set | None = None) -> ParityReport:
    """Compare every captured node of `prog` with the same node of `tape` (same structure).
    A half program (no half diff kernel) downloads its arrays and compares on the host.

    Where the device's memory is the host's, a pair whose bits are equal is exact without an
    upload or a diff kernel (its summary is what the kernel gives equal bits: all zero); only
    the pairs that differ go through the device diff, so its every field is the kernel's.
    ``equal``: a set that gets the ``(node id, "value" | "grad")`` of each of those pairs, the
    device's array the tape's bits now (NaN payloads and zero signs included; an exact
    summary alone does not say that: two NaNs are equal whatever their bits), and of each
    pair the kernel found identical (``gpu.diff.identical``: no differing bits, no NaN of
    other bits; where the device's memory is not the host's), so a later check of the same
    arrays before the next launch need not read them again (``core.provenance.same_inputs``)
    and the pair's store reads them from the tape (``app.run_sides.StepArrays``)."""
    if len(tape) < len(prog.nodes):
        raise ValueError(f"the tape has {len(tape)} nodes, the program {len(prog.nodes)}")
    if prog.dtype in HALF:
        return _host_compare(tape, prog, grads)
    rv, rg, diff = _refs(prog)
    dev = prog.device
    dev.synchronize()  # the program's last launches are done before its memory is read
    pairs, where = [], []
    missing: dict[int, TensorDiff] = {}
    same: dict[tuple[int, str], TensorDiff] = {}
    for n in prog.nodes:
        tn = tape.node(n.id)
        if tn.op != n.op or tuple(tn.shape) != tuple(n.shape):
            raise ValueError(f"node {n.id}: the tape has {tn.op} {tn.shape}, the program "
                             f"captured {n.op} {n.shape}: not the same episode")
        tv = np.asarray(tape.value(n.id))
        if _same_bits(tv, prog.values[n.id], dev):
            same[(n.id, "value")] = TensorDiff(n.size, 0, 0, 0.0, 0.0, None)
            if equal is not None:
                equal.add((n.id, "value"))
        else:
            rv[n.id].upload(np.ascontiguousarray(tv).reshape(-1))
            pairs.append((rv[n.id], prog.values[n.id]))
            where.append((n.id, "value"))
        tg = tape.grad(n.id) if grads else None
        if tg is not None:
            if prog.grads[n.id] is None:  # the tape reached it, the program did not
                missing[n.id] = TensorDiff(n.size, n.size, 0, float("inf"), float("inf"), 0)
                continue
            tg = np.asarray(tg)
            if _same_bits(tg, prog.grads[n.id], dev):
                same[(n.id, "grad")] = TensorDiff(n.size, 0, 0, 0.0, 0.0, None)
                if equal is not None:
                    equal.add((n.id, "grad"))
                continue
            rg[n.id].upload(np.ascontiguousarray(tg).reshape(-1))
            pairs.append((rg[n.id], prog.grads[n.id]))
            where.append((n.id, "grad"))
    dev.synchronize()
    sums = diff.summarize(pairs) if pairs else []
    got: dict[tuple[int, str], TensorDiff] = dict(zip(where, sums, strict=True))
    if equal is not None:  # judged by the kernel (a device whose memory is not the host's)
        equal.update(k for k, d in got.items() if identical(d))
    got.update(same)
    out = []
    for n in prog.nodes:
        g = got.get((n.id, "grad"), missing.get(n.id))
        out.append(NodeParity(n.id, n.op, n.name, got[(n.id, "value")], g))
    return ParityReport.of(out)
