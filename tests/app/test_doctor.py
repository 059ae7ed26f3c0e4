"""``tapescope doctor`` and ``tapescope --version``: one table that says what this machine has,
checked against what the backends themselves find."""

from __future__ import annotations

import os
import shutil

import pytest

from tapescope.app.cli import main
from tapescope.app.commands import doctor

NAMES = ["Python", "numpy", "Qt", "display", "gcc", "native", "NVRTC", "CuPy", "GPU", "torch",
         "capture"]


def _table(capsys) -> dict[str, str]:
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tapescope ")
    return {ln.split()[0]: ln for ln in lines[1:]}


def test_doctor_says_exactly_what_this_machine_has(capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    rows = _table(capsys)
    assert list(rows) == NAMES
    import numpy

    assert rows["numpy"].split()[1:3] == ["ok", numpy.__version__]
    assert rows["Python"].split()[1] == "ok"
    assert (rows["gcc"].split()[1] == "ok") == (shutil.which(os.environ.get("TAPESCOPE_CXX",
                                                                          "g++")) is not None)
    from tapescope.gpu.cuda import cuda_unavailable_reason

    why = cuda_unavailable_reason()
    if why is None:
        assert rows["GPU"].split()[1] == "ok"
    else:
        assert "not available" in rows["GPU"] and why in rows["GPU"]
    try:
        from tapescope.gpu.nvrtc import cuda_version_text, nvrtc_version

        assert f"NVRTC {cuda_version_text(nvrtc_version())}" in rows["NVRTC"]
    except Exception:  # noqa: BLE001  (no NVRTC here: the row must say what to install)
        assert "pip install" in rows["NVRTC"]
    assert "no display" in rows["display"] and "--screenshot" in rows["display"]
    from tapescope.core.native import isa

    assert rows["native"].split()[1:3] == ["ok", isa.chosen()]


def test_a_path_the_cpu_cannot_run_is_missing_with_what_to_do(capsys, monkeypatch):
    monkeypatch.setenv("TAPESCOPE_ISA", "avx9000")
    row = _table(capsys)["native"]
    assert row.split()[1] == "MISSING" and "TAPESCOPE_ISA" in row and "unset" in row


def test_what_is_missing_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("TAPESCOPE_CXX", "no-such-cxx")
    monkeypatch.setattr(doctor, "_dist", lambda *names: None)  # no PySide6, CuPy, torch

    def broken():
        raise RuntimeError("numpy is half installed\nsecond line")

    monkeypatch.setattr(doctor, "CHECKS", [(n, broken if n == "numpy" else c)
                                           for n, c in doctor.CHECKS])
    rows = _table(capsys)
    assert "MISSING" in rows["gcc"] and "no-such-cxx" in rows["gcc"]
    assert "apt-get install g++" in rows["gcc"]
    assert "MISSING" in rows["Qt"] and "pip install PySide6-Essentials" in rows["Qt"]
    assert "not available" in rows["CuPy"] and "pip install cupy-cuda12x" in rows["CuPy"]
    assert "not available" in rows["torch"] and "pip install torch" in rows["torch"]
    assert "RuntimeError: numpy is half installed second line" in rows["numpy"]


def test_build_makes_the_capture_recorders_c_path_that_the_row_then_finds(capsys, monkeypatch,
                                                                         tmp_path):
    """With an empty kernel cache the capture row says the C path is not built and what to run;
    ``doctor --build`` builds it (core.native's library is built by its own tests: counted
    here, not rebuilt), and the row, looking it up as a user's process would, finds it."""
    import sysconfig

    pytest.importorskip("torch")
    if shutil.which(os.environ.get("CC", "gcc")) is None or not os.path.isfile(
            os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        pytest.skip("no gcc or Python.h: the recorder's Python path runs (the row says so)")
    from tapescope.app.capture import recorder_native
    from tapescope.core import native

    monkeypatch.delenv("TAPESCOPE_NO_NATIVE", raising=False)
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(recorder_native, "_mod", False)
    built = []
    monkeypatch.setattr(native, "library", lambda build=True: built.append(build))
    row = _table(capsys)["capture"]
    assert "not available" in row and "not built yet" in row and "doctor --build" in row
    assert built == []  # the table alone builds nothing
    monkeypatch.setattr(recorder_native, "_mod", False)
    assert main(["doctor", "--build"]) == 0
    row = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[1:]}["capture"]
    assert row.split()[1] == "ok" and "is built" in row and built == [True]
    monkeypatch.setattr(recorder_native, "_mod", False)
    assert recorder_native.module(build=False) is not None  # a guest's lookup finds it


def test_the_capture_row_without_native_code(capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("TAPESCOPE_NO_NATIVE", "1")
    row = _table(capsys)["capture"]
    assert "not available" in row and "TAPESCOPE_NO_NATIVE" in row and "Python path" in row


def test_version(capsys):
    from tapescope.app.about import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tapescope {version()}\n"
