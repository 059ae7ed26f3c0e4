"""MKL's dot-product kernels as they run on an AMD CPU (core/explain_aten.py ``_sgemv_amd``,
``sdot_amd``): MKL picks its kernels by vendor, and on an AMD EPYC it adds rounded products
where an Intel Xeon fma's them, in other lanes. Each written-out kernel gives torch's own bits
over random shapes, and ``explain_op`` names it for ``mv`` / ``dot`` / ``vdot`` (and not for a
result one ulp away). Measured where torch's products are MKL's on an AMD CPU: skipped, with
the reason, elsewhere. A capture records the CPU's vendor, and the judge tries that vendor's
kernels first (a dot is one number: two vendors' orders may agree on it)."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture.aten_ref import reference
from tapescope.core.capture.explain import explain_op
from tapescope.core.explain_aten import _sgemv_amd, mkl_gemv_amd, sdot_amd
from tests.helpers.mkl import mkl_vendor

torch = pytest.importorskip("torch")

need_amd_mkl = pytest.mark.skipif(
    mkl_vendor() != "AuthenticAMD",
    reason="MKL's AMD kernels give torch's bits only where torch runs MKL on an AMD CPU")


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
