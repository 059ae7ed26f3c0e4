"""Every op of the op table spelled in PyTorch, once: ``TORCH[op](torch, inputs, attrs)``.

The PyTorch candidate (``tapescope parity --device torch``, app/torch_run.py) runs each tape node
through the function here, on the candidate's own input tensors, so each node is PyTorch's own
op (``torch.matmul``, ``torch.softmax``, ``torch.nn.functional.*``) and its backward is
PyTorch's autograd of that op. A spelling is what a PyTorch user writes for the op, not a
re-creation of the reference order: where the two orders part, the parity check says so, and
``--explain`` says how.

This module never imports torch: the torch module comes in as the first argument (``T``), so
core stays numpy-only and torch an optional extra. ``LEAF`` marks the leaves (``param``,
``const``): the run feeds them (its own parameters; the episode's data). A test walks
``core.ops.REGISTRY`` and holds every op to having a spelling here (docs/adding-an-op.md).

Scalars of the table (``adds``' s, an eps) enter as 0-d tensors of the input's dtype, rounded
once, as the reference rounds them (``x.dtype.type(s)``); on half tensors as Python floats
(``_s``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tapescope.core.ops.reduce import reduced_axes
from tapescope.core.optable.registry import norm_axis

__all__ = ["LEAF", "TORCH", "spelling"]

TorchForm = Callable[[Any, Sequence[Any], Mapping[str, Any]], Any]


def LEAF(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:  # noqa: N802
    """A leaf: the run feeds it (its parameter, or the episode's data); never called."""
    raise TypeError("a leaf is fed by the run, not computed")


def _s(T: Any, x: Any, v: float) -> Any:
    """``v`` as a 0-d tensor of ``x``'s dtype and device (rounded once); for a half ``x`` the
    Python float a PyTorch user writes (``x * 0.125``): the reference rounds a half tape's
    scalars to float32, not to the half type, and PyTorch's own scalar handling is then what
    the parity check sees (its ``mul`` takes the scalar in float32, its ``add`` rounds it to
    the tensor's type first: measured, torch 2.13 CPU)."""
    if str(x.dtype) in ("torch.float16", "torch.bfloat16"):
        return float(v)
    return T.tensor(float(v), dtype=x.dtype, device=x.device)


def _dims(x: Any, at: Mapping[str, Any]) -> tuple[int, ...]:
    return reduced_axes(tuple(x.shape), at.get("axis"))


def _sum(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    x = xs[0]
    dims = _dims(x, at)
    if not dims:  # torch reads dim=() as "every axis": a 0-d input sums to itself
        return x.clone()
    return T.sum(x, dim=dims, keepdim=bool(at.get("keepdims", False)))


def _mean(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    x = xs[0]
    dims = _dims(x, at)
    if not dims:
        return x.clone()
    return T.mean(x, dim=dims, keepdim=bool(at.get("keepdims", False)))


def _transpose(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    x = xs[0]
    axes = at.get("axes")
    axes = tuple(range(x.dim()))[::-1] if axes is None else tuple(
        norm_axis(a, x.dim()) for a in axes)
    return x.permute(axes)


def _reshape(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    return xs[0].reshape(tuple(int(d) for d in at["shape"]))


def _slice(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    x = xs[0]
    ax = norm_axis(at["axis"], x.dim())
    return x.narrow(ax, int(at["start"]), int(at["stop"]) - int(at["start"]))


def _pads(at: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """ONNX pads (top, left, bottom, right) as F.pad's (left, right, top, bottom)."""
    p = tuple(int(v) for v in at.get("pads", (0, 0, 0, 0)))
    return p[1], p[3], p[0], p[2]


def _conv2d(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    F = T.nn.functional
    x, w = xs
    left, right, top, bottom = _pads(at)
    if (left, top) == (right, bottom):
        padding: Any = (top, left)
    else:  # asymmetric: pad first (zeros), as an exporter's Pad + Conv
        x, padding = F.pad(x, (left, right, top, bottom)), 0
    return F.conv2d(x, w, stride=tuple(at.get("strides", (1, 1))), padding=padding,
                    dilation=tuple(at.get("dilations", (1, 1))), groups=int(at.get("group", 1)))


def _conv3d(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    F = T.nn.functional
    x, w = xs
    p = tuple(int(v) for v in at.get("pads", (0,) * 6))  # ONNX: begins (d, h, w), then ends
    if p[:3] == p[3:]:
        padding: Any = p[:3]
    else:  # asymmetric: pad first (zeros; F.pad takes the last axis first)
        x, padding = F.pad(x, (p[2], p[5], p[1], p[4], p[0], p[3])), 0
    return F.conv3d(x, w, stride=tuple(at.get("strides", (1, 1, 1))), padding=padding,
                    dilation=tuple(at.get("dilations", (1, 1, 1))),
                    groups=int(at.get("group", 1)))


def _conv_transpose2d(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    # F.conv_transpose2d without padding (its output_padding at the end), then the ONNX pads
    # (top, left, bottom, right) cropped: asymmetric pads too
    x, w = xs
    y = T.nn.functional.conv_transpose2d(
        x, w, stride=tuple(at.get("strides", (1, 1))),
        output_padding=tuple(at.get("output_padding", (0, 0))),
        groups=int(at.get("group", 1)), dilation=tuple(at.get("dilations", (1, 1))))
    t, left, b, r = (int(v) for v in at.get("pads", (0, 0, 0, 0)))
    return y[:, :, t:y.shape[2] - b, left:y.shape[3] - r]


def _conv_transpose3d(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    # as _conv_transpose2d: no padding in F.conv_transpose3d, then the ONNX pads (begins
    # (d, h, w), then ends) cropped
    x, w = xs
    y = T.nn.functional.conv_transpose3d(
        x, w, stride=tuple(at.get("strides", (1, 1, 1))),
        output_padding=tuple(at.get("output_padding", (0, 0, 0))),
        groups=int(at.get("group", 1)), dilation=tuple(at.get("dilations", (1, 1, 1))))
    p = tuple(int(v) for v in at.get("pads", (0,) * 6))
    return y[:, :, p[0]:y.shape[2] - p[3], p[1]:y.shape[3] - p[4], p[2]:y.shape[4] - p[5]]


def _pool(T: Any, xs: Sequence[Any], at: Mapping[str, Any], kind: str) -> Any:
    F = T.nn.functional
    x = xs[0]
    k = tuple(int(v) for v in at["kernel"])
    st = tuple(int(v) for v in at.get("strides", k))
    cm = bool(at.get("ceil_mode", 0))
    left, right, top, bottom = _pads(at)
    padding: Any = (top, left)
    if (left, top) != (right, bottom):
        fill = float("-inf") if kind == "max" else 0.0
        x, padding = F.pad(x, (left, right, top, bottom), value=fill), 0
    if kind == "max":
        return F.max_pool2d(x, k, st, padding, ceil_mode=cm)
    return F.avg_pool2d(x, k, st, padding, ceil_mode=cm,
                        count_include_pad=bool(at.get("count_include_pad", 0)))


def _pool3d(T: Any, xs: Sequence[Any], at: Mapping[str, Any], kind: str) -> Any:
    F = T.nn.functional
    x = xs[0]
    k = tuple(int(v) for v in at["kernel"])
    st = tuple(int(v) for v in at.get("strides", k))
    cm = bool(at.get("ceil_mode", 0))
    p = tuple(int(v) for v in at.get("pads", (0,) * 6))  # ONNX: begins (d, h, w), then ends
    padding: Any = p[:3]
    if p[:3] != p[3:]:  # asymmetric: pad first (F.pad takes the last axis first)
        fill = float("-inf") if kind == "max" else 0.0
        x, padding = F.pad(x, (p[2], p[5], p[1], p[4], p[0], p[3]), value=fill), 0
    if kind == "max":
        return F.max_pool3d(x, k, st, padding, ceil_mode=cm)
    return F.avg_pool3d(x, k, st, padding, ceil_mode=cm,
                        count_include_pad=bool(at.get("count_include_pad", 0)))


def _gather(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    x, idx = xs
    ax = int(at.get("axis", 0)) % x.dim()
    i = idx.detach().reshape(-1).long()
    i = T.where(i < 0, i + x.shape[ax], i)
    y = T.index_select(x, ax, i)
    return y.reshape(tuple(x.shape[:ax]) + tuple(idx.shape) + tuple(x.shape[ax + 1:]))


def _rope(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    # the cos/sin tables are the reference's host data (core.ops.rowwise.rope_tables: every
    # candidate gets them as inputs, so libm never reaches them); the rotation is torch's
    from tapescope.core.ops.rowwise import rope_tables

    # (a half x: the tables in float32, the reference's, cast to x's type as a PyTorch model
    # casts its cached cos/sin: the products then round in the half type)
    x = xs[0]
    name = str(x.dtype).replace("torch.", "")
    c, s = rope_tables(x.shape[-2], x.shape[-1], at.get("base", 10000.0),
                       "float32" if name in ("float16", "bfloat16") else name)
    c = T.from_numpy(c).to(device=x.device, dtype=x.dtype)
    s = T.from_numpy(s).to(device=x.device, dtype=x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return T.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def _cross_entropy(T: Any, xs: Sequence[Any], at: Mapping[str, Any]) -> Any:
    x, t = xs
    c = x.shape[-1]
    return T.nn.functional.cross_entropy(x.reshape(-1, c), t.detach().reshape(-1).long())


def _last(x: Any) -> tuple[int]:
    return (int(x.shape[-1]),)


TORCH: dict[str, TorchForm] = {
    "param": LEAF,
    "const": LEAF,
    # elementwise (one IEEE operation per element: PyTorch must be bit-identical here)
    "add": lambda T, xs, at: T.add(xs[0], xs[1]),
    "sub": lambda T, xs, at: T.sub(xs[0], xs[1]),
    "mul": lambda T, xs, at: T.mul(xs[0], xs[1]),
    "div": lambda T, xs, at: T.div(xs[0], xs[1]),
    "neg": lambda T, xs, at: T.neg(xs[0]),
    "adds": lambda T, xs, at: T.add(xs[0], _s(T, xs[0], at["s"])),
    "muls": lambda T, xs, at: T.mul(xs[0], _s(T, xs[0], at["s"])),
    "relu": lambda T, xs, at: T.relu(xs[0]),
    "sqrt": lambda T, xs, at: T.sqrt(xs[0]),
    "clip01": lambda T, xs, at: T.clamp(xs[0], 0.0, 1.0),
    "keep": lambda T, xs, at: T.where(xs[1] != 0, xs[0], _s(T, xs[0], -0.0)),
    # transcendentals (PyTorch's own: SLEEF / its vectorised kernels on the CPU)
    "sigmoid": lambda T, xs, at: T.sigmoid(xs[0]),
    "tanh": lambda T, xs, at: T.tanh(xs[0]),
    "exp": lambda T, xs, at: T.exp(xs[0]),
    "log": lambda T, xs, at: T.log(xs[0]),
    "softplus": lambda T, xs, at: T.nn.functional.softplus(xs[0]),
    "erf": lambda T, xs, at: T.erf(xs[0]),
    "silu": lambda T, xs, at: T.nn.functional.silu(xs[0]),
    "swiglu": lambda T, xs, at: T.nn.functional.silu(xs[0]) * xs[1],
    # products (BLAS / oneDNN) and reductions
    "matmul": lambda T, xs, at: T.matmul(xs[0], xs[1]),
    "bmm": lambda T, xs, at: T.bmm(xs[0], xs[1]),
    "conv2d": _conv2d,
    "conv3d": _conv3d,
    "conv_transpose2d": _conv_transpose2d,
    "conv_transpose3d": _conv_transpose3d,
    "sum": _sum,
    "mean": _mean,
    "maxpool2d": lambda T, xs, at: _pool(T, xs, at, "max"),
    "avgpool2d": lambda T, xs, at: _pool(T, xs, at, "avg"),
    "maxpool3d": lambda T, xs, at: _pool3d(T, xs, at, "max"),
    "avgpool3d": lambda T, xs, at: _pool3d(T, xs, at, "avg"),
    # row ops
    "softmax": lambda T, xs, at: T.softmax(xs[0], dim=int(at.get("axis", -1))),
    "log_softmax": lambda T, xs, at: T.log_softmax(xs[0], dim=int(at.get("axis", -1))),
    "log_sum_exp": lambda T, xs, at: T.logsumexp(xs[0], dim=int(at.get("axis", -1))),
    "rms_norm": lambda T, xs, at: T.nn.functional.rms_norm(xs[0], _last(xs[0]), xs[1],
                                                           float(at["eps"])),
    "layer_norm": lambda T, xs, at: T.nn.functional.layer_norm(xs[0], _last(xs[0]), xs[1],
                                                               None, float(at.get("eps", 1e-5))),
    "rope": _rope,
    "cross_entropy": _cross_entropy,
    # movement (copies: exact)
    "transpose": _transpose,
    "reshape": _reshape,
    "slice": _slice,
    "concat": lambda T, xs, at: T.cat(list(xs), dim=int(at["axis"])),
    "gather": _gather,
}


def spelling(op: str) -> TorchForm:
    """The torch spelling of ``op``; KeyError naming the op when the table has none."""
    try:
        return TORCH[op]
    except KeyError:
        raise KeyError(f"op {op!r} has no torch spelling in core/ops/torch_forms.py") from None
