"""Issue 46 item 6: the scenario suite under a real X server. This module starts Xvfb (as
test_desktop.py does; skipped with a reason only where no Xvfb or no xcb library exists, and CI
installs both) and runs tests/scenarios/scenarios_window.py there in a pytest of its own: Qt
picks its platform once per process, and the rest of this suite is offscreen. Each scenario is
one test here, with the inner run's verdict and its screenshot (kept under
``TAPESCOPE_KEEP_SHOTS`` when set: docs/window.md's pictures come from there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.desktop import colours, display_env, xvfb_display

ROOT = Path(__file__).resolve().parents[2]
INNER = ROOT / "tests" / "scenarios" / "scenarios_window.py"
@pytest.fixture(scope="module")
def xvfb():
    """A private Xvfb display (1280x800) for this module; skipped with a reason if unusable."""
    with xvfb_display() as display:
        yield display


SCENARIOS = {  # test name in the inner module → the screenshots it saves
    "test_live_pause_first_divergence_opens_in_the_inspector": ["live-first-divergence"],
    "test_scrub_to_a_kept_and_to_an_unkept_step": ["scrub-kept-step", "scrub-unkept-step"],
    "test_the_stepper_walks_two_steps": ["stepper-step-late", "stepper-step-2"],
    "test_elements_at_the_default_dock_width_show_the_bits": ["elements-default-width"],
    "test_fit_shows_the_model_labelled[mlp]": ["fit-mlp"],
    "test_fit_shows_the_model_labelled[transformer]": ["fit-transformer"],
    "test_fit_shows_the_model_labelled[tape10k]": ["fit-tape10k"],
    "test_fit_shows_the_model_labelled[torch_cnn]": ["fit-torch_cnn"],
    "test_file_export_graph_as_png": ["export-graph", "export-status"],
}
pytestmark = pytest.mark.xdist_group("window_scenarios")  # one worker runs the inner suite once


@pytest.fixture(scope="module")
def run(xvfb, tmp_path_factory):
    """The inner pytest on the Xvfb display: {scenario: its report line}, the shots folder."""
    tmp = tmp_path_factory.mktemp("scenarios")
    shots, results = tmp / "shots", tmp / "results.jsonl"
    env = display_env(tmp, DISPLAY=xvfb, QT_QPA_PLATFORM="xcb",
               TAPESCOPE_SCENARIO_SHOTS=str(shots), TAPESCOPE_SCENARIO_RESULTS=str(results))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-o", "addopts=", "-o", "python_files=scenarios_*.py",
                        "--rootdir", str(ROOT), str(INNER)],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=280)
    got = {}
    if results.exists():
        for line in results.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec["outcome"] != "passed" or rec["name"] not in got:
                got[rec["name"]] = rec
    keep = os.environ.get("TAPESCOPE_KEEP_SHOTS")
    if keep and shots.exists():
        shutil.copytree(shots, keep, dirs_exist_ok=True)
    return got, shots, r


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(run, name):
    got, shots, r = run
    rec = got.get(name)
    assert rec is not None, f"{name} did not run:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    assert rec["outcome"] == "passed", f"{rec['when']}: {rec['why']}"
    for shot in SCENARIOS[name]:
        png = shots / f"{shot}.png"
        assert png.is_file(), png
        assert colours(png) > 30, f"{png} is a blank frame"


def test_every_scenario_is_listed_here(run):
    got, _, r = run
    assert set(got) == set(SCENARIOS), (sorted(set(got) ^ set(SCENARIOS)), r.stdout[-2000:])
