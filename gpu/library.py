"""The kernel library's op table: for every tape op, the launches of its forward and backward.

`KERNELS[op]` holds two builders keyed by the same names as `core.ops.REGISTRY`:
`fwd(ctx, node) -> [Launch]` writes the node's value buffer; `bwd(ctx, node, k) -> [Launch]`
adds the node's contribution to input `k`'s gradient buffer (docs/reference-order.md).
Leaves (param, const) have no kernels: their values are uploaded. The registry and the builder
context live in gpu/kernel_table.py; the families register themselves on import, here:
gpu/library_ew.py (elementwise, rendered from the op table), library_rows.py, library_nn.py.
"""

from __future__ import annotations

from tapescope.gpu import library_ew, library_nn, library_rows  # noqa: F401  (each registers its ops)
from tapescope.gpu.kernel_table import (
    KERNELS,
    LEAF,
    BuildCtx,
    OpKernels,
    broadcast_index,
    register_kernels,
    unb_perm,
)

__all__ = ["KERNELS", "LEAF", "OpKernels", "BuildCtx", "register_kernels", "broadcast_index",
           "unb_perm"]
