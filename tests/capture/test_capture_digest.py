"""A capture's value digests (core/capture/file.py ``DIGESTS``, docs/capture.md "The file"): the
header names its algorithm (``xxh3_128`` by default, ``sha256`` by choice); a file that names
none is the first layout (SHA-256) and loads and verifies as before.

Hostile headers first: an unknown algorithm, a digest of the wrong length or alphabet for the
file's algorithm (a value's, an array's): one line naming the file and the entry, exit 2. Then
the layouts: the first one (written by the SHA-256 path, no algorithm named) loads, is checked
and is refused when corrupt; a new file's digests are direct XXH3-128s of the values' bytes;
a truncated array is a clear error; ``capture --digest sha256`` reaches the script's recorder.
Then across captures: two captures of different algorithms
are compared by their stored arrays (a pair agreeing with itself, the ranks), and refused
(one line: both files, their algorithms, ``--digest``) where neither stores every value."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash

from tapescope.core.capture.file import (
    DIGESTS,
    CaptureFileError,
    DigestMismatchError,
    comparable,
    digest,
    load,
    save,
    uninitialised_digest,
)
from tapescope.core.capture.ranks import judge_ranks, load_ranks, rank_path
from tests.helpers.capture_files import one_error_line, rewrite_header

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


ARRAYS = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, -2, 3], dtype=np.int64),
          np.array(2.5)]


def _header(algorithm: str | None, arrays: list[np.ndarray] = ARRAYS,
            stored: list[bool] | None = None) -> dict:
    """A capture header of ``arrays`` as values (no ops): ``algorithm`` None is the first layout
    (SHA-256 in ``values.sha256``, no algorithm named); ``stored[i]`` False: value i by its
    digest only."""
    alg = algorithm or "sha256"
    stored = stored or [True] * len(arrays)
    names = sorted({str(a.dtype) for a in arrays})
    array_of, k = [], 0
    for s in stored:
        array_of.append(k if s else -1)
        k += s
    values = {"dtypes": names, "dtype": [names.index(str(a.dtype)) for a in arrays],
              "shape": [list(a.shape) for a in arrays], "array": array_of,
              ("digests" if algorithm else "sha256"): [digest(a, alg) for a in arrays]}
    h = {"steps": 0, "values": values,
         "ops": {"names": [], "modules": [], "sources": [], "op": [], "module": [], "phase": [],
                 "step": [], "source": [], "args": [], "kwargs": [], "outputs": []},
         "losses": [], "initial": {}, "settings": {}, "meta": {}}
    if algorithm:
        h["digest"] = algorithm
    return h


def _write(path: Path, algorithm: str | None, arrays=ARRAYS, stored=None) -> Path:
    stored = stored or [True] * len(arrays)
    save(path, _header(algorithm, arrays, stored), [a for a, s in zip(arrays, stored,
                                                                       strict=True) if s])
    return path


def _set(*path_and_value):
    *keys, value = path_and_value

    def edit(h: dict) -> None:
        d = h
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value(d[keys[-1]]) if callable(value) else value
    return edit


def _value_digest(i: int, new):
    def edit(h: dict) -> None:
        key = "digests" if "digest" in h else "sha256"
        h["values"][key][i] = new(h["values"][key][i])
    return edit


def _array_digest(i: int, new):
    def edit(h: dict) -> None:
        h["arrays"][i][2] = new(h["arrays"][i][2])
    return edit


# ---- hostile headers --------------------------------------------------------------------------
HOSTILE = {  # (the file's algorithm, its edit, what the one line says)
    "unknown-algorithm": ("xxh3_128", _set("digest", "md5"),
                          "'digest' names the algorithm 'md5'"),
    "algorithm-not-a-string": ("xxh3_128", _set("digest", ["xxh3_128"]),
                               "'digest' names the algorithm"),
    "sha256-length-in-xxh3": ("xxh3_128", _value_digest(1, lambda d: d * 2),
                              "value 1's digest .* is not a xxh3_128 digest"),
    "xxh3-length-in-sha256": ("sha256", _value_digest(0, lambda d: d[:32]),
                              "value 0's digest .* is not a sha256 digest"),
    "uppercase": ("xxh3_128", _value_digest(2, str.upper),
                  r"value 2's digest .*\(32 lowercase hex digits\)"),
    "not-hex": ("xxh3_128", _value_digest(0, lambda d: "g" + d[1:]),
                "value 0's digest .* is not a xxh3_128 digest"),
    "not-a-string": ("xxh3_128", _value_digest(0, lambda d: 7), "value 0's digest '7'"),
    "array-digest-length": ("xxh3_128", _array_digest(1, lambda d: d + "00"),
                            "array 1's digest .* is not a xxh3_128 digest"),
    "legacy-short-digest": (None, _value_digest(1, lambda d: d[:32]),
                            "value 1's digest .* is not a sha256 digest"),
    # a file naming xxh3_128 with the first layout's list: no 'digests' list at all
    "named-but-legacy-list": (None, _set("digest", "xxh3_128"), "'digests' is not a list"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_digest_header_is_one_clear_error(tmp_path, case):
    alg, edit, want = HOSTILE[case]
    good = _write(tmp_path / "good.capture", alg)
    f = tmp_path / f"{case}.capture"
    f.write_bytes(rewrite_header(good.read_bytes(), edit))
    with pytest.raises(CaptureFileError, match=want) as e:
        load(f)
    assert str(e.value).startswith(f"{f}: ") and "\n" not in str(e.value)


def test_a_hostile_digest_header_is_exit_2_on_the_command_line(tmp_path):
    good = _write(tmp_path / "good.capture", "xxh3_128")
    f = tmp_path / "md5.capture"
    f.write_bytes(rewrite_header(good.read_bytes(), _set("digest", "md5")))
    line = one_error_line(cli("parity", "--capture", str(f)), "parity")
    assert str(f) in line and "'md5'" in line and "xxh3_128, sha256" in line, line


# ---- the layouts ------------------------------------------------------------------------------
def test_the_first_layout_names_no_algorithm_and_loads_as_sha256(tmp_path):
    f = _write(tmp_path / "old.capture", None)
    raw = f.read_bytes()
    _, hoff, hlen, _ = struct.unpack("<8sQQ32s", raw[-56:])
    h = json.loads(raw[hoff:hoff + hlen])
    assert "digest" not in h and "sha256" in h["values"]  # what files before wrote
    cap = load(f)
    assert cap.digest_algorithm == "sha256"
    for a, got, d in zip(ARRAYS, cap.arrays, cap.digests, strict=True):
        assert got.tobytes() == a.tobytes() and got.shape == a.shape
        assert d == hashlib.sha256(a.tobytes()).hexdigest()
    bad = tmp_path / "old-corrupt.capture"
    bad.write_bytes(raw[:64] + bytes([raw[64] ^ 1]) + raw[65:])
    with pytest.raises(CaptureFileError, match=r"corrupt array 0 \(value 0\): its sha256 "):
        load(bad)


@pytest.mark.parametrize("algorithm", sorted(DIGESTS))
def test_a_file_names_its_algorithm_and_its_digests_are_direct(tmp_path, algorithm):
    f = _write(tmp_path / "new.capture", algorithm)
    cap = load(f)
    assert cap.digest_algorithm == algorithm
    direct = {"xxh3_128": xxhash.xxh3_128_hexdigest,
              "sha256": lambda b: hashlib.sha256(b).hexdigest()}[algorithm]
    for a, d in zip(ARRAYS, cap.digests, strict=True):
        assert d == direct(np.ascontiguousarray(a).tobytes())
        assert len(d) == DIGESTS[algorithm][0]
    raw = f.read_bytes()
    bad = tmp_path / "corrupt.capture"
    bad.write_bytes(raw[:64 + 8] + bytes([raw[64 + 8] ^ 0x80]) + raw[64 + 9:])
    with pytest.raises(CaptureFileError, match=rf"corrupt array 0 \(value 0\): its {algorithm} "
                                               "digest does not match"):
        load(bad)


@pytest.mark.parametrize("algorithm", sorted(DIGESTS))
def test_every_way_of_reading_the_arrays_gives_the_same_arrays_and_refusals(tmp_path,
                                                                            monkeypatch,
                                                                            algorithm):
    """One read of the arrays' span (bytes; each value an array made over its offset in it,
    hashed from a memoryview's slice), a read per array, and the hashing pool: the same values,
    read-only, and the same first corrupt array named."""
    from tapescope.core.capture import file as F

    arrays = [np.zeros((0, 3), np.float32), *ARRAYS, np.array([], np.float64),
              np.arange(70000, dtype=np.float32)]  # empty first and last; one for the pool
    f = _write(tmp_path / "c.capture", algorithm, arrays)
    raw = f.read_bytes()
    _, hoff, hlen, _ = struct.unpack("<8sQQ32s", raw[-56:])
    table = json.loads(raw[hoff:hoff + hlen])["arrays"]
    bad = bytearray(raw)
    for ai in (3, 1):  # two corrupt arrays: the first value's is named
        bad[table[ai][0]] ^= 1
    (tmp_path / "bad.capture").write_bytes(bytes(bad))
    got = []
    for slab_max, workers in ((F._SLAB_MAX, 0), (-1, 0), (F._SLAB_MAX, 2)):
        monkeypatch.setattr(F, "_SLAB_MAX", slab_max)
        monkeypatch.setattr(F, "_hash_workers", lambda w=workers: w)
        cap = load(f)
        for a, c in zip(arrays, cap.arrays, strict=True):
            assert c.dtype == a.dtype and c.shape == a.shape and c.tobytes() == a.tobytes()
            assert not c.flags.writeable
            if workers == 0 and slab_max > 0:  # over one read's bytes: not even by setflags
                with pytest.raises(ValueError, match="cannot set WRITEABLE"):
                    c.setflags(write=True)
        with pytest.raises(CaptureFileError) as e:
            load(tmp_path / "bad.capture")
        got.append(str(e.value))
    assert got[0] == got[1] == got[2] and f"corrupt array 1 (value 1): its {algorithm}" in got[0]


def test_a_digest_of_a_strided_value_is_of_its_c_order_bytes():
    a = np.arange(24, dtype=np.float32).reshape(4, 6).T  # not C-contiguous
    assert digest(a) == xxhash.xxh3_128_hexdigest(np.ascontiguousarray(a).tobytes())
    assert digest(a, "sha256") == hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_an_array_cut_short_is_a_clear_error_not_a_crash(tmp_path):
    """The arrays are read (not mapped): a file whose arrays' bytes are not all there is the
    truncation error of the array, naming it."""
    from tapescope.core.capture import file as F

    big = [np.arange(1 << 16, dtype=np.float64)]
    f = _write(tmp_path / "big.capture", "xxh3_128", big)

    class Short:  # a file that shrank under the reader: reads stop early
        def __init__(self, f):
            self.f = f

        def seek(self, off):
            self.f.seek(off)

        def readinto(self, view):
            return self.f.readinto(view[:min(len(view), 1000)]) if self.f.tell() < 5000 else 0

    with open(f, "rb") as fh, pytest.raises(CaptureFileError,
                                            match=r"array 0 \(value 0\) is truncated \(5000 of "
                                                  r"524288 bytes\)"):
        F._read(Short(fh), 64, 1 << 19, lambda why: CaptureFileError(f"{f}: {why}"),
                "array 0 (value 0)")


def test_save_refuses_an_unknown_algorithm(tmp_path):
    with pytest.raises(ValueError, match="'md5' is unknown"):
        save(tmp_path / "x.capture", {**_header("xxh3_128"), "digest": "md5"}, ARRAYS)


# ---- across captures --------------------------------------------------------------------------
def test_captures_of_two_algorithms_compare_by_their_stored_arrays(tmp_path):
    a = load(_write(tmp_path / "x.capture", "xxh3_128"))
    b = load(_write(tmp_path / "s.capture", "sha256"))
    assert a.digests != b.digests
    a2, b2 = comparable([a, b])
    assert a2 is a and b2.digest_algorithm == "xxh3_128" and b2.digests == a.digests
    assert b2.arrays is b.arrays and b.digest_algorithm == "sha256"  # b itself unchanged
    # b stores only a part: a (all stored) is the one rehashed, into sha256
    part = load(_write(tmp_path / "p.capture", "sha256", stored=[True, False, True]))
    a3, p3 = comparable([a, part])
    assert p3 is part and a3.digest_algorithm == "sha256" and a3.digests == part.digests


def test_captures_of_two_algorithms_neither_all_stored_are_refused(tmp_path):
    a = load(_write(tmp_path / "x.capture", "xxh3_128", stored=[True, False, True]))
    b = load(_write(tmp_path / "s.capture", "sha256", stored=[False, True, True]))
    with pytest.raises(DigestMismatchError) as e:
        comparable([a, b])
    line = str(e.value)
    assert "\n" not in line and f"{a.path} (xxh3_128)" in line and f"{b.path} (sha256)" in line
    assert "--digest" in line


# a two-op training step, captured in process: its values' digests by either algorithm
def _capture(path: Path, algorithm: str, **kw) -> Path:
    torch = pytest.importorskip("torch")
    from tapescope.app.capture import capture

    torch.manual_seed(0)
    m = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(5, 8)
    with capture(path, steps=1, digest=algorithm, **kw):
        opt.zero_grad()
        m(x).tanh().sum().backward()
        opt.step()
    return path


def test_a_pair_of_two_algorithms(tmp_path):
    """The same run captured with each algorithm agrees with itself (all stored: compared by
    their arrays); hashes only in both: refused, one line naming both files, exit 2."""
    from tapescope.core.capture.pair import pair

    x = _capture(tmp_path / "x.capture", "xxh3_128")
    s = _capture(tmp_path / "s.capture", "sha256")
    cx, cs = load(x), load(s)
    assert (cx.digest_algorithm, cs.digest_algorithm) == ("xxh3_128", "sha256")
    assert cx.digests != cs.digests
    for d, a in zip(cx.digests, cx.arrays, strict=True):
        assert d == xxhash.xxh3_128_hexdigest(a.tobytes())  # the recorder's: direct digests
    rep = pair(cx, cs)
    assert rep["agree"] and rep["parted"] == [] and rep["alignment"]["matched"] == cx.n_ops
    xh = _capture(tmp_path / "xh.capture", "xxh3_128", hashes_only=True)
    sh = _capture(tmp_path / "sh.capture", "sha256", hashes_only=True)
    with pytest.raises(DigestMismatchError):
        pair(load(xh), load(sh))
    line = one_error_line(cli("parity", "--capture", str(xh), "--against", str(sh)), "parity")
    assert f"{xh} (xxh3_128)" in line and f"{sh} (sha256)" in line and "--digest" in line, line


def _rank(out: Path, rank: int, algorithm: str | None, x: np.ndarray, y: np.ndarray,
          stored: bool = True) -> str:
    """Rank ``rank`` of 2 of one run: one ``c10d.allreduce_`` (SUM) of ``x`` into ``y``."""
    arrays = [x, y]
    h = _header(algorithm, arrays, [True, stored])
    h.update(steps=1, losses=[-1], initial={"params": [], "buffers": [], "optimizer_state": []},
             meta={"rank": {"rank": rank, "world_size": 2, "run": "one"}})
    h["ops"] = {"names": ["c10d.allreduce_.default"], "modules": [""], "sources": ["ddp.py:1"],
                "op": [0], "module": [0], "phase": [1], "step": [1], "source": [0],
                "args": [[[{"T": 0}], {"g": [rank, 2]}, {"r": "SUM"}, None]], "kwargs": [{}],
                "outputs": [[1]]}
    path = rank_path(out, rank)
    save(path, h, arrays if stored else [x])
    return path


def test_ranks_of_two_algorithms(tmp_path):
    xs = [np.linspace(-1, 1, 16, dtype=np.float32), np.linspace(2, 3, 16, dtype=np.float32)]
    s = xs[0] + xs[1]
    paths = [_rank(tmp_path / "m", 0, "xxh3_128", xs[0], s), _rank(tmp_path / "m", 1, None,
                                                                    xs[1], s)]
    rs = load_ranks(paths)
    assert [c.digest_algorithm for c in rs.caps] == ["xxh3_128", "xxh3_128"]
    assert rs.caps[0].digests[1] == rs.caps[1].digests[1]  # the same sum: the same digest
    assert judge_ranks(rs)["agree"]
    paths = [_rank(tmp_path / "h", 0, "xxh3_128", xs[0], s, stored=False),
             _rank(tmp_path / "h", 1, None, xs[1], s, stored=False)]
    with pytest.raises(DigestMismatchError, match=r"h\.rank0\.capture \(xxh3_128\) and .*"
                                                  r"h\.rank1\.capture \(sha256\)"):
        load_ranks(paths)


def test_the_capture_command_takes_digest(tmp_path):
    """``tapescope capture --digest sha256`` reaches the script's recorder (the child's
    settings): the file names sha256 and its digests are SHA-256s of the stored values."""
    pytest.importorskip("torch")
    script = tmp_path / "tiny.py"
    script.write_text("import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(3, 2)\n"
                      "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "m(torch.randn(4, 3)).sum().backward()\nopt.step()\n")
    f = tmp_path / "s.capture"
    p = cli("capture", "--digest", "sha256", "--steps", "1", "--out", str(f), "--", "python",
            str(script))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "as sha256 digests only" in p.stdout
    cap = load(f)
    assert cap.digest_algorithm == "sha256" and cap.n_ops > 0
    for v, (a, d) in enumerate(zip(cap.arrays, cap.digests, strict=True)):
        if a is None:  # uninitialised memory (``empty``): its sentinel, never its bytes
            assert d == uninitialised_digest("sha256", cap.dtypes[v], cap.shapes[v])
            continue
        assert d == hashlib.sha256(a.tobytes()).hexdigest()
