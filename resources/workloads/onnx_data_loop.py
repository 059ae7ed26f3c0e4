"""An ONNX model trained with your own data loop and optimizer (docs/workloads.md, "An ONNX
model with your data and optimizer"): ``tapescope train --workload THIS_FILE --steps 40``."""

import os

import numpy as np

from tapescope.core import optim
from tapescope.core.onnx.workload import OnnxWorkload
from tapescope.core.schedule import Schedule

MODEL = os.path.join(os.path.dirname(__file__), "..", "models", "tiny_mlp.onnx")


class Blobs(OnnxWorkload):
    """tiny_mlp.onnx (x [2, 8] -> 4 class probabilities) on four Gaussian blobs of 16 points."""

    def __init__(self, **kwargs):
        rng = np.random.default_rng(kwargs.get("seed", 0))
        self.labels = np.arange(64) % 4
        self.points = rng.standard_normal((4, 8))[self.labels] * 3 + rng.standard_normal((64, 8))
        super().__init__(MODEL, **kwargs)  # imports the model and calls build()

    def rows(self, step):
        """Step 1.. takes the next 2 points; every epoch (32 steps) in a new seeded order."""
        epoch, i = divmod(max(step, 1) - 1, 32)
        order = np.random.default_rng((self.seed, epoch)).permutation(64)
        return order[2 * i:2 * i + 2]

    def batch_inputs(self, step):  # the model's inputs, by the names in the file
        return {"x": self.points[self.rows(step)].astype(np.float32)}

    def batch(self, step):  # and the classes the default cross-entropy trains against
        labels = self.labels[self.rows(step)].astype(np.float64)
        return {**self.batch_inputs(step), self.target_name: labels}

    def make_optimizer(self):
        opt = optim.AdamW(self.tape, lr=1e-2, weight_decay=1e-2)
        opt.add_all()
        opt.schedule = Schedule("cosine", warmup=3, t_max=40)  # 3 steps of LinearLR first
        return opt
