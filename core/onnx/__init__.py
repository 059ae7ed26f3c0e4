"""ONNX for tapescope: load (hardened), execute (reference order), drive the ONNX backend tests.

``run(model_or_path, {name: ndarray}) -> {name: ndarray}``; :class:`Session` to run many times;
:class:`Backend` for ``onnx.backend.test``; every failure is an :class:`OnnxError`. What one run
may take is bounded by :class:`Limits` (``Session(path, limits=Limits(max_elements=...))``).
"""

from tapescope.core.onnx import gradient as _gradient  # noqa: F401  (registers Gradient, above the importer)
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.executor import Session, default_inputs, run
from tapescope.core.onnx.limits import Limits, OnnxCancelled, OnnxLimitError
from tapescope.core.onnx.loader import LoadedModel, load

__all__ = ["OnnxError", "OnnxLimitError", "OnnxCancelled", "Limits", "Session", "LoadedModel",
           "load", "run", "default_inputs", "Backend", "BackendRep", "import_to_tape", "Imported"]


def __getattr__(name):  # the backend pulls in onnx.backend: only when asked for
    if name in ("Backend", "BackendRep"):
        from tapescope.core.onnx import backend

        return getattr(backend, name)
    if name in ("import_to_tape", "Imported"):
        from tapescope.core.onnx import importer

        return getattr(importer, name)
    raise AttributeError(name)
