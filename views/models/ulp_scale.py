"""The one ulp colour scale (numpy only): every drawing of ulp in the window uses it.

Exact is green; 1 ulp amber, darkening to red at 2**20 ulp and beyond, on a log2 scale (so 1 ulp
and a million ulp both stay visible); a NaN against a number is violet. The graph's parity
stripe and the minimap (``ulp_color`` through app.session.worst_codes), the parity table, the
report's page and its graph picture, the Training heatmap, the Compare and Elements maps and the
graph's legend all read it (issue 25: five encodings, one of them explained; issue 47: the
stripe's own formula, which disagreed with the heatmap on 73 of 480 values, is gone).
"""

from __future__ import annotations

import numpy as np

# (level, label) of the scale's marks: the colour bars' ticks and the legend's chips
HEAT_TICKS = [(0.0, "exact"), (1 + 253 * 5 / 20, "32 ulp"), (1 + 253 * 10 / 20, "1024"),
              (1 + 253 * 15 / 20, "2^15"), (254.0, "≥2^20"), (255.0, "NaN")]


def heat_lut() -> np.ndarray:
    """Colour table for log2(ulp)+1 levels: 0 exact green, then amber → red; NaN purple last."""
    lut = np.zeros((256, 4), dtype=np.ubyte)
    lut[:, 3] = 255
    t = np.linspace(0.0, 1.0, 254)
    lut[0] = (22, 163, 74, 255)
    lut[1:255, 0] = (245 - 25 * t).astype(np.ubyte)
    lut[1:255, 1] = (158 * (1 - t)).astype(np.ubyte)
    lut[1:255, 2] = 11
    lut[255] = (124, 58, 237, 255)
    return lut


FADED = 0.3  # inherited error: its colour at this strength over white (the graph's faded stripe)
INHERITED = 256  # added to a heatmap level: the cell's error was inherited, drawn faded


def two_tone_lut(background: tuple[int, int, int] = (255, 255, 255)) -> np.ndarray:
    """heat_lut() for levels 0..255 (introduced, or nothing known of where the error came
    from), then the same colours faded toward ``background`` (the plot's: white, or a dark
    theme's) for INHERITED + level: 512 entries."""
    full = heat_lut()
    faded = full.copy()
    bg = np.asarray(background, dtype=np.float64)
    faded[:, :3] = np.round(FADED * full[:, :3] + (1 - FADED) * bg).astype(np.ubyte)
    faded[0] = full[0]  # exact stays exact
    return np.concatenate((full, faded))


def mark_inherited(levels: np.ndarray, introduced: np.ndarray) -> np.ndarray:
    """Levels with INHERITED added where a cell differs but did not introduce its error."""
    lv = np.asarray(levels, dtype=np.float64)
    return np.where((lv > 0) & ~np.asarray(introduced, dtype=bool), lv + INHERITED, lv)


def heat_levels(col: np.ndarray) -> np.ndarray:
    """Per-node worst ulp (−1 or NaN: a NaN against a number) → level 0..255 (log scale,
    2**20 ulp saturates)."""
    c = np.asarray(col, dtype=np.float64)
    out = np.zeros(c.shape, dtype=np.float64)
    pos = c > 0
    # NOTE: log2 so 1 ulp and 1e6 ulp both stay visible; 1 + ... keeps "1 ulp" off the exact colour
    out[pos] = np.minimum(1 + np.log2(c[pos]) * (253 / 20.0), 254)
    out[(c < 0) | np.isnan(c)] = 255
    return out


def _index(level: float) -> int:
    return int(round(min(max(level, 0.0), 255.0)))


_NAMES: list[str] = []  # the table's colours as #rrggbb, made once


def _names() -> list[str]:
    if not _NAMES:
        _NAMES.extend(f"#{int(r):02x}{int(g):02x}{int(b):02x}" for r, g, b, _ in heat_lut())
    return _NAMES


def level_color(level: float) -> str:
    """The scale's colour at ``level`` as #rrggbb."""
    return _names()[_index(level)]


EXACT_COLOR = level_color(0.0)  # "#16a34a"
NAN_COLOR = level_color(255.0)  # "#7c3aed": a NaN against a number


def ulp_colors(worst) -> list[str]:
    """The colour of each node's worst ulp (``core.summary.worst``: 0 exact, >= 1 ulp, -1 or
    NaN a NaN mismatch) as #rrggbb: exact green, the scale's level, NaN violet."""
    w = np.asarray(worst, dtype=np.float64).ravel()
    # NOTE: a worst between 0 and 1 (never made by core.summary) still reads as 1 ulp, not exact
    lv = heat_levels(np.where(w > 0, np.fmax(w, 1.0), w))
    names = _names()
    return [names[_index(v)] for v in lv.tolist()]


def ulp_color(worst: float) -> str:
    """``ulp_colors`` of one worst ulp."""
    return ulp_colors([worst])[0]


def faded_color(level: float) -> str:
    """The scale's colour at ``level`` faded (inherited error) as #rrggbb."""
    r, g, b, _ = two_tone_lut()[INHERITED + int(round(min(max(level, 0.0), 255.0)))]
    return f"#{int(r):02x}{int(g):02x}{int(b):02x}"
