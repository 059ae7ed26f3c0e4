"""Synthetic tape structures (ops, inputs, names) shaped like real ones, for layout benchmarks.

Only structure: no values. Used by benchmarks/bench_graph.py and the layout tests to exercise
graphs far larger than the built-in workloads without recording an episode.
"""

from __future__ import annotations

import numpy as np


def transformer_like(
    n_nodes: int, seed: int = 0
) -> tuple[list[str], list[tuple[int, ...]], list[str]]:
    """A residual stack of attention/MLP blocks with params, until ``n_nodes`` nodes exist."""
    rng = np.random.default_rng(seed)
    ops: list[str] = []
    inputs: list[tuple[int, ...]] = []
    names: list[str] = []

    def add(op: str, ins: tuple[int, ...], name: str) -> int:
        ops.append(op)
        inputs.append(ins)
        names.append(name)
        return len(ops) - 1

    x = add("const", (), "x")
    h = add("matmul", (x, add("param", (), "embed/W")), "embed/h")
    b = 0
    while len(ops) < n_nodes - 8:
        s = f"block{b}"
        n1 = add("rms_norm", (h, add("param", (), f"{s}/attn/g")), f"{s}/attn/norm")
        q = add("matmul", (n1, add("param", (), f"{s}/attn/Wq")), f"{s}/attn/q")
        k = add("matmul", (n1, add("param", (), f"{s}/attn/Wk")), f"{s}/attn/k")
        v = add("matmul", (n1, add("param", (), f"{s}/attn/Wv")), f"{s}/attn/v")
        q = add("rope", (q,), f"{s}/attn/rope_q")
        k = add("rope", (k,), f"{s}/attn/rope_k")
        kt = add("transpose", (k,), f"{s}/attn/kt")
        sc = add("muls", (add("bmm", (q, kt), f"{s}/attn/scores"),), f"{s}/attn/scale")
        p = add("softmax", (sc,), f"{s}/attn/p")
        o = add("bmm", (p, v), f"{s}/attn/o")
        o = add("matmul", (o, add("param", (), f"{s}/attn/Wo")), f"{s}/attn/proj")
        h = add("add", (h, o), f"{s}/res1")
        n2 = add("rms_norm", (h, add("param", (), f"{s}/mlp/g")), f"{s}/mlp/norm")
        u = add("matmul", (n2, add("param", (), f"{s}/mlp/W1")), f"{s}/mlp/up")
        g = add("matmul", (n2, add("param", (), f"{s}/mlp/W3")), f"{s}/mlp/gate")
        a = add("swiglu", (u, g), f"{s}/mlp/act")
        if rng.random() < 0.3:  # occasional extra branch so the widths vary
            a = add("mul", (a, add("sigmoid", (a,), f"{s}/mlp/sig")), f"{s}/mlp/gated")
        d = add("matmul", (a, add("param", (), f"{s}/mlp/W2")), f"{s}/mlp/down")
        h = add("add", (h, d), f"{s}/res2")
        b += 1
    logits = add("matmul", (h, add("param", (), "head/W")), "head/logits")
    add("cross_entropy", (logits, add("const", (), "targets")), "loss")
    return ops, inputs, names
