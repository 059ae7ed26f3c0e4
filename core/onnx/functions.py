"""Ops without a kernel of their own but with a function body in their ONNX schema (Attention,
Gelu-like ops): the body is expanded and run as a subgraph, as the spec defines them.

Context-dependent bodies depend on the input types, so they are built at run time, once per
(dtype, rank) signature.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import AttributeProto, FunctionProto, NodeProto, helper
from onnx.defs import SchemaError, get_schema, onnx_opset_version


def _substitute(fp: FunctionProto, node: NodeProto, schema) -> list[NodeProto]:
    """The body's nodes with attribute references (``ref_attr_name``) bound to the caller's
    attributes, or to the schema's defaults where the caller gives none."""
    given = {name: a.default_value for name, a in schema.attributes.items()
             if a.default_value is not None and a.default_value.type != AttributeProto.UNDEFINED}
    given.update({a.name: a for a in node.attribute})
    out = []
    for n in fp.node:
        m = NodeProto()
        m.CopyFrom(n)
        attrs = []
        for a in m.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name in given:
                    b = AttributeProto()
                    b.CopyFrom(given[a.ref_attr_name])
                    b.name = a.name
                    attrs.append(b)
            else:
                attrs.append(a)
        del m.attribute[:]
        m.attribute.extend(attrs)
        out.append(m)
    return out


class FunctionKernel:
    """A kernel that runs the schema's function body of ``node``."""

    def __init__(self, session: Any, node: NodeProto, opset: int, schema) -> None:
        self.session = session
        self.node = node
        self.opset = opset
        self.schema = schema
        self.cache: dict[tuple, Any] = {}

    def _body(self, ins: list) -> FunctionProto:
        s = self.schema
        if s.has_function:
            fp = FunctionProto()
            versions = [v for v in s.function_opset_versions if v <= self.opset]
            raw = s.get_function_with_opset_version(max(versions)) if versions else None
            if raw is None:
                return s.function_body
            fp.ParseFromString(raw if isinstance(raw, bytes) else raw.SerializeToString())
            return fp
        types = [helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(x.dtype),
                                               x.shape).SerializeToString()
                 if isinstance(x, np.ndarray) else helper.TypeProto().SerializeToString()
                 for x in ins]
        raw = s.get_context_dependent_function_with_opset_version(
            self.opset, self.node.SerializeToString(), types)
        fp = FunctionProto()
        fp.ParseFromString(raw)
        return fp

    def __call__(self, ctx, *ins, **_attrs):
        key = tuple((x.dtype.str, x.ndim) if isinstance(x, np.ndarray) else None for x in ins)
        cg = self.cache.get(key)
        if cg is None:
            fp = self._body(list(ins))
            opsets = dict(self.session.lm.opsets)
            if self.node.domain in ("", "ai.onnx"):
                opsets[""] = self.opset
            else:  # a body of another domain's op may use default-domain ops at any version
                opsets.setdefault("", onnx_opset_version())
            opsets.update({("" if o.domain in ("", "ai.onnx") else o.domain): o.version
                           for o in fp.opset_import})
            g = helper.make_graph(_substitute(fp, self.node, self.schema),
                                  f"{self.node.op_type}_body",
                                  [helper.make_value_info(i, helper.TypeProto())
                                   for i in fp.input],
                                  [helper.make_value_info(o, helper.TypeProto())
                                   for o in fp.output])
            cg = self.session.compile(g, f"{self.node.op_type} body", opsets=opsets)
            self.cache[key] = cg
        args = list(ins) + [None] * (len(cg.inputs) - len(ins))
        wanted = [i for i, name in enumerate(self.node.output) if name]
        sub = type(cg)(cg.name, cg.steps, cg.inits, cg.inputs,
                       [cg.outputs[i] for i in wanted], cg.proto)
        got = dict(zip(wanted, ctx.run_graph(sub, args, {}), strict=True))
        return tuple(got.get(i) for i in range(len(self.node.output)))


def function_kernel(session: Any, node: NodeProto, opset: int) -> FunctionKernel | None:
    """A FunctionKernel when the op's schema defines a body at ``opset``, else None."""
    try:
        schema = get_schema(node.op_type, opset, node.domain)
    except SchemaError:
        return None
    if schema.has_function or schema.has_context_dependent_function:
        return FunctionKernel(session, node, opset, schema)
    return None
