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
from tapescope.core.onnx.export_meta import exported_parameters, signature


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


def _sources(graph, params):
    """What ties an export's renamed initializers to PyTorch's names: (a dynamo file's
    ``exported_parameters`` or None, {PyTorch name: the initializers folded from it alone},
    {TorchScript ``<scope>.weight``: the ``onnx::MatMul_N`` its scope's MatMul reads}, the
    initializers a MatMul reads as its right side). A renamed 2-D initializer a MatMul reads
    as its right side is a Linear weight's transpose (x @ W.T); a square one is told by this
    use, not by its shape."""
    export = exported_parameters(graph)
    folded: dict[str, list[str]] = {}  # state_dict name -> the initializers folded from it
    if export is not None:
        for init, srcs in export[1].items():
            if len(srcs) == 1:
                folded.setdefault(srcs[0], []).append(init)
    scoped: dict[str, list[str]] = {}  # TorchScript: '<scope>.weight' -> initializers
    if export is None:
        names = {t.name for t in graph.initializer}
        for n in graph.node:  # only x @ W.T: a renamed Conv weight is a folded BatchNorm's
            s = _scope(n.name)
            if s and n.op_type == "MatMul" and len(n.input) > 1 and n.input[1] in params \
                    and n.input[1].startswith("onnx::"):
                own = _scope_weight(s, names)
                if own:
                    scoped.setdefault(own, []).append(n.input[1])
    matmul_rhs = {n.input[1] for n in graph.node if n.op_type == "MatMul" and len(n.input) > 1}
    return export, folded, scoped, matmul_rhs


def _scope_weight(scope: str, names: set[str]) -> str | None:
    """The weight a TorchScript MatMul in module ``scope`` reads: ``<scope>.weight`` (a
    Linear's), ``<scope>.in_proj_weight`` where the file holds ``<scope>.in_proj_bias``
    (``nn.MultiheadAttention``'s packed projection); None where the module's other parameters
    say it is neither (its weight has a name this cannot tell)."""
    if f"{scope}.in_proj_bias" in names:
        return f"{scope}.in_proj_weight"
    others = [n for n in names if n.startswith(scope + ".") and n != f"{scope}.bias"
              and "." not in n[len(scope) + 1:]]
    return None if others else f"{scope}.weight"


def torch_names(graph, params: dict[str, tuple]) -> dict[str, str]:
    """PyTorch's name of each renamed weight (``params``: {initializer: shape}), for the graph
    and the JSON: a dynamo ``val_12`` folded from ``blocks.0.attn.qkv.weight`` alone, a
    TorchScript ``onnx::MatMul_135`` its scope's MatMul reads -> that name, with ``.T`` where
    the initializer holds the transpose (x @ W.T: ``qkv.weight.T`` is the value shown). A
    weight under its own name, or one no single PyTorch name accounts for, is not listed; no
    two weights get one name. The same sources as ``map_state_dict``, so a name shown is the
    name ``--weights`` takes."""
    _, folded, scoped, matmul_rhs = _sources(graph, params)
    out: dict[str, str] = {}
    for src, inits in (*folded.items(), *scoped.items()):
        mine = [k for k in inits if k in params and k != src]
        if len(mine) != 1 or src in params:  # two initializers of one name, or it is there
            continue
        k = mine[0]
        out[k] = src + (".T" if len(params[k]) == 2 and k in matmul_rhs else "")
    seen: dict[str, int] = {}
    for v in out.values():
        seen[v] = seen.get(v, 0) + 1
    return {k: v for k, v in out.items() if seen[v] == 1}


def map_state_dict(graph, header: dict[str, tuple[str, tuple]], params: dict[str, tuple],
                   consts: dict[str, tuple]) -> Mapping:
    """The mapping of a state_dict's ``header`` ({name: (dtype code, shape)}) onto a model
    whose trainable weights have ``params`` ({key: shape}) and whose other float initializers
    have ``consts``; ``graph`` is the ONNX graph (its nodes and a dynamo file's metadata).
    Raises ValueError with one line naming what could not be mapped and why."""
    export, folded, scoped, matmul_rhs = _sources(graph, params)
    m = Mapping()
    taken: dict[str, str] = {}
    unmapped: dict[str, str] = {}  # name -> why
    shape_bad: list[str] = []

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


