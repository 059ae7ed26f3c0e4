"""A capture's values written to its file as they are recorded (issue 42's speed work): the
recorder writes each stored value's bytes from the tensor's memory straight into a temporary
beside the file (no private copy held until the end and written again), and ``save`` appends
the header and renames it. The file is the one the in-memory recorder writes, byte for byte;
a full disk, a step never completed, or a recorder dropped leaves no temporary and the old
file as it was; the script's own results do not move."""

from __future__ import annotations

import errno
import gc
import json
import os
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core.capture.file import load  # noqa: E402
from tests.helpers.fs_faults import full_disk  # noqa: E402


def _step():
    """Every kind of stored value: contiguous outputs, transposes (a C-order copy), a
    bfloat16 value (no numpy dtype of its own), views of the same bytes, in-place writes."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.Linear(48, 8))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(6, 24)

    def step() -> float:
        h = m(x)
        b = h.to(torch.bfloat16).float()  # a bfloat16 value between
        loss = (b.t() @ b).pow(2).mean()  # a transposed view
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def _memory(path, steps: int = 2, **kw) -> list[float]:
    """The same step captured by a recorder that holds its values until ``save``."""
    step = _step()
    rec = R.Recorder(steps=steps, **kw).start()
    try:
        losses = [step() for _ in range(steps)]
    finally:
        rec.stop()
    rec.save(str(path))
    return losses


def _spooled(path, steps: int = 2, **kw) -> list[float]:
    step = _step()
    with capture(path, steps=steps, **kw):
        losses = [step() for _ in range(steps)]
    return losses


def _parts(path) -> tuple[bytes, dict]:
    data = path.read_bytes()
    _, hoff, hlen, _ = struct.unpack("<8sQQ32s", data[-56:])
    header = json.loads(data[hoff:hoff + hlen])
    header["meta"].pop("record_seconds")
    return data[:hoff], header


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("max_bytes", [1 << 30, 20_000])  # everything stored; most hashed
def test_a_spooled_capture_is_the_in_memory_one_byte_for_byte(tmp_path, max_bytes):
    plain = [_step()() for _ in range(1)]
    held, spooled = tmp_path / "held.capture", tmp_path / "spooled.capture"
    assert _memory(held, max_bytes=max_bytes)[:1] == plain
    assert _spooled(spooled, max_bytes=max_bytes)[:1] == plain  # the script's own bits
    a, ha = _parts(held)
    b, hb = _parts(spooled)
    assert a == b  # the arrays, in the same places
    assert ha == hb
    cap = load(spooled)
    assert "bfloat16" in cap.dtypes
    stored = [v for v, x in enumerate(cap.arrays) if x is not None]
    assert stored and (max_bytes > 1 << 20 or len(stored) < len(cap.arrays))
    assert _leftovers(tmp_path) == []


def test_the_values_wait_beside_the_file_while_the_run_is_recorded(tmp_path):
    f = tmp_path / "run.capture"
    step = _step()
    with capture(f, steps=2):
        step()
        waiting = _leftovers(tmp_path)
        step()
    assert len(waiting) == 1 and waiting[0].startswith(".run.capture.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.capture"]


def test_a_full_disk_while_recording_keeps_the_old_file_and_the_script_runs_on(
        tmp_path, monkeypatch):
    f = tmp_path / "run.capture"
    f.write_bytes(b"the last capture")
    plain = (lambda s: [s() for _ in range(3)])(_step())
    step = _step()
    full_disk(monkeypatch, after=20_000)  # the file's first values fit, then the disk is full
    losses = []
    with pytest.raises(OSError, match=f"cannot write {f}: No space left on device") as e:
        with capture(f, steps=2):
            losses = [step() for _ in range(3)]
    assert e.value.errno == errno.ENOSPC
    assert losses == plain  # the recorder stopped; the step's results are the same bits
    assert f.read_bytes() == b"the last capture" and _leftovers(tmp_path) == []


def test_a_recorder_dropped_without_a_file_leaves_nothing(tmp_path):
    step = _step()
    rec = R.Recorder(steps=2, spool=tmp_path / "never.capture").start()
    try:
        step()
    finally:
        rec.stop()
    assert len(_leftovers(tmp_path)) == 1 and isinstance(rec.v_array[0], int)
    rec.discard()
    assert list(tmp_path.iterdir()) == []
    rec = R.Recorder(steps=2, spool=tmp_path / "dropped.capture").start()
    try:
        step()
    finally:
        rec.stop()
    assert len(_leftovers(tmp_path)) == 1
    del rec  # an exception took it, or the script ended before its steps
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_cannot_hold_the_values_is_said_at_the_end_as_before(tmp_path):
    f = tmp_path / "missing" / "run.capture"
    step = _step()
    with pytest.raises(OSError, match=f"cannot write {f}"):
        with capture(f, steps=1):
            step()
    assert list(tmp_path.iterdir()) == []


def test_a_chdir_inside_the_block_does_not_move_the_file(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    step = _step()
    with capture("run.capture", steps=1):
        os.chdir(tmp_path / "elsewhere")
        step()
    assert load(tmp_path / "run.capture").steps == 1
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_hashes_only_and_the_hashing_thread_keep_no_spool(tmp_path, monkeypatch):
    """Hashes only stores nothing; the hashing thread's values are hashed after the op, so
    they stay in memory until ``save``: neither opens a temporary."""
    for kw in ({"hashes_only": True}, {"digest": "sha256"}):
        monkeypatch.setattr(R.Recorder, "async_hash", "digest" in kw)
        rec = R.Recorder(steps=1, spool=tmp_path / "x.capture", **kw).start()
        try:
            _step()()
        finally:
            rec.stop()
        assert rec.spool is None and _leftovers(tmp_path) == []
        assert all(a is None or isinstance(a, np.ndarray) for a in rec.v_array)
