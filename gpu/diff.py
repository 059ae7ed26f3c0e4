"""The device diff: reduce pairs of device buffers to parity summaries where the data lives."""

from __future__ import annotations

import numpy as np

from tapescope.core.parity import TensorDiff
from tapescope.gpu.device import Buffer, Device, DeviceError, Module
from tapescope.gpu.kernel_facts import merge_facts
from tapescope.gpu.source import instantiate, instantiate_facts, template, template_facts

__all__ = ["DeviceDiff", "identical"]

_THREADS = 64  # per tensor (one block each); partials combine exactly in any grouping


def identical(d: TensorDiff) -> bool:
    """The two tensors of a summary hold the same bits, NaN payloads and signs included (a
    summary that says exact may still hide NaNs of other bits: ``nan_bits_differ``)."""
    return d.n_diff == 0 and d.nan_bits_differ == 0


class DeviceDiff:
    """Summaries of (reference, other) buffer pairs computed on the device.

    Only the summaries (8 numbers per tensor) come back to the host.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        src = template("diff")
        text = instantiate(src, np.float64) + "\n" + instantiate(src, np.float32)
        facts = merge_facts(instantiate_facts(template_facts("diff"), dt)
                            for dt in (np.float64, np.float32))
        self.module: Module = device.compile(text, facts)

    def summarize(self, pairs: list[tuple[Buffer, Buffer]]) -> list[TensorDiff]:
        """One TensorDiff per (ref, other) pair, in order (pairs of mixed dtypes allowed)."""
        out: list[TensorDiff | None] = [None] * len(pairs)
        for dt in (np.dtype(np.float64), np.dtype(np.float32)):
            idx = [i for i, (r, _) in enumerate(pairs) if r.dtype == dt]
            if idx:
                for i, d in zip(idx, self._run(dt, [pairs[i] for i in idx]), strict=True):
                    out[i] = d
        for i, (r, o) in enumerate(pairs):
            if r.dtype not in (np.float64, np.float32) or o.dtype != r.dtype or r.n != o.n:
                raise DeviceError(
                    f"diff pair {i}: {r!r} vs {o!r} (need equal size and float64/float32)"
                )
        return out  # type: ignore[return-value]

    def _run(self, dt: np.dtype, pairs: list[tuple[Buffer, Buffer]]) -> list[TensorDiff]:
        dev, count = self.device, len(pairs)
        sfx = "f64" if dt == np.float64 else "f32"
        table = np.array([[r.ptr, o.ptr, r.n] for r, o in pairs], dtype=np.int64).reshape(-1)
        tbuf = dev.alloc(table.size, np.int64)
        tbuf.upload(table)
        pi = dev.alloc(6 * count * _THREADS, np.int64)
        pd = dev.alloc(2 * count * _THREADS, np.float64)
        ri = dev.alloc(6 * count, np.int64)
        rd = dev.alloc(2 * count, np.float64)
        part = self.module[f"diff_partial_{sfx}"].record(count, _THREADS, tbuf, count, pi, pd)
        comb = self.module[f"diff_combine_{sfx}"].record(
            (count + 63) // 64, 64, count, _THREADS, pi, pd, ri, rd
        )
        dev.run([part, comb])
        ints, dbls = ri.download().reshape(count, 6), rd.download().reshape(count, 2)
        res = []
        for (r, _), iv, dv in zip(pairs, ints, dbls, strict=True):
            n_diff = int(iv[0])
            res.append(
                TensorDiff(
                    n=r.n,
                    n_diff=n_diff,
                    max_ulp=int(np.int64(iv[1]).view(np.uint64)),
                    max_abs=float(dv[0]),
                    max_rel=float(dv[1]),
                    first_index=int(iv[2]) if n_diff else None,
                    n_nan=int(iv[3]),
                    n_signed_zero=int(iv[4]),
                    nan_bits_differ=int(iv[5]),
                )
            )
        return res
