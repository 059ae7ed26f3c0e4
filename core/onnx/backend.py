"""``onnx.backend.base.Backend`` for the executor, so ONNX's own backend tests can drive it."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, helper
from onnx.backend.base import Backend as _Backend
from onnx.backend.base import BackendRep as _BackendRep

from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.limits import Limits


class BackendRep(_BackendRep):
    """A prepared model: ``run(inputs)`` takes a list (graph-input order) or a dict by name."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """Outputs as a tuple in graph-output order."""
        names = self.session.input_names
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(names, inputs, strict=False))
        out = self.session.run(feeds)
        return tuple(out[n] for n in self.session.output_names)


class Backend(_Backend):
    """The tapescope executor as an ONNX backend (CPU only)."""

    #: what one run may take (``prepare(..., limits=)`` overrides it per model)
    limits: Limits = Limits()

    @classmethod
    def is_compatible(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether every node has a kernel here."""
        from tapescope.core.onnx.registry import kernel_for

        return all(kernel_for(n) is not None for n in model.graph.node)

    @classmethod
    def prepare(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> BackendRep:
        """Load, check (our loader: failures are OnnxError) and compile the model."""
        return BackendRep(Session(model, mode=kwargs.get("mode", "reference"),
                                  check=kwargs.get("check", True),
                                  limits=kwargs.get("limits", cls.limits)))

    @classmethod
    def run_node(cls, node: NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Any = None, **kwargs: Any) -> tuple:
        """Run one node by wrapping it in a one-node model."""
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
               for n, x in zip(node.input, inputs, strict=False)]
        outs = [helper.make_value_info(n, helper.TypeProto()) for n in node.output]
        graph = helper.make_graph([node], "run_node", ins, outs)
        opset = kwargs.get("opset_version", 21)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        rep = cls.prepare(model, device, check=False)  # outputs are untyped: skip the checker
        return rep.run(list(inputs))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU only."""
        return device == "CPU"


prepare = Backend.prepare
run_node = Backend.run_node
supports_device = Backend.supports_device
