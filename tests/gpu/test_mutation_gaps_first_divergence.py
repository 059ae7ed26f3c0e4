"""gpu.parity.first_divergence on hand-made summaries: the lowest-id differing value wins (forward
runs in tape order), else the highest-id differing gradient (backward runs in decreasing id).
A planted reversal of either loop was caught only by whole-program tests; this names the rule."""

from __future__ import annotations

import numpy as np

from tapescope.core.parity import NodeParity, compare_arrays, first_divergence

SAME = compare_arrays(np.zeros(2), np.zeros(2))
DIFF = compare_arrays(np.zeros(2), np.array([0.0, 1.0]))


def nodes(values: str, grads: str) -> tuple[NodeParity, ...]:
    """One node per character: '.' exact, 'x' differs, '-' (grads only) no gradient."""
    return tuple(NodeParity(i, "op", None, DIFF if v == "x" else SAME,
                            None if g == "-" else DIFF if g == "x" else SAME)
                 for i, (v, g) in enumerate(zip(values, grads, strict=True)))


def test_the_first_differing_value_in_tape_order_wins():
    assert first_divergence(nodes(".x.x.", "x...x")) == (1, "value")
    assert first_divergence(nodes("....x", "x....")) == (4, "value")


def test_otherwise_the_highest_differing_gradient_wins():
    assert first_divergence(nodes(".....", ".x.x-")) == (3, "grad")
    assert first_divergence(nodes(".....", "x-...")) == (0, "grad")


def test_all_exact_is_none():
    assert first_divergence(nodes("...", "..-")) is None
    assert first_divergence(()) is None
