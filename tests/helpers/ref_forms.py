"""Helpers of the reference forms' tests."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def recorded_outputs(outs: list):
    """The judge's bound for a form (``OUT_ELEMS``): ``outs`` as the op's recorded outputs
    while the block runs (a size a form's arguments name is refused past the largest)."""
    from tapescope.core.capture.aten_ref_table import OUT_ELEMS

    token = OUT_ELEMS.set(list(outs))
    try:
        yield
    finally:
        OUT_ELEMS.reset(token)


def assert_agrees_in_float64(r, t, rg, tg) -> None:
    """A form and its backward (``r``, ``rg``) agree with torch's (``t``, ``tg``) in float64:
    the same shapes, float64, within 1e-12."""
    import numpy as np

    assert r.shape == t.shape and rg.shape == tg.shape and r.dtype == rg.dtype == np.float64
    np.testing.assert_allclose(r, t, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rg, tg, rtol=0, atol=1e-12)


def diff_of(ref, rec) -> dict:
    """``core.parity.compare_arrays`` of a form's output and torch's, as the dict
    ``explain_op`` takes (``diff``)."""
    from tapescope.core.parity import compare_arrays

    d = compare_arrays(ref, rec)
    return d if isinstance(d, dict) else vars(d)
