"""``--weights FILE.safetensors`` written from ``model.state_dict()``: PyTorch's names mapped
onto an export's initializers (docs/models.md, "Your weights").

In order: a name the file holds as a weight or a constant (a buffer: batch-norm running
statistics) is that value; a name a torch.export (dynamo) file says it folded an initializer
from (``folded_from``: a transposed Linear weight ``val_N``) is that initializer, transposed
where its shape is the transpose; a TorchScript initializer of its own name (``onnx::MatMul_N``,
a transposed Linear weight) is ``<scope>.weight`` of the node that reads it (``/fc/MatMul`` ->
``fc.weight``), transposed. Anything else is refused with one line naming each name that could
not be mapped and why (an eval-mode BatchNorm the exporter folded into the Conv before it). Only
the header's names and shapes are used here: nothing is read or allocated before the whole
mapping holds, and a name is only ever compared, never evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tapescope.core.names import shown


@dataclass
class Mapping:
    """What to do with each of the file's tensors."""

    #: state_dict name -> (the weight it sets, whether it is stored transposed)
    weights: dict[str, tuple[str, bool]] = field(default_factory=dict)
    #: state_dict name -> the constant initializer it sets (a buffer)
    constants: dict[str, str] = field(default_factory=dict)
    #: state_dict names that no graph reads (a BatchNorm's integer num_batches_tracked)
    skipped: set[str] = field(default_factory=set)

    def shapes(self, params: dict[str, tuple], consts: dict[str, tuple]) -> dict[str, tuple]:
        """The shape each state_dict name must have in the file."""
        out = {}
        for n, (k, t) in self.weights.items():
            out[n] = tuple(reversed(params[k])) if t else tuple(params[k])
        for n, k in self.constants.items():
            out[n] = tuple(consts[k])
        return out


_FLOATS = ("F64", "F32", "F16", "BF16")


def _scope(node_name: str) -> str | None:
    """``/blocks.0/fc/MatMul`` -> ``blocks.0.fc`` (a TorchScript node's module path)."""
    if not node_name.startswith("/") or node_name.count("/") < 2:
        return None
    return ".".join(node_name.strip("/").split("/")[:-1])


def _list(names) -> str:
    names = sorted(names)
    return ", ".join(f"'{shown(n)[:80]}'" for n in names[:6]) + (
        f" and {len(names) - 6} more" if len(names) > 6 else "")


def map_state_dict(graph, header: dict[str, tuple[str, tuple]], params: dict[str, tuple],
                   consts: dict[str, tuple]) -> Mapping:
    """The mapping of a state_dict's ``header`` ({name: (dtype code, shape)}) onto a model
    whose trainable weights have ``params`` ({key: shape}) and whose other float initializers
    have ``consts``; ``graph`` is the ONNX graph (its nodes and a dynamo file's metadata).
    Raises ValueError with one line naming what could not be mapped and why."""
    from tapescope.core.onnx.importer import exported_parameters

    export = exported_parameters(graph)
    folded: dict[str, list[str]] = {}  # state_dict name -> the initializers folded from it
    if export is not None:
        for init, srcs in export[1].items():
            if len(srcs) == 1:
                folded.setdefault(srcs[0], []).append(init)
    scoped: dict[str, list[str]] = {}  # TorchScript: '<scope>.weight' -> initializers
    if export is None:
        for n in graph.node:  # only x @ W.T: a renamed Conv weight is a folded BatchNorm's
            s = _scope(n.name)
            if s and n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in params \
                    and n.input[1].startswith("onnx::"):
                scoped.setdefault(f"{s}.weight", []).append(n.input[1])
    m = Mapping()
    taken: dict[str, str] = {}
    unmapped: dict[str, str] = {}  # name -> why
    shape_bad: list[str] = []

    # a renamed 2-D initializer a MatMul reads as its right side is a Linear weight's
    # transpose (x @ W.T); a square one is told by this use, not by its shape
    matmul_rhs = {n.input[1] for n in graph.node if n.op_type == "MatMul" and len(n.input) > 1}

    def claim(name: str, key: str, shape: tuple) -> bool:
        want = tuple(params[key])
        t = len(want) == 2 and key in matmul_rhs
        if key in taken or shape != (want[::-1] if t else want):
            return False
        m.weights[name] = (key, t)
        taken[key] = name
        return True

    for name, (code, shape) in header.items():
        if code not in _FLOATS and (name in params or name in consts):
            shape_bad.append(f"tensor '{shown(name)[:80]}': dtype {code!r} is not a float type "
                             "a weight can have (F64, F32, F16, BF16)")
            continue
        if name in params:
            taken[name] = name
            if shape != tuple(params[name]):
                shape_bad.append(f"'{shown(name)[:80]}' has shape {shape}, the model's is "
                                 f"{tuple(params[name])}")
            else:
                m.weights[name] = (name, False)
            continue
        if name in consts:
            if shape != tuple(consts[name]):
                shape_bad.append(f"'{shown(name)[:80]}' has shape {shape}, the model's is "
                                 f"{tuple(consts[name])}")
            else:
                m.constants[name] = name
            continue
        cands = [k for k in folded.get(name, ()) if k in params] + [
            k for k in scoped.get(name, ()) if k in params]
        if cands:
            if not any(claim(name, k, shape) for k in cands):
                k = cands[0]
                taken.setdefault(k, name)  # (named here, not again as missing)
                shape_bad.append(f"'{shown(name)[:80]}' has shape {shape}, the model's "
                                 f"'{shown(k)[:80]}' is {tuple(params[k])} (or its transpose)")
            continue
        if code in ("I64", "I32") and name.rsplit(".", 1)[-1] == "num_batches_tracked":
            m.skipped.add(name)
            continue
        unmapped[name] = ""
    missing = [k for k in params if k not in taken]
    for name in unmapped:
        unmapped[name] = _why(name, header, missing, consts, export)
    parts = []
    if shape_bad:
        parts.append("; ".join(shape_bad[:4]) + (" ..." if len(shape_bad) > 4 else ""))
    if unmapped:
        by_why: dict[str, list[str]] = {}
        for n, why in unmapped.items():
            by_why.setdefault(why, []).append(n)
        parts.append("; ".join(
            f"{_list(ns)} {'is' if len(ns) == 1 else 'are'} not a weight of the model (its "
            f"weights: {_list(params)})" if why == _NOT_A_WEIGHT else
            f"{_list(ns)} could not be mapped ({why})" for why, ns in by_why.items()))
    if missing and not unmapped:
        parts.append(f"the model's weights {_list(missing)} are not in the file (a "
                     "state_dict holds every parameter: was it saved from this model?)")
    if parts:
        raise ValueError("; ".join(parts))
    return m


def _why(name: str, header: dict, left: list[str], consts: dict, export) -> str:
    """Why a state_dict name has no initializer in the export (``left``: the model's weights
    no name was mapped onto)."""
    if any(n.endswith(".running_mean") and n not in consts for n in header):
        return ("the exporter folded an eval-mode BatchNorm into the Conv before it: "
                "export the model in training mode (model.train(); TorchScript: "
                "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)")
    if export is not None and name in export[0]:
        return "a parameter the exporter merged into another initializer or dropped"
    if export is None and any(k.startswith("onnx::") for k in left):
        return ("no initializer of the export has this name, and the exporter renamed some "
                f"({_list(k for k in left if k.startswith('onnx::'))}): a folded weight")
    return _NOT_A_WEIGHT


_NOT_A_WEIGHT = "no initializer of the export has this name"
