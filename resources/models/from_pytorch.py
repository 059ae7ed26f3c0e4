"""Make ``torch_cnn.onnx``: a small PyTorch convnet exported the two-line way (docs/models.md).

PyTorch is not a dependency of tapescope or its tests; this script is how the committed model
was made (``pip install torch``, then from the repository root
``python resources/models/from_pytorch.py``), and the path any PyTorch user takes:

    torch.onnx.export(model, example_input, "model.onnx")
    tapescope gui model.onnx --live
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class TinyCNN(nn.Module):
    """conv-bn-relu, max pool, a residual conv block, global average pool, linear (10 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                   nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = torch.relu(h + self.block(h))
        h = torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1)
        return self.head(h)


def main() -> None:
    torch.manual_seed(0)
    model = TinyCNN().eval()
    x = torch.randn(2, 3, 16, 16)
    # the legacy (TorchScript) exporter: no onnxscript needed; the model's weights become
    # initializers, BatchNorm stays a BatchNormalization node in eval mode
    torch.onnx.export(model, (x,), os.path.join(HERE, "torch_cnn.onnx"), input_names=["x"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    # PyTorch's own answer (an independent engine) for the tests and `tapescope onnx --expected`
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(HERE, "torch_cnn.input.x.npy"), x.numpy())
    np.save(os.path.join(HERE, "torch_cnn.expected.logits.npy"), y.numpy())


if __name__ == "__main__":
    main()
