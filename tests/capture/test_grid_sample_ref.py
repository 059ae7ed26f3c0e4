"""The spatial transformer's references (core/capture/aten_ref_sample.py): ``affine_grid_generator``
(what ``F.affine_grid`` records), ``grid_sampler_2d`` and ``grid_sampler_2d_backward`` (what
``F.grid_sample`` records for 4-d input on the CPU), written in ATen's scalar order
(GridSampler.cpp's fallback), one rounding per operation, no FMA:

- float64: each form is torch's own op to rtol 1e-12 / atol 1e-13 over bilinear, nearest and
  bicubic, zeros, border and reflection padding, both ``align_corners``, a few shapes, grids
  reaching 1.3 past [-1, 1] (so the paddings matter);
- float32: nearest is torch's output bit for bit, forward and backward, with every padding;
  bilinear differs from torch only by the FMAs torch's vectorised kernel contracts (its
  unnormalize without ``align_corners`` and the four-tap sum): the reference's formulas with
  those FMAs give torch's bits;
- the backward's ``output_mask`` leaves an output out as torch does ([False, True]: autograd's
  call when the input needs no gradient: torch returns None there, the form only grad_grid);
- a NaN or infinite grid point gives torch's forward output (NaN where it weights a tap, the
  border clip taking NaN to 0);
- hostile arguments (wrong rank, a grid's last dim not 2, another batch, mode 7, float16, a 5-d
  size, sizes the recorded output cannot hold) are a NoReference naming the op;
- a captured spatial-transformer step (Linear -> theta -> affine_grid -> grid_sample -> loss,
  SGD) has every one of these ops judged, and the capture leaves its losses as they were."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.aten_ref_table import NoReference  # noqa: E402
from tests.helpers.capture_files import judged_capture  # noqa: E402
from tests.helpers.ref_forms import recorded_outputs  # noqa: E402

FWD = "aten.grid_sampler_2d.default"
BWD = "aten.grid_sampler_2d_backward.default"
AFFINE = "aten.affine_grid_generator.default"
OPS = {FWD, BWD, AFFINE}

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADS = {"zeros": 0, "border": 1, "reflection": 2}
# (N, C, H, W, H_out, W_out): down- and upsampling, a single channel, a single input row
SHAPES = [(2, 3, 5, 7, 4, 6), (1, 2, 3, 4, 9, 11), (3, 1, 6, 6, 2, 3), (1, 4, 1, 5, 3, 3)]
COMBOS = list(itertools.product(MODES, PADS, (False, True)))


def _ids(combo) -> str:
    m, p, a = combo
    return f"{m}-{p}-{'align' if a else 'noalign'}"


def _case(dt, shape, seed: int) -> tuple:
    N, C, H, W, oh, ow = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, C, H, W, generator=g, dtype=dt)
    grid = (torch.rand(N, oh, ow, 2, generator=g, dtype=dt) * 2 - 1) * 1.3
    go = torch.randn(N, C, oh, ow, generator=g, dtype=dt)
    return x, grid, go


def _np(*ts) -> list:
    return [t.numpy() for t in ts]


def _forward(x, grid, m, p, a) -> tuple[np.ndarray, np.ndarray]:
    want = torch.ops.aten.grid_sampler_2d(x, grid, m, p, a).numpy()
    (got,) = reference(FWD, [*_np(x, grid), m, p, a], {})
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, want


def _backward(go, x, grid, m, p, a, mask) -> tuple[list, tuple]:
    want = torch.ops.aten.grid_sampler_2d_backward(go, x, grid, m, p, a, mask)
    got = reference(BWD, [*_np(go, x, grid), m, p, a, mask], {})
    return got, want


# ---- float64: torch's own op --------------------------------------------------------------------
@pytest.mark.parametrize("combo", COMBOS, ids=_ids)
def test_float64_forward_and_backward_are_torch_to_1e_12(combo):
    m, p, a = MODES[combo[0]], PADS[combo[1]], combo[2]
    for seed, shape in enumerate(SHAPES):
        x, grid, go = _case(torch.float64, shape, seed)
        got, want = _forward(x, grid, m, p, a)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        (gi, gg), (wi, wg) = _backward(go, x, grid, m, p, a, [True, True])
        assert gi.dtype == gg.dtype == np.float64
        np.testing.assert_allclose(gi, wi.numpy(), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(gg, wg.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_output_mask_leaves_an_output_out_as_torch_does(mode):
    """[False, True] (the input needs no gradient): torch gives None and grad_grid, the form
    grad_grid alone (a left-out output is not returned); [True, False] (a grid that needs no
    gradient: a random sampling grid): ATen computes and returns grad_grid all the same, so
    the form gives both (session 47: it gave grad_input alone, and the judge reported "the
    reference returned 1 outputs, the capture has 2")."""
    x, grid, go = _case(torch.float64, SHAPES[0], 7)
    m = MODES[mode]
    got, want = _backward(go, x, grid, m, 2, False, [False, True])
    assert want[0] is None and len(got) == 1
    np.testing.assert_allclose(got[0], want[1].numpy(), rtol=1e-12, atol=1e-13)
    got, want = _backward(go, x, grid, m, 2, False, [True, False])
    assert want[1] is not None and len(got) == 2 and got[0].shape == tuple(x.shape)
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got[1], want[1].numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("align", [False, True], ids=["noalign", "align"])
def test_float64_affine_grid_is_torch_to_1e_12(align):
    g = torch.Generator().manual_seed(3)
    for N, H, W in [(2, 5, 7), (1, 1, 4), (3, 6, 1), (2, 16, 9)]:
        theta = torch.randn(N, 2, 3, generator=g, dtype=torch.float64)
        want = torch.ops.aten.affine_grid_generator(theta, [N, 3, H, W], align).numpy()
        (got,) = reference(AFFINE, [theta.numpy(), [N, 3, H, W], align], {})
        assert got.dtype == want.dtype and got.shape == want.shape == (N, H, W, 2)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        # float32: the same formula, within a few ulps (torch's linspace and bmm order apart)
        t32 = theta.float()
        want = torch.ops.aten.affine_grid_generator(t32, [N, 3, H, W], align).numpy()
        (got,) = reference(AFFINE, [t32.numpy(), [N, 3, H, W], align], {})
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- float32: bit for bit where torch's kernel orders as the reference ---------------------------
@pytest.mark.parametrize("combo", [c for c in COMBOS if c[0] == "nearest"], ids=_ids)
def test_float32_nearest_is_torch_bit_for_bit(combo):
    """A copy forwards, the output gradient added to its pixel in output order backwards (the
    kernel's order per element too), a zero grad_grid."""
    p, a = PADS[combo[1]], combo[2]
    for seed, shape in enumerate(SHAPES):
        x, grid, go = _case(torch.float32, shape, seed)
        got, want = _forward(x, grid, 1, p, a)
        assert got.tobytes() == want.tobytes()
        (gi, gg), (wi, wg) = _backward(go, x, grid, 1, p, a, [True, True])
        assert gi.tobytes() == wi.numpy().tobytes()
        assert gg.tobytes() == wg.numpy().tobytes()


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 ``a * b + c`` rounded once (the product is exact in float64)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("combo", [c for c in COMBOS if c[0] == "bilinear"], ids=_ids)
def test_float32_bilinear_differs_from_torch_only_by_its_kernels_fmas(combo):
    """Not torch's bits (a few ulps off): torch's vectorised kernel contracts the unnormalize
    ``(c + 1) * (size / 2) - 0.5`` (without ``align_corners``) and the tap sum to FMAs. The
    reference's own indices and weights, summed with those FMAs, are torch's bits."""
    from tapescope.core.capture import aten_ref_sample as S

    p, a = PADS[combo[1]], combo[2]
    x, grid, _ = _case(torch.float32, SHAPES[0], 11)
    got, want = _forward(x, grid, 0, p, a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.tobytes() != want.tobytes()
    N, C, H, W = x.shape
    gx, gy = (grid[..., k].numpy().reshape(N, -1) for k in (0, 1))

    def src(c, size):
        if a:
            return S._source(c, size, p, a)
        half = np.full_like(c, np.float32(size) / np.float32(2))
        return S._pad(_fma(c + np.float32(1), half, np.full_like(c, -0.5)), size, p, a)

    taps = S._Taps(x.numpy())
    corners, _ = S._bilinear_setup(src(gx, W), src(gy, H))
    terms = [(taps.read(cx, cy), np.broadcast_to(wt[:, None, :], (N, C, wt.shape[1])))
             for cx, cy, wt in corners]
    out = terms[0][0] * terms[0][1]
    for v, wt in terms[1:]:
        out = _fma(v, wt, out)
    assert out.reshape(want.shape).tobytes() == want.tobytes()


# ---- non-finite grid points -----------------------------------------------------------------
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_nan_or_infinite_grid_point_gives_torchs_output(mode):
    """NaN, +-inf and far-out points (several reflections). A point of 1e30 is torch's output
    but under reflection, where torch's kernel reflects by ``|v| - trunc(|v| / 2 span) * 2 span``
    (rounded: any pixel) and the reference by ATen's exact ``fmod``."""
    nan, inf = float("nan"), float("inf")
    x = torch.arange(1.0, 13.0, dtype=torch.float64).view(1, 1, 3, 4)
    grid = torch.tensor([[[[nan, 0.0], [0.0, nan], [inf, 0.0], [-inf, 0.0], [-7.3, 5.1],
                           [1e30, 0.2]]]], dtype=torch.float64)
    for pad, a in itertools.product(PADS.values(), (False, True)):
        got, want = _forward(x, grid, MODES[mode], pad, a)
        if pad == PADS["reflection"]:
            got, want = got[..., :-1], want[..., :-1]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13, equal_nan=True)


# ---- hostile arguments ------------------------------------------------------------------------
def _hostile() -> dict:
    x, grid, go = _np(*_case(torch.float32, SHAPES[0], 0))
    theta = np.zeros((2, 2, 3), np.float32)
    return {
        "3-d-input": (FWD, [x[0], grid, 0, 0, False], "dims"),
        "5-d-grid": (FWD, [x, grid[..., None], 0, 0, False], "dims"),
        "grid-last-dim-3": (FWD, [x, np.concatenate([grid, grid[..., :1]], -1), 0, 0, False],
                            "last dim"),
        "grid-batch": (FWD, [x, grid[:1], 0, 0, False], "batch"),
        "mode-7": (FWD, [x, grid, 7, 0, False], "interpolation_mode"),
        "padding-7": (FWD, [x, grid, 0, 7, False], "padding_mode"),
        "mode-bool": (FWD, [x, grid, True, 0, False], "interpolation_mode"),
        "float16": (FWD, [x.astype(np.float16), grid.astype(np.float16), 0, 0, False],
                    "float16"),
        "mixed-dtypes": (FWD, [x, grid.astype(np.float64), 0, 0, False], "float64"),
        "empty-spatial": (FWD, [x[:, :, :0], grid, 0, 0, False], "empty"),
        "backward-grad-shape": (BWD, [go[:, :1], x, grid, 0, 0, False, [True, True]],
                                "grad_output"),
        "backward-mask": (BWD, [go, x, grid, 0, 0, False, [True]], "output_mask"),
        "backward-mode-7": (BWD, [go, x, grid, 7, 0, False, [True, True]],
                            "interpolation_mode"),
        "affine-5-d-size": (AFFINE, [np.zeros((2, 3, 4), np.float32), [2, 1, 3, 4, 5], False],
                            "5-d"),
        "affine-theta-shape": (AFFINE, [theta, [3, 1, 4, 5], False], "theta"),
        "affine-negative-size": (AFFINE, [theta, [2, 1, -4, 5], False], "size"),
        "affine-float16": (AFFINE, [theta.astype(np.float16), [2, 1, 4, 5], False], "float16"),
    }


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_hostile_arguments_are_a_no_reference_naming_the_op(case):
    op, args, words = _hostile()[case]
    with pytest.raises(NoReference, match=op.split(".")[1]) as e:
        reference(op, args, {})
    assert words in str(e.value)


def test_a_size_the_recorded_outputs_cannot_hold_is_refused_before_allocating():
    """A file's affine_grid size of 10^12 points (and a grid sample whose output outgrows the
    recorded one) is refused against the recorded outputs' size, before any allocation."""
    small = [np.zeros((1, 4, 4, 2), np.float32)]
    with recorded_outputs(small):
        with pytest.raises(NoReference, match="elements"):
            reference(AFFINE, [np.zeros((1, 2, 3), np.float32), [1, 1, 10**6, 10**6], False], {})
        x, grid = np.zeros((1, 500, 4, 4), np.float32), np.zeros((1, 8, 8, 2), np.float32)
        with pytest.raises(NoReference, match="elements"):
            reference(FWD, [x, grid, 0, 0, False], {})


# ---- captured and judged ----------------------------------------------------------------------
def _train_step():
    """A spatial transformer: a Linear localisation net's theta (identity to start), a bilinear
    zeros-padded sample (the loss against a shifted copy) and a nearest reflection-padded one of
    a widened grid; SGD. The input needs no gradient: grid_sampler_2d_backward with
    output_mask [False, True]."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    loc = torch.nn.Linear(64, 6)
    torch.nn.init.zeros_(loc.weight)
    with torch.no_grad():
        loc.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))
    opt = torch.optim.SGD(loc.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)

    def step() -> float:
        x = torch.randn(4, 2, 8, 8, generator=g)
        theta = loc(x[:, 0].flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        y = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        z = F.grid_sample(x, grid * 1.2, mode="nearest", padding_mode="reflection",
                          align_corners=False)
        loss = (y - torch.roll(x, 1, dims=-1)).square().mean() + 0.1 * z.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def test_a_captured_spatial_transformer_step_has_every_sampling_op_judged(tmp_path):
    rep = judged_capture(tmp_path / "stn.capture", _train_step)
    assert not [n for n in rep["no_reference"] if n["op"] in OPS], rep["no_reference"]
    ours = [e for e in rep["ops"] if e["op"] in OPS]
    assert {e["op"] for e in ours} == OPS
    assert len(ours) == 2 * (1 + 2 + 2)  # per step: affine_grid, 2 samples, 2 backwards
    for e in ours:
        assert len(e["outputs"]) == 1, e  # (each backward: grad_grid alone)
        for o in e["outputs"]:
            assert o["verdict"] in ("exact", "inherited", "introduced"), e
