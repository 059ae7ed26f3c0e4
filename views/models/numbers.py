"""One way to write a count and a distance in ulp, for every panel (numpy only, no Qt).

Counts carry thousands separators (``4,488``). A distance in ulp is a whole number with
separators below a million (``63,054``) and three significant digits in scientific notation
from there (``5.87e+06``): a float64 ulp distance runs to 9.2e18, nineteen digits that no column
holds, and past a million the last digits say nothing a reader uses (the tooltips and the JSON
keep the exact count: ``ulp_exact``). Issue 46 found ``4,488``, ``4488`` and ``5.87372e+06``
for the same kind of number in three panels.
"""

from __future__ import annotations

import math

ULP_SCIENTIFIC_FROM = 1e6  # from here a distance in ulp is written 5.87e+06


def count_text(n) -> str:
    """A count of elements, nodes or steps: ``4,488``."""
    return f"{int(n):,}"


def ulp_text(u) -> str:
    """A distance in ulp: ``0``, ``63,054``, ``5.87e+06``; a fraction (a mean) to three
    significant digits; NaN or a negative value (how the columns mark a NaN against a number)
    ``NaN``."""
    u = float(u)
    if math.isnan(u) or u < 0:
        return "NaN"
    if math.isinf(u):
        return "inf"
    if u >= ULP_SCIENTIFIC_FROM:
        return f"{u:.2e}"
    if u.is_integer():
        return f"{int(u):,}"
    return f"{u:.3g}"


def ulp_exact(u) -> str:
    """The whole distance, every digit (for a tooltip): ``5,873,720``."""
    u = float(u)
    if math.isnan(u) or u < 0:
        return "NaN"
    if math.isinf(u) or not u.is_integer():
        return f"{u!r}"
    return f"{int(u):,}"
