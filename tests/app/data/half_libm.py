"""A user workload whose sigmoid inputs are ones where the platform's float32 sigmoid, rounded
to the half type, differs from refmath's (found by trying all 65,536 inputs of each type: 6 in
float16, 8 in bfloat16; docs/reference-order.md, "--math platform in half")."""

import numpy as np

from tapescope.core import ops
from tapescope.core.workloads import Workload

INPUTS = {
    "float16": [-0.00146484375, -0.00341796875, -0.00439453125, -0.00537109375,
                -0.01123046875, -0.1639404296875],
    "bfloat16": [-89.0, -89.5, -90.0, -90.5, -91.0, -91.5, -92.0, -92.5],
}


class HalfLibm(Workload):
    name = "half_libm"

    def build(self):
        n = len(INPUTS.get(self.tape.dtype.name, INPUTS["float16"]))
        self.w = self.tape.param(np.ones(n), name="w")

    def batch(self, step):
        return {"x": np.array(INPUTS.get(self.tape.dtype.name, INPUTS["float16"]))}

    def episode(self, data):
        return ops.sum(ops.sigmoid(data["x"] * self.w, name="s"), name="loss")
