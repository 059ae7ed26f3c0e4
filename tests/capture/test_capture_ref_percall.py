"""The reference forms' cheaper spellings compute what the plain ones did, bit for bit, on
hostile values (NaN, +-inf, +-0, subnormals, huge and tiny; issue 42's ``parity --capture``
speed): an in-place op's fresh result taken as it is (no copy), lerp's one side for one
weight, the transposes by the native kernel and refmath's erf by ranges (both on every
native path)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tapescope.core.capture.aten_ref import reference
from tapescope.core.capture.aten_ref_optim import lerp
from tapescope.core.capture.aten_ref_shape import _native_transpose, cast, swap_last2


def hostile(shape, dtype, seed: int) -> np.ndarray:
    """Random normals of ``dtype`` with a tenth of them replaced by special values."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4.0).astype(dtype)
    fi = np.finfo(dtype)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal,
                        -fi.smallest_subnormal, fi.tiny, fi.max, -fi.max, 0.5, -0.5],
                       dtype=dtype)
    m = rng.random(shape) < 0.1
    x[m] = rng.choice(special, int(m.sum()))
    return x


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lerp_with_one_weight_is_the_two_sided_where(dtype):
    a, b = hostile((33, 17), dtype, 1), hostile((33, 17), dtype, 2)
    one = dtype(1)
    for w in (0.1, 0.49999997, 0.5, 0.9, -0.3, -0.7, 1.0, 0.0, -0.0, np.nan, np.inf, 3.0):
        wt = np.asarray(w, dtype)
        with np.errstate(all="ignore"):
            want = np.where(np.abs(wt) < dtype(0.5), a + (wt * (b - a)),
                            b - ((b - a) * (one - wt)))
        with np.errstate(all="ignore"):
            got = lerp(a, b, wt)
        assert got.dtype == want.dtype and _bits(got) == _bits(want), w


