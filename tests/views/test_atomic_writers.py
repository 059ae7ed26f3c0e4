"""views.models.repro's repro folder and views.examples --save write through core.atomic: a failure
in the middle of a write (a full disk) leaves the old files as they were and no temporary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tapescope.views.models import repro
from tests.helpers.fs_faults import full_disk

NODE = {"id": 3, "op": "exp", "attrs": {}, "shape": [4], "dtype": "float64", "step": 2,
        "reference": "cpu", "candidate": "host"}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_repro_written_again_on_a_full_disk_leaves_the_old_one_whole(tmp_path, monkeypatch):
    out = tmp_path / "repro"
    x = np.linspace(0, 1, 4)
    repro.write_repro(out, NODE, [x], np.exp(x), np.exp(x))
    before = _files(out)
    assert set(before) == {"input0.npy", "candidate.npy", "reference.npy", "node.json",
                           "repro.py"}
    big = np.arange(100_000, dtype=np.float64)  # the second repro's files are larger
    full_disk(monkeypatch, after=200_000)  # fails in the middle of the candidate's file
    with pytest.raises(OSError, match="cannot write .*No space left on device"):
        repro.write_repro(out, {**NODE, "shape": [100_000]}, [big], big + 1, big)
    assert _files(out) == before  # every old file, byte for byte; no temporary left
    monkeypatch.undo()
    repro.write_repro(out, {**NODE, "shape": [100_000]}, [big], big + 1, big)
    assert np.load(out / "candidate.npy").tobytes() == (big + 1).tobytes()


def test_examples_save_on_a_full_disk_keeps_the_old_picture(qapp, tmp_path, monkeypatch, capsys):
    from tapescope.views import examples

    assert examples.main(["kernels", "--save", str(tmp_path)]) == 0
    png = tmp_path / "kernels.png"
    old = png.read_bytes()
    assert old[:8] == b"\x89PNG\r\n\x1a\n"
    png.write_bytes(old + b"marker")  # so "unchanged" cannot be "rewritten the same"
    kept = png.read_bytes()
    full_disk(monkeypatch, after=1000)
    assert examples.main(["kernels", "--save", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "could not write" in err and "No space left on device" in err
    assert png.read_bytes() == kept and sorted(p.name for p in tmp_path.iterdir()) == [
        "kernels.png"]
