"""The kernel library's registry: every op's launch builders, and what a builder is given.

`KERNELS[op]` holds two builders keyed by the same names as `core.ops.REGISTRY`:
`fwd(ctx, node) -> [Launch]` writes the node's value buffer; `bwd(ctx, node, k) -> [Launch]`
adds the node's contribution to input `k`'s gradient buffer (docs/reference-order.md).
Leaves (param, const) have no kernels: their values are uploaded. Host-side index maps
(broadcast reads, reduction orders, permutations) are computed once at capture, here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapescope.core import precision
from tapescope.gpu.device import Buffer, Device, Launch, Module
from tapescope.gpu.source import SUFFIX

__all__ = ["KERNELS", "LEAF", "OpKernels", "BuildCtx", "register_kernels", "broadcast_index",
           "unb_perm"]

LEAF = "leaf"
_BLOCK = 128
_MAX_GRID = 4096


@dataclass(frozen=True)
class OpKernels:
    """An op's forward and backward launch builders (LEAF for param/const)."""

    fwd: Callable[..., list[Launch]] | str
    bwd: Callable[..., list[Launch]] | str


KERNELS: dict[str, OpKernels] = {}


def register_kernels(*names: str) -> Callable:
    """Decorator for a (fwd, bwd) pair factory: `@register_kernels("add", "sub")`."""

    def deco(factory: Callable[[str], OpKernels]) -> Callable:
        for n in names:
            KERNELS[n] = factory(n)
        return factory

    return deco


class BuildCtx:
    """What a builder needs: buffers by node id, aux allocation, kernels for the tape dtype."""

    def __init__(self, device: Device, module: Module, dtype: np.dtype, nodes: tuple,
                 values: list[Buffer], grads: list[Buffer | None]) -> None:
        self.device = device
        self.module = module
        self.dtype = np.dtype(dtype)
        self.sfx = SUFFIX[self.dtype]
        # scalars and scratch: float32 in a half episode (docs/reference-order.md)
        self.compute_dtype = precision.compute_dtype(self.dtype)
        self.nodes = nodes
        self.values = values
        self.grads = grads
        self.aux_buffers: dict[tuple[int, str], Buffer] = {}

    def real(self, x: float) -> np.generic:
        """A host scalar rounded once to the tape's compute dtype (the contract's T(s))."""
        return self.compute_dtype.type(x)

    def aux(self, node_id: int, key: str, array: np.ndarray | None = None,
            n: int = 0, dtype: Any = None) -> Buffer:
        """A per-node device buffer made at capture: uploaded from `array`, or zeroed (of
        ``dtype``, default the compute dtype: scratch is float32 in a half episode)."""
        k = (node_id, key)
        if k not in self.aux_buffers:
            if array is not None:
                a = np.ascontiguousarray(array).reshape(-1)
                buf = self.device.alloc(a.size, a.dtype)
                buf.upload(a)
            else:
                buf = self.device.alloc(n, dtype if dtype is not None else self.compute_dtype)
            self.aux_buffers[k] = buf
        return self.aux_buffers[k]

    def launch(self, name: str, n: int, *args: Any) -> Launch:
        """A grid-stride launch of `name_<dtype>` sized for n work items."""
        grid = max(1, min(-(-int(n) // _BLOCK), _MAX_GRID))
        return self.module[f"{name}_{self.sfx}"].record(grid, _BLOCK, *args)

    def single(self, name: str, *args: Any) -> Launch:
        """A one-thread launch (serial tails: the loss sum, the clip norm)."""
        return self.module[f"{name}_{self.sfx}"].record(1, 1, *args)

    def shape(self, i: int) -> tuple[int, ...]:
        """Shape of node i."""
        return tuple(self.nodes[i].shape)


# ---- index maps (host, once per capture) -------------------------------------------------------
def broadcast_index(in_shape: tuple, out_shape: tuple) -> np.ndarray:
    """ia[i]: the input element read at output position i under numpy broadcasting."""
    n = int(np.prod(in_shape, dtype=np.int64))
    src = np.arange(n, dtype=np.int64).reshape(in_shape)
    return np.ascontiguousarray(np.broadcast_to(src, out_shape)).reshape(-1)


def unb_perm(in_shape: tuple, out_shape: tuple) -> tuple[np.ndarray, int]:
    """perm[j*R + r]: the output positions reducing into input slot j, row-major; and R."""
    nd = len(out_shape)
    padded = (1,) * (nd - len(in_shape)) + tuple(in_shape)
    red = [a for a in range(nd) if a < nd - len(in_shape) or (padded[a] == 1 and out_shape[a] != 1)]
    keep = [a for a in range(nd) if a not in red]
    pos = np.arange(int(np.prod(out_shape, dtype=np.int64)), dtype=np.int64).reshape(out_shape)
    r = int(np.prod([out_shape[a] for a in red], dtype=np.int64))
    moved = np.ascontiguousarray(pos.transpose(keep + red)).reshape(-1)
    return moved, r
