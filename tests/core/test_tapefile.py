"""Tape files round-trip bit-exactly; truncated, bit-flipped and foreign files are refused."""

import numpy as np
import pytest

from tapescope.core import Tape, ops, tapefile, workloads
from tapescope.core.tapefile import TapeFileError


@pytest.fixture
def recorded(tmp_path):
    wl = workloads.get("transformer")
    loss = wl.record(0)
    wl.tape.backward(loss)
    path = tapefile.save(wl.tape, tmp_path / "ep.tape", meta={"workload": "transformer"})
    return wl.tape, path


def test_round_trip_is_bit_exact(recorded):
    tape, path = recorded
    back, meta = tapefile.load(path)
    assert meta == {"workload": "transformer"}
    assert back.dtype == tape.dtype and len(back) == len(tape)
    for a, b in zip(tape.nodes, back.nodes, strict=True):
        assert (a.op, a.inputs, a.shape, a.name, a.requires_grad) == \
            (b.op, b.inputs, b.shape, b.name, b.requires_grad)
        assert dict(a.attrs) == dict(b.attrs)
        assert np.asarray(tape.value(a.id)).tobytes() == np.asarray(back.value(b.id)).tobytes()
        ga, gb = tape.grad(a.id), back.grad(b.id)
        assert (ga is None) == (gb is None)
        if ga is not None:
            assert ga.tobytes() == gb.tobytes()
    assert [p.id for p in back.params()] == [p.id for p in tape.params()]


def test_float32_round_trip(tmp_path):
    t = Tape(dtype=np.float32)
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3))
    t.backward(ops.sum(ops.tanh(x)))
    back, _ = tapefile.load(tapefile.save(t, tmp_path / "f.tape"))
    assert back.dtype == np.float32 and back.grad(0).tobytes() == t.grad(0).tobytes()


def test_truncated_file_is_refused(recorded, tmp_path):
    _, path = recorded
    data = path.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 30):
        bad = tmp_path / f"cut{cut}.tape"
        bad.write_bytes(data[:cut])
        with pytest.raises(TapeFileError, match=str(bad.name)):
            tapefile.load(bad)


def test_bit_flips_in_data_are_refused(recorded, tmp_path):
    _, path = recorded
    data = path.read_bytes()
    rng = np.random.default_rng(0)
    # flip bits inside the stored members (the first 80% of an npz is member data)
    for pos in rng.integers(64, int(len(data) * 0.8), 12):
        flipped = bytearray(data)
        flipped[pos] ^= 0x04
        bad = tmp_path / "flip.tape"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(TapeFileError, match="flip.tape"):
            tapefile.load(bad)


def test_foreign_files_are_refused(tmp_path):
    txt = tmp_path / "notes.tape"
    txt.write_text("hello")
    with pytest.raises(TapeFileError, match="not an npz archive"):
        tapefile.load(txt)
    npz = tmp_path / "other.npz"
    np.savez(npz, a=np.ones(3))
    with pytest.raises(TapeFileError, match="no header"):
        tapefile.load(npz)
    with pytest.raises(TapeFileError, match="no such file"):
        tapefile.load(tmp_path / "missing.tape")


def test_pickled_arrays_are_never_loaded(tmp_path):
    evil = tmp_path / "evil.tape"
    np.savez(evil, header=np.frombuffer(b"{}", dtype=np.uint8),
             v0=np.array([object()], dtype=object))
    with pytest.raises(TapeFileError):
        tapefile.load(evil)
