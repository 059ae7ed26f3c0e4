"""The transformer workload: pre-norm blocks (rms_norm, rope, causal attention, swiglu) trained
with cross-entropy and Adam on a synthetic next-token task (arithmetic progressions mod V)."""

from __future__ import annotations

import numpy as np

from tapescope.core import ops
from tapescope.core.workload import Workload


class Transformer(Workload):
    """A tiny decoder: one-hot embedding, ``blocks`` blocks, a linear head."""

    name = "transformer"

    def __init__(self, vocab: int = 12, seq: int = 8, dim: int = 16, heads: int = 2,
                 hidden: int = 32, blocks: int = 1, batch_size: int = 4, **kw) -> None:
        self.vocab, self.seq, self.dim, self.heads = vocab, seq, dim, heads
        self.hidden, self.blocks, self.batch_size = hidden, blocks, batch_size
        super().__init__(**kw)

    def build(self) -> None:
        t, d = self.tape, self.dim
        with t.scope("embed"):
            self.emb = t.param(self.rng.standard_normal((self.vocab, d)) * 0.5, name="E")
        self.block_params = []
        for i in range(self.blocks):
            p = {}
            with t.scope(f"block{i}/attn"):
                p["g1"] = t.param(np.ones(d), name="norm")
                for w in ("Wq", "Wk", "Wv", "Wo"):
                    p[w] = t.param(self.init(d, d), name=w)
            with t.scope(f"block{i}/mlp"):
                p["g2"] = t.param(np.ones(d), name="norm")
                p["W1"] = t.param(self.init(d, self.hidden), name="W1")
                p["W3"] = t.param(self.init(d, self.hidden), name="W3")
                p["W2"] = t.param(self.init(self.hidden, d), name="W2")
            self.block_params.append(p)
        with t.scope("head"):
            self.gf = t.param(np.ones(d), name="norm")
            self.wout = t.param(self.init(d, self.vocab), name="W")

    def batch(self, step: int) -> dict[str, np.ndarray]:
        rng = self.step_rng(step)
        start = rng.integers(0, self.vocab, (self.batch_size, 1))
        stride = rng.integers(1, 3, (self.batch_size, 1))
        seq = (start + stride * np.arange(self.seq + 1)[None, :]) % self.vocab
        tokens, targets = seq[:, :-1], seq[:, 1:]
        return {"tokens": np.eye(self.vocab)[tokens], "targets": targets.astype(np.float64)}

    def _heads(self, x):
        b, s, h = self.batch_size, self.seq, self.heads
        x = ops.reshape(x, (b, s, h, self.dim // h))
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (b * h, s, self.dim // h))

    def _merge(self, x):
        b, s, h = self.batch_size, self.seq, self.heads
        x = ops.reshape(x, (b, h, s, self.dim // h))
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (b, s, self.dim))

    def episode(self, data):
        t = self.tape
        with t.scope("embed"):
            x = ops.matmul(data["tokens"], self.emb, name="x")
        for i, p in enumerate(self.block_params):
            with t.scope(f"block{i}/attn"):
                h = ops.rms_norm(x, p["g1"], 1e-6)
                q = ops.rope(self._heads(h @ p["Wq"]), name="q")
                k = ops.rope(self._heads(h @ p["Wk"]), name="k")
                v = self._heads(h @ p["Wv"])
                a = ops.attention(q, k, v, causal=True, name="attn")
                x = ops.add(x, self._merge(a) @ p["Wo"], name="residual")
            with t.scope(f"block{i}/mlp"):
                h = ops.rms_norm(x, p["g2"], 1e-6)
                u = ops.swiglu(h @ p["W1"], h @ p["W3"])
                x = ops.add(x, u @ p["W2"], name="residual")
        with t.scope("head"):
            logits = ops.matmul(ops.rms_norm(x, self.gf, 1e-6), self.wout, name="logits")
            return ops.cross_entropy(logits, data["targets"], name="loss")
