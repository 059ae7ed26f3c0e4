"""Shared fixtures of the device tests: one host device per session (kernels compile once and
are cached per user, so later sessions only load them)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def host():
    """The host backend, every launch list run with blocks and threads forward and reversed
    from the same memory: a race or a missing barrier fails the test (docs/devices.md)."""
    from tapescope import gpu

    dev = gpu.open_device("host")
    dev.orders = "both"
    return dev
