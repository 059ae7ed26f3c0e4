"""What the inspector shows about one node: plain data, no Qt (app/session.py fills it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NodeDetails"]


@dataclass
class NodeDetails:
    """Everything the inspector shows about one node (plain data, filled by the app)."""

    id: int
    op: str
    name: str | None
    shape: tuple[int, ...]
    dtype: str
    value: np.ndarray | None
    grad: np.ndarray | None
    inputs: list[tuple[int, str]]  # (id, "op name") per input, clickable
    attrs: dict | None = None
    device_value: np.ndarray | None = None  # filled once a device run exists (issue 8)
    device_grad: np.ndarray | None = None
    # a live session's answer: value/grad are then its reference side, device_* its candidate
    sides: tuple[str, str] | None = None  # (reference label, candidate label)
    note: str = ""  # e.g. "live · step 4", shown under the header
    # the ONNX node this tape node was imported from: {"name", "op_type", "attributes",
    # "inputs", "first", "stop"} (core.onnx.importer.onnx_node_info), shown as Netron does
    onnx: dict | None = None
    step: int | None = None  # the live step these arrays are from (steps count from 1)
