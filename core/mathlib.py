"""The transcendental functions an op may call, by math mode.

``refmath`` (the default) is our own portable math: the same bits on numpy, the host backend and
CUDA. ``platform`` is numpy's libm, kept so users can see where and how far it drifts. Every op
reaches transcendentals only through ``get(mode)``: this is the one place that picks them.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

MODES = ("refmath", "platform")


def _platform() -> SimpleNamespace:
    def sigmoid(x: np.ndarray) -> np.ndarray:
        one = x.dtype.type(1)
        return one / (one + np.exp(-x))

    def rsqrt(x: np.ndarray) -> np.ndarray:
        return x.dtype.type(1) / np.sqrt(x)

    return SimpleNamespace(
        mode="platform", exp=np.exp, expm1=np.expm1, log=np.log, log1p=np.log1p,
        tanh=np.tanh, sigmoid=sigmoid, rsqrt=rsqrt, erf=_erf_platform,
    )


def _erf_platform(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def _refmath() -> SimpleNamespace:
    from tapescope.core import refmath

    names = ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "rsqrt", "erf")
    return SimpleNamespace(mode="refmath", **{n: getattr(refmath, n) for n in names})


_CACHE: dict[str, SimpleNamespace] = {}


def get(mode: str) -> SimpleNamespace:
    """The math namespace for ``mode`` (``"refmath"`` or ``"platform"``)."""
    if mode not in MODES:
        raise ValueError(f"math mode {mode!r} is not one of {MODES}")
    if mode not in _CACHE:
        _CACHE[mode] = _refmath() if mode == "refmath" else _platform()
    return _CACHE[mode]
