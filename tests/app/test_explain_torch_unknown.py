"""Issue 44's done-when on PyTorch's CPU as the candidate: the variants reproduce torch's own
bits (MKL VML's sqrt), and `--explain` leaves at most 5 % of the introduced arrays `unknown`
(mlp and transformer, float64 and float32, 2 steps)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.runs import PairRunner, SessionConfig  # noqa: E402
from tapescope.core.explain import _vml_lib, vml_sqrt  # noqa: E402

pytestmark = pytest.mark.xdist_group("torch_unknown")


def _edges(dt):
    rng = np.random.default_rng(44)
    f = np.finfo(dt)
    xs = np.concatenate([rng.random(4000) * 10, rng.random(1000) * 1e-300 if dt == np.float64
                         else rng.random(1000) * 1e-30, [0.0, -0.0, 1.0, 4.0, f.tiny,
                                                         f.tiny / 4, f.max, np.inf]])
    return xs.astype(dt)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_vml_sqrt_is_torch_sqrt_bit_for_bit(dt):
    """PyTorch's CPU torch.sqrt is MKL VML's HA sqrt: not IEEE (many elements 1 ulp off
    np.sqrt) and equal to vml_sqrt in every bit, subnormals and edges included."""
    if _vml_lib() is None:
        pytest.skip("no MKL here (neither libmkl_rt nor PyTorch's libtorch_cpu)")
    x = _edges(dt)
    got = torch.sqrt(torch.from_numpy(x)).numpy()
    assert (got.view(np.uint8) != np.sqrt(x).view(np.uint8)).any(), \
        "torch.sqrt is IEEE here: the variant would model nothing"
    assert np.array_equal(got.view(np.uint8), vml_sqrt(x).view(np.uint8))


def _run(workload, dtype, steps=2):
    r = PairRunner(SessionConfig(workload=workload, device="torch", dtype=dtype, explain=True))
    entries = []
    for _ in range(steps):
        entries += r.step().introduced
    return entries


@pytest.fixture(scope="module")
def runs():
    """One 2-step --explain run per (workload, dtype): a few seconds each."""
    return {(w, d): _run(w, d) for w in ("mlp", "transformer") for d in ("float64", "float32")}


def _unknown(entries):
    return [e for e in entries if e["cause"] == "unknown"]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mlp_unknown_at_most_5_percent(runs, dtype):
    entries = runs[("mlp", dtype)]
    unk = _unknown(entries)
    assert entries and len(unk) <= 0.05 * len(entries), unk


def test_mlp_updates_are_mkl_sqrt(runs):
    """Every optimizer update that departs is explained: the tape's Adam in torch ops with
    MKL's sqrt. Which updates depart depends on MKL's code path for this CPU (on an Intel
    Xeon with AVX-512 no float64 update of these 2 steps did, on an AMD EPYC several did), so
    the two dtypes' runs together must have some, each explained."""
    ups = [e for d in ("float64", "float32") for e in runs[("mlp", d)]
           if e["which"] == "update"]
    assert ups and all(e["cause"] == "libm" and "MKL VML" in e["explain"]["variant"]
                       for e in ups), ups


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_transformer_unknown_at_most_5_percent(runs, dtype):
    """softmax, silu * u, rms_norm's backward (a residual's gradient added in autograd's
    order), cross_entropy's backward, the weight gradients' batch sums and the updates are
    all named (measured: 0 of 87 / 100 unknown)."""
    entries = runs[("transformer", dtype)]
    unk = _unknown(entries)
    assert entries and len(unk) <= 0.05 * len(entries), [
        (e.get("step"), e["node"], e["op"], e["which"]) for e in unk]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_transformer_updates_explained(runs, dtype):
    """Every update of the transformer is named (before: all `unknown`)."""
    entries = runs[("transformer", dtype)]
    ups = [e for e in entries if e["which"] == "update"]
    assert ups and not _unknown(ups), _unknown(ups)


@pytest.mark.parametrize("run", ["mlp-float64", "mlp-float32", "transformer-float64",
                                 "transformer-float32"])
def test_every_explained_difference_is_a_valid_reordering(runs, run):
    """The classifier agrees with the variants: every array PyTorch introduced, now named by
    its kernel (SLEEF's exp, ATen's sums, MKL's sqrt, ...), is within a reordering bound."""
    w, d = run.split("-")
    bad = [e for e in runs[(w, d)] if e.get("class") != "valid reordering"]
    assert not bad, bad
