"""The judge's native speed-ups give the same answers.

aten's exact GELU and its backward in one native call (core/native/refmath_py.c's ``gelu``,
``aten_ref_pointwise._gelu_c``) give the numpy forms' bits wherever no output is NaN and answer
None (numpy's forms then) wherever one is: float32 and float64, hostile values (±0, ±inf,
denormals, the tails where erf saturates and exp underflows, NaNs), sizes around its chunk of
256, on every native path; what it does not take (a layout, another dtype, a shape) is left to
numpy. And the judge's comparison reads arrays past its prefetched chunks (compare.c's 1 KB
chunks, 2 KB ahead) with the numpy oracle's numbers wherever the differences lie. The
judge's report is one with and without dropping the chain's values after their last reader
(``_expiry``)."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.capture import aten_ref_pointwise as P
from tapescope.core.capture.aten_ref_table import quiet_all
from tapescope.core.capture.judge import _BLOCK, _float_diff_numpy
from tests.helpers.native_ext import ext_or_skip

every_path = pytest.mark.usefixtures("native_isa")


def _hostile(dt: type, n: int, rng: np.random.Generator) -> np.ndarray:
    x = (rng.standard_normal(n) * rng.choice([0.01, 1.0, 4.0, 40.0], n)).astype(dt)
    special = np.array([0.0, -0.0, np.finfo(dt).tiny / 4, -np.finfo(dt).tiny, 6.0, -6.0, 27.0,
                        -27.0, np.finfo(dt).max, -np.finfo(dt).max, np.inf], dt)
    k = min(n, special.size)
    x[rng.permutation(n)[:k]] = special[:k]
    return x


@every_path
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_gelu_is_the_numpy_forms_or_none_where_an_output_is_nan(dt):
    ext_or_skip("numpy's forms only", native.gelu_entry)
    rng = np.random.default_rng(7)
    taken = 0
    with quiet_all():
        for n in (0, 1, 15, 255, 256, 257, 511, 513, 3000):
            x, g = _hostile(dt, n, rng), rng.standard_normal(n).astype(dt)
            for gg in (None, g):
                got = P._gelu_c(x, gg)
                want = np.asarray(P._gelu_fwd(x, "none") if gg is None
                                  else P._gelu_bwd(gg, x, "none"), dt)
                if np.isnan(want).any():  # (-inf's 0 * inf, and the backward's inf * 0)
                    assert got is None
                    continue
                assert got is not None and got.dtype == dt and got.shape == x.shape
                assert got.tobytes() == want.tobytes(), (dt, n, gg is None)
                taken += 1
            nan = x.copy()
            if n:
                nan[n // 2] = np.nan
                assert P._gelu_c(nan, None) is None and P._gelu_c(nan, g) is None
    assert taken >= 8  # (the fast path ran, not only its refusals)


def test_gelu_leaves_what_it_does_not_take_to_numpy():
    fn = ext_or_skip("numpy's forms only", native.gelu_entry)
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    assert P._gelu_c(x.T, None) is None  # strided
    assert P._gelu_c(x.astype(np.float16), None) is None  # a half type (computed in float32)
    assert P._gelu_c(x, x.astype(np.float64)) is None  # two dtypes
    assert P._gelu_c(x, x[:4]) is None  # two shapes
    with pytest.raises(ValueError, match="C-contiguous"):
        fn(x.T, None, P._SQRT1_2, P._GELU_PDF)
    with pytest.raises(TypeError, match="ndarray"):
        fn([1.0], None, P._SQRT1_2, P._GELU_PDF)
    # the forms themselves: the same bits through the native call and the numpy spelling
    args, w = [x], [x.T.copy(), x]
    with quiet_all():
        a, b = P._gelu(args, {})[0], P._gelu_backward(w, {})[0]
    assert a.tobytes() == np.asarray(P._gelu_fwd(x, "none")).tobytes()
    assert b.tobytes() == np.asarray(P._gelu_bwd(w[0], x, "none")).tobytes()


@every_path
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_the_comparison_past_its_prefetched_chunks_is_the_numpy_oracles(dt):
    fdiff = ext_or_skip("the numpy comparison", native.float_diff_entry)
    fd, kinds = fdiff
    rng = np.random.default_rng(3)
    per = 1024 // np.dtype(dt).itemsize  # elements a chunk
    for n in (per - 1, per, 3 * per, 3 * per + 1, 7 * per + 5, 40 * per + 3):
        rec = rng.standard_normal(n).astype(dt)
        edges = sorted({min(k, n - 1) for k in (per - 1, per, 2 * per, n - per)})
        for where in ([0], [n - 1], edges, list(range(0, n, 97))):
            ref = rec.copy()
            ref[where] = np.nextafter(ref[where], dt(np.inf)) * dt(-1 if len(where) == 1 else 1)
            for full in (True, False):
                got = fd(ref, rec, kinds[rec.dtype], _BLOCK, full)
                d = _float_diff_numpy(ref, rec, full)
                assert (got[0], got[1], got[2]) == (d["n_diff"], d["first_index"], d["max_ulp"])
                if full:
                    assert (got[3], got[4]) == (d["max_abs"], d["n_signed_zero"])


def test_the_judge_drops_the_chains_values_after_their_last_reader(zoo_capture, monkeypatch):
    from tapescope.core.capture import judge as J
    from tapescope.core.capture.file import load

    f, run = zoo_capture(["gpt.py", "--steps", "2"])
    assert run.returncode == 0, run.stderr
    cap = load(f)
    expire = J._expiry(cap)
    assert sum(len(v) for v in expire.values()) > cap.n_ops  # (values do expire)
    with_drop = J.judge(cap)
    monkeypatch.setattr(J, "_expiry", lambda cap: {})
    without = J.judge(cap)
    for r in (with_drop, without):
        r.pop("judge_seconds")
    assert with_drop == without
    assert with_drop["counts"]["inherited"]  # (the chain held values: the drops were tested)
