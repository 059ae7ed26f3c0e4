"""The window scenarios (scenarios_window.py) run in a pytest of their own, on a real X server:
tests/app/test_window_scenarios.py starts Xvfb and this run (a process whose Qt is xcb, not the
suite's offscreen one). Inert in the suite's own run: it collects no file here."""

from __future__ import annotations

import json
import os

import pytest

RESULTS = os.environ.get("TAPESCOPE_SCENARIO_RESULTS")


def pytest_runtest_logreport(report):
    """One line per scenario (its outcome and, when it failed, why) for the outer test."""
    if not RESULTS or (report.when != "call" and report.passed):
        return
    name = report.nodeid.split("::")[-1]
    with open(RESULTS, "a", encoding="utf-8") as f:
        f.write(json.dumps({"name": name, "when": report.when, "outcome": report.outcome,
                            "why": str(report.longrepr)[-3000:] if report.failed else "",
                            "s": round(report.duration, 2)}) + "\n")


@pytest.fixture(scope="session")
def shots():
    """The folder each scenario saves its screenshot into."""
    d = os.environ.get("TAPESCOPE_SCENARIO_SHOTS")
    if not d:
        pytest.skip("run through tests/app/test_window_scenarios.py (it starts Xvfb)")
    os.makedirs(d, exist_ok=True)
    return d
