"""MKL's dot-product kernels as they run on an AMD CPU (core/explain_aten.py ``_sgemv_amd``,
``sdot_amd``): MKL picks its kernels by vendor, and on an AMD EPYC it adds rounded products
where an Intel Xeon fma's them, in other lanes. Each written-out kernel gives torch's own bits
over random shapes, and ``explain_op`` names it for ``mv`` / ``dot`` / ``vdot`` (and not for a
result one ulp away). Measured where torch's products are MKL's on an AMD CPU: skipped, with
the reason, elsewhere. A capture records the CPU's vendor, and the judge tries that vendor's
kernels first (a dot is one number: two vendors' orders may agree on it)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tapescope.core.capture.aten_ref import reference
from tapescope.core.capture.explain import explain_op
from tapescope.core.explain_aten import (
    _sgemv_amd,
    mkl_amd,
    mkl_gemv_amd,
    mkl_grid_amd,
    mkl_grid_amd_fit,
    mkl_small_amd,
    sdot_amd,
)
from tests.helpers.mkl import need_amd_mkl

torch = pytest.importorskip("torch")

need_amd_mkl = need_amd_mkl()


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch.Generator().manual_seed(11)
    torch.set_num_threads(before)


@need_amd_mkl
def test_the_dot_product_kernel_is_torchs_mv_bit_for_bit(one_thread):
    """Every row kind: groups of four (heads of 1-4 terms), the pairs' 8- and 4-lane rows and
    their tails; ``mv`` and a product with one output row (``mkl_gemv_amd``)."""
    g = one_thread
    shapes = [(m, n) for m in (1, 2, 3, 4, 5, 6, 7, 9) for n in (1, 3, 4, 5, 8, 11, 12, 13, 21,
                                                                   29, 64, 333)]
    for m, n in shapes:
        a, v = torch.randn(m, n, generator=g), torch.randn(n, generator=g)
        want = torch.mv(a, v).numpy()
        assert np.array_equal(_sgemv_amd(a.numpy(), v.numpy()), want), (m, n)
        row = torch.mm(v[None, :], a.t()).numpy()
        assert np.array_equal(mkl_gemv_amd(v.numpy()[None, :], a.t().numpy()), row), (m, n)


@need_amd_mkl
def test_sdot_is_torchs_dot_and_vdot_bit_for_bit(one_thread):
    g = one_thread
    for n in (1, 3, 4, 5, 8, 12, 15, 16, 17, 27, 31, 40, 100, 1000, 1031):
        a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
        got = sdot_amd(a.numpy(), b.numpy())
        assert got == np.float32(torch.dot(a, b).item()), n
        assert got == np.float32(torch.vdot(a, b).item()), n


def _cause(op, args, rec, vendor="AuthenticAMD"):
    plain = reference(op, args, {})[0]
    d = {"n_diff": max(1, int(np.sum(plain != rec))), "max_ulp": 1, "n_signed_zero": 0,
         "n_nan": 0}
    return explain_op(op, args, {}, rec, d, 0, vendor)


@need_amd_mkl
def test_explain_names_the_amd_kernels_and_not_one_ulp_off(one_thread):
    g = one_thread
    named = 0
    for m, n in ((16, 33), (13, 100), (33, 257), (18, 1000)):
        a, v = torch.randn(m, n, generator=g), torch.randn(n, generator=g)
        args, rec = [a.numpy(), v.numpy()], torch.mv(a, v).numpy()
        if np.array_equal(reference("aten.mv.default", args, {})[0], rec):
            continue
        got = _cause("aten.mv.default", args, rec)
        assert got["cause"] == "reassociation" and "on an AMD CPU" in got["variant"], got
        off = rec.copy()
        off[np.argmax(np.abs(off))] = np.nextafter(off[np.argmax(np.abs(off))], np.inf,
                                                   dtype=np.float32)
        assert _cause("aten.mv.default", args, off)["cause"] == "unknown"
        named += 1
    dots = 0
    for n in (40, 100, 333, 1000):
        a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
        for op, fn in (("aten.dot.default", torch.dot), ("aten.vdot.default", torch.vdot)):
            args, rec = [a.numpy(), b.numpy()], fn(a, b).numpy()
            if np.array_equal(reference(op, args, {})[0], rec):
                continue
            got = _cause(op, args, rec)
            assert got["cause"] == "reassociation" and "sdot on an AMD CPU" in got["variant"], \
                (op, n, got)
            dots += 1
    assert named >= 3 and dots >= 2, (named, dots)


def test_a_capture_records_the_cpu_and_the_judge_tries_its_vendors_kernels_first():
    from tapescope.app.capture.recorder import settings
    from tapescope.core.capture.explain import _by_vendor

    got = settings()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        text = ""
    if "vendor_id" in text:
        assert got["cpu_vendor"] in text and got["cpu_model"] in text
    cands = [("fma", "MKL's dot-product kernel for one output column", None),
             ("reassociation", "MKL's sdot on an AMD CPU: no FMA", None),
             ("fma", "acc = fma(a, b, acc)", None)]
    assert [c[1] for c in _by_vendor(cands, "AuthenticAMD")][0].endswith("no FMA")
    for other in ("GenuineIntel", None):
        assert [c[1] for c in _by_vendor(cands, other)] == [cands[0][1], cands[2][1],
                                                            cands[1][1]]


@need_amd_mkl
def test_a_product_past_192_terms_is_named_mkls_amd_panels(one_thread):
    """A captured ``mm`` past 192 terms (a 4x MLP's backward: ``dy @ W`` over 512, ``dyᵀ @ x``
    over 256, a transposed view) is MKL's AMD panels (``mkl_sgemm_amd``), named for a capture
    made here; one ulp off unknown."""
    g = one_thread
    dy, w, x = (torch.randn(256, 512, generator=g), torch.randn(512, 128, generator=g),
                torch.randn(256, 128, generator=g))
    for a, b in ((dy, w), (dy.t(), x)):
        args, rec = [a.numpy(), b.numpy()], torch.mm(a, b).numpy()
        got = _cause("aten.mm.default", args, rec)
        assert got["cause"] == "fma" and "sgemm on an AMD CPU" in got["variant"], got
        off = rec.copy()
        off.flat[np.argmax(np.abs(off))] = np.nextafter(off.flat[np.argmax(np.abs(off))],
                                                        np.inf, dtype=np.float32)
        assert _cause("aten.mm.default", args, off)["cause"] == "unknown"


# MKL's small-product kernel (core.explain_aten.mkl_small_amd): a classifier's few columns, a
# batch of 2-3 rows, and at two threads the last rows of a product split off by themselves

def _weight_view(g, n, k):
    return torch.randn(n, k, generator=g).t()  # (k, n): nn.Linear's weight as addmm takes it


SMALL_SHAPES = [(m, k, n) for m, n in ((16, 10), (64, 10), (33, 7), (9, 11), (5, 2), (12, 3),
                                       (40, 5), (2, 24), (3, 100), (2, 13), (3, 4))
                for k in (1, 3, 13, 16, 37, 200, 517)]


@need_amd_mkl
def test_the_small_product_kernel_is_torchs_bit_for_bit(one_thread):
    """Both layouts over every row's 16-byte boundary (k not a multiple of 4), the 4- and
    8-lane columns, the blocks' tails, products past 192 terms; a weight's gradient takes its
    left operand as a transposed view (``dyᵀ @ x``)."""
    g = one_thread
    for m, k, n in SMALL_SHAPES:
        a = torch.randn(m, k, generator=g)
        w = _weight_view(g, n, k)
        assert np.array_equal(mkl_small_amd(a.numpy(), np.ascontiguousarray(w.numpy())),
                              torch.mm(a, w).numpy()), (m, k, n)
        b = torch.randn(k, n, generator=g)
        for left in (a, torch.randn(k, m, generator=g).t()):
            assert np.array_equal(mkl_small_amd(np.ascontiguousarray(left.numpy()), b.numpy(),
                                                by_rows=True),
                                  torch.mm(left, b).numpy()), (m, k, n, left.is_contiguous())


@need_amd_mkl
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two threads need two CPUs")
def test_two_threads_split_the_rows_and_the_last_part_is_the_small_kernel():
    """At two threads MKL cuts 5-7 rows after 4 and 9-11 after 8: the last 1-3 rows by 12 or
    more columns are the small kernel's, the rest sgemm's fma chains (a classifier's weight
    gradient ``dyᵀ @ x`` with 10 classes)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(5)
        split = 0
        for m, k, n in ((10, 16, 24), (10, 64, 64), (5, 138, 49), (7, 40, 30), (11, 300, 20),
                        (9, 33, 17)):
            for by_rows in (False, True):
                a = torch.randn(m, k, generator=g)
                b = torch.randn(k, n, generator=g) if by_rows else _weight_view(g, n, k)
                want = torch.mm(a, b).numpy()
                got = mkl_small_amd(a.numpy(), np.ascontiguousarray(b.numpy()), by_rows, 2)
                assert np.array_equal(got, want), (m, k, n, by_rows)
                torch.set_num_threads(1)
                split += not np.array_equal(torch.mm(a, b).numpy(), want)
                torch.set_num_threads(2)
        assert split >= 8  # (the split shows: one thread's bits differ)
        # a 10-class classifier's weight gradient dyᵀ @ x, as a capture made here holds it
        dy, x = torch.randn(16, 10, generator=g), torch.randn(16, 64, generator=g)
        args, rec = [dy.t().numpy(), x.numpy()], torch.mm(dy.t(), x).numpy()
        got = _cause("aten.mm.default", args, rec)
        assert "small-product kernel" in got["variant"] and "two threads" in got["variant"], got
        off = rec.copy()
        off.flat[-1] = np.nextafter(off.flat[-1], np.inf, dtype=np.float32)  # (a split row)
        assert _cause("aten.mm.default", args, off)["cause"] == "unknown"
    finally:
        torch.set_num_threads(before)


