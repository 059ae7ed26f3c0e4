"""ONNX operator kernels, grouped by family; importing this package registers them all."""

from tapescope.core.onnx.ops import (  # noqa: F401
    control,
    elementwise,
    grid,
    losses,
    math_ops,
    misc,
    nn,
    pool,
    quant,
    reduce,
    resize,
    rnn,
    shape,
    tensor,
    training,
)
