"""Load an ONNX model safely: parse, resolve external data inside the model's folder, check.

Everything that can go wrong with a file (missing, truncated, corrupt, foreign, an external data
reference that escapes the folder, an opset this onnx package does not know) ends in an
:class:`OnnxError` naming the file and the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper

from tapescope.core.onnx.errors import OnnxError

#: Default-domain opsets this executor accepts (7 is where broadcasting semantics settled; the
#: older ones are still run, with the version differences each op cares about).
MIN_OPSET = 1
MAX_OPSET = onnx.defs.onnx_opset_version()
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class LoadedModel:
    """A checked model plus where it came from and its opset per domain."""

    model: ModelProto
    path: str | None
    opsets: dict[str, int] = field(default_factory=dict)

    @property
    def opset(self) -> int:
        """The default-domain opset version."""
        return self.opsets.get("", 1)

    @property
    def label(self) -> str:
        """How errors name this model."""
        return self.path or f"<model {self.model.graph.name or 'in memory'}>"


def _parse(data: bytes, label: str) -> ModelProto:
    if not data:
        raise OnnxError("empty file, not an ONNX model", file=label)
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError, sometimes others, on garbage
        raise OnnxError(f"not an ONNX model or truncated ({exc})", file=label) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise OnnxError("not an ONNX model (no IR version or no graph)", file=label)
    return model


def _all_tensors(model: ModelProto):
    """Every TensorProto anywhere in the model: initializers, tensor attributes, subgraphs,
    local functions, sparse tensors, training info, at any depth.

    A walk over every message field rather than a list of known places: a place we forgot (an
    If inside a function) is exactly how external data escaped before.
    """
    stack = [model]
    while stack:
        msg = stack.pop()
        if isinstance(msg, TensorProto):
            yield msg
            continue
        for fd, value in msg.ListFields():
            if fd.type != fd.TYPE_MESSAGE:
                continue
            if _is_repeated(fd):
                stack.extend(value)
            else:
                stack.append(value)


def _is_repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)  # protobuf >= 5.x; `label` is deprecated there
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED


def _external_location(loc: str, base: str, where: str, label: str) -> str:
    """The real path of an external data file, refused unless it lies inside ``base``."""
    if "\x00" in loc:
        raise OnnxError(f"{where}: location {loc!r} contains a NUL byte", file=label)
    if not loc or os.path.isabs(loc) or loc.startswith(("/", "\\")):
        raise OnnxError(f"{where}: location {loc!r} must be a relative path", file=label)
    root = os.path.realpath(base)
    full = os.path.realpath(os.path.join(root, loc))
    if os.path.commonpath([root, full]) != root:
        raise OnnxError(f"{where}: location {loc!r} escapes the model's folder", file=label)
    if not os.path.isfile(full):
        raise OnnxError(f"{where}: file {loc!r} not found next to the model", file=label)
    return full


def _resolve_external(model: ModelProto, base: str | None, label: str) -> None:
    """Read external data into the tensors, refusing any location outside ``base``.

    No file is read for more bytes than it holds (summed over the tensors that point into it):
    a small model cannot name the same gigabyte a thousand times.
    """
    read: dict[str, int] = {}
    for t in _all_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        where = f"external data of tensor {t.name!r}"
        if base is None:
            raise OnnxError(f"{where}: a model given in memory has no folder to read it from",
                            file=label)
        loc = info.get("location", "")
        full = _external_location(loc, base, where, label)
        try:
            offset = int(info.get("offset", 0))
            size = os.path.getsize(full)
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError:
            raise OnnxError(f"{where}: offset/length are not integers", file=label) from None
        if offset < 0 or length < 0 or offset + length > size:
            raise OnnxError(f"{where}: bytes {offset}..{offset + length} lie outside {loc!r} "
                            f"({size} bytes)", file=label)
        read[full] = read.get(full, 0) + length
        if read[full] > size:
            raise OnnxError(f"{where}: the model reads more bytes than the file holds from "
                            f"{loc!r} ({read[full]} of {size}): ranges overlap", file=label)
        with open(full, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(length)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


def _opsets(model: ModelProto, label: str) -> dict[str, int]:
    ops: dict[str, int] = {}
    for imp in model.opset_import:
        domain = "" if imp.domain in DEFAULT_DOMAINS else imp.domain
        ops[domain] = int(imp.version)
    if "" not in ops and any(n.domain in DEFAULT_DOMAINS for n in model.graph.node):
        raise OnnxError("model imports no default-domain opset", file=label)
    v = ops.get("", MAX_OPSET)
    if not MIN_OPSET <= v <= MAX_OPSET:
        raise OnnxError(f"unsupported opset {v} (this build runs {MIN_OPSET}..{MAX_OPSET})",
                        file=label)
    return ops


def _precheck(data, limits, label: str) -> None:
    from tapescope.core.onnx.limits import Limits, precheck_file_tensors

    try:
        precheck_file_tensors(data, limits or Limits())
    except OnnxError as exc:
        raise exc.with_file(label) from None


def load(model_or_path: str | os.PathLike | bytes | ModelProto, *, check: bool = True,
         limits=None) -> LoadedModel:
    """Parse and check a model from a path, bytes or a ModelProto; raise OnnxError if unusable.

    ``limits`` (core.onnx.limits.Limits): a file's tensors are charged to its ``max_bytes``
    before it is parsed (``precheck_file_tensors``)."""
    if isinstance(model_or_path, LoadedModel):
        return model_or_path
    path: str | None = None
    base: str | None = None
    if isinstance(model_or_path, ModelProto):
        model = ModelProto()
        model.CopyFrom(model_or_path)  # we resolve external data in place: never touch theirs
        label = f"<model {model.graph.name or 'in memory'}>"
    elif isinstance(model_or_path, (bytes, bytearray)):
        label = "<model bytes>"
        _precheck(model_or_path, limits, label)
        model = _parse(bytes(model_or_path), label)
    elif isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        label = path
        if not os.path.isfile(path):
            raise OnnxError("no such file", file=label)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise OnnxError(f"cannot read ({exc.strerror})", file=label) from None
        _precheck(data, limits, label)
        model = _parse(data, label)
        base = os.path.dirname(os.path.abspath(path))
    else:
        raise OnnxError(f"expected a path, bytes or onnx.ModelProto, got "
                        f"{type(model_or_path).__name__}")
    _resolve_external(model, base, label)
    opsets = _opsets(model, label)
    if check:
        try:
            onnx.checker.check_model(model)
        except Exception as exc:  # ValidationError and friends; one line is enough
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OnnxError(f"invalid model: {first}", file=label) from None
    return LoadedModel(model=model, path=path, opsets=opsets)


def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _input_spec(lm: LoadedModel) -> tuple:
    """(initializer names, input names, per input (name, optional, tensor, dtype, dims)):
    read from the protobuf once per model (reading it per run costs ~0.3 ms on a model with
    hundreds of inputs)."""
    spec = lm.__dict__.get("_input_spec")
    if spec is None:
        g = lm.model.graph
        rows = []
        for vi in g.input:
            tensor = vi.type.HasField("tensor_type")
            tt = vi.type.tensor_type
            dtype = None
            if tensor and tt.elem_type and tt.elem_type != TensorProto.STRING:
                try:
                    dtype = np_dtype(tt.elem_type)
                except Exception:  # noqa: BLE001 - raised again, as before, if it is fed
                    dtype = tt.elem_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] \
                if tensor and tt.HasField("shape") else None
            rows.append((vi.name, vi.type.HasField("optional_type"), tensor, dtype, dims))
        spec = ({t.name for t in g.initializer}, {i.name for i in g.input}, rows)
        lm.__dict__["_input_spec"] = spec
    return spec


def check_inputs(lm: LoadedModel, feeds: dict[str, np.ndarray]) -> None:
    """Every graph input is given, with the declared element type, rank and fixed dims."""
    inits, known, rows = _input_spec(lm)
    for name in feeds:
        if name not in known:
            raise OnnxError(f"input {name!r} is not an input of the graph "
                            f"(inputs: {', '.join(sorted(known - inits)) or 'none'})",
                            file=lm.label)
    for name, optional, tensor, want, dims in rows:
        if name in inits and name not in feeds:
            continue
        if name not in feeds or (feeds[name] is None and not optional):
            raise OnnxError(f"missing input {name!r}", file=lm.label)
        if not tensor:
            continue
        x = feeds[name]
        if not isinstance(x, np.ndarray):
            raise OnnxError(f"input {name!r}: expected a numpy array, got "
                            f"{type(x).__name__}", file=lm.label)
        if isinstance(want, int):
            want = np_dtype(want)  # an element type numpy does not know: raises
        if want is not None and x.dtype != want:
            raise OnnxError(f"input {name!r}: dtype {x.dtype} but the model declares "
                            f"{want}", file=lm.label)
        if dims is not None:
            ok = len(dims) == x.ndim and all(
                d is None or d == s for d, s in zip(dims, x.shape, strict=False))
            if not ok:
                shown = tuple(d if d is not None else "?" for d in dims)
                raise OnnxError(f"input {name!r}: shape {tuple(x.shape)} but the model "
                                f"declares {shown}", file=lm.label)