@need_amd_mkl
def test_explain_names_the_small_kernel_for_a_classifier_and_not_one_ulp_off(one_thread):
    """``nn.Linear(64, 10)``: the forward's ``addmm`` (bias + the product, alpha 3 too) and the
    input gradient's ``mm`` (``dy @ W``), named for a capture made here; one ulp off
    unknown."""
    g = one_thread
    x, w, bias = (torch.randn(16, 64, generator=g), torch.randn(10, 64, generator=g),
                  torch.randn(10, generator=g))
    dy = torch.randn(16, 10, generator=g)
    cases = [("aten.addmm.default", [bias.numpy(), x.numpy(), w.t().numpy()], {},
              torch.addmm(bias, x, w.t()).numpy()),
             ("aten.addmm.default", [bias.numpy(), x.numpy(), w.t().numpy()], {"alpha": 3.0},
              torch.addmm(bias, x, w.t(), alpha=3.0).numpy()),
             ("aten.mm.default", [dy.numpy(), w.numpy()[:, :11]], {},
              torch.mm(dy, w[:, :11]).numpy())]
    for op, args, kw, rec in cases:
        plain = reference(op, args, kw)[0]
        d = {"n_diff": max(1, int(np.sum(plain != rec))), "max_ulp": 1, "n_signed_zero": 0,
             "n_nan": 0}
        got = explain_op(op, args, kw, rec, d, 0, "AuthenticAMD")
        assert got["cause"] == "reassociation" and "small-product kernel on an AMD CPU" in \
            got["variant"], (op, kw, got)
        off = rec.copy()
        off.flat[np.argmax(np.abs(off))] = np.nextafter(off.flat[np.argmax(np.abs(off))],
                                                        np.inf, dtype=np.float32)
        assert explain_op(op, args, kw, off, d, 0, "AuthenticAMD")["cause"] == "unknown"



