"""Sliding windows for convolution and pooling: the tape's own (core.ops.nn), shared so that
the executor and the tape round identically."""

from __future__ import annotations

from tapescope.core.ops.nn import out_size, pads_for, windows  # noqa: F401  (re-exported)


def attrs_nd(x, kernel_shape, strides, dilations):
    """Default strides/dilations to ones for the spatial rank of x."""
    nd = x.ndim - 2
    k = list(kernel_shape)
    return k, list(strides) if strides else [1] * nd, list(dilations) if dilations else [1] * nd
