"""bfloat16 products as PyTorch's CPU runs them under autocast (session 35): oneDNN's
``brg_matmul:avx512_core_bf16`` on a CPU with AVX-512 BF16 and no AMX (an AMD EPYC, Zen 4):
per output one float32 chain over k in pairs, the odd term added before the even
(``vdpbf16ps``), addmm's bias added to the sum, rounded to bfloat16 once; with AMX (an Intel
Xeon, session 41) ``tdpbf16ps``'s order: k in blocks of 32, each block's even and odd terms
two chains added together, the blocks in turn. ``--explain`` names it for torch's own bits
(mm, addmm, bmm; the operands as autograd lays them out; 1 and 2 threads) and says
``unknown`` one bfloat16 ulp away."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.explain import explain_op  # noqa: E402


def _flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f
                         if line.startswith("flags")), set())
    except OSError:
        return set()


need_vdpbf16 = pytest.mark.skipif(
    "avx512_bf16" not in _flags() or "amx_bf16" in _flags(),
    reason="oneDNN's vdpbf16ps kernel runs on a CPU with AVX-512 BF16 and no AMX (with AMX "
           "its tiles add otherwise; without BF16 it converts to float32)")

need_amx = pytest.mark.skipif(
    "amx_bf16" not in _flags(), reason="AMX's tdpbf16ps runs on a CPU with AMX (an Intel Xeon)")

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def threads():
    n = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(n)


def _np(t):
    return t.detach().contiguous().numpy() if t.dtype != torch.bfloat16 else \
        t.detach().contiguous().view(torch.int16).numpy().view(BF16)


def _one_ulp_off(rec):
    off = rec.copy()
    bits = off.reshape(-1).view(np.uint16)
    i = int(np.argmax(np.abs(rec.astype(np.float32)).reshape(-1)))
    bits[i] += 1
    return off


# (op, shapes of the operands, threads); the shapes of a BERT layer's products and their
# gradients (x @ Wᵀ, gᵀ @ x, g @ W), an odd k, a batch of attention scores
CASES = [
    ("aten.mm.default", ((192, 64), (64, 256)), 1),
    ("aten.mm.default", ((256, 192), (192, 64)), 2),
    ("aten.mm.default", ((96, 77), (77, 120)), 1),
    ("aten.addmm.default", ((256,), (192, 64), (64, 256)), 1),
    ("aten.addmm.default", ((64,), (192, 256), (256, 64)), 2),
    ("aten.bmm.default", ((32, 24, 16), (32, 16, 24)), 2),
]


@need_vdpbf16
@pytest.mark.parametrize("op, shapes, t", CASES)
def test_a_bfloat16_product_is_onednns_chain_of_pairs(op, shapes, t, threads):
    _named_here(op, shapes, t, threads, "vdpbf16ps", "AuthenticAMD")


@need_amx
@pytest.mark.parametrize("op, shapes, t", CASES)
def test_a_bfloat16_product_with_amx_is_tdpbf16ps_blocks(op, shapes, t, threads):
    _named_here(op, shapes, t, threads, "tdpbf16ps", "GenuineIntel")


def _named_here(op, shapes, t, threads, words, vendor, dt=torch.bfloat16, big=2.0 ** 14):
    """torch's product of ``dt`` (bfloat16 / float16) operands at ``t`` threads named by the
    variant saying ``words`` (the capture's CPU vendor ``vendor``), one ulp off ``unknown``."""
    threads(t)
    g = torch.Generator().manual_seed(sum(sum(s) for s in shapes) + t)
    xs = [torch.randn(*s, generator=g) for s in shapes]
    # the first term of each sum large (``big`` x), the last its negation: the chain carries
    # the large partial sum past the others, so its float32 roundings (which the order
    # decides) reach the small narrow result often enough to tell orders apart
    a, b = xs[-2], xs[-1]
    a[..., 0] *= big
    a[..., -1] = -a[..., 0]
    b[..., -1, :] = b[..., 0, :]
    xs = [x.to(dt) for x in xs]
    if op == "aten.mm.default" and shapes[0][0] > shapes[0][1]:  # (a gradient's transposed view)
        xs[0] = xs[0].t().contiguous().t()
    y = getattr(torch.ops.aten, op.split(".")[1]).default(*xs)
    args = [_np(x) for x in xs]
    rec = _np(y)
    plain = reference(op, args, {})[0]
    n = int(np.sum(plain.view(np.uint16) != rec.view(np.uint16)))
    assert n > 0, "torch equals the reference here (nothing to name)"
    d = {"n_diff": n, "max_ulp": 1, "n_signed_zero": 0, "n_nan": 0}
    got = explain_op(op, args, {}, rec, d, 0, vendor)
    assert got["cause"] == "reassociation" and words in got["variant"], got
    assert explain_op(op, args, {}, _one_ulp_off(rec), d, 0, vendor)["cause"] == "unknown"


def test_no_float32_mkl_kernel_is_offered_for_a_bfloat16_product():
    """MKL's float32 sgemm orders could round to a bfloat16 product's bits by chance (and, the
    last shape's hint first, were named for 2 of a BERT's 14): a bfloat16 product is AMX's or
    oneDNN's, first in the list (AMX's first, oneDNN's vdpbf16ps chain first for a capture
    made on an AMD CPU), and MKL's float32 kernels are not offered for it."""
    from tapescope.core.capture.explain import _by_vendor, _variants

    rng = np.random.default_rng(38)
    x = {n: rng.standard_normal(n).astype(BF16) for n in ((2, 6, 5), (6, 5), (5, 7), (7,))}
    for op, args in (("aten.mm.default", [x[6, 5], x[5, 7]]),
                     ("aten.addmm.default", [x[7,], x[6, 5], x[5, 7]]),
                     ("aten.bmm.default", [x[2, 6, 5], np.stack([x[5, 7]] * 2)])):
        vs = _variants(op, BF16)
        assert "tdpbf16ps" in vs[0][1] and "vdpbf16ps" in vs[1][1], (op, vs[0][1])
        assert "vdpbf16ps" in _by_vendor(vs, "AuthenticAMD")[0][1]
        assert "tdpbf16ps" in _by_vendor(vs, "GenuineIntel")[0][1]
        for v in vs:
            if v[1].startswith("MKL's"):  # (offered only where it refuses bfloat16 operands)
                with pytest.raises(ValueError):
                    v[2](args, {})
        assert [v[1] for v in _variants(op, np.float32) if v[1].startswith("MKL's")]


need_avx512_fp16 = pytest.mark.skipif(
    "avx512_fp16" not in _flags(),
    reason="PyTorch hands float16 products to oneDNN's AVX-512 FP16 matmul on a CPU with it")


@need_avx512_fp16
@pytest.mark.parametrize("op, shapes, t", [
    ("aten.mm.default", ((64, 700), (700, 48)), 1),
    ("aten.mm.default", ((32, 1024), (1024, 24)), 2),
    ("aten.addmm.default", ((40,), (100, 1500), (1500, 40)), 2),
    ("aten.bmm.default", ((2, 20, 600), (2, 600, 16)), 1)])
def test_a_float16_product_is_onednns_split_chain(op, shapes, t, threads):
    """fp16 autocast's products on a CPU with AVX-512 FP16 (session 41): oneDNN's float16
    matmul, the exact products in chains over k split at the largest power of two below it
    (512 at least), the parts added, addmm's bias added to the sum, rounded once: named for
    torch's bits (1 and 2 threads, 600 to 1,500 terms), one float16 ulp off ``unknown``. Up
    to 512 terms it is one chain in order: the reference's own bits (``CASES``: nothing
    departs, asserted)."""
    for op_, shapes_, t_ in CASES:
        threads(t_)
        xs_ = [torch.randn(*s) for s in shapes_]
        xs_[-2][..., 0] *= 2.0 ** 9
        xs_ = [x.half() for x in xs_]
        y_ = getattr(torch.ops.aten, op_.split(".")[1]).default(*xs_).numpy()
        assert np.array_equal(reference(op_, [x.numpy() for x in xs_], {})[0].view(np.uint16),
                              y_.view(np.uint16)), op_
    _named_here(op, shapes, t, threads, "oneDNN's float16 matmul", "GenuineIntel", torch.half,
                2.0 ** 9)