@need_amd_mkl
def test_an_addmm_by_rows_is_named_with_its_bias_seeding_the_chains(one_thread):
    """``addmm(bias, x, B)`` with ``B`` laid out by rows (not ``nn.Linear``'s transposed
    weight): MKL's small kernel starts each output's chain from the bias, it does not add the
    bias after (a few rows, or at most 11 columns); explain names it, one ulp off unknown."""
    g = one_thread
    named = 0
    for m, k, n in ((2, 37, 40), (3, 100, 24), (16, 50, 10), (33, 20, 7), (5, 9, 11)):
        x, b, bias = (torch.randn(m, k, generator=g), torch.randn(k, n, generator=g),
                      torch.randn(n, generator=g))
        args, rec = [bias.numpy(), x.numpy(), b.numpy()], torch.addmm(bias, x, b).numpy()
        got = _cause("aten.addmm.default", args, rec)
        assert got["cause"] == "reassociation" and "small-product kernel" in got["variant"] \
            and "by rows" in got["variant"], (m, k, n, got)
        named += 1
        off = rec.copy()
        off.flat[0] = np.nextafter(off.flat[0], np.inf, dtype=np.float32)
        assert _cause("aten.addmm.default", args, off)["cause"] == "unknown", (m, k, n)
    assert named == 5

