"""A user workload with two independent transcendental branches (exp, tanh) and a relu one."""

import numpy as np  # noqa: F401 — the tests' variants of batch() use it

from tapescope.core import ops
from tapescope.core.workloads import Workload


class Branches(Workload):
    name = "branches"
    def build(self):
        self.w = self.tape.param(self.init(4, 8), name="w")
    def batch(self, step):
        rng = self.step_rng(step)
        return {"x": rng.standard_normal((16, 4))}
    def episode(self, data):
        h = data["x"] @ self.w
        a = ops.exp(h, name="e")
        b = ops.tanh(h, name="t")
        c = ops.relu(h, name="r")
        return ops.mean(a * b + c, name="loss")
