"""CTC loss's reference (``_ctc_loss`` and ``_ctc_loss_backward``: what ``F.ctc_loss`` runs on
the CPU; a speech model's loss). The form is ATen's LossCTC.cpp recursion in log space, one
rounding per operation, exp and log from refmath (core/capture/aten_ref_losses.py ``ctc_loss``):

- by the C library's exp / log (the ``--explain`` variant) it is torch's output bit for bit,
  forwards and backwards, over the geometries the kernel branches on (concatenated and padded
  targets, repeated labels, another blank, an empty target, an empty input, ``zero_infinity``,
  float32 and float64);
- by refmath it differs from torch only where glibc's exp / log round otherwise, and
  ``--explain`` names that;
- the alphas' memory the kernel leaves unwritten (``empty``) is taken as recorded, so only what
  the kernel writes is judged;
- hostile arguments are a NoReference naming the op, before any allocation;
- a captured script with ``F.ctc_loss`` has every CTC op judged (no ``no reference``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.aten_ref_losses import ctc_loss, ctc_loss_backward  # noqa: E402
from tapescope.core.capture.aten_ref_table import M, NoReference  # noqa: E402
from tapescope.core.capture.explain import explain_op  # noqa: E402
from tapescope.core.explain_prims import _LIBC_MATH  # noqa: E402
from tapescope.core.parity import compare_arrays  # noqa: E402
from tests.helpers.capture_files import judged_capture  # noqa: E402
from tests.helpers.ref_forms import recorded_outputs  # noqa: E402

FWD, BWD = "aten._ctc_loss.Tensor", "aten._ctc_loss_backward.Tensor"

# (T, B, C, target lengths, input lengths, blank, concatenated targets, zero_infinity, dtype)
GEOMETRIES = {
    "padded": (10, 4, 7, [3, 3, 2, 2], [10, 9, 7, 5], 0, False, True, torch.float32),
    "concatenated": (20, 3, 5, [4, 0, 6], [20, 3, 15], 0, True, False, torch.float32),
    "empty-input": (12, 3, 5, [2, 0, 3], [12, 0, 8], 0, True, False, torch.float32),
    "blank-3": (40, 4, 10, [12, 8, 5, 2], [40, 33, 20, 9], 3, False, False, torch.float32),
    "repeats": (16, 2, 3, [6, 5], [16, 14], 0, False, False, torch.float32),
    "impossible": (6, 2, 5, [4, 3], [3, 6], 0, False, False, torch.float32),
    "impossible-zeroed": (6, 2, 5, [4, 3], [3, 6], 0, False, True, torch.float32),
    "float64": (30, 5, 12, [8, 1, 6, 12, 3], [30, 25, 20, 29, 7], 0, False, False,
                torch.float64),
}


def _case(name: str, seed: int = 0) -> dict:
    T, B, C, tls, ils, blank, flat, zero_inf, dt = GEOMETRIES[name]
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(torch.randn(T, B, C, generator=g, dtype=dt) * 3, -1)
    hi = 2 if name == "repeats" else C  # (labels 0..1 of 3: runs of one label, the skip rule)
    tg = torch.randint(0, hi, (B, max(tls)), generator=g)
    tg[tg == blank] = (blank + 1) % C
    il, tl = torch.tensor(ils), torch.tensor(tls)
    tgt = torch.cat([tg[i, :tls[i]] for i in range(B)]) if flat else tg
    nll, la = torch.ops.aten._ctc_loss(lp, tgt, il, tl, blank, zero_inf)
    go = torch.rand(B, generator=g, dtype=dt) + 0.5
    grad = torch.ops.aten._ctc_loss_backward(go, lp, tgt, il, tl, nll, la, blank, zero_inf)
    n = [t.numpy() for t in (lp, tgt, il, tl, nll, la, go, grad)]
    return {"fwd": [n[0], n[1], n[2], n[3], blank, zero_inf],
            "bwd": [n[6], n[0], n[1], n[2], n[3], n[4], n[5], blank, zero_inf],
            "nll": n[4], "la": n[5], "grad": n[7], "il": ils, "tl": tls}


def _written(c: dict) -> np.ndarray:
    """Where ATen's forward writes its alphas: row 0, then each input's rows up to its target's
    2 L + 1 states (the rest of ``empty`` is whatever memory held)."""
    w = np.zeros(c["la"].shape, bool)
    w[:, 0, :] = True
    for b, (n, tl) in enumerate(zip(c["il"], c["tl"], strict=True)):
        w[b, 1:n, :2 * tl + 1] = True
    return w


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _forward(c: dict, mth) -> list:
    with recorded_outputs([c["nll"], c["la"]]):  # (as the judge holds the recorded outputs)
        return ctc_loss(c["fwd"], {}, mth)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_by_the_c_librarys_exp_and_log_it_is_torch_bit_for_bit(name):
    c = _case(name)
    nll, la = _forward(c, _LIBC_MATH)
    assert _bits(nll).tobytes() == _bits(c["nll"]).tobytes()
    assert la.tobytes() == c["la"].tobytes()  # (unwritten: the recorded bytes, as the judge)
    (grad,) = ctc_loss_backward(c["bwd"], {}, _LIBC_MATH)
    d = compare_arrays(grad, c["grad"])
    # every bit; a NaN's payload by the parity policy (an impossible item without
    # zero_infinity: inf - inf)
    assert d.n_diff == 0 and (d.nan_bits_differ == 0 or name == "impossible"), d
    if name != "impossible":
        assert grad.tobytes() == c["grad"].tobytes()


def test_the_refmath_form_differs_only_where_glibc_rounds_otherwise_and_explain_says_so():
    """Seeds where glibc's float32 expf / logf misround against refmath's correctly rounded
    ones: the form differs there (a few ulp in the backward), and ``--explain`` names the
    C library's exp / log; the written alphas of the others are exact."""
    differing = 0
    for seed in range(6):
        c = _case("blank-3", seed)
        nll, la = _forward(c, M)
        w = _written(c)
        assert np.array_equal(la[~w].view(np.uint32), c["la"][~w].view(np.uint32))
        (grad,) = reference(BWD, c["bwd"], {})
        d = compare_arrays(grad, c["grad"])
        assert d.max_ulp < 64, d  # (the same recursion: a rounding or two apart)
        if d.n_diff:
            differing += 1
            diff = {"n_diff": d.n_diff, "max_ulp": d.max_ulp}
            got = explain_op(BWD, c["bwd"], {}, c["grad"], diff)
            assert got["cause"] == "libm" and "exp / log" in got["variant"], got
    assert differing  # (the property is tested: some seed differs)