def _tree_sizes(run, k: int) -> dict:
    """FPRev (Xie et al., 2024): with one term 2^40, another -2^40 and the rest ones, the sum
    counts the terms outside the pair's smallest subtree: {(i, j): its size}."""
    big = np.float32(2.0 ** 40)
    out = {}
    for i in range(k):
        for j in range(i + 1, k):
            x = np.ones(k, np.float32)
            x[i], x[j] = big, -big
            out[i, j] = k - int(run(x))
    return out


def test_the_small_kernels_orders_are_the_documented_trees():
    """On any CPU: the written-out orders themselves, as FPRev reads them -- a's row 1 of 13
    terms (three products before its 16-byte boundary, two 4-lane vectors, two after); an
    8-lane column; and a by-rows output before its row's boundary (8-term blocks halved)."""
    def lanes(col_of_10):  # out[1, col] of a (2, 13) @ (13, 10) with b a transposed view
        def run(x):
            a = np.zeros((2, 13), np.float32)
            a[1] = x
            b = np.zeros((13, 10), np.float32)
            b[:, col_of_10] = 1
            return mkl_small_amd(a, b)[1, col_of_10]
        return run

    t4 = _tree_sizes(lanes(0), 13)
    assert t4[0, 1] == 2 and t4[0, 2] == 3  # the three head products in order ...
    assert t4[3, 7] == 5  # ... seed lane 0 (3, 7): the head with both
    assert t4[4, 8] == 2 and t4[4, 6] == 4 and t4[3, 5] == 7  # lanes, then (l0 + l2) ...
    assert t4[3, 4] == 11 and t4[3, 11] == 12 and t4[0, 12] == 13  # ... + (l1 + l3), tail
    t8 = _tree_sizes(lanes(9), 13)  # the last n % 4 columns: 8 lanes over one block (3-10)
    assert t8[3, 7] == 5 and t8[4, 8] == 2 and t8[3, 5] == 7 and t8[3, 4] == 11
    assert t8[0, 3] == 4 and t8[3, 11] == 12

    def rows(x):  # out[1, 0] of a (2, 16) @ (16, 10) by rows: row 1 starts 2 columns short
        a = np.zeros((2, 16), np.float32)
        a[1] = x
        b = np.ones((16, 10), np.float32)
        return mkl_small_amd(a, b, by_rows=True)[1, 0]

    tb = _tree_sizes(rows, 16)
    assert tb[0, 1] == 2 and tb[0, 3] == 4 and tb[4, 7] == 4 and tb[0, 4] == 8
    assert tb[0, 8] == 9 and tb[11, 12] == 16 and tb[12, 15] == 4
    flat = _tree_sizes(lambda x: mkl_small_amd(np.stack([x, x]), np.ones((16, 10), np.float32),
                                               by_rows=True)[0, 0], 16)
    assert all(flat[0, j] == j + 1 for j in range(1, 16))  # row 0: one chain in order


def test_the_small_kernel_refuses_what_it_does_not_run():
    f = np.ones((4, 3), np.float32)
    for a, b, kw in ((np.ones((4, 3)), np.ones((3, 12)), {}),  # float64
                     (f, np.ones((3, 12), np.float32), {}),  # sgemm's: 4 rows, 12 columns
                     (f[:1], np.ones((3, 5), np.float32), {}),  # one row: the row kernel
                     (f, np.ones((3, 5), np.float32), {"threads": 3}),
                     (f, np.ones((3, 5), np.float32), {"threads": 2}),  # no part of its own
                     (f, np.ones((2, 5), np.float32), {})):  # shapes that do not meet
        with pytest.raises(ValueError):
            mkl_small_amd(a, b, **kw)


