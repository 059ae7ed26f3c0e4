"""The native epilogue (core.native's ep_t: bias, BatchNormalization's four roundings, a
residual add in either operand order, Relu) as separate numpy ops, each its own rounding, in
ep_t's order: what the native kernels' fused epilogues must equal bit for bit."""

from __future__ import annotations

import numpy as np


def apply_epilogue(y: np.ndarray, bias=None, bn=None, res=None, res_first: bool = False,
                   relu: bool = False) -> np.ndarray:
    """``y`` (channels on axis 1) through the parts given; ``bn`` is (mean, den, scale, beta)."""
    def ch(v: np.ndarray) -> np.ndarray:
        return v.reshape((1, -1) + (1,) * (y.ndim - 2))

    with np.errstate(all="ignore"):
        if bias is not None:
            y = y + ch(bias)
        if bn is not None:
            mean, den, scale, beta = bn
            y = ((y - ch(mean)) / ch(den)) * ch(scale) + ch(beta)
        if res is not None:
            y = res + y if res_first else y + res
        if relu:
            y = np.where(y <= 0, y.dtype.type(0), y)
    return y
