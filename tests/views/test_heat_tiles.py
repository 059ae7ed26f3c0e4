"""views.models.heat_tiles: a tensor's heat levels as one near-square picture that fits a box
(the capture window's ulp map of a [8, 4, 8, 8] convolution output was a strip 8 pixels wide)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapescope.views.models.heat_tiles import BACKGROUND, tile

SHAPES = st.lists(st.integers(1, 9), min_size=0, max_size=4).map(tuple) | st.sampled_from(
    [(4096,), (2048, 8), (4, 4096), (1, 1, 1000), (300, 1), (8, 4, 8, 8), (3, 1, 1)])


@settings(max_examples=150, deadline=None)
@given(SHAPES)
def test_every_element_is_drawn_once_in_c_order_within_each_plane(shape):
    n = int(np.prod(shape, dtype=np.int64))
    a = np.arange(n, dtype=np.int64).reshape(shape) % 30000
    t = tile(a, 10**6, 10**6)  # a box that needs no shrinking
    assert t.block == 1
    drawn = t.image[t.image != BACKGROUND]
    assert sorted(drawn.tolist()) == sorted(a.reshape(-1).tolist())  # each once, no other
    if n >= 30000:
        return
    # the last dimension runs along a picture row: the next element of a row is the next pixel
    # (but where a long row wraps onto its next line)
    pos = {int(v): (y, x) for (y, x), v in np.ndenumerate(t.image) if v != BACKGROUND}
    c = shape[-1] if shape else 1
    wrap = -(-c // -t.bands) if t.bands < -1 else c
    for e in range(n - 1):
        if (e + 1) % c and (e % c + 1) % wrap:
            y, x = pos[e]
            assert pos[e + 1] == (y, x + 1), (shape, e)


@pytest.mark.parametrize("shape", [(2048, 8), (8, 4096), (4096,), (8, 4, 8, 8), (16, 128, 16, 16),
                                   (1, 100000), (100000, 1)])
def test_the_picture_is_near_square_and_fits_its_box(shape):
    a = np.zeros(shape, dtype=np.int16)
    t = tile(a, 640, 300)
    h, w = t.image.shape
    assert h <= 300 and w <= 640
    assert max(h, w) / min(h, w) <= 8, (shape, t.image.shape)  # no one-pixel strip
    assert t.caption()


def test_a_tall_plane_is_cut_into_bands_of_whole_rows():
    a = np.arange(64 * 4).reshape(64, 4)
    t = tile(a, 10**6, 10**6)
    assert t.bands > 1 and "bands side by side" in t.caption()
    h = t.image.shape[0]
    first = t.image[:, :4]  # the first band: the first h rows, whole
    assert first.tolist() == a[:h].tolist()


def test_shrinking_keeps_the_worst_element_of_each_block():
    a = np.zeros((16, 128, 16, 16), dtype=np.int16)
    a[5, 77, 3, 9] = 254  # one element 2**20 ulp off among half a million exact ones
    a[15, 127, 15, 15] = 255  # the last one a NaN against a number
    t = tile(a, 200, 100)
    assert t.block > 1 and f"worst of {t.block} x {t.block}" in t.caption()
    assert (t.image == 254).sum() == 1 and (t.image == 255).sum() == 1
    assert t.image.max() == 255 and set(np.unique(t.image)) <= {BACKGROUND, 0, 254, 255}


def test_planes_sit_in_a_grid_in_order():
    a = np.stack([np.full((3, 3), k) for k in range(6)])  # plane k holds k
    t = tile(a, 10**6, 10**6)
    gy, gx = t.grid
    assert gy * gx >= 6 and "6 planes of 3 rows x 3" in t.caption()
    for k in range(6):
        y, x = divmod(k, gx)
        assert (t.image[y * 4:y * 4 + 3, x * 4:x * 4 + 3] == k).all()


def test_empty_and_scalar_tensors():
    assert tile(np.zeros((5, 0), np.int16)).image.tolist() == [[BACKGROUND]]
    t = tile(np.array(7, np.int16))
    assert t.image.tolist() == [[7]] and t.caption() == "1 element"
