"""Tape file version 2 (blocks, one SHA-256 a block, arrays read lazily): round trips, the old
version still read, and hostile files, each refused in one line naming the file (through the
CLI too: exit 2, one line).

Every hostile file is crafted here from a small valid tape: the body (preamble + blocks) kept or
edited, the JSON header edited, the trailer rewritten with the header's true length and SHA-256
so the edit reaches the checks behind the header's own checksum.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import Tape, ops, tapefile
from tapescope.core.tapefile import Limits, TapeFileError
from tests.helpers.tapefile_v2 import (
    TRAILER,
    assemble,
    chain,
    edited,
    loc_of,
    parts,
    refused,
    same,
    set_loc,
    small_tape,
)

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small(tmp_path) -> Path:
    """x[2,3] param -> tanh -> sum, with gradients; meta names the loss; one block an array."""
    return small_tape(tmp_path)


@pytest.fixture
def many(tmp_path) -> Path:
    """A tape of ~83 nodes over many 1 KiB blocks."""
    t, loss = chain()
    return tapefile.save(t, tmp_path / "many.tape", meta={"loss": loss}, block_bytes=1024)


# ---- round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize("lazy", [False, True])
def test_version_2_round_trips_every_bit(tmp_path, lazy):
    t, loss = chain(12)
    path = tapefile.save(t, tmp_path / "c.tape", meta={"loss": loss, "workload": "w"},
                         block_bytes=512)
    assert path.read_bytes()[:len(tapefile.MAGIC)] == tapefile.MAGIC  # the default is v2
    back, meta = tapefile.load(path, lazy=lazy)
    same(t, back)
    assert meta == {"loss": loss, "workload": "w"}
    assert back.dtype == t.dtype and back.math == t.math and back.ok


def test_float32_poisoned_and_empty_tapes_round_trip(tmp_path):
    t = Tape(dtype=np.float32)
    a = t.param(np.ones((2, 3)), name="a")
    ops.add(a, t.const(np.ones((4, 5))))  # poisons
    back, _ = tapefile.load(tapefile.save(t, tmp_path / "p.tape"))
    assert back.dtype == np.float32 and not back.ok and back.error == t.error
    empty, _ = tapefile.load(tapefile.save(Tape(), tmp_path / "e.tape"))
    assert len(empty) == 0


def test_a_lazy_tape_reads_a_block_only_when_touched(many):
    t, _ = tapefile.load(many, lazy=True)
    seq = t._values
    assert seq.blocks_read == 0  # the open read the header only
    t.value(0)
    first = seq.blocks_read
    assert first == 1
    t.value(0), t.value(1)  # the same block (or the next): never read twice
    assert seq.blocks_read <= 2
    t.value(len(t) - 1)
    assert seq.blocks_read <= 3 < len(parts(many)[1]["blocks"])


def test_lazy_nonfinite_flags_come_from_the_file_without_reading(tmp_path):
    t = Tape()
    x = t.param(np.array([1.0, -1.0, 4.0]), name="x")
    y = ops.log(x)  # NaN at -1
    ops.sum(y)
    back, _ = tapefile.load(tapefile.save(t, tmp_path / "n.tape", block_bytes=64), lazy=True)
    assert back._values.nonfinite().tolist() == [False, True, True]
    assert back._values.blocks_read == 0
    assert back._grads.nonfinite().tolist() == [False, False, False]


def test_a_lazy_tape_records_backward_and_resets_like_any_tape(many):
    t, meta = tapefile.load(many, lazy=True)
    ref, _ = tapefile.load(many)
    m = t.mark()
    extra = ops.sum(ops.mul(t.var(0), t.var(0)))
    t.backward(extra)
    ref_extra = ops.sum(ops.mul(ref.var(0), ref.var(0)))
    ref.backward(ref_extra)
    assert t.grad(0).tobytes() == ref.grad(0).tobytes()
    t.reset_to(m)
    assert len(t) == len(ref) - 2
    t.assign(0, np.zeros((4, 8)))
    assert not t.value(0).any() and t.value(2).tobytes() == ref.value(2).tobytes()


# ---- the old version -----------------------------------------------------------------------
def test_version_1_files_are_still_read(tmp_path):
    t, loss = chain(5)
    path = tapefile.save(t, tmp_path / "old.tape", meta={"loss": loss}, version=1)
    assert path.read_bytes()[:4] == b"PK\x03\x04"  # the zip of version 1
    for lazy in (False, True):
        back, meta = tapefile.load(path, lazy=lazy)
        same(t, back)
        assert meta == {"loss": loss}


def test_the_committed_example_tapes_are_version_1_and_load():
    """resources/tapes/*.tape were written by the version-1 writer: a fixture of the old format."""
    for name in ("mlp", "transformer"):
        path = ROOT / "resources" / "tapes" / f"{name}.tape"
        assert path.read_bytes()[:4] == b"PK\x03\x04", path
        back, meta = tapefile.load(path, lazy=True)
        assert len(back) > 10 and meta["workload"] == name
        assert back.value(len(back) - 1).shape == ()


def test_save_refuses_an_unknown_version(tmp_path):
    with pytest.raises(ValueError, match="version 3"):
        tapefile.save(Tape(), tmp_path / "x.tape", version=3)


# ---- hostile: the envelope -----------------------------------------------------------------
@pytest.mark.parametrize("cut", [0, 5, 16, 100, -1, -20, -57, -200])
def test_truncated_files_are_refused(small, tmp_path, cut):
    raw = small.read_bytes()
    bad = tmp_path / "cut.tape"
    bad.write_bytes(raw[:cut] if cut > 0 else raw[:len(raw) + cut] if cut else b"")
    refused(bad)


def test_a_block_truncated_inside_is_refused(many, tmp_path):
    body, h = parts(many)
    start, size, _ = h["blocks"][-1]
    # the last block's bytes shortened by 8: the header still declares them
    refused(assemble(tmp_path / "t.tape", body[:start + size - 8], h), "block")


def test_garbage_after_the_trailer_and_a_bad_header_checksum_are_refused(small, tmp_path):
    raw = small.read_bytes()
    (tmp_path / "g.tape").write_bytes(raw + b"\0" * 8)
    refused(tmp_path / "g.tape")
    body, h = parts(small)
    text = json.dumps(h).encode()
    t2 = tmp_path / "h.tape"
    t2.write_bytes(body + text + TRAILER.pack(tapefile.TRAILER_MAGIC, len(body), len(text),
                                              b"\0" * 32))
    refused(t2, "checksum")


def test_an_oversized_header_length_is_refused_before_reading(small, tmp_path):
    raw = bytearray(small.read_bytes())
    body, _ = parts(small)
    raw[-TRAILER.size:] = TRAILER.pack(tapefile.TRAILER_MAGIC, len(body), 1 << 40, b"\0" * 32)
    (tmp_path / "o.tape").write_bytes(bytes(raw))
    refused(tmp_path / "o.tape")  # 1 TiB declared: refused before any allocation
    refused(small, "limit", limits=Limits(max_header_bytes=64))


def test_wrong_magic_and_version_are_refused(small, tmp_path):
    raw = bytearray(small.read_bytes())
    raw[len(tapefile.MAGIC)] = 9  # the preamble's version
    (tmp_path / "v.tape").write_bytes(bytes(raw))
    refused(tmp_path / "v.tape", "version")
    (tmp_path / "m.tape").write_bytes(b"hello world" * 20)
    refused(tmp_path / "m.tape", "not a tapescope tape")


# ---- hostile: digests ----------------------------------------------------------------------
def test_a_digest_mismatch_in_a_block_touched_late(many, tmp_path):
    body, h = parts(many)
    start, size, _ = h["blocks"][-1]
    flipped = bytearray(body)
    flipped[start + size - 1] ^= 0x01
    bad = assemble(tmp_path / "late.tape", bytes(flipped), h)
    t, _ = tapefile.load(bad, lazy=True)  # the open reads no block
    t.value(0)  # an early block: fine
    last = len(t) - 1
    with pytest.raises(TapeFileError, match="SHA-256") as ei:
        for i in range(len(t)):  # touched late: every array, the last block's among them
            t.value(i), t.grad(i)
    assert str(bad) in str(ei.value) and "\n" not in str(ei.value)
    assert f"block {len(h['blocks']) - 1}" in str(ei.value)
    with pytest.raises(TapeFileError):  # and again: a refused block is never handed out
        t.value(last), t.grad(last)
    refused(bad, "SHA-256")  # an eager load checks every block before returning


def test_an_altered_block_digest_is_refused(many, tmp_path):
    def edit(h):
        h["blocks"][0][2] = "0" * 64
    bad = edited(many, tmp_path / "d.tape", edit)
    refused(bad, "SHA-256")


def test_a_false_nonfinite_claim_is_caught_when_its_block_is_read(tmp_path):
    t = Tape()
    ops.log(t.param(np.array([-1.0, 2.0]), name="x"))
    path = tapefile.save(t, tmp_path / "f.tape")
    bad = edited(path, tmp_path / "lie.tape", lambda h: h.update(nonfinite_values=[]))
    back, _ = tapefile.load(bad, lazy=True)
    assert not back._values.nonfinite().any()  # the claim, until the block is read
    with pytest.raises(TapeFileError, match="NaN") as ei:
        back.value(1)
    assert str(bad) in str(ei.value)
    # an eager load uses no claim (the window scans what it holds): the data is the truth
    eager, _ = tapefile.load(bad)
    assert np.isnan(eager.value(1)[0])


HOSTILE = {
    # declared sizes and offsets
    "block-past-header": (lambda h: h["blocks"][-1].__setitem__(1, 1 << 30), "block"),
    "block-negative": (lambda h: h["blocks"][0].__setitem__(0, -64), "block"),
    "block-in-preamble": (lambda h: h["blocks"][0].__setitem__(0, 0), "block"),
    "blocks-overlap": (lambda h: h["blocks"][1].__setitem__(0, h["blocks"][0][0]), "overlap"),
    "block-size-float": (lambda h: h["blocks"][0].__setitem__(1, 8.0), "block"),
    "block-digest-short": (lambda h: h["blocks"][0].__setitem__(2, "ab"), "block"),
    "array-out-of-block": (lambda h: set_loc(h, "values", 1, [0, 1 << 20]), "block"),
    "array-negative-offset": (lambda h: set_loc(h, "values", 1, [0, -8]), "offset"),
    "array-unknown-block": (lambda h: set_loc(h, "values", 1, [999, 0]), "block"),
    "arrays-overlap": (lambda h: set_loc(h, "values", 1, loc_of(h, "values", 0)), "overlap"),
    "array-misaligned": (lambda h: set_loc(h, "values", 1, [0, 3]), "align"),
    "value-missing": (lambda h: set_loc(h, "values", 1, [-1, -1]), "value"),
    "values-short": (lambda h: h.update(values=h["values"][:-2]), "values"),
    "grads-bool": (lambda h: h["grads"].__setitem__(0, True), "grads"),
    # dtypes
    "dtype-object": (lambda h: h.update(dtype="object"), "dtype"),
    "dtype-O": (lambda h: h.update(dtype="|O"), "dtype"),
    "dtype-void": (lambda h: h.update(dtype="V8"), "dtype"),
    "dtype-int": (lambda h: h.update(dtype="int64"), "dtype"),
    "dtype-list": (lambda h: h.update(dtype=["float64"]), "dtype"),
    "byteorder": (lambda h: h.update(byteorder="big"), "byte order"),
    # shapes
    "shape-huge": (lambda h: h["shapes_table"].__setitem__(0, [10**12, 10**12]), "shape"),
    "shape-overflow": (lambda h: h["shapes_table"].__setitem__(0, [2**61, 2**61]), "shape"),
    "shape-negative": (lambda h: h["shapes_table"].__setitem__(0, [-2, -3]), "shape"),
    "shape-float": (lambda h: h["shapes_table"].__setitem__(0, [2.0, 3]), "shape"),
    "rank-over-limit": (lambda h: h["shapes_table"].__setitem__(0, [1] * 33), "rank"),
    "shape-index": (lambda h: h["shape"].__setitem__(0, 99), "shape"),
    "shape-wrong-for-op": (lambda h: h["shapes_table"].append([3, 2])
                           or h["shape"].__setitem__(1, len(h["shapes_table"]) - 1), "shape"),
    # structure
    "op-unknown": (lambda h: h["ops"].__setitem__(0, "exec"), "op"),
    "op-index": (lambda h: h["op"].__setitem__(1, 99), "op"),
    "ops-duplicated": (lambda h: h.update(ops=h["ops"] + [h["ops"][0]]), "twice"),
    "input-later-node": (lambda h: h["inputs"][1].__setitem__(0, 2), "earlier"),
    "input-negative": (lambda h: h["inputs"][1].__setitem__(0, -1), "input"),
    "input-float": (lambda h: h["inputs"][1].__setitem__(0, 0.0), "input"),
    "inputs-not-lists": (lambda h: h["inputs"].__setitem__(1, 0), "input"),
    "arity-wrong": (lambda h: h["inputs"].__setitem__(1, [0, 0]), "input"),
    "attrs-index": (lambda h: h["attrs"].__setitem__(2, 50), "attrs"),
    "attrs-wrong-for-op": (lambda h: h["attrs_table"].append({"axis": 7, "keepdims": False})
                           or h["attrs"].__setitem__(2, len(h["attrs_table"]) - 1), "attrs"),
    "name-control-char": (lambda h: h["names"].__setitem__(0, "a\x1b[2Jb"), "printable"),
    "names-short": (lambda h: h.update(names=h["names"][:-1]), "names"),
    "requires-grad-int": (lambda h: h["requires_grad"].__setitem__(0, 1), "requires_grad"),
    "params-duplicated": (lambda h: h.update(params=[0, 0]), "twice"),
    "params-not-param": (lambda h: h.update(params=[1]), "param"),
    "nonfinite-out-of-range": (lambda h: h.update(nonfinite_values=[77]), "nonfinite"),
    "meta-loss-out-of-range": (lambda h: h["meta"].update(loss=99), "loss"),
    "format-tag": (lambda h: h.update(format="zip"), "format"),
    "version-field": (lambda h: h.update(version=1), "version"),
    "header-not-object": (lambda h: [h], "format"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_headers_are_refused_in_one_line(small, tmp_path, case):
    edit, match = HOSTILE[case]
    bad = edited(small, tmp_path / f"{case}.tape", edit)
    for lazy in (False, True):  # the open itself refuses: nothing is deferred to a touch
        refused(bad, match, lazy=lazy)


def test_duplicated_keys_in_the_header_are_refused(small, tmp_path):
    body, h = parts(small)
    text = json.dumps(h)
    # a second "dtype" after the first: json would keep the last one silently
    dup = text[:-1] + ', "dtype": "float32"}'
    refused(assemble(tmp_path / "dup.tape", body, dup), "twice")
    dup_attr = text.replace('"keepdims": false', '"keepdims": false, "keepdims": true', 1)
    assert dup_attr != text
    refused(assemble(tmp_path / "dup2.tape", body, dup_attr), "twice")


@pytest.mark.parametrize("table,column", [("shapes_table", "shape"), ("attrs_table", "attrs")])
def test_an_empty_table_that_nodes_index_is_refused_by_the_column(small, tmp_path, table, column):
    """A header with nodes but an empty shapes or attrs table: refused by the column that
    indexes it (it once passed that check, index 0 allowed, and failed later as
    "unreadable (IndexError ...)" or as attrs that "do not fit")."""
    bad = edited(small, tmp_path / "empty.tape", lambda h: h.update({table: [], column: [0] * 3}))
    for lazy in (False, True):
        err = str(refused(bad, lazy=lazy))
        assert err.endswith(f"'{column}' holds a value outside [0, 0)"), err
    t = Tape()  # a tape of no nodes has empty tables, and loads
    assert len(tapefile.load(tapefile.save(t, tmp_path / "none.tape"))[0]) == 0

def test_a_huge_declared_shape_allocates_nothing(small, tmp_path):
    bad = edited(small, tmp_path / "huge.tape",
                 lambda h: h["shapes_table"].__setitem__(0, [1 << 20, 1 << 20]))
    refused(bad, "shape", budget_bytes=4 * MiB)


# ---- hostile: the file itself --------------------------------------------------------------
def test_symlinks(small, tmp_path):
    link = tmp_path / "link.tape"
    link.symlink_to(small)
    back, _ = tapefile.load(link)  # a link to a regular tape file is that file
    assert len(back) == 3
    dangling = tmp_path / "dangling.tape"
    dangling.symlink_to(tmp_path / "nowhere.tape")
    refused(dangling, "no such file")
    loop = tmp_path / "loop.tape"
    loop.symlink_to(loop)
    refused(loop)
    dev = tmp_path / "dev.tape"
    dev.symlink_to("/dev/zero")
    refused(dev, "not a regular file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    to_fifo = tmp_path / "fifo.tape"
    to_fifo.symlink_to(fifo)
    t0 = time.monotonic()
    refused(to_fifo, "not a regular file")
    assert time.monotonic() - t0 < 5


def test_a_file_that_grows_or_shrinks_after_the_open_is_refused_on_touch(many, tmp_path):
    copy = tmp_path / "moving.tape"
    copy.write_bytes(many.read_bytes())
    t, _ = tapefile.load(copy, lazy=True)
    body, _ = parts(copy)
    with open(copy, "r+b") as f:
        f.truncate(64)  # every block gone after the open
    with pytest.raises(TapeFileError, match="truncated|changed") as ei:
        t.value(len(t) - 1)
    assert str(copy) in str(ei.value)


# ---- the same through the CLI --------------------------------------------------------------
CLI_CASES = ["dtype-object", "shape-huge", "arrays-overlap", "block-past-header",
             "ops-duplicated"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def _one_line_exit_2(r: subprocess.CompletedProcess, cmd: str, path: Path) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tapescope {cmd}:"), r.stderr
    assert str(path) in lines[0] and "Traceback" not in r.stderr


def test_hostile_files_through_fuse_are_one_line_and_exit_2(small, many, tmp_path, capsys):
    """``fuse --tape F`` (an eager load): the CLI's own entry point in this process for each
    file, and one real process for the exit status."""
    from tapescope.app.cli import main

    files = [edited(small, tmp_path / f"{c}.tape", HOSTILE[c][0]) for c in CLI_CASES]
    body, h = parts(many)
    start, size, _ = h["blocks"][-1]
    flipped = bytearray(body)
    flipped[start + size - 1] ^= 0x01
    late = assemble(tmp_path / "late.tape", bytes(flipped), h)
    cut = tmp_path / "cut.tape"
    cut.write_bytes(small.read_bytes()[:-30])
    for path in [*files, late, cut]:
        rc = main(["fuse", "--tape", str(path)])
        err = capsys.readouterr().err
        _one_line_exit_2(subprocess.CompletedProcess([], rc, "", err), "fuse", path)
    r = _cli("fuse", "--tape", str(late))
    _one_line_exit_2(r, "fuse", late)
    assert "SHA-256" in r.stderr


@pytest.mark.slow
def test_hostile_files_through_the_gui_are_one_line_and_exit_2(small, many, tmp_path):
    """``gui F --screenshot``: a refused header at the open; a block whose digest fails when the
    window touches it (the screenshot steps backward over the last nodes and selects one)."""
    bad = edited(small, tmp_path / "obj.tape", HOSTILE["dtype-object"][0])
    r = _cli("gui", str(bad), "--screenshot", str(tmp_path / "a.png"))
    _one_line_exit_2(r, "gui", bad)
    body, h = parts(many)
    flipped = bytearray(body)
    for start, size, _ in h["blocks"]:  # every block altered: whichever the window touches
        flipped[start + size - 1] ^= 0x01
    late = assemble(tmp_path / "late.tape", bytes(flipped), h)
    r = _cli("gui", str(late), "--screenshot", str(tmp_path / "b.png"))
    _one_line_exit_2(r, "gui", late)
    assert "SHA-256" in r.stderr


# ---- fuzz: any edit of the header is a tape or one TapeFileError ---------------------------
JUNK = [0, 1, -1, 2, 7, 64, 2**31, 2**62, 2**64, -(2**63), 10**400, 0.5, float("inf"), True,
        None, "", "float64", "x" * 300, [], [0], [[0]], {}, {"a": 1}, "0" * 64]


def _fuzz_one(src: Path, dst: Path, path: list, value) -> None:
    body, h = parts(src)
    node = h
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    bad = assemble(dst, body, h)
    for lazy in (False, True):
        try:
            t, _ = tapefile.load(bad, lazy=lazy)
            for i in range(len(t)):
                t.value(i), t.grad(i)
        except TapeFileError as e:
            assert str(bad) in str(e) and "\n" not in str(e)
            # a check of its own, not the loader's last-resort wrapper of an exception
            assert not re.search(r"(truncated or corrupt|unreadable) \(\w+: ", str(e)), (
                path, value, str(e))


def _paths(h, prefix=()):
    """Every (container path) of the header a value can be put at."""
    if isinstance(h, dict):
        for k, v in h.items():
            yield [*prefix, k]
            yield from _paths(v, (*prefix, k))
    elif isinstance(h, list):
        for i, v in enumerate(h[:4]):
            yield [*prefix, i]
            yield from _paths(v, (*prefix, i))


def test_every_header_field_set_to_junk_is_a_tape_or_one_line(small, tmp_path):
    """Deterministic: every place in the small tape's header, each junk value (a few thousand
    loads, each of a few hundred bytes)."""
    _, h = parts(small)
    places = list(_paths(h))
    assert len(places) > 60
    for k, place in enumerate(places):
        for j, value in enumerate(JUNK):
            if (k + j) % 3:  # a third of the grid: every place, every value, in ~10 s
                continue
            _fuzz_one(small, tmp_path / "f.tape", place, value)


def test_the_dtype_allow_list_is_the_tapes_own_and_holds_no_object_dtype():
    """One list (core.tape.DTYPES): a dtype added to the tape is a file dtype too; never one
    that can hold Python objects."""
    from tapescope.core.precision import HALF
    from tapescope.core.tape import DTYPES

    assert set(tapefile.FILE_DTYPES) == {d.name for d in (*DTYPES, *HALF)}
    assert all(not d.hasobject for d in tapefile.FILE_DTYPES.values())
    assert "object" not in tapefile.FILE_DTYPES and "O" not in tapefile.FILE_DTYPES


# ---- half tapes ----------------------------------------------------------------------------
def _half_tape(dtype: str) -> tuple[Tape, int]:
    t = Tape(dtype=dtype)
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
    loss = ops.sum(ops.tanh(x))
    t.backward(loss)
    return t, x.id


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_tapes_round_trip_every_bit(tmp_path, dtype, version):
    """float16 and bfloat16 tapes save and load in both versions (bfloat16 in a version-1 .npy
    member as its uint16 bits), with their dtype and every value's and gradient's bits."""
    t, x = _half_tape(dtype)
    p = tapefile.save(t, tmp_path / "h.tape", version=version)
    for lazy in (False, True):
        u, _ = tapefile.load(p, lazy=lazy)
        assert u.dtype.name == dtype and u.value(x).dtype.name == dtype
        assert u.grad(x).dtype.name == dtype
        same(t, u)


def test_a_float32_body_relabelled_bfloat16_is_refused(tmp_path):
    """The header says bfloat16 over float32 arrays: each array would be read at half its size
    (garbage that fits); the block's bytes past its last array give it away."""
    t = Tape(dtype="float32")
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
    t.backward(ops.sum(ops.tanh(x)))
    p = tapefile.save(t, tmp_path / "f.tape", block_bytes=64)
    refused(edited(p, tmp_path / "b.tape", lambda h: h.update(dtype="bfloat16")),
            "the header's dtype or shapes are not the file's")
    tb, _ = _half_tape("bfloat16")
    q = tapefile.save(tb, tmp_path / "h.tape", block_bytes=64)
    refused(edited(q, tmp_path / "w.tape", lambda h: h.update(dtype="float32")), "lies outside")


def test_a_version_1_bfloat16_member_of_another_dtype_is_refused(tmp_path):
    """A version-1 bfloat16 tape's members must be uint16 bits of the node's shape."""
    import zipfile

    tb, _ = _half_tape("bfloat16")
    p = tapefile.save(tb, tmp_path / "h.tape", version=1)
    with zipfile.ZipFile(p) as z:
        members = {n: z.read(n) for n in z.namelist()}
    buf = __import__("io").BytesIO()
    np.save(buf, np.zeros((2, 3), np.float32))
    members["v0.npy"] = buf.getvalue()
    bad = tmp_path / "bad.tape"
    with zipfile.ZipFile(bad, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    refused(bad, "member v0 is float32[2, 3], the header says uint16[2, 3]")
