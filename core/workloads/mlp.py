"""The mlp workload: an autoencoder (relu + linear + mse + Adam) on synthetic low-rank data."""

from __future__ import annotations

import numpy as np

from tapescope.core import ops
from tapescope.core.workload import Workload


class MLP(Workload):
    """Autoencoder ``dims[0] -> ... -> dims[-1]`` (relu between layers, linear output)."""

    name = "mlp"

    def __init__(self, dims: tuple[int, ...] = (32, 16, 8, 16, 32), batch_size: int = 16,
                 rank: int = 4, **kw) -> None:
        self.dims = tuple(dims)
        self.batch_size = batch_size
        self.rank = rank
        super().__init__(**kw)

    def build(self) -> None:
        t = self.tape
        self.layers = []
        for i, (a, b) in enumerate(zip(self.dims[:-1], self.dims[1:], strict=False)):
            with t.scope(f"layer{i}"):
                w = t.param(self.init(a, b), name="W")
                bias = t.param(np.zeros(b), name="b")
            self.layers.append((w, bias))
        # the data lives on a fixed low-rank subspace, so the autoencoder can learn it
        basis_rng = np.random.default_rng(1000 + self.seed)
        self.basis = basis_rng.standard_normal((self.rank, self.dims[0])) / np.sqrt(self.rank)

    def batch(self, step: int) -> dict[str, np.ndarray]:
        rng = self.step_rng(step)
        z = rng.standard_normal((self.batch_size, self.rank))
        return {"x": z @ self.basis}

    def episode(self, data):
        x = h = data["x"]
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            with self.tape.scope(f"layer{i}"):
                h = ops.add_bias(h @ w, b)
                if i < last:
                    h = ops.relu(h)
        return ops.mse(h, x, name="loss")
