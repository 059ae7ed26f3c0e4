"""Issue 44 item 4: a capture's explain draws its variants from core.explain's table (one table,
not a second), so PyTorch's own kernels explain captured aten ops as they explain tape nodes."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture.explain import _MEMORY_ORDERS, _variants, explain_op
from tapescope.core.explain import UPDATE_VARIANTS, VARIANTS, variants_for
from tapescope.core.parity import compare_arrays


def _diff(ref, got):
    d = compare_arrays(ref, got)
    return {"n_diff": d.n_diff, "max_ulp": d.max_ulp, "n_signed_zero": d.n_signed_zero}


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_products_and_sums_are_the_tables_own(dt):
    mm = [v.label for v in variants_for("matmul", dt) if v.prim == "mm"]
    blas = "blocked product (BLAS np.matmul)"
    mm = [blas] + [lab for lab in mm if lab != blas]  # the cheapest first, then the table's
    # float32: then MKL's small-product kernel on an AMD CPU (two layouts, one and two
    # threads: orders that hang on the operands' memory, which the file does not hold), then
    # its threads' grids (two layouts, the grid fitted to the recorded bits)
    # float64: then MKL's dgemm on an AMD CPU (session 48)
    small, grid = (4, 2) if dt == np.float32 else (0, 0)
    dgemm = 1 if dt == np.float64 else 0
    got = [v[1] for v in _variants("aten.mm.default", dt)]
    assert got[:len(mm)] == mm and len(got) == len(mm) + small + grid + dgemm
    assert all(lab.startswith("MKL's dgemm on an AMD CPU") for lab in got[len(got) - dgemm:])
    assert all(lab.startswith("MKL's small-product kernel on an AMD CPU")
               for lab in got[len(mm):len(mm) + small])
    assert all(lab.startswith("MKL's products on several threads on an AMD CPU")
               for lab in got[len(mm) + small:len(got) - dgemm])
    # addmm: the table's, then MKL's own addmm (the bias as the output its k panels are added
    # to; Intel's panels, its 384-term panels, k in halves on two threads, then
    # AMD's) and its one-term addmm (the bias as the accumulator): orders of the bias, not of
    # the product, so not table primitives
    addmm = [v[1] for v in _variants("aten.addmm.default", dt)]
    assert addmm[:-5] == got and addmm[-5].startswith("MKL's sgemm as addmm calls it (")
    assert addmm[-4].startswith("MKL's sgemm as addmm calls it in 384-term panels")
    assert addmm[-3].startswith("MKL's sgemm as addmm calls it on two threads")
    assert addmm[-2].startswith("MKL's sgemm as addmm calls it on an AMD CPU")
    assert addmm[-1].startswith("MKL's sgemm over one term")
    sums = [v.label for v in variants_for("sum", dt) if v.prim == "sum"]
    # sum over dimensions: first ATen's sum over the layout the file recorded (ops.strided:
    # only where it holds one), then the table's, then ATen's sum in the memory orders a view
    # may have had (a file made before ops.strided holds no strides), first with the kept
    # dimensions one block, then (orders of 3 or more dimensions) the reduced ones between
    # them, and last ATen's sum on several threads (its outputs cut among them)
    got = [v[1] for v in _variants("aten.sum.dim_IntList", dt)]
    assert got[0].startswith("ATen's sum over its input as it lay in memory")
    got = got[1:]
    middle = [o for _, o in _MEMORY_ORDERS if len(o) > 2]
    assert got[:len(sums)] == sums
    assert len(got) == len(sums) + len(_MEMORY_ORDERS) + len(middle) + 1
    assert all(lab.startswith("ATen's sum of a ") for lab in got[len(sums):-1])
    assert all("between kept ones" in lab for lab in got[len(sums) + len(_MEMORY_ORDERS):-1])
    assert got[-1].startswith("ATen's sum over leading dimensions on several threads")
    assert [v[1] for v in _variants("aten.sum.default", dt)][1:] == sums
    libm = [v.label for v in VARIANTS if v.prim == "M"]
    # tanh: the table's math namespaces, then PyTorch's own (MKL VML's: the table's aten:tanh)
    vml = [v.label for v in VARIANTS if v.prim == "aten:tanh"]
    assert len(vml) == 1
    assert [v[1] for v in _variants("aten.tanh.default", dt)] == libm + vml
    assert [v[1] for v in _variants("aten.sqrt.default", dt)] == \
        [lab for _, lab, _ in UPDATE_VARIANTS]


def test_a_new_table_variant_reaches_captures(monkeypatch):
    """Add a product variant to the table: the capture's mm tries it (no copy to update)."""
    import tapescope.core.explain as E

    extra = E.Variant("reassociation", "a planted product", "mm", lambda a, b: a @ b)
    monkeypatch.setattr(E, "VARIANTS", E.VARIANTS[:-1] + (extra, E.VARIANTS[-1]))
    assert "a planted product" in [v[1] for v in _variants("aten.mm.default")]


def test_captured_torch_ops_are_explained_by_torchs_kernels():
    torch = pytest.importorskip("torch")
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("ATen's AVX-512 kernels are what core.explain_aten writes out")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 24)) * 3
    got = torch.softmax(torch.from_numpy(x), -1).numpy()
    ref = np.exp(x - x.max(-1, keepdims=True))
    ref = ref / ref.sum(-1, keepdims=True)
    c = explain_op("aten._softmax.default", [x, -1, False], {}, got, _diff(ref, got))
    assert c["cause"] == "libm" and "softmax" in c["variant"], c
    v = (rng.random(4096) * 10).astype(np.float32)
    got = torch.sqrt(torch.from_numpy(v)).numpy()
    c = explain_op("aten.sqrt.default", [v], {}, got, _diff(np.sqrt(v), got))
    assert c["cause"] == "libm" and "MKL VML" in c["variant"], c
    a = (rng.standard_normal((8, 40)) * 4).astype(np.float32)
    got = torch.nn.functional.silu(torch.from_numpy(a)).numpy()
    c = explain_op("aten.silu.default", [a], {}, got, _diff(a / (1 + np.exp(-a)), got))
    assert c["cause"] == "libm", c
    s = rng.standard_normal((24, 16))
    got = torch.sum(torch.from_numpy(s), 0).numpy()
    c = explain_op("aten.sum.dim_IntList", [s, [0]], {}, got, _diff(s.sum(0), got))
    assert c["cause"] == "reassociation", c


def test_a_capture_closest_is_named_only_when_strictly_closer():
    """Item 2 for captures: a product no variant reproduces, whose best variant is as far as
    the reference, says unknown alone."""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    ref = a @ b
    got = ref.copy()
    got[0, 0] = np.nextafter(got[0, 0], np.inf) * 1.5  # far off: no order makes it
    c = explain_op("aten.mm.default", [a, b], {}, got, _diff(ref, got))
    assert c["cause"] == "unknown" and c["closest"] is None, c