@need_amd_mkl
def test_the_small_kernel_adds_onto_c_as_addmm_does(one_thread):
    """beta = 1 (the flash kernels' running outputs): against a transposed view ``c + alpha *
    (a @ b)``; by rows ``alpha * a`` first and ``c`` each chain's start, the columns before a
    row's 16-byte boundary included."""
    g = one_thread
    cases = (((16, 37, 10), 1.0), ((3, 100, 40), 0.35), ((33, 64, 8), 2.0), ((2, 9, 13), 0.35),
             ((24, 200, 7), 0.125), ((5, 21, 3), 3.0))
    for (m, k, n), alpha in cases:
        for by_rows in (False, True):
            a = torch.randn(m, k, generator=g)
            b = torch.randn(k, n, generator=g) if by_rows else _weight_view(g, n, k)
            c = torch.randn(m, n, generator=g)
            want = torch.addmm(c, a, b, alpha=alpha).numpy()
            got = mkl_small_amd(a.numpy(), np.ascontiguousarray(b.numpy()), by_rows, 1,
                                c.numpy(), None if alpha == 1 else np.float32(alpha))
            assert np.array_equal(got, want), (m, k, n, by_rows, alpha)


@need_amd_mkl
def test_views_that_start_inside_their_array_take_their_rows_where_they_lie(one_thread):
    """The flash kernels hand MKL blocks of rows inside larger tensors: ``_mkl_mm`` reckons
    each row's 16-byte boundary from where the view lies in its array (a slice from row 1 of
    13-term rows starts 13 floats in), for ``a``'s rows against a transposed view and for the
    output's rows (``c``) by rows."""
    from tapescope.core.explain_aten import _mkl_mm, mkl_amd

    g = one_thread
    base = torch.randn(7, 13, generator=g)
    w = torch.randn(10, 13, generator=g)
    a = base[1:]
    with mkl_amd():
        got = _mkl_mm(base.numpy()[1:], w.numpy().T)
    assert np.array_equal(got, torch.mm(a, w.t()).numpy())
    cbase = torch.randn(7, 10, generator=g)
    x, b = torch.randn(6, 20, generator=g), torch.randn(20, 10, generator=g)
    inplace = cbase.clone()
    inplace[1:].addmm_(x, b)  # (MKL adds onto the rows where they lie: 10 floats in)
    with mkl_amd():
        got = _mkl_mm(x.numpy(), b.numpy(), cbase.numpy()[1:])
    assert np.array_equal(got, inplace[1:].numpy())
    # addmm copies c to a fresh output first: rows from an aligned start, and that differs
    fresh = torch.addmm(cbase[1:], x, b).numpy()
    assert np.array_equal(mkl_small_amd(x.numpy(), b.numpy(), True, 1,
                                        np.ascontiguousarray(cbase[1:].numpy())), fresh)
    assert not np.array_equal(fresh, got)