# the onnxscript rewrite rules of a torch.export (dynamo) file that drop a bias of zeros
_DROPPED_BIAS = {"RemoveOptionalBiasFromGemm": "Gemm", "RemoveOptionalBiasFromConv": "Conv",
                 "RemoveOptionalBiasFromConvTranspose": "ConvTranspose"}


def _placeholders(graph) -> dict[str, str]:
    """A dynamo file's {fx placeholder (``p_blocks_0_fc_bias``): PARAMETER target}."""
    import re

    sig = signature(graph) or ""
    return dict(re.findall(r"^\s*(\w+): PARAMETER target='([^']*)'", sig, re.M))


def _fx_args(fx_node: str, ops: str) -> list[str]:
    """The arguments of a dynamo node's fx call (``call_function[target=torch.ops.aten.linear
    .default](args = (%x, %p_fc_weight, %p_fc_bias), ...)``) when its aten op matches ``ops``
    (a regular expression), else []."""
    import re

    m = re.search(rf"target=torch\.ops\.aten\.(?:{ops})\.\w+\]\(args = \(([^()]*)\)",
                  fx_node)
    return [a.strip() for a in m.group(1).split(",")] if m else []


def folded_batch_norms(graph) -> set[str]:
    """The parameters of the BatchNorms a torch.export (dynamo) file folded into the Conv
    before them (onnxscript's ``FuseBatchNormIntoConv``: even a training-mode one's, whose
    batch statistics then become the running ones)."""
    targets = _placeholders(graph)
    out: set[str] = set()
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props if len(p.value) <= 1 << 16}
        if "FuseBatchNormIntoConv" not in meta.get("pkg.onnxscript.rewriter.rule_name", ""):
            continue
        for a in _fx_args(meta.get("pkg.torch.onnx.fx_node", ""), r"\w*batch_norm\w*")[1:3]:
            if a.lstrip("%") in targets:
                out.add(targets[a.lstrip("%")])
    return out


def restore_dropped_biases(model) -> list[str]:
    """Give back the zero biases a torch.export (dynamo) file dropped: its optimizer removes a
    Linear's, a Conv's or a ConvTranspose's bias that is all zeros (onnxscript's
    ``RemoveOptionalBiasFrom*`` rules: ``nn.MultiheadAttention``'s ``out_proj.bias`` as
    initialised, a bias you zeroed), so the parameter would not train. Where a node says it was
    rewritten so, and its fx node names the bias's parameter, the bias comes back as an
    initializer of zeros under the parameter's name (the weight's type, its output channels),
    the node's third input. Edits ``model`` (an onnx ModelProto) in place; returns the names
    given back. Metadata is read as text, never evaluated."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    targets = _placeholders(graph)
    if not targets:
        return []
    inits = {t.name: t for t in graph.initializer}
    taken = set(inits) | {o for n in graph.node for o in n.output} | {
        i.name for i in graph.input}
    back = []
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props if len(p.value) <= 1 << 16}
        op = _DROPPED_BIAS.get(meta.get("pkg.onnxscript.rewriter.rule_name", ""))
        if op != node.op_type or len(node.input) != 2 or node.input[1] not in inits:
            continue  # (a bias dropped after a folded BatchNorm has no parameter: not one)
        args = _fx_args(meta.get("pkg.torch.onnx.fx_node", ""),
                        r"linear|conv\w*|convolution\w*")
        target = targets.get(args[2].lstrip("%")) if len(args) > 2 else None
        if target in back:  # a module called twice: its one bias, read by both
            node.input.append(target)
            continue
        if not target or target in taken:
            continue
        w = inits[node.input[1]]
        dims = list(w.dims)
        if op == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            n = dims[0] if trans_b else dims[-1]
        elif op == "Conv":
            n = dims[0]
        else:  # ConvTranspose: [C_in, C_out / group, ...]
            n = dims[1] * next((a.i for a in node.attribute if a.name == "group"), 1)
        dt = helper.tensor_dtype_to_np_dtype(w.data_type)
        graph.initializer.append(numpy_helper.from_array(np.zeros(n, dt), target))
        node.input.append(target)
        taken.add(target)
        back.append(target)
    return back
