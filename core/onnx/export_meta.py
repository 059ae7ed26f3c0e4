"""What a torch.export (dynamo) file says about itself in its metadata, read as text and never
evaluated: the graph signature's parameters and what its optimizer folded from them.

Both the importer (which initializers are weights) and ``state_dict`` (PyTorch's names for
renamed initializers) read it; it lives here so neither imports the other.
"""

from __future__ import annotations

import re

SIGNATURE = "pkg.torch.export.ExportedProgram.graph_signature"
KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
FOLDED_FROM = "pkg.onnxscript.optimizer.folded_from"
META_MAX = 1 << 22  # longer metadata values are ignored (a hostile file's)


def signature(graph) -> str | None:
    """The file's graph signature text, or None (none, or longer than ``META_MAX``)."""
    return next((p.value for p in getattr(graph, "metadata_props", ())
                 if p.key == SIGNATURE and len(p.value) <= META_MAX), None)


def exported_parameters(graph) -> tuple[set[str], dict[str, list[str]]] | None:
    """A torch.export (dynamo) file's own account of its parameters, or None for another file:
    (the PARAMETER targets of its graph signature and the initializers it marks PARAMETER,
    {initializer: the names its optimizer folded it from}). Read as text, never evaluated."""
    sig = signature(graph)
    if sig is None:
        return None
    params = set(re.findall(r"^\s*\w+: PARAMETER target='([^']*)'", sig, re.M))
    folded: dict[str, list[str]] = {}
    for vi in (*graph.value_info, *graph.input):
        for p in vi.metadata_props:
            if p.key == KIND and p.value == "PARAMETER":
                params.add(vi.name)
            elif p.key == FOLDED_FROM and len(p.value) <= META_MAX:
                folded[vi.name] = re.findall(r"'([^']*)'", p.value)
    return params, folded