def _at_threads(n: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn().numpy()
    finally:
        torch.set_num_threads(before)


@need_amd_mkl
def test_several_threads_cut_the_output_in_a_grid_of_one_thread_products():
    """At 3-32 threads (a laptop's or a server's cores) MKL cuts a product's output in a
    grid -- rows in multiples of 4, columns of 16 -- and a last part of ``m % 4`` rows or
    ``n % 16`` columns is the small kernel's (by rows, every part's first columns before the
    output row's boundary): an MLP's ``addmm`` of 24 outputs, an LSTM's vocabulary of 20,
    the weight gradient of a 10-class classifier. ``mkl_grid_amd_fit`` finds a grid giving
    torch's bits wherever the threads changed them, and that grid, run on its own, gives them
    again; explain names it, and one ulp off is unknown."""
    g = torch.Generator().manual_seed(21)
    cases = [(16, 37, 24, "t"), (32, 12, 20, "t"), (24, 16, 37, "at"), (10, 16, 64, "at"),
             (2, 277, 139, "r"), (7, 38, 106, "r"), (26, 146, 79, "at"), (11, 132, 210, "at"),
             (17, 37, 100, "t"), (5, 60, 193, "t"), (16, 37, 257, "t"), (13, 20, 45, "r"),
             (16, 30, 43, "t"), (12, 50, 27, "at"),  # (a last part of 11 columns: small)
             (1024, 64, 20, "t"), (515, 16, 37, "at")]  # (many tokens, a vocabulary of 20)
    fitted = grid_named = 0
    for m, k, n, lay in cases:
        a = torch.randn(m, k, generator=g) if lay != "at" else \
            torch.randn(k, m, generator=g).t()
        b = _weight_view(g, n, k) if lay == "t" else torch.randn(k, n, generator=g)
        bias = torch.randn(n, generator=g)
        for threads in (3, 4, 8, 16, 32):
            alpha = 3.0 if threads == 16 else 1.0  # (addmm's alpha: times b, or a's rows)
            for addmm in (False, True):
                def run(a=a, b=b, bias=bias, addmm=addmm, alpha=alpha):
                    return torch.addmm(bias, a, b, alpha=alpha) if addmm else torch.mm(a, b)
                want, one = _at_threads(threads, run), _at_threads(1, run)
                if np.array_equal(want, one):
                    continue
                an, bn = a.numpy(), b.numpy()
                c, al = (bias.numpy(), np.float32(alpha) if alpha != 1 else None) if addmm \
                    else (None, None)
                got = mkl_grid_amd_fit(an, bn, lay != "t", want, c, al)
                assert got is not None, (m, k, n, lay, threads, addmm)
                fitted += 1
                y, h, w = got
                again = mkl_grid_amd(an, bn, lay != "t", h, w, c, al)
                assert np.array_equal(again, want), (m, k, n, lay, threads, h, w)
                if threads == 8 and lay != "r":  # (alpha 1)
                    op, args = (("aten.addmm.default", [bias.numpy(), an, bn]) if addmm else
                                ("aten.mm.default", [an, bn]))
                    named = _cause(op, args, want)["variant"]
                    if "two threads: the rows in two parts" in named:
                        continue  # (a cut two threads make too: that variant's bits)
                    assert named.startswith("MKL's products on several threads on an AMD "
                                            "CPU"), (m, k, n, named)
                    assert "parts of" in named.rsplit(":", 1)[1]
                    grid_named += 1
                    off = want.copy()
                    off.flat[-1] = np.nextafter(off.flat[-1], np.inf, dtype=np.float32)
                    assert _cause(op, args, off)["cause"] == "unknown", (m, k, n, lay)
    assert fitted >= 40 and grid_named >= 8  # (the threads changed these products' bits)


def test_a_grid_is_its_parts_one_thread_products():
    """On any CPU: ``mkl_grid_amd`` as the documented composition -- a grid with no small part
    is sgemm's chains whole; a last part of ``m % 4`` rows is the small kernel's rows where
    they lie, the rest sgemm's; by rows, a column part starting at 32 takes its own 8-term
    blocks before the row's boundary (one-thread small kernel on those columns, the output's
    starts); the grids tried cut differently; bad part sizes refused; and a fitted grid
    refuses bits no grid gives."""
    from tapescope.core.explain_aten import _chain_rows_amd, _grid_sizes, _sgemm, _small_block_amd

    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((14, 40), (40, 48)))
    with mkl_amd():
        wide = _sgemm(a, b)
    assert np.array_equal(mkl_grid_amd(a[:12], b, False, 4, 16), wide[:12])
    assert np.array_equal(mkl_grid_amd(a[:12], b, True, 8, 32), wide[:12])
    y = mkl_grid_amd(a, b, False, 12, 48)
    small = _small_block_amd(a, b, range(14), False, np.arange(14) * 40)  # (its rows 12-13)
    assert np.array_equal(y[:12], wide[:12]) and np.array_equal(y[12:], small[12:])
    a2, b2 = (rng.standard_normal(s).astype(np.float32) for s in ((3, 24), (24, 45)))
    y = mkl_grid_amd(a2, b2, True, 4, 32)
    for i in range(3):
        peel = (-(i * 45 + 32)) % 4
        part = _chain_rows_amd(a2[i:i + 1], b2[:, 32:], np.array([peel]))
        assert np.array_equal(y[i, 32:], part[0]), i
    assert not np.array_equal(y, mkl_small_amd(a2, b2, by_rows=True))  # (the cut shows)
    assert _grid_sizes(45, 16, 64) == [48, 32, 16] and _grid_sizes(14, 4, 2) == [16, 12, 8]
    for h, w in ((3, 16), (4, 8), (6, 16), (4, 24)):
        with pytest.raises(ValueError):
            mkl_grid_amd(a, b, False, h, w)
    big_a, big_b = np.ones((4096, 256), np.float32), np.ones((256, 300), np.float32)
    with pytest.raises(ValueError, match="budget"):  # (sgemm's chains in numpy: bounded)
        mkl_grid_amd_fit(big_a, big_b, True, np.zeros((4096, 300), np.float32))
    off = y.copy()
    off[0, 40] = np.nextafter(off[0, 40], np.inf, dtype=np.float32)
    assert mkl_grid_amd_fit(a2, b2, True, y) is not None
    assert mkl_grid_amd_fit(a2, b2, True, off) is None


