"""The judge's costs on tiny steps (issue 42, zoo GPT): each shortcut gives the answer of the path
it stands in for. ``_decode_args`` (the arguments decoded and the value ids they name, in one
walk) against ``_decode`` and ``_inputs``; a planted one-ulp difference still splits into
introduced and inherited through list arguments and a foreach op; ``vector_norms`` (a
``_foreach_norm`` in one padded sum) against ``vector_norm`` per tensor; the attention forms'
batched product against ``matmul``."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.capture import aten_ref, aten_ref_layers, judge
from tapescope.core.capture.aten_ref_nn import vector_norm, vector_norms
from tapescope.core.capture.file import Capture, digest
from tapescope.core.ops.reference import matmul as ref_matmul


def test_decode_args_gives_decode_and_the_ids_inputs_names():
    """The decoded arguments are ``_decode``'s (the recorded arrays themselves), the ids those
    ``_inputs`` names for the args and the keywords' values (in lists at any depth; not inside
    other tagged objects), a value over the budget raises ``_Missing`` naming it. Planted: ids
    of a nested list or of a keyword not kept, or ids of a complex's parts kept, fail it."""
    arrays = [np.zeros(2), np.ones(3), np.full(2, 2.0), None]
    get = arrays.__getitem__

    def same(x, y) -> bool:
        if isinstance(x, list):
            return type(y) is list and len(x) == len(y) and all(map(same, x, y))
        return x is y if isinstance(x, np.ndarray | dict) else repr(x) == repr(y)

    cases = [([{"T": 1}, 2, None, "x", 1.5, True, {"T": 2}], {}),
             ([[{"T": 2}, [{"T": 1}, 3]], {"f": "inf"}], {"out": {"T": 0}}),
             ([{"c": [1.0, {"f": "-0.0"}]}], {"alpha": 2, "w": [{"T": 1}, [{"T": 2}]]}),
             ([{"g": 5}, {"r": "sum"}], {"group": {"g": 1}}), ([], {}), ([[[]]], {"x": []}),
             ([{"T": 1}, {"T": 1}], {"y": {"T": 1}, "s": "a"})]
    for args, kwargs in cases:
        ids: list[int] = []
        a, k = judge._decode_args(args, kwargs, arrays, ids)
        assert same(a, judge._decode(args, get)), args
        want_k = judge._decode_kw(kwargs, get)
        assert list(k) == list(want_k) and all(same(k[n], want_k[n]) for n in k), kwargs
        assert sorted(ids) == sorted(judge._inputs(args) + judge._inputs(list(kwargs.values())))
    for args, kwargs in (([{"T": 1}, {"T": 3}], {}), ([[{"T": 3}]], {}), ([], {"x": {"T": 3}}),
                         ([1], {"x": [2, [{"T": 3}]]})):
        with pytest.raises(judge._Missing) as e:
            judge._decode_args(args, kwargs, arrays, [])
        assert e.value.vid == 3
    with pytest.raises(judge._NoRef):
        judge._decode_args([[{"T": 1}, {"q": 2}]], {}, arrays, [])


def _capture(ops: list[tuple[str, list, dict, list[np.ndarray]]], inputs: list[np.ndarray]
             ) -> Capture:
    """One forward step: ``inputs`` are values 0..n-1, then each op's outputs in turn."""
    arrays = list(inputs)
    outs = []
    for _, _, _, got in ops:
        outs.append(list(range(len(arrays), len(arrays) + len(got))))
        arrays.extend(got)
    n = len(ops)
    return Capture(path="toy", steps=1,
                   ops={"op": [o[0] for o in ops], "module": ["M"] * n,
                        "phase": ["forward"] * n, "step": [1] * n, "source": [""] * n,
                        "args": [o[1] for o in ops], "kwargs": [o[2] for o in ops],
                        "outputs": outs},
                   dtypes=[str(x.dtype) for x in arrays], shapes=[x.shape for x in arrays],
                   digests=[digest(x) for x in arrays], arrays=arrays, losses=[-1],
                   initial={}, settings={})


