"""Outputs are checked before the run and written whole: a bad place costs nothing, a full disk
keeps the previous good file (core.atomic)."""

from __future__ import annotations

import subprocess
import sys

from tapescope.app.cli import main
from tests.helpers.fs_faults import full_disk, read_only

CLI = [sys.executable, "-m", "tapescope.app.cli"]


def one_line_before_any_work(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert p.stdout == "", p.stdout  # not a step was run, not a device line printed
    return lines[0]


def test_a_missing_folder_is_one_line_before_the_run_and_is_never_created(tmp_path):
    where = tmp_path / "no" / "dir"
    p = subprocess.run([*CLI, "report", "--steps", "50", "--out", str(where / "r.html")],
                       capture_output=True, text=True, timeout=300)
    line = one_line_before_any_work(p)
    assert line == f"tapescope report: cannot write --out {where / 'r.html'}: the folder " \
                   f"{where} does not exist"
    assert not (tmp_path / "no").exists()
    p = subprocess.run([*CLI, "parity", "--steps", "50", "--json", str(where / "x.json")],
                       capture_output=True, text=True, timeout=300)
    assert "--json" in one_line_before_any_work(p) and not (tmp_path / "no").exists()


def test_a_read_only_place_is_refused_before_the_run(tmp_path, monkeypatch, capsys):
    read_only(monkeypatch)
    for argv in (["report", "--out", str(tmp_path / "r.html")],
                 ["parity", "--json", str(tmp_path / "p.json")],
                 ["fuse", "--json", str(tmp_path / "f.json")]):
        assert main([*argv, "--steps", "50"] if argv[0] != "fuse" else argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, (out, err)
        assert "Read-only file system" in err and str(tmp_path) in err


def test_parity_json_on_a_full_disk_keeps_the_good_file(tmp_path, monkeypatch, capsys):
    good = tmp_path / "p.json"
    good.write_text('{"good": "file"}')
    assert main(["parity", "--device", "host", "--steps", "1", "--json", str(good)]) == 0
    capsys.readouterr()
    good.write_text('{"good": "file"}')
    full_disk(monkeypatch)
    assert main(["parity", "--device", "host", "--steps", "1", "--json", str(good)]) == 2
    monkeypatch.undo()
    err = capsys.readouterr().err
    # (the CLI adds where the fake os.write raised: tests/helpers/fs_faults.py and its line)
    assert err.startswith(f"tapescope parity: cannot write {good}: No space left on device "
                          "(the old file is unchanged)") and err.count("\n") == 1, err
    assert good.read_text() == '{"good": "file"}'
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_settings_are_written_atomically_by_qt(tmp_path):
    from PySide6.QtCore import QSettings

    s = QSettings(str(tmp_path / "tapescope.ini"), QSettings.IniFormat)
    assert s.isAtomicSyncRequired()  # QSaveFile: a temporary, then a rename, never in place
    s.setValue("recent", ["a.tape"])
    s.sync()
    assert s.status() == QSettings.NoError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tapescope.ini"]
