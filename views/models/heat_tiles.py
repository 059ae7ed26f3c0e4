"""A tensor's per-element heat levels laid out as one picture that fits a box (numpy only).

A tensor of any rank becomes a 2-D picture whose parts a reader can find again: the last
dimension runs along a row; the last two are a plane (rows x the last dimension); the leading
dimensions' planes sit in a grid in C order, left to right then down, one background pixel
between them. A plane far taller than wide is cut into bands of whole rows set side by side, one
far wider than tall (a vector) wrapped into rows, so that the picture is near square rather than
a one-pixel strip (a [8, 4, 8, 8] convolution output drawn as 2,048 rows of 8 was a strip 8
pixels wide). A picture larger than the box is reduced by taking the worst level of each
``f x f`` block (a hot element is never averaged away). Background pixels are -1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BACKGROUND = -1


@dataclass(frozen=True)
class Tiled:
    """The picture (int levels, ``BACKGROUND`` between parts) and how it was made."""

    image: np.ndarray
    shape: tuple[int, ...]  # the tensor's
    grid: tuple[int, int]  # the grid the planes sit in (rows, columns)
    bands: int  # a plane cut into this many bands (1: whole); negative: a row wrapped into -n lines
    block: int  # each pixel the worst of block x block elements' pixels (1: one element each)

    def caption(self) -> str:
        """How to read the picture, in one line."""
        shape = self.shape
        if len(shape) <= 1:
            n = shape[0] if shape else 1
            text = f"{n} element{'s' if n != 1 else ''}"
            if self.bands < -1:
                text += f" in {-self.bands} lines"
        else:
            r, c = shape[-2:]
            n = int(np.prod(shape[:-2], dtype=np.int64)) if len(shape) > 2 else 1
            text = f"{r} rows x {c}"
            if n > 1:
                text = (f"{n} planes of {text} in a {self.grid[0]} x {self.grid[1]} grid, in "
                        "order along each row of the grid")
            if self.bands > 1:
                whose = "each plane's" if n > 1 else "the"
                text += f"; {whose} rows in {self.bands} bands side by side"
            elif self.bands < -1:
                text += f"; each row wrapped into {-self.bands} lines"
        if self.block > 1:
            text += f"; a pixel the worst of {self.block} x {self.block}"
        return text


def _fold(planes: np.ndarray, ratio: float) -> tuple[np.ndarray, int]:
    """Planes (n x rows x cols) made near square, all alike: bands of whole rows side by side
    (tall), or each row wrapped into lines (wide); the folded planes and the bands (negative:
    lines a row)."""
    n, r, c = planes.shape
    if r > ratio * c:
        k = max(1, round(math.sqrt(r / c)))
        h = -(-r // k)
        k = -(-r // h)
        pad = np.full((n, k * h, c + 1), BACKGROUND, dtype=planes.dtype)
        pad[:, :r, :c] = planes
        out = pad.reshape(n, k, h, c + 1).transpose(0, 2, 1, 3).reshape(n, h, k * (c + 1))
        return out[:, :, :-1], k
    if c > ratio * r:
        k = max(1, round(math.sqrt(c / r)))
        w = -(-c // k)
        k = -(-c // w)
        gap = 1 if r > 1 else 0
        pad = np.full((n, r, k + gap, w), BACKGROUND, dtype=planes.dtype)
        pad[:, :, :k, :].reshape(n, r, k * w)[:, :, :c] = planes
        out = pad.reshape(n, r * (k + gap), w)
        return (out[:, :-1] if gap else out), -k
    return planes, 1


def _reduce(img: np.ndarray, f: int) -> np.ndarray:
    """The worst level of each f x f block (background only where the block is all background)."""
    h, w = img.shape
    hp, wp = -(-h // f) * f, -(-w // f) * f
    pad = np.full((hp, wp), BACKGROUND, dtype=img.dtype)
    pad[:h, :w] = img
    return pad.reshape(hp // f, f, wp // f, f).max(axis=(1, 3))


def tile(levels: np.ndarray, max_w: int = 640, max_h: int = 320, ratio: float = 3.0) -> Tiled:
    """``levels`` (the tensor's shape, any rank, non-negative ints) as a ``Tiled`` picture of at
    most ``max_w`` x ``max_h`` pixels."""
    a = np.asarray(levels).astype(np.int16, copy=False)
    shape = tuple(a.shape)
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        a = a.reshape(1, -1)
    r, c = a.shape[-2], a.shape[-1]
    n = int(np.prod(a.shape[:-2], dtype=np.int64)) if a.ndim > 2 else 1
    planes = a.reshape(n, r, c)
    if n == 0 or r == 0 or c == 0:
        return Tiled(np.full((1, 1), BACKGROUND, np.int16), shape, (1, 1), 1, 1)
    folded, bands = _fold(planes, ratio)
    ph, pw = folded.shape[1:]
    # the grid: as many columns as make the whole near the box's shape
    gx = max(1, min(n, round(math.sqrt(n * (ph + 1) * max_w / ((pw + 1) * max_h)))))
    gy = -(-n // gx)
    pad = np.full((gy * gx, ph + 1, pw + 1), BACKGROUND, dtype=np.int16)
    pad[:n, :ph, :pw] = folded
    img = pad.reshape(gy, gx, ph + 1, pw + 1).transpose(0, 2, 1, 3).reshape(
        gy * (ph + 1), gx * (pw + 1))[:-1, :-1]
    f = max(1, math.ceil(max(img.shape[0] / max_h, img.shape[1] / max_w)))
    if f > 1:
        img = _reduce(img, f)
    return Tiled(img, shape, (gy, gx), bands, f)
