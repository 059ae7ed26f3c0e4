"""Values of the same bytes stored once (issue 42's speed work): the recorder names one array
for each value whose bytes another already holds (a view's output and its input), the file's
reader reads and checks such an array once and still refuses a corrupt one before handing it
out, and the judge's shortcut for reshapes and copies of the same bytes gives the same report
as re-running them."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest
import xxhash

torch = pytest.importorskip("torch")

from tapescope.core.capture import judge as J  # noqa: E402
from tapescope.core.capture.file import CaptureFileError, load, save  # noqa: E402


def _header(shapes: list, array: list, digests: list) -> dict:
    return {"steps": 0, "values": {"dtypes": ["float32"], "dtype": [0] * len(shapes),
                                   "shape": shapes, "sha256": digests, "array": array},
            "ops": {"names": [], "modules": [], "sources": [], "op": [], "module": [],
                    "phase": [], "step": [], "source": [], "args": [], "kwargs": [],
                    "outputs": []}, "losses": [], "initial": {}, "settings": {}, "meta": {}}


def test_one_array_named_by_two_values_is_read_once_and_checked(tmp_path):
    a = np.arange(6, dtype=np.float32)
    d = hashlib.sha256(a.tobytes()).hexdigest()
    f = tmp_path / "shared.capture"
    save(f, _header([[6], [2, 3]], [0, 0], [d, d]), [a])
    cap = load(f)
    assert cap.arrays[0].shape == (6,) and cap.arrays[1].shape == (2, 3)
    assert cap.arrays[0].tobytes() == cap.arrays[1].tobytes() == a.tobytes()
    assert not cap.arrays[0].flags.writeable and not cap.arrays[1].flags.writeable
    data = bytearray(f.read_bytes())
    data[64] ^= 1  # the shared array's first byte
    bad = tmp_path / "corrupt.capture"
    bad.write_bytes(bytes(data))
    with pytest.raises(CaptureFileError, match=r"corrupt array 0 \(value 0\).*sha256 digest"):
        load(bad)


def test_a_value_naming_an_array_of_another_size_or_digest_is_refused(tmp_path):
    a = np.arange(6, dtype=np.float32)
    d = hashlib.sha256(a.tobytes()).hexdigest()
    f = tmp_path / "size.capture"
    save(f, _header([[6], [5]], [0, 0], [d, d]), [a])
    with pytest.raises(CaptureFileError, match=r"value 1: array 0 holds 24 bytes"):
        load(f)
    g = tmp_path / "digest.capture"
    save(g, _header([[6], [6]], [0, 0], [d, "0" * 64]), [a])
    with pytest.raises(CaptureFileError, match=r"value 1: its digest and array 0's differ"):
        load(g)


def _step_with_views():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    x = torch.randn(8, 2, 16)

    def step() -> None:
        y = m(x.view(16, 16)).reshape(8, 2, 4)  # views: outputs of the same bytes
        loss = y.float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


@pytest.fixture(scope="module")
def views_capture(tmp_path_factory):
    """The step captured twice from the same seed: by ``capture`` (its values written to the
    file as they are recorded), and by a recorder that holds them until ``save`` (in memory)."""
    from tapescope.app.capture import capture
    from tapescope.app.capture.recorder import Recorder

    folder = tmp_path_factory.mktemp("shared")
    f = folder / "views.capture"
    step = _step_with_views()
    with capture(f, steps=2):
        step()
        step()
    step = _step_with_views()
    rec = Recorder(steps=2).start()
    try:
        step()
        step()
    finally:
        rec.stop()
    rec.save(str(folder / "memory.capture"))
    return f, rec, folder / "memory.capture"


def test_the_recorder_stores_same_bytes_once(views_capture):
    f, rec, held = views_capture
    cap = load(held)
    stored = [v for v, a in enumerate(rec.v_array) if a is not None]
    assert all(cap.arrays[v] is not None for v in stored)
    for v in stored:  # every value's bytes as recorded
        assert cap.arrays[v].tobytes() == np.ascontiguousarray(rec.v_array[v]).tobytes()
        assert xxhash.xxh3_128_hexdigest(cap.arrays[v].tobytes()) == cap.digests[v]
    names = {}
    for v in stored:
        names.setdefault((cap.digests[v], cap.arrays[v].nbytes), []).append(v)
    shared = [vs for vs in names.values() if len(vs) > 1]
    assert shared, "the step's views should give values of the same bytes"
    for vs in shared:  # one buffer for all of them
        assert len({cap.arrays[v].__array_interface__["data"][0] for v in vs}) == 1
    # written as recorded: the same file, byte for byte, but the time it took
    spooled = load(f)
    assert spooled.digests == cap.digests
    assert [None if a is None else a.tobytes() for a in spooled.arrays] \
        == [None if a is None else a.tobytes() for a in cap.arrays]
    assert _arrays_part(f) == _arrays_part(held)
    assert json.loads(_header_text(f))["arrays"] == json.loads(_header_text(held))["arrays"]


def _arrays_part(f) -> bytes:
    data = f.read_bytes()
    return data[:struct.unpack("<8sQQ32s", data[-56:])[1]]


@pytest.mark.skipif(not J.reference_available(), reason="core.capture.aten_ref is not there")
def test_the_same_bytes_shortcut_gives_the_report_of_re_running(views_capture, monkeypatch):
    cap = load(views_capture[0])
    fast = J.judge(cap)
    monkeypatch.setattr(J, "_SAME_BYTES_OPS", frozenset())
    slow = J.judge(cap)
    assert fast["reference_calls"] < slow["reference_calls"]  # the shortcut was taken
    for key in ("counts", "first_divergence", "introduced", "losses", "ops", "exact"):
        assert fast[key] == slow[key], key


@pytest.mark.skipif(not J.reference_available(), reason="core.capture.aten_ref is not there")
def test_the_shortcut_follows_an_inherited_difference(views_capture, monkeypatch):
    """A view of a value the chain holds (the reference departed before it): the chain's
    value goes on, reshaped, and the view is ``inherited``, as re-running it says."""
    cap = load(views_capture[0])
    ops = cap.ops
    i = next(i for i, op in enumerate(ops["op"])
             if op in J._SAME_BYTES_OPS and ops["args"][i] and isinstance(ops["args"][i][0], dict)
             and cap.digests[ops["args"][i][0]["T"]] == cap.digests[ops["outputs"][i][0]]
             and cap.dtypes[ops["outputs"][i][0]] == "float32")
    v_in = ops["args"][i][0]["T"]
    chain = {v_in: np.nextafter(cap.arrays[v_in], np.float32(np.inf))}
    got, tot = J._same_bytes(cap, ops["op"][i], ops["args"][i], ops["outputs"][i],
                             [cap.arrays[ops["outputs"][i][0]]], chain)
    rec = cap.arrays[ops["outputs"][i][0]]
    assert got[0] is rec
    assert tot[0].shape == rec.shape and not tot[0].flags.writeable
    assert tot[0].tobytes() == chain[v_in].tobytes()
    ref = J._reference_fn()[0](ops["op"][i], [chain[v_in], *ops["args"][i][1:]],
                               ops["kwargs"][i])
    assert np.asarray(ref[0]).tobytes() == tot[0].tobytes()  # what re-running it gives


@pytest.mark.parametrize("workers", [0, 2])
def test_hashing_on_the_pool_names_the_same_first_corrupt_array(tmp_path, monkeypatch, workers):
    """The load hashes large arrays on a pool while it reads on: a file with two corrupt
    arrays is refused naming the first of them, as when each is hashed where it is read."""
    from tapescope.core.capture import file as F

    monkeypatch.setattr(F, "_hash_workers", lambda: workers)
    monkeypatch.setattr(F, "_POOL_MIN", 1)  # every array on the pool
    arrays = [np.full(1000, i, dtype=np.float32) for i in range(5)]
    ds = [hashlib.sha256(a.tobytes()).hexdigest() for a in arrays]
    f = tmp_path / "five.capture"
    save(f, _header([[1000]] * 5, [0, 1, 2, 3, 4], ds), arrays)
    cap = load(f)
    assert [a.tobytes() for a in cap.arrays] == [a.tobytes() for a in arrays]
    assert not any(a.flags.writeable for a in cap.arrays)
    table = json.loads(_header_text(f))["arrays"]
    data = bytearray(f.read_bytes())
    for ai in (3, 1):  # arrays 1 and 3 corrupt: array 1 is the one named
        data[table[ai][0] + 7] ^= 0x10
    bad = tmp_path / "two-bad.capture"
    bad.write_bytes(bytes(data))
    with pytest.raises(CaptureFileError, match=r"corrupt array 1 \(value 1\)"):
        load(bad)


def _header_text(f) -> bytes:
    data = f.read_bytes()
    _, hoff, hlen, _ = struct.unpack("<8sQQ32s", data[-56:])
    return data[hoff:hoff + hlen]
