"""``signed-zero``: a cause read from the diff alone, before any variant is tried."""

from __future__ import annotations

import numpy as np

from tapescope.core.explain import SIGNED_ZERO, cause_text, signed_zero
from tapescope.core.parity import compare_arrays


def test_only_zeros_of_the_other_sign_is_signed_zero():
    ref = np.array([0.0, 1.0, 0.0, -2.0])
    cand = np.array([-0.0, 1.0, -0.0, -2.0])
    c = signed_zero(compare_arrays(ref, cand))
    assert c is not None and c.cause == SIGNED_ZERO
    assert cause_text(c.to_json()).startswith("equal but for the sign of zero (")
    assert "+0.0 + -0.0 = +0.0" in c.text()


def test_any_real_difference_is_not_signed_zero():
    ref = np.array([0.0, 1.0], dtype=np.float32)
    cand = np.array([-0.0, np.nextafter(np.float32(1.0), np.float32(2.0))], dtype=np.float32)
    assert signed_zero(compare_arrays(ref, cand)) is None
    assert signed_zero(compare_arrays(ref, ref.copy())) is None  # nothing differs: no cause