@pytest.mark.parametrize("op,extra,kw", [
    ("aten.add_.Tensor", 1, {"alpha": 0.1}), ("aten.mul_.Tensor", 1, {}),
    ("aten.lerp_.Scalar", 1, {}), ("aten.addcdiv_.default", 2, {"value": -0.01}),
    ("aten.addcmul_.default", 2, {"value": 0.5}), ("aten.sub_.Tensor", 1, {}),
    ("aten.clamp_.default", 0, {}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_an_in_place_op_is_its_functional_twin_written_in(op, extra, kw, dtype):
    """The in-place result (fresh: no copy) has the functional twin's bits cast into the
    target, and never is one of the call's arrays (the chain's inputs are writeable)."""
    x = hostile((9, 31), dtype, 3)
    others = [hostile((9, 31), dtype, 4 + i) for i in range(extra)]
    args = [x] + others
    if op == "aten.lerp_.Scalar":
        args.append(0.25)
    if op == "aten.clamp_.default":
        args += [-1.0, 2.0]
    name, ovl = op.split(".")[1], op.split(".")[2]
    with np.errstate(all="ignore"):
        want = reference(f"aten.{name[:-1]}.{ovl}", list(args), dict(kw))[0]
        got = reference(op, list(args), dict(kw))
    assert len(got) == 1 and got[0].dtype == x.dtype and got[0].shape == x.shape
    assert _bits(got[0]) == _bits(cast(want, x.dtype))
    assert all(got[0] is not a and not np.shares_memory(got[0], a)
               for a in args if isinstance(a, np.ndarray))


def test_an_in_place_form_giving_back_an_input_is_copied():
    """A form whose result is one of its arguments (clamp with no bounds hands back its
    input; a chained input is writeable and owns its memory): copied, never that array."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for op, args in (("aten.mul_.Tensor", [x, np.float32(1)]),
                     ("aten.clamp_.default", [x, None, None]),
                     ("aten.copy_.default", [x, x])):
        got = reference(op, list(args), {})[0]
        assert got is not x and not np.shares_memory(got, x) and _bits(got) == _bits(x), op


def test_foreach_in_place_results_are_each_tensors_own():
    xs = [hostile((5, 7), np.float32, 10 + i) for i in range(3)]
    ys = [hostile((5, 7), np.float32, 20 + i) for i in range(3)]
    with np.errstate(all="ignore"):
        got = reference("aten._foreach_add_.List", [xs, ys], {"alpha": 0.5})
        want = [reference("aten.add.Tensor", [x, y], {"alpha": 0.5})[0]
                for x, y in zip(xs, ys, strict=True)]
    assert [_bits(g) for g in got] == [_bits(w) for w in want]
    assert all(not np.shares_memory(g, a) for g in got for a in xs + ys)


_SHAPES = [(1, 1), (1, 37), (37, 1), (16, 16), (17, 33), (64, 300), (300, 64), (256, 1024),
           (3, 40, 70), (2, 3, 16, 129)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
                                   np.int64, np.int32, np.uint16])
def test_the_native_transpose_is_numpys_copy(dtype, native_isa):
    """Every element's bits (NaN payloads, -0.0, subnormals) where numpy's copy of the
    swapped view puts them, on every native path, tiles cut at odd edges."""
    rng = np.random.default_rng(5)
    for shape in _SHAPES:
        if np.dtype(dtype).kind in "iu":
            x = rng.integers(0, 2 ** 15, shape).astype(dtype)
        else:
            with np.errstate(over="ignore"):
                x = hostile(shape, np.float32, 6).astype(dtype)
            raw = x.view(f"u{x.itemsize}")
            raw.flat[::7] = np.array(np.iinfo(raw.dtype).max, raw.dtype)  # all-ones NaNs
        want = np.array(np.swapaxes(x, -1, -2), order="C")
        got = swap_last2(x, native_min=0)
        assert got.shape == want.shape and got.dtype == x.dtype, shape
        assert got.flags.c_contiguous and _bits(got) == _bits(want), shape
        # below the native copy's size: numpy's copy of the swapped view, a new C-ordered array
        small = swap_last2(x, native_min=x.size + 1)
        assert small.shape == want.shape and small.dtype == x.dtype, shape
        assert small.flags.c_contiguous and small.flags.owndata and _bits(small) == _bits(want)


def test_t_transpose_permute_take_the_native_copy_and_match_numpy():
    x = hostile((70, 90), np.float32, 8)
    x4 = hostile((2, 3, 70, 90), np.float32, 9)
    from tapescope.core import native

    # (without native code, TAPESCOPE_NO_NATIVE or no gcc: numpy's copy, the same bits)
    assert bool(_native_transpose()) == (native.library() is not None), \
        "the native transpose is built with the library"
    for op, args, want in (
            ("aten.t.default", [x], x.T),
            ("aten.transpose.int", [x4, -1, 2], np.swapaxes(x4, 2, 3)),
            ("aten.transpose.int", [x4, 1, 3], np.swapaxes(x4, 1, 3)),
            ("aten.permute.default", [x4, [0, 1, 3, 2]], np.transpose(x4, [0, 1, 3, 2])),
            ("aten.permute.default", [x4, [3, 1, 0, 2]], np.transpose(x4, [3, 1, 0, 2])),
            ("aten.t.default", [x[:, ::2]], x[:, ::2].T)):  # strided: numpy's copy
        got = reference(op, args, {})[0]
        assert got.shape == want.shape and _bits(got) == _bits(want), (op, args[1:])


# ts_erf's range edges (|x| = 2**-28, 0.84375, 1.25, 1/0.35, 6) and the double subnormal edge
_ERF_EDGES = (2.0 ** -28, 0.84375, 1.25, float.fromhex("0x1.6db6e00000000p+1"), 6.0,
              2.2250738585072014e-308)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_by_ranges_is_the_numpy_spelling(dtype, native_isa):
    """refmath's native erf sorts each block's elements by ts_erf's range: every range's
    edges (a few ulps either side, both signs), the specials, and blocks whose elements mix
    all ranges in random order, a length that leaves a partial block; bits as the numpy
    spelling's (the C twin's oracle), on every native path."""
    from tapescope.core import refmath

    edges = []
    for e in _ERF_EDGES:
        v = np.array(e, dtype)
        for k in range(-3, 4):
            w = v.view(f"i{v.itemsize}") + k
            edges.append(w.view(dtype))
    edges = np.array(edges, dtype)
    rng = np.random.default_rng(11)
    mixed = (rng.standard_normal(5000) * rng.choice([0.3, 1.0, 2.5, 7.0], 5000)).astype(dtype)
    x = np.concatenate([edges, -edges, hostile((1500,), dtype, 12), mixed])
    rng.shuffle(x)
    from tapescope.core import native

    # this path's library (ctypes); None only without native code (TAPESCOPE_NO_NATIVE, no
    # gcc: refmath.erf is then the numpy spelling itself; a path that did not build fails in
    # the native_isa fixture)
    fn = native.refmath_fn("erf", dtype)
    assert (fn is None) == (native.library() is None)
    refmath.use_native(True)  # refmath's loops re-probed: this path's extension
    try:
        for part in (x, x[:513], x[:1]):
            want = refmath.numpy_apply("erf", part)
            got = refmath.erf(part)
            assert got.dtype == want.dtype and _bits(got) == _bits(want)
            if fn is not None:
                got = np.empty_like(part)
                fn(part.ctypes.data, got.ctypes.data, part.size)
                assert _bits(got) == _bits(want)
    finally:
        refmath.use_native(True)