def test_the_unwritten_alphas_are_the_recorded_bytes_and_the_written_are_judged():
    c = _case("empty-input")
    w = _written(c)
    assert (~w).any()  # (item 1 has no input, item 2 a short one: memory left as it was)
    marked = c["la"].copy()
    marked[~w] = np.float32(1234.5)  # (what else that memory could have held)
    with recorded_outputs([c["nll"], marked]):
        _, la = reference(FWD, c["fwd"], {})
    assert np.all(la[~w] == np.float32(1234.5))
    assert la[w].tobytes() == c["la"][w].tobytes()
    # outside the judge (no recorded outputs) the unwritten memory is the kernel's -inf fill
    _, bare = reference(FWD, c["fwd"], {})
    assert np.all(np.isneginf(bare[~w])) and bare[w].tobytes() == c["la"][w].tobytes()
    # an empty input: the loss is -log(0) = +inf with a target, -0.0 without (ATen's sign)
    c2 = _case("empty-input")
    c2["fwd"][3] = np.array([2, 0, 3])
    nll, _ = reference(FWD, c2["fwd"], {})
    assert nll[1] == 0 and np.signbit(nll[1]) == np.signbit(c2["nll"][1])


def _hostile():
    c = _case("padded")
    lp, tg, il, tl = c["fwd"][:4]
    bad_label = tg.copy()
    bad_label[0, 0] = 7
    return {
        "label-out-of-range": ([lp, bad_label, il, tl, 0, False], "label"),
        "negative-label": ([lp, -tg, il, tl, 0, False], "label"),
        "input-longer-than-T": ([lp, tg, il + 1, tl, 0, False], "out of range"),
        "negative-length": ([lp, tg, il, -tl, 0, False], "out of range"),
        "blank-out-of-range": ([lp, tg, il, tl, 7, False], "out of range"),
        "short-targets": ([lp, tg, il, tl + 1, 0, False], "shorter than"),
        "lengths-not-per-item": ([lp, tg, il[:3], tl, 0, False], "input_lengths"),
        "float-lengths": ([lp, tg, il.astype(np.float32), tl, 0, False], "input_lengths"),
        "2-d-log-probs": ([lp[0], tg, il, tl, 0, False], "(T, B, C)"),
        "half": ([lp.astype(np.float16), tg, il, tl, 0, False], "(T, B, C)"),
        "concatenated-count": ([lp, tg.reshape(-1)[:5], il, tl, 0, False], "concatenated"),
    }


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_hostile_arguments_are_a_no_reference_naming_the_op(case):
    args, words = _hostile()[case]
    with pytest.raises(NoReference, match="_ctc_loss") as e:
        reference(FWD, args, {})
    assert words in str(e.value)


def test_a_length_the_recorded_outputs_cannot_hold_is_refused_before_allocating():
    """Targets a file claims 1,000 labels long for every item ask for alphas of 2,001 states
    a row: refused against the recorded outputs' size before anything is allocated."""
    c = _case("padded")
    lp, _, il, _ = c["fwd"][:4]
    tg, tl = np.ones((4, 1000), np.int64), np.full(4, 1000)
    with recorded_outputs([c["nll"], c["la"]]):
        with pytest.raises(NoReference, match="elements"):
            reference(FWD, [lp, tg, il, tl, 0, False], {})


def _train_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)

    def step() -> float:
        x = torch.randn(12, 3, 6, generator=g)
        lp = torch.log_softmax(net(x), -1)
        tgt = torch.randint(1, 5, (3, 4), generator=g)
        loss = torch.nn.functional.ctc_loss(lp, tgt, torch.tensor([12, 10, 7]),
                                            torch.tensor([4, 3, 2]), zero_infinity=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def test_a_captured_ctc_step_has_every_ctc_op_judged(tmp_path):
    rep = judged_capture(tmp_path / "ctc.capture", _train_step)
    assert not any("ctc" in n["op"] for n in rep["no_reference"]), rep["no_reference"]
    ctc = [e for e in rep["ops"] if "_ctc_loss" in e["op"]]
    assert {e["op"] for e in ctc} == {FWD, BWD} and len(ctc) == 4
    for e in ctc:
        for o in e["outputs"]:
            assert o["verdict"] in ("exact", "inherited", "introduced"), e
    # the judged outputs are every CTC output (none left as the kernel's own)
    assert sum(len(e["outputs"]) for e in ctc) == 2 * 2 + 2
