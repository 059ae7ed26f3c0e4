"""Shared fixtures of the device tests: one host device per session (kernels compile once and
are cached per user, so later sessions only load them)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def host():
    """The host backend."""
    import gpu

    return gpu.open_device("host")
