"""The operator table: one small function per ONNX operator, keyed by (domain, op_type).

A kernel is ``f(ctx, *inputs, **attributes)``: inputs in node order (``None`` for an omitted
optional input), attributes as keyword arguments, filled with the operator schema's defaults for
the model's opset. It returns one array or a tuple of arrays (one per node output).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, helper, numpy_helper
from onnx.defs import SchemaError, get_schema

Kernel = Callable[..., Any]
OPS: dict[tuple[str, str], Kernel] = {}


@dataclass
class Ctx:
    """What a kernel may know besides its inputs: opset, node, kernel set, subgraph runner."""

    opset: int
    node: NodeProto
    k: Any  # the kernel set of core.onnx.reference (REFERENCE or FAST)
    run_graph: Callable[..., list]  # run_graph(graph, inputs: list, outer: dict) -> outputs
    scope: dict  # the values visible to subgraphs
    graph: Any = None  # the CompiledGraph being run (Gradient looks at its nodes)
    opset_default: int = 0  # the default-domain opset (for ops of other domains)
    budget: Any = None  # the run's core.onnx.limits.Budget (None: unlimited)
    label: str = ""  # the node as errors name it: ``node 3 'name' (Dropout)``

    def iterate(self) -> None:
        """Count one loop iteration against the run's budget (and honour a cancel)."""
        if self.budget is not None:
            self.budget.iteration()

    def check_elements(self, n: int, what: str) -> None:
        """Refuse an array of ``n`` elements over the run's limit, before making it."""
        if self.budget is not None:
            self.budget.check_elements(n, what)

    @property
    def n_outputs(self) -> int:
        """How many outputs the node declares (trailing optional ones may be "")."""
        return len(self.node.output)

    def wants(self, i: int) -> bool:
        """Whether output ``i`` is requested by the node."""
        return i < len(self.node.output) and bool(self.node.output[i])


def op(*names: str, domain: str = "") -> Callable[[Kernel], Kernel]:
    """Register the decorated kernel under one or more op types."""

    def deco(f: Kernel) -> Kernel:
        for n in names:
            OPS[(domain, n)] = f
        return f

    return deco


def attr_value(a: AttributeProto) -> Any:
    """A node attribute as a Python value (strings decoded, tensors as arrays)."""
    if a.type == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if a.type == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if a.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t) for t in a.tensors]
    if a.type == AttributeProto.SPARSE_TENSOR:
        return a.sparse_tensor
    if a.type == AttributeProto.INTS:
        return [int(v) for v in a.ints]
    return helper.get_attribute_value(a)


@cache
def schema_defaults(op_type: str, opset: int, domain: str = "") -> tuple[tuple[str, Any], ...]:
    """The attribute defaults the operator's schema declares at ``opset``."""
    try:
        schema = get_schema(op_type, opset, domain)
    except SchemaError:
        return ()
    out = []
    for name, a in schema.attributes.items():
        if a.default_value is not None and a.default_value.type != AttributeProto.UNDEFINED:
            out.append((name, attr_value(a.default_value)))
    return tuple(out)


def node_attrs(node: NodeProto, opset: int) -> dict[str, Any]:
    """Schema defaults overlaid with the node's own attributes."""
    kw = dict(schema_defaults(node.op_type, opset, node.domain))
    for a in node.attribute:
        if a.ref_attr_name:
            continue  # only inside functions; inlined before we get here
        kw[a.name] = attr_value(a)
    return kw


def kernel_for(node: NodeProto) -> Kernel | None:
    """The registered kernel of a node (None if we have none)."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    return OPS.get((domain, node.op_type))


def as_int_list(x: Any) -> list[int]:
    """An int64 tensor input (shape, axes, pads...) as a Python list."""
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":  # complex, strings...: not a list of ints (int() would lie)
        raise ValueError(f"expected integers, got {a.dtype}")
    return [int(v) for v in a.reshape(-1)]
