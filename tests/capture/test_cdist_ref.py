"""``torch.cdist``'s product form, ``aten._euclidean_dist`` (what cdist runs for p = 2 past 25
rows: a VQ-VAE's codebook search, k-means, metric learning): a reference form (ATen's
expansion, each piece by the table's form) and its causes (session 38: `no reference` before);
and ``aten.linear`` recorded whole (autograd off) explained as its product."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture.aten_ref import NoReference, reference
from tapescope.core.capture.explain import explain_op

torch = pytest.importorskip("torch")

OP = "aten._euclidean_dist.default"


def _diff(plain: np.ndarray, rec: np.ndarray) -> dict:
    return {"n_diff": int(np.sum(plain != rec)), "max_ulp": 1, "n_signed_zero": 0, "n_nan": 0}


@pytest.mark.parametrize("s1, s2", [((64, 8), (32, 8)), ((2, 30, 5), (2, 40, 5)),
                                    ((26, 3), (1, 3))], ids=str)
def test_the_reference_is_the_expansion_and_the_kernel_is_named(s1, s2):
    """The reference is ATen's expansion ``sqrt(clamp_min([-2 x1, |x1|^2, 1] @ [x2, 1,
    |x2|^2]ᵀ, 0))`` in the table's order: torch's own distances to a few ulp, its shape and
    dtype; where torch's bits differ, ``--explain`` names them (the product's order, VML's
    square root, the dot-product kernel), and one ulp off them is unknown."""
    g = torch.Generator().manual_seed(sum(s1) + sum(s2))
    x1, x2 = torch.randn(*s1, generator=g), torch.randn(*s2, generator=g)
    got = torch.ops.aten._euclidean_dist(x1, x2).numpy()
    ref = reference(OP, [x1.numpy(), x2.numpy()], {})[0]
    assert ref.shape == got.shape and ref.dtype == got.dtype
    np.testing.assert_allclose(ref, torch.cdist(x1, x2).numpy(), rtol=2e-5, atol=2e-5)
    d = _diff(ref, got)
    if not d["n_diff"]:
        return
    args = [x1.numpy(), x2.numpy()]
    cause = explain_op(OP, args, {}, got, d)
    # (the cause is the variant's: VML's square root, the product's order, or MKL's
    # dot-product kernel's fma stages for one output column on an Intel CPU)
    assert cause["cause"] in ("libm", "reassociation", "fma") and "_euclidean_dist" in \
        cause["variant"], cause
    off = got.copy()
    off.flat[int(np.argmax(off))] = np.nextafter(off.flat[int(np.argmax(off))], np.inf)
    assert explain_op(OP, args, {}, off, _diff(ref, off))["cause"] == "unknown"


def test_a_hostile_call_has_no_reference():
    """Arguments the form is not written for are refused by name, never guessed."""
    a = np.ones((4, 3), np.float32)
    for args in ([a[0], a[0]], [a, np.ones((4, 2), np.float32)], [a, a.astype(np.float64)],
                 [a, np.ones((4, 3), np.int64)], [a[None], a]):
        with pytest.raises(NoReference, match="_euclidean_dist"):
            reference(OP, args, {})


def test_a_captured_cdist_is_judged(tmp_path):
    """A step that calls ``torch.cdist`` on 64 rows: its ``_euclidean_dist`` judged (exact,
    introduced or inherited), not ``no reference``."""
    from tapescope.app.capture import capture
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge

    torch.manual_seed(4)
    emb = torch.nn.Embedding(32, 8)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    z = torch.randn(64, 8)
    with capture(tmp_path / "c.capture", steps=1):
        d = torch.cdist(z, emb.weight)
        loss = d.min(1).values.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    rep = judge(load(tmp_path / "c.capture"))
    mine = [e for e in rep["ops"] if e["op"] == OP]
    assert len(mine) == 1
    assert mine[0]["outputs"][0]["verdict"] in ("exact", "introduced", "inherited")
    assert not [r for r in rep["no_reference"] if r["op"] == OP]


@pytest.mark.parametrize("xs, ws, bias", [((32, 16), (1, 16), True), ((4, 8, 24), (40, 24), True),
                                          ((5, 7, 64), (33, 64), False)], ids=str)
def test_a_linear_recorded_whole_is_explained_as_its_product(xs, ws, bias):
    """Where autograd is off (``torch.inference_mode``, an evaluation between steps),
    ``F.linear`` is recorded as one ``aten.linear`` op: its causes are addmm's (mm's without a
    bias) on x's rows by wᵀ (session 38: an LBFGS script's evaluation was ``unknown``); one ulp
    off them is unknown."""
    g = torch.Generator().manual_seed(sum(xs))
    x, w = torch.randn(*xs, generator=g), torch.randn(*ws, generator=g)
    b = torch.randn(ws[0], generator=g) if bias else None
    with torch.inference_mode():
        y = torch.nn.functional.linear(x, w, b).numpy()
    args = [x.numpy(), w.numpy()] + ([b.numpy()] if bias else [])
    ref = reference("aten.linear.default", args, {})[0]
    d = _diff(ref, y)
    assert d["n_diff"], "torch equals the reference here (no test)"
    cause = explain_op("aten.linear.default", args, {}, y, d)
    assert cause["cause"] in ("fma", "reassociation") and cause["variant"].startswith(
        "linear as " + ("addmm" if bias else "mm")), cause
    off = y.copy()
    off.flat[0] = np.nextafter(off.flat[0], np.inf)
    assert explain_op("aten.linear.default", args, {}, off, _diff(ref, off))["cause"] == "unknown"
