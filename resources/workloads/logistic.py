"""An example user workload: logistic regression on two Gaussian blobs.

Run it with ``tapescope train --workload resources/workloads/logistic.py`` (or open it in the
app with ``tapescope gui --workload resources/workloads/logistic.py``). See docs/workloads.md.
"""

import numpy as np

from tapescope.core import ops, optim
from tapescope.core.workloads import Workload


class Logistic(Workload):
    name = "logistic"

    def build(self):
        # parameters are registered once, before the mark the base class takes
        self.w = self.tape.param(np.zeros((2, 1)), name="w")
        self.b = self.tape.param(np.zeros(1), name="b")

    def batch(self, step):
        # deterministic in (seed, step), so the CPU tape and a device see the same data
        rng = self.step_rng(step)
        y = rng.integers(0, 2, (32, 1)).astype(float)
        x = rng.standard_normal((32, 2)) + (2 * y - 1) * 1.5
        return {"x": x, "y": y}

    def episode(self, data):
        p = ops.sigmoid(ops.add_bias(data["x"] @ self.w, self.b), name="p")
        # binary cross-entropy written with tape ops: -(y log p + (1 - y) log(1 - p))
        y = data["y"]
        ll = y * ops.log(p) + (1 - y) * ops.log(1 - p)
        return ops.neg(ops.mean(ll), name="loss")

    def make_optimizer(self):
        opt = optim.SGD(self.tape, lr=0.5)
        opt.add(self.w, l2=1e-3)
        opt.add(self.b)
        return opt