@need_amd_mkl
def test_attentions_batched_products_are_the_small_kernel_per_batch():
    """nn.MultiheadAttention's math path (a key padding mask, dropout, weights returned):
    ``baddbmm(mask, q, kᵀ)`` over 48 batches of (10 x 8) @ (8 x 10), and its backward's
    ``bmm``s, each batch MKL's own small product (kᵀ a transposed view; the gradients by
    rows), at 2 threads; named, and one ulp off unknown (session 35: 4 unknown of 190 -> 0)."""
    g = torch.Generator().manual_seed(35)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        q, k = torch.randn(48, 10, 8, generator=g), torch.randn(48, 10, 8, generator=g)
        mask = torch.where(torch.rand(48, 1, 10, generator=g) < 0.3, -1e9, 0.0)
        gs = torch.randn(48, 10, 10, generator=g)
        v = torch.randn(48, 10, 10, generator=g)  # (rows of 10: each starts elsewhere in
        cases = [("aten.baddbmm.default", [mask, q, k.transpose(1, 2)]),  # a 16-byte line)
                 ("aten.bmm.default", [gs.transpose(1, 2).contiguous(), v]),
                 ("aten.bmm.default", [gs, v.transpose(1, 2)])]
        for op, xs in cases:
            rec = getattr(torch.ops.aten, op.split(".")[1]).default(*xs).numpy()
            args = [x.contiguous().numpy() for x in xs]
            plain = reference(op, args, {})[0]
            d = {"n_diff": int(np.sum(plain != rec)), "max_ulp": 1, "n_signed_zero": 0,
                 "n_nan": 0}
            assert d["n_diff"] > 0, op
            got = explain_op(op, args, {}, rec, d, 0, "AuthenticAMD")
            assert got["cause"] == "reassociation" and "each batch its own product" in \
                got["variant"], (op, got)
            off = rec.copy()
            i = np.argmax(np.abs(off))
            off.flat[i] = np.nextafter(off.flat[i], np.inf, dtype=np.float32)
            assert explain_op(op, args, {}, off, d, 0, "AuthenticAMD")["cause"] == "unknown"
    finally:
        torch.set_num_threads(before)


@need_amd_mkl
def test_the_small_kernels_accumulators_start_at_plus_zero(one_thread):
    """A row against a column of -0.0 (an attention's masked gradient rows): MKL's small
    kernel gives +0.0 in both layouts, as its accumulators start at +0.0; so does the
    written-out kernel (a chain from the first product kept -0.0)."""
    g = one_thread
    for kk in (3, 10, 20):
        a = torch.rand(6, kk, generator=g) + 0.1
        for b in (-torch.zeros(kk, 5), (-torch.zeros(5, kk)).t()):
            want = torch.mm(a, b).numpy()
            assert not np.signbit(want).any()
            for by_rows in (False, True):
                got = mkl_small_amd(a.numpy(), b.contiguous().numpy(), by_rows, 1)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (kk, by_rows)