def test_a_planted_ulp_is_introduced_once_and_inherited_through_lists():
    """A product recorded one ulp off is introduced there; a cat of a list holding it and a
    foreach norm over a list holding it inherit it (their own re-runs exact), the list's other
    norm and an op off the chain stay exact. Planted: the chain's test blind to list entries
    (or a foreach norm's padding moving a chain) fails it."""
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    ref = aten_ref.reference
    prod = ref("aten.mul.Tensor", [x, y], {})[0]
    planted = np.nextafter(prod, np.copysign(np.float32(np.inf), prod))  # one ulp out
    assert vector_norm(planted).tobytes() != vector_norm(prod).tobytes()  # (the case's premise)
    cat = ref("aten.cat.default", [[planted, x]], {})[0]
    norms = ref("aten._foreach_norm.Scalar", [[x, planted], 2.0], {})
    off = ref("aten.add.Tensor", [x, y], {})[0]
    cap = _capture([("aten.mul.Tensor", [{"T": 0}, {"T": 1}], {}, [planted]),
                    ("aten.cat.default", [[{"T": 2}, {"T": 0}]], {}, [cat]),
                    ("aten._foreach_norm.Scalar", [[{"T": 0}, {"T": 2}], 2.0], {}, norms),
                    ("aten.add.Tensor", [{"T": 0}, {"T": 1}], {}, [off])], [x, y])
    rep = judge.judge(cap)
    got = [[o["verdict"] for o in e["outputs"]] for e in rep["ops"]]
    assert got == [["introduced"], ["inherited"], ["exact", "inherited"], ["exact"]], got
    assert rep["introduced"][0]["n_diff"] == 12 and rep["introduced"][0]["max_ulp"] == 1
    assert rep["ops"][1]["outputs"][0]["total_n_diff"] == 12


def _lists(rng: np.random.Generator, dt: type) -> list[np.ndarray]:
    xs = []
    for _ in range(int(rng.integers(1, 12))):
        shape = tuple(int(s) for s in rng.integers(0, 6, size=int(rng.integers(0, 4))))
        x = np.asarray(rng.standard_normal(shape) * 10.0 ** int(rng.integers(-30, 30))).astype(dt)
        if x.size and rng.random() < 0.3:
            x.reshape(-1)[rng.integers(x.size)] = rng.choice(
                [np.nan, np.inf, -np.inf, -0.0, 1e-45, 3e38])
        if rng.random() < 0.2 and x.ndim >= 2:
            x = x.T  # (read in C order of the view, as vector_norm's flattening)
        xs.append(x)
    return xs


@pytest.mark.usefixtures("native_isa")
@pytest.mark.parametrize("sums", ["native", "padded"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_vector_norms_give_each_tensors_own_norm(dt, sums, monkeypatch):
    """Every tensor's norm has the bits (and 0-d shape, dtype) of ``vector_norm`` alone: empty
    and 0-d tensors, NaN, infinities, -0.0, denormals, overflowing squares, transposed views;
    through the table's ``_foreach_norm`` too; by the native sums of squares (every native
    path; a list it does not take, or a NaN sum, by the padded matrix) and by the padded
    matrix alone. Planted: a NaN or -0.0 padding, the rows' fill in another order, or a native
    square fused into its add, fails it."""
    if sums == "padded":
        monkeypatch.setattr(native, "square_sums", lambda xs: None)
    elif native.library() is not None and native.refmath_ext() is not None:
        assert native.square_sums([np.ones(3, dt), np.ones((2, 2), dt)]) is not None
    rng = np.random.default_rng(7)
    for _ in range(200):
        xs = _lists(rng, dt)
        want = [vector_norm(x, 2.0) for x in xs]
        for got in (vector_norms(xs, 2.0), aten_ref.reference("aten._foreach_norm.Scalar",
                                                               [xs, 2.0], {})):
            assert got is not None and len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert (g.shape, g.dtype, g.tobytes()) == (w.shape, w.dtype, w.tobytes())
    u = np.uint32 if dt == np.float32 else np.uint64
    quiet = np.array([np.nan], dt).view(u)[0]
    nans = np.array([quiet | u(5), quiet | u(9), quiet | u(3)], u).view(dt)  # three payloads
    two = [np.array([1.0, nans[0], 2.0, nans[1]], dt), np.array([nans[2], 3.0], dt)] * 3
    assert [v.tobytes() for v in vector_norms(two, 2.0)] == [
        vector_norm(x, 2.0).tobytes() for x in two]  # (a chain's NaN meeting another's)
    neg = [np.full((2, 3), -0.0, dt), np.zeros(0, dt)]
    assert [v.tobytes() for v in vector_norms(neg, 2.0)] == [
        vector_norm(x, 2.0).tobytes() for x in neg]


def test_vector_norms_leave_other_lists_to_the_loop():
    f32 = np.ones(3, np.float32)
    assert vector_norms([np.ones(3, np.float16)], 2.0) is None
    assert vector_norms([f32, np.ones(3)], 2.0) is None  # mixed dtypes
    assert vector_norms([f32], 1.0) is None and vector_norms([], 2.0) is None
    big = [np.ones(1 << 12, np.float32)] * 17  # over the padded matrix's size
    assert vector_norms(big, 2.0) is None
    got = aten_ref.reference("aten._foreach_norm.Scalar", [big, 2.0], {})
    assert [g.tobytes() for g in got] == [vector_norm(x, 2.0).tobytes() for x in big]


def test_the_attention_forms_batched_product_is_matmul():
    """``aten_ref_layers._matmul`` against ``matmul`` (its broadcast of each operand): one batch
    shape (3-d, 4-d, a transposed view), broadcast batches and 2-d operands (matmul's own
    path); the causal mask is ``np.triu``'s, read only."""
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        def r(*s, dt=dt):
            return rng.standard_normal(s).astype(dt)
        for a, b in ((r(2, 3, 5, 4), r(2, 3, 4, 6)), (r(4, 5, 3), r(4, 3, 2)),
                     (r(2, 2, 4, 5).swapaxes(-1, -2), r(2, 2, 5, 3)),
                     (r(1, 3, 5, 4), r(2, 3, 4, 6)), (r(2, 3, 5, 4), r(4, 6)), (r(5, 4), r(4, 2))):
            got, want = aten_ref_layers._matmul(a, b), ref_matmul(a, b)
            assert got.shape == want.shape and got.tobytes() == want.tobytes()
    m = aten_ref_layers._causal(3, 4, np.dtype(np.float32))
    assert not m.flags.writeable and m.tobytes() == np.triu(
        np.full((3, 4), -np.inf, np.float32), k=1).tobytes()


def test_an_output_of_another_dtype_or_shape_is_no_reference():
    """``_check_outs``' one-output path and its loop name the first output that is not the
    recorded one's dtype and shape (the op no-reference, never a comparison of the two)."""
    x = np.ones((3, 4), np.float32)
    two = aten_ref.reference("aten.var_mean.correction", [x], {})
    cap = _capture([("aten.neg.default", [{"T": 0}], {}, [-x]),
                    ("aten.var_mean.correction", [{"T": 0}], {}, two)], [x])
    answers = {0: [np.zeros(12, np.float32)], 1: [two[0], two[1].astype(np.float64)]}
    rep = judge.judge(cap, override=lambda i, op, a, k: answers[i])
    got = [(e["outputs"][0]["verdict"], e.get("reason")) for e in rep["ops"]]
    assert got == [("no-reference", "the reference's output 0 is float32[12], the recorded one "
                                    "float32[3, 4]"),
                   ("no-reference", "the reference's output 1 is float64[], the recorded one "
                                    "float32[]")], got
    assert [o["verdict"] for o in judge.judge(cap)["ops"][1]["outputs"]] == ["exact"] * 2


def test_an_output_of_another_dtype_is_no_reference_from_either_call():
    """``_check_outs``' one-output path on both of the loop's calls: an output of the recorded
    shape but another dtype is no-reference, from the call on the recorded inputs and from the
    one on the chain's. Planted: the dtype test left out of either call's check fails it."""
    x = np.ones((3, 4), np.float32)
    off = np.nextafter(-x, np.float32(0))  # neg recorded one ulp off: the chain holds -x
    cap = _capture([("aten.neg.default", [{"T": 0}], {}, [off]),
                    ("aten.neg.default", [{"T": 1}], {}, [x]),
                    ("aten.neg.default", [{"T": 1}], {}, [x])], [x])
    calls: list[int] = []

    def override(i, op, a, k):
        calls.append(i)
        y = -a[0]
        if i == 1 or (i == 2 and calls.count(2) == 2):  # (op 2's second call: the chain's)
            return [y.astype(np.float64)]
        return [y]

    rep = judge.judge(cap, override=override)
    why = "the reference's output 0 is float64[3, 4], the recorded one float32[3, 4]"
    got = [(e["outputs"][0]["verdict"], e.get("reason")) for e in rep["ops"]]
    assert got == [("introduced", None), ("no-reference", why), ("no-reference", why)], got
    assert calls == [0, 1, 2, 2]


def test_one_fitting_output_is_judged_as_it_is_and_a_number_as_an_array():
    """``_check_outs``' one-output path: an array of the recorded dtype and shape is handed on
    as it is (the same list), a number of that dtype as its 0-d array (judged, not refused), a
    0-d array against a 1-element output refused. Planted: the short cut taken for a number,
    or without its shape test, fails it."""
    x = np.arange(3, dtype=np.float32)
    g = [x.copy()]
    assert judge._check_outs(g, [x]) is g
    (h,) = judge._check_outs([np.float32(2.0)], [np.float32(2.0).reshape(())])
    assert type(h) is np.ndarray and h.shape == () and h.dtype == np.float32
    with pytest.raises(judge._NoRef):
        judge._check_outs([np.asarray(2.0, np.float32)], [np.ones(1, np.float32)])
    s = np.asarray(np.float32(1.5))
    cap = _capture([("aten.neg.default", [{"T": 0}], {}, [-s])], [s])
    rep = judge.judge(cap, override=lambda i, op, a, k: [np.float32(-1.5)])
    assert [o["verdict"] for o in rep["ops"][0]["outputs"]] == ["exact"]


def test_layer_norm_form_is_the_tapes_forward_and_its_statistics():
    """``native_layer_norm``'s form (its statistics computed once) against the tape's
    layer_norm forward plus the statistics computed again, as the form was: every output's
    bits, with and without weight and bias, a 2-d normalized shape, half inputs, NaN, inf and
    a constant row. Planted: the forward's own eps rounding or order changed fails it."""
    from tapescope.core.capture.aten_ref_table import M
    from tapescope.core.ops import REGISTRY

    rng = np.random.default_rng(4)
    for dt in (np.float32, np.float64, np.float16):
        x = rng.standard_normal((3, 4, 6)).astype(dt)
        x[0, 1, 2], x[1, 2, 3], x[2, 3] = np.nan, np.inf, 0.5
        w, b = rng.standard_normal(6).astype(dt), rng.standard_normal(6).astype(dt)
        for shape, weight, bias in (([6], w, b), ([6], None, None), ([6], w, None),
                                    ([4, 6], rng.standard_normal((4, 6)).astype(dt), None)):
            got = aten_ref.reference("aten.native_layer_norm.default",
                                     [x, shape, weight, bias, 1e-5], {})
            k = int(np.prod(shape))
            x2 = x.astype(np.float32 if dt == np.float16 else dt).reshape(-1, k)
            gamma = np.ones(k, x2.dtype) if weight is None else weight.astype(x2.dtype).reshape(-1)
            with np.errstate(all="ignore"):
                y = REGISTRY["layer_norm"].forward(M, [x2, gamma], {"eps": 1e-5})
                if bias is not None:
                    y = y + bias.astype(x2.dtype).reshape(-1)
                mu, r = aten_ref_layers._ln_stats(x2, 1e-5)
            stat = x.shape[:x.ndim - len(shape)] + (1,) * len(shape)
            want = [y.reshape(x.shape).astype(dt), mu.reshape(stat).astype(dt),
                    r.reshape(stat).astype(dt)]
            assert [(g.dtype, g.shape, g.tobytes()) for g in got] == [
                (v.dtype, v.shape, v.tobytes()) for v in want], (dt, shape)


def _diff_pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs of one dtype and shape: every float type, the same bits, one ulp off, across
    zero, NaNs (the policy's hand-over), an integer and a bool output, an empty one, a
    strided one."""
    from tapescope.core import precision

    rng = np.random.default_rng(9)
    pairs = []
    for dt in (np.float64, np.float32, precision.FLOAT16, precision.BFLOAT16):
        x = rng.standard_normal((5, 7)).astype(np.float32).astype(dt)
        y = x.copy()
        y.reshape(-1)[[3, 9]] = -y.reshape(-1)[[3, 9]]
        z = x.copy()
        z[1, 1] = np.nan
        pairs += [(x, x.copy()), (x, y), (z, x), (z, z.copy()), (x[:, ::2], y[:, ::2]),
                  (x[:0], y[:0]), (np.zeros(3, dt), -np.zeros(3, dt))]
    pairs += [(np.arange(6), np.arange(6)[::-1].copy()), (np.ones(4, bool), np.zeros(4, bool))]
    return pairs


def test_total_numbers_are_diffs_short_form():
    """``_total`` (the loop's direct call of the native pass for a total difference) gives
    ``_diff(t, r, full=False)``'s n_diff and max_ulp on ``_diff_pairs``; and without the
    extension (``_diff`` itself)."""
    from tapescope.core import native

    entry = native.float_diff_entry()
    for t, r in _diff_pairs():
        d = judge._diff(t, r, full=False)
        want = (d["n_diff"], d["max_ulp"])
        assert judge._total(t, r, *(entry or (None, {}))) == want, (t.dtype, t.shape)
        assert judge._total(t, r, None, {}) == want


def test_full_numbers_are_diffs():
    """``_full`` (the loop's direct call of the native pass for an introduced output) gives
    ``_diff(t, r)``'s every number on ``_diff_pairs`` (a NaN's pair: ``compare_arrays``'s
    policy; the same bits: ``_same``'s); and without the extension (``_diff`` itself)."""
    from tapescope.core import native

    entry = native.float_diff_entry()
    for t, r in _diff_pairs():
        want = judge._diff(t, r)
        assert judge._full(t, r, *(entry or (None, {}))) == want, (t.dtype, t.shape)
        assert judge._full(t, r, None, {}) == want


def test_compare_out_gives_the_bytes_test_and_diffs_numbers():
    """``_compare_out`` (the loop's one native pass per output, without the bytes test) gives
    what the loop's bytes test, ``_diff(g, r)`` and ``_diff(t, r, full=False)`` give, on
    ``_diff_pairs`` and pairs over ``_SAME_BYTES_MAX`` (the same bits, one ulp off), with
    ``t`` the output itself, the recorded one, or another; the same without the extension.
    Planted: n_diff 0 of a NaN's pair taken as the same bits, a "nan" answer's numbers not
    ``compare_arrays``'s, or a total's numbers taken from the output's, fails it."""
    from tapescope.core import native

    def used(got):  # (di is read only where d_n: an introduced output's)
        return (got[0] if got[2] else None,) + got[1:]

    def before(g, r, t):  # the loop's numbers as they were (the bytes test, then _diff)
        if g is r or (r.nbytes <= judge._SAME_BYTES_MAX and g.tobytes() == r.tobytes()):
            di, n, d_n, d_ulp = None, r.size, 0, 0
        else:
            di = judge._diff(g, r)
            n, d_n, d_ulp = di["n"], di["n_diff"], di["max_ulp"]
        if t is g:
            return di, n, d_n, d_ulp, d_n, d_ulp
        d = judge._diff(t, r, full=False)
        return di, n, d_n, d_ulp, d["n_diff"], d["max_ulp"]

    big = np.random.default_rng(3).standard_normal(judge._SAME_BYTES_MAX // 4 + 5)
    big = big.astype(np.float32)
    off = big.copy()
    off[-2] = np.nextafter(off[-2], np.float32(np.inf))
    pairs = _diff_pairs() + [(big, big.copy()), (off, big), (big[::-1], off[::-1])]
    entry = native.float_diff_entry()
    n_diff = 0
    for g, r in pairs:
        other = [x for pair in pairs for x in pair
                 if x.dtype == r.dtype and x.shape == r.shape and x is not g and x is not r]
        for t in (g, r, r.copy(), *other[:3]):
            want = used(before(g, r, t))
            n_diff += bool(want[2]) + bool(want[4])
            for fd in (entry or (None, {}), (None, {})):
                assert used(judge._compare_out(g, r, t, *fd)) == want, (g.dtype, g.shape)
        assert judge._compare_out(r, r, r, *(entry or (None, {}))) == before(r, r, r)
    assert n_diff > 20  # (differences met, not only the same bits)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_foreach_mul_by_one_operand_gives_each_tensors_product(dt):
    """``_foreach_mul(_)`` by a 0-d tensor or a Python number in one multiply over the list
    (``aten_ref._scaled``) gives each tensor's own ``mul``: bits, dtype, shape (NaN payloads,
    inf, -0.0, denormals, empty, 0-d and transposed tensors; a NaN or an int operand), no
    output sharing an argument's memory; other lists keep the loop. Planted: the operand
    rounded after the product, or the outputs' split off by one, fails it."""
    rng = np.random.default_rng(12)
    nan_payload = np.array([0x7FC00123 if dt == np.float32 else 0x7FF8000000000123],
                           np.uint32 if dt == np.float32 else np.uint64).view(dt)[0]
    for trial in range(60):
        xs = _lists(rng, dt)
        if trial % 3 == 0:
            xs[0] = np.full((2, 2), nan_payload, dt)
        for s in (np.asarray(rng.standard_normal(), dt), np.asarray(np.nan, dt), 0.3, 3,
                  np.asarray(-0.0, dt)):
            ovl = "Tensor" if isinstance(s, np.ndarray) else "Scalar"
            want = [aten_ref.reference(f"aten.mul.{ovl}", [x, s], {})[0] for x in xs]
            for op in (f"aten._foreach_mul_.{ovl}", f"aten._foreach_mul.{ovl}"):
                got = aten_ref.reference(op, [xs, s], {})
                assert [(g.dtype, g.shape, g.tobytes()) for g in got] == [
                    (w.dtype, w.shape, w.tobytes()) for w in want], (op, s)
                assert not any(np.shares_memory(g, x) for g in got for x in xs)
    x = [np.ones(3, dt), np.ones(2, dt)]
    assert aten_ref._scaled(x, np.ones(1, dt)) is None  # (a 1-d operand: broadcast per tensor)
    assert aten_ref._scaled(x, True) is None  # (a bool: the loop's own type rule)
    other = np.float64 if dt == np.float32 else np.float32
    assert aten_ref._scaled(x, np.asarray(2.0, other)) is None  # (an operand of another dtype)
    assert aten_ref._scaled([x[0], x[1].astype(np.float16)], 2.0) is None
    assert aten_ref._scaled([np.ones(2, np.float16)], 2.0) is None
    assert aten_ref._scaled(x, np.asarray(np.nan, dt)) is None  # (NaN * NaN: the loop's payload)


def test_lerp_with_one_weight_picks_the_side_numpy_picked():
    """``lerp``'s one-weight test in Python floats (|w| < 0.5) picks the side ``np.abs(w) <
    0.5`` picked, so the same bits: weights at and around 0.5, NaN, infinities, -0.0 and a
    denormal, in float32 and float64, 0-d arrays and numpy scalars."""
    from tapescope.core.capture.aten_ref_optim import lerp

    def before(a, b, w):  # the form as it was
        one = a.dtype.type(1)
        small = np.abs(w) < a.dtype.type(0.5)
        return a + (w * (b - a)) if small else b - ((b - a) * (one - w))

    rng = np.random.default_rng(8)
    for dt in (np.float32, np.float64):
        a, b = rng.standard_normal((3, 5)).astype(dt), rng.standard_normal((3, 5)).astype(dt)
        half = dt(0.5)
        for w in (half, np.nextafter(half, dt(0)), np.nextafter(half, dt(1)), -half, dt(0.1),
                  dt(0.9), dt(np.nan), dt(np.inf), dt(-np.inf), dt(-0.0), dt(1e-45), dt(1)):
            for ww in (w, np.asarray(w)):
                with np.errstate(all="ignore"):
                    assert lerp(a, b, ww).tobytes() == before(a, b, ww).tobytes(), (dt, w)


def test_decode_chained_is_decode_with_the_chains_values_first():
    """``_decode_chained`` (the loop's second decode, on the chain's values) gives
    ``_decode(a, get)`` with ``get`` the chain's value, else the recorded one: values in and
    out of the chain, at any depth, beside plain entries and other tagged objects (a value
    inside ``{"c": ...}`` too); a value over the budget is ``_Missing``."""
    arrays = [np.arange(3.0), np.ones(2, np.float32), None, np.zeros(1)]
    chain = {1: np.full(2, 7, np.float32), 3: np.full(1, 5.0)}

    def get(v):
        x = chain.get(v)
        return arrays[v] if x is None else x
    a = [{"T": 0}, {"T": 1}, [1, [{"T": 3}, "s", None], True], 2.5, {"f": "nan"},
         {"c": [1.0, {"f": "inf"}]}, [], {"T": 3}]
    got, want = judge._decode_chained(a, arrays, chain), judge._decode(a, get)
    assert repr(got) == repr(want)
    assert got[1] is chain[1] and got[0] is arrays[0] and got[2][1][0] is chain[3]
    with pytest.raises(judge._Missing):
        judge._decode_chained([[{"T": 2}]], arrays, chain)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_judge_pauses_the_collector_and_restores_it(enabled):
    """The judge runs with the cyclic collector off (its report's entries made full collections
    rescan the whole process, core/gcpause.py) and leaves it as it found it, also after a
    form's failure. Planted: the pause left out, or the state not restored, fails it."""
    import gc

    x = np.ones(3, np.float32)
    cap = _capture([("aten.neg.default", [{"T": 0}], {}, [-x])], [x])
    seen: list[bool] = []

    def override(i, op, a, k):
        seen.append(gc.isenabled())
        return [-a[0]]

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        rep = judge.judge(cap, override=override)
        assert gc.isenabled() is enabled
        assert seen == [False] and rep["counts"]["exact"] == 1

        def fail(i, op, a, k):
            seen.append(gc.isenabled())
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            judge.judge(cap, override=fail)
        assert gc.isenabled() is enabled and seen == [False, False]
    finally:
        (gc.enable if was else gc.disable)()
