"""Hostile ``.tape`` files: every failure of ``tapefile.load`` is one TapeFileError naming the file,
sizes are checked before anything is allocated, and no input hangs.

Every file here is crafted by the test from a small valid tape, at the zip-member level.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapescope.core import Tape, ops, tapefile
from tapescope.core.tapefile import Limits, TapeFileError
from tests.helpers.tapefile_v1 import (
    MiB,
    digest,
    header_of,
    npy,
    patch_member_flags,
    read_members,
    refused,
    save_v1,
    with_header,
    write_zip,
)


@pytest.fixture
def small(tmp_path) -> Path:
    """x[2,3] param -> tanh -> sum, with gradients; meta names the loss."""
    t = Tape()
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
    loss = ops.sum(ops.tanh(x))
    t.backward(loss)
    return save_v1(t, tmp_path / "small.tape", meta={"loss": loss.id})


# ---- the header: wrong JSON types and values -----------------------------------------------
def _node(h: dict, i: int) -> dict:
    return h["nodes"][i]


MUTATIONS = {
    "header-not-object": lambda h: [h],
    "attrs-list": lambda h: _node(h, 2).update(attrs=[1, 2]),
    "attrs-str": lambda h: _node(h, 2).update(attrs="axis"),
    "attr-value-object": lambda h: _node(h, 2).update(attrs={"axis": {"a": 1}, "keepdims": False}),
    "attrs-wrong-for-op": lambda h: _node(h, 2).update(attrs={"axis": 7, "keepdims": False}),
    "digests-list": lambda h: h.update(digests=["v0"]),
    "digests-str": lambda h: h.update(digests="v0"),
    "digest-int": lambda h: h["digests"].update(v0=5),
    "meta-list": lambda h: h.update(meta=[1]),
    "meta-str": lambda h: h.update(meta="x"),
    "meta-loss-null": lambda h: h["meta"].update(loss=None),
    "meta-loss-str": lambda h: h["meta"].update(loss="2"),
    "meta-loss-float": lambda h: h["meta"].update(loss=1e300),
    "meta-loss-out-of-range": lambda h: h["meta"].update(loss=99),
    "meta-loss-bool": lambda h: h["meta"].update(loss=True),
    "meta-workload-int": lambda h: h["meta"].update(workload=3),
    "nodes-object": lambda h: h.update(nodes={"0": 1}),
    "node-int": lambda h: h["nodes"].__setitem__(1, 5),
    "node-missing-key": lambda h: _node(h, 1).pop("shape"),
    "id-float": lambda h: _node(h, 1).update(id=1.0),
    "inputs-str": lambda h: _node(h, 1).update(inputs="0"),
    "inputs-infinity": lambda h: _node(h, 1).update(inputs=[float("inf")]),
    "inputs-nan": lambda h: _node(h, 1).update(inputs=[float("nan")]),
    "inputs-huge": lambda h: _node(h, 1).update(inputs=[10**400]),
    "inputs-later-node": lambda h: _node(h, 1).update(inputs=[2]),
    "inputs-wrong-arity": lambda h: _node(h, 1).update(inputs=[0, 0]),
    "leaf-with-inputs": lambda h: _node(h, 0).update(inputs=[0]),
    "shape-str": lambda h: _node(h, 1).update(shape="23"),
    "shape-negative": lambda h: _node(h, 1).update(shape=[-2, -3]),
    "shape-float": lambda h: _node(h, 1).update(shape=[2.0, 3]),
    "shape-huge": lambda h: _node(h, 1).update(shape=[10**12, 10**12]),
    "op-unknown": lambda h: _node(h, 1).update(op="system"),
    "op-list": lambda h: _node(h, 1).update(op=["tanh"]),
    "requires-grad-str": lambda h: _node(h, 1).update(requires_grad="yes"),
    "name-int": lambda h: _node(h, 0).update(name=5),
    "name-newline": lambda h: _node(h, 0).update(name="x\n/ system"),
    "name-backslash-newline": lambda h: _node(h, 0).update(name="*\\\n/"),
    "name-control": lambda h: _node(h, 0).update(name="x\x1b[2J"),
    "name-bidi": lambda h: _node(h, 0).update(name="x\u202ey"),
    "name-long": lambda h: _node(h, 0).update(name="n" * 100_000),
    "params-int": lambda h: h.update(params=0),
    "params-float": lambda h: h.update(params=[0.0]),
    "params-infinity": lambda h: h.update(params=[float("inf")]),
    "params-not-a-node": lambda h: h.update(params=[7]),
    "params-not-a-param": lambda h: h.update(params=[1]),
    "dtype-int": lambda h: h.update(dtype=8),
    "dtype-int64": lambda h: h.update(dtype="int64"),
    "dtype-object": lambda h: h.update(dtype="object"),
    "dtype-float16": lambda h: h.update(dtype="float16"),
    "dtype-bigendian": lambda h: h.update(dtype=">f8"),
    "dtype-gibberish": lambda h: h.update(dtype="not a dtype [[["),
    "math-unknown": lambda h: h.update(math="fast"),
    "math-list": lambda h: h.update(math=["refmath"]),
    "version-str": lambda h: h.update(version="1"),
    "ok-str": lambda h: h.update(ok="no"),
    "error-list": lambda h: h.update(ok=False, error=["x"]),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_wrong_header_types_and_values_are_refused(small, tmp_path, case):
    members = read_members(small)
    h = header_of(members)
    out = MUTATIONS[case](h)
    bad = write_zip(tmp_path / f"{case}.tape", with_header(members, out if out is not None else h))
    refused(bad)


def test_names_are_checked_when_loaded(small, tmp_path):
    members = read_members(small)
    h = header_of(members)
    h["nodes"][0]["name"] = "ok/name-1.w"
    back, _ = tapefile.load(write_zip(tmp_path / "fine.tape", with_header(members, h)))
    assert back.nodes[0].name == "ok/name-1.w"
    h["nodes"][0]["name"] = "line\nbreak"
    err = refused(write_zip(tmp_path / "nl.tape", with_header(members, h)), "name")
    assert "node 0" in str(err)


@pytest.mark.parametrize("text", [
    "[" * 200_000 + "]" * 200_000,
    '{"a":' * 200_000 + "1" + "}" * 200_000,
    '{"format": "tapescope.tape", "version": 1, "nodes": [{"inputs": [Infinity]}]}',
    "\xff\xfe not utf-8",
    "",
], ids=["list-200k-deep", "object-200k-deep", "infinity-id", "not-utf8", "empty"])
def test_hostile_json_text_is_refused(small, tmp_path, text):
    members = read_members(small)
    bad = tmp_path / "json.tape"
    if text.startswith("\xff"):
        members = {**members, "header.npy": npy(np.frombuffer(b"\xff\xfe{", np.uint8))}
    else:
        members = with_header(members, text)
    refused(write_zip(bad, members))


# ---- the arrays: dtypes, shapes, sizes, digests ---------------------------------------------
@pytest.mark.parametrize("arr", [
    np.zeros((2, 3), np.int64), np.zeros((2, 3), np.float32), np.zeros((2, 3), ">f8"),
    np.zeros((2, 3), np.complex128), np.zeros(6, [("a", "<f8")]).reshape(2, 3),
    np.zeros((3, 2)), np.zeros((2, 3, 1)), np.zeros((2, 3), "<U1"),
])
def test_foreign_member_dtypes_and_shapes_are_refused(small, tmp_path, arr):
    members = read_members(small)
    h = header_of(members)
    h["digests"]["v1"] = digest(arr)  # a consistent digest: the dtype/shape check must refuse
    members = with_header({**members, "v1.npy": npy(arr)}, h)
    refused(write_zip(tmp_path / "dtype.tape", members), "v1")


def test_object_arrays_are_refused_without_unpickling(small, tmp_path):
    members = read_members(small)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([object()] * 6).reshape(2, 3), allow_pickle=True)
    refused(write_zip(tmp_path / "pickle.tape", {**members, "v1.npy": buf.getvalue()}), "v1")


def _npy_declaring(shape: tuple, dtype: str = "<f8", data: bytes = b"\0" * 64) -> bytes:
    """A .npy whose header declares ``shape`` but which carries only ``data``."""
    hdr = {"descr": dtype, "fortran_order": False, "shape": shape}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, hdr)
    return buf.getvalue() + data


@pytest.mark.parametrize("n", [10**9, 10**12, 2**61, 2**62])
def test_declared_sizes_are_checked_before_allocating(small, tmp_path, n):
    members = read_members(small)
    # the npy header alone lies (the JSON header still says [2, 3])
    refused(write_zip(tmp_path / "a.tape", {**members, "v1.npy": _npy_declaring((n,))}), "v1")
    # both headers agree on a huge shape (x and tanh(x) are [n]); each member is 64 bytes
    h = header_of(members)
    h["nodes"][0]["shape"] = h["nodes"][1]["shape"] = [n]
    big = {k: _npy_declaring((n,)) for k in ("v0.npy", "g0.npy", "v1.npy", "g1.npy")}
    refused(write_zip(tmp_path / "b.tape", with_header({**members, **big}, h)))


def _zip_with_big_member(path: Path, members: dict[str, bytes], name: str, size: int) -> Path:
    """The members plus ``name`` holding ``size`` zero bytes, deflated (a ~1 MB file per GiB)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for n, data in members.items():
            z.writestr(n, data)
        zi = zipfile.ZipInfo(name)
        zi.compress_type = zipfile.ZIP_DEFLATED
        with z.open(zi, "w", force_zip64=True) as f:
            f.write(_npy_declaring((size // 8,), data=b""))
            chunk = bytes(8 * MiB)
            for _ in range(size // len(chunk)):
                f.write(chunk)
    return path


def test_unused_gigabyte_member_costs_nothing(small, tmp_path):
    members = read_members(small)
    bad = _zip_with_big_member(tmp_path / "bomb.tape", members, "junk.npy", 1 << 30)
    assert bad.stat().st_size < 2 * MiB  # ~1 MB on disk, 1 GiB inflated
    refused(bad, "junk.npy", budget_s=5.0)
    # the same member named as an array no node refers to (same length: patch the name)
    bomb2 = tmp_path / "bomb2.tape"
    bomb2.write_bytes(bad.read_bytes().replace(b"junk.npy", b"v999.npy"))
    refused(bomb2, "v999", budget_s=5.0)


def test_every_npy_header_is_checked_before_any_data_is_read(tmp_path):
    # a big valid first member and a foreign second one: nothing may be allocated for the first
    t = Tape()
    t.param(np.zeros(3), name="x")
    members = read_members(save_v1(t, tmp_path / "one.tape"))
    h = header_of(members)
    size = 48 * MiB
    h["nodes"][0]["shape"] = [size // 8]
    h["digests"]["v0"] = hashlib.sha256(bytes(size)).hexdigest()
    h["digests"]["g0"] = h["digests"]["v0"]
    del members["v0.npy"]
    bad = _zip_with_big_member(tmp_path / "two.tape", with_header(members, h), "v0.npy", size)
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("g0.npy", npy(np.zeros(3, np.int64)))
    refused(bad, "g0", budget_bytes=8 * MiB)


def test_compressed_members_inflate_within_the_limit(small, tmp_path, monkeypatch):
    members = read_members(small)
    h = header_of(members)
    big = np.zeros(MiB // 8 * 4)  # 4 MiB of zeros, deflated to a few KiB
    h["nodes"][0]["shape"] = [big.size]
    h["nodes"][1]["shape"] = [big.size]
    h["digests"] = {"v0": digest(big), "v1": digest(np.tanh(big)), "v2": h["digests"]["v2"]}
    members = {"header.npy": b"", "v0.npy": npy(big), "v1.npy": npy(np.tanh(big)),
               "v2.npy": members["v2.npy"]}
    path = write_zip(tmp_path / "deflated.tape", with_header(members, h), zipfile.ZIP_DEFLATED)
    back, _ = tapefile.load(path)  # within the default limit: loads
    assert back.value(1).shape == (big.size,)
    err = refused(path, "inflate", limits=Limits(max_inflate_bytes=2 * MiB))
    assert "TAPESCOPE_TAPE_MAX_INFLATE" in str(err)  # the message says how to raise it
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_INFLATE", "2M")
    refused(path, "over the limit of 2097152")
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_INFLATE", "9M")  # v0 + v1 + v2: 8 MiB and headers
    assert tapefile.load(path)[0].value(0).shape == (big.size,)
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_INFLATE", "lots")
    refused(path, "TAPESCOPE_TAPE_MAX_INFLATE='lots'")
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_INFLATE", "")
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_HEADER", "100")
    refused(path, "TAPESCOPE_TAPE_MAX_HEADER")


def test_fortran_order_members_load_in_c_order(small, tmp_path):
    members = read_members(small)
    v = np.asfortranarray(np.load(small)["v0"])
    assert npy(v) != members["v0.npy"]  # written column-major, the same values
    back, _ = tapefile.load(write_zip(tmp_path / "f.tape", {**members, "v0.npy": npy(v)}))
    assert back.value(0).flags.c_contiguous and back.value(0).tobytes() == v.tobytes("C")


def test_a_resaved_member_with_changed_data_fails_its_checksum(small, tmp_path):
    members = read_members(small)
    v = np.load(small)["v1"].copy()
    v[0, 0] = np.nextafter(v[0, 0], 2.0)  # one ulp: a valid array and zip, header untouched
    bad = write_zip(tmp_path / "resaved.tape", {**members, "v1.npy": npy(v)})
    assert zipfile.ZipFile(bad).testzip() is None  # zip's CRC-32 is happy
    refused(bad, "checksum")


def test_an_altered_digest_in_the_header_fails_its_checksum(small, tmp_path):
    members = read_members(small)
    h = header_of(members)
    d = h["digests"]["g1"]
    h["digests"]["g1"] = ("0" if d[0] != "0" else "1") + d[1:]
    refused(write_zip(tmp_path / "digest.tape", with_header(members, h)), "checksum")


@pytest.mark.parametrize("case", ["missing-digest", "extra-digest", "missing-value", "dup-member",
                                  "unknown-member", "gradient-of-no-node"])
def test_members_and_digests_must_match_the_nodes(small, tmp_path, case):
    members = read_members(small)
    h = header_of(members)
    if case == "missing-digest":
        del h["digests"]["g0"]
    elif case == "extra-digest":
        h["digests"]["g9"] = "0" * 64
    elif case == "missing-value":
        del members["v1.npy"]
        del h["digests"]["v1"]
    elif case == "unknown-member":
        members["notes.txt"] = b"hello"
    elif case == "gradient-of-no-node":
        members["g3.npy"] = members["g2.npy"]
        h["digests"]["g3"] = h["digests"]["g2"]
    bad = tmp_path / f"{case}.tape"
    if case == "dup-member":
        with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(bad, "w") as z:
            for n, data in [*members.items(), ("v1.npy", members["v1.npy"])]:
                z.writestr(n, data)
    else:
        write_zip(bad, with_header(members, h))
    refused(bad)


@pytest.mark.parametrize("how", [{"flag": 0x1}, {"flag": 0x41}, {"method": 99}, {"method": 12},
                                 {"method": 14}])
def test_encrypted_and_unsupported_members_are_refused(small, tmp_path, how):
    bad = tmp_path / "enc.tape"
    bad.write_bytes(small.read_bytes())
    patch_member_flags(bad, "v1.npy", **how)
    refused(bad, "v1")


def test_overlapping_members_are_refused(small, tmp_path):
    # two central-directory entries pointing at the same stored bytes: a 1 MB file could claim
    # a gigabyte this way
    members = read_members(small)
    bad = write_zip(tmp_path / "overlap.tape", members)
    data = bytearray(bad.read_bytes())
    cd = data.find(b"PK\x01\x02")
    entries = []
    pos = cd
    while pos >= 0:
        entries.append(pos)
        pos = data.find(b"PK\x01\x02", pos + 4)
    # point g1's central entry at v1's local header (the same length, the same CRC)
    name_at = {bytes(data[p + 46: p + 52]).decode(): p for p in entries}
    v1, g1 = name_at["v1.npy"], name_at["g1.npy"]
    data[g1 + 16: g1 + 20] = data[v1 + 16: v1 + 20]  # crc
    data[g1 + 42: g1 + 46] = data[v1 + 42: v1 + 46]  # local header offset
    bad.write_bytes(bytes(data))
    refused(bad)


# ---- the file itself -----------------------------------------------------------------------
def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "pipe.tape"
    os.mkfifo(fifo)
    result: list = []

    def go() -> None:
        try:
            tapefile.load(fifo)
        except Exception as e:  # noqa: BLE001 - the assertion below says which
            result.append(e)

    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(10)
    hung = th.is_alive()
    if hung:  # release the blocked open so the thread can end
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        th.join(5)
    assert not hung, "loading a FIFO blocked"
    assert len(result) == 1 and isinstance(result[0], TapeFileError), result
    assert "not a regular file" in str(result[0]) and str(fifo) in str(result[0])


def test_directories_and_devices_are_refused(tmp_path):
    refused(tmp_path, "not a regular file")
    if os.path.exists("/dev/zero"):
        with pytest.raises(TapeFileError, match="not a regular file"):
            tapefile.load("/dev/zero")


def test_the_example_tapes_still_load():
    root = Path(__file__).resolve().parents[2] / "resources" / "tapes"
    for p in sorted(root.glob("*.tape")):
        tape, meta = tapefile.load(p)
        assert len(tape) > 10 and isinstance(meta.get("loss"), int)


# ---- property-based mutation: whatever the damage, TapeFileError or a tape ---------------------
def _base_members() -> dict[str, bytes]:
    """The small tape's members, built once (hypothesis examples share it)."""
    if not _BASE:
        import tempfile

        t = Tape()
        x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
        y = ops.mul(ops.tanh(x), ops.adds(x, 0.5))
        loss = ops.sum(y, name="loss")
        t.backward(loss)
        with tempfile.TemporaryDirectory() as td:
            path = save_v1(t, Path(td) / "base.tape", meta={"loss": loss.id, "k": [1]})
            _BASE.update(read_members(path))
            _BASE["__file__"] = path.read_bytes()
    return _BASE


_BASE: dict[str, bytes] = {}
FUZZ = dict(max_examples=150, derandomize=True, database=None, deadline=None)


def _load_outcome(data: bytes, compression: int | None = None) -> None:
    """Load bytes as a tape: a tape or one TapeFileError, within a few seconds."""
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "m.tape"
        p.write_bytes(data)
        t0 = time.monotonic()
        try:
            tape, meta = tapefile.load(p)
        except TapeFileError as e:
            assert str(p) in str(e) and "\n" not in str(e)
        else:
            assert len(tape) >= 1 and isinstance(meta, dict)
        assert time.monotonic() - t0 < 5.0


def _zip_bytes(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _paths(v, at=()) -> list[tuple]:
    """Every path into a JSON value (keys and indices)."""
    out = [at]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*at, i))
    return out


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
    | st.text(max_size=12) | st.sampled_from([0, 1, 2, -1, "", "param", "sum", "float32", "v0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=8)


@settings(**FUZZ)
@given(st.data())
def test_fuzz_byte_mutations_of_the_file(data):
    raw = bytearray(_base_members()["__file__"])
    for _ in range(data.draw(st.integers(1, 6), "n")):
        kind = data.draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]), "kind")
        pos = data.draw(st.integers(0, max(len(raw) - 1, 0)), "pos")
        if kind == "flip" and raw:
            raw[pos] ^= 1 << data.draw(st.integers(0, 7), "bit")
        elif kind == "set" and raw:
            raw[pos] = data.draw(st.integers(0, 255), "byte")
        elif kind == "cut":
            del raw[pos:]
        elif kind == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=16), "ins")
        elif kind == "delete":
            del raw[pos:pos + data.draw(st.integers(1, 16), "len")]
    _load_outcome(bytes(raw))


@settings(**FUZZ)
@given(st.data())
def test_fuzz_member_mutations_with_valid_zip_checksums(data):
    members = {k: v for k, v in _base_members().items() if k != "__file__"}
    name = data.draw(st.sampled_from(sorted(members)), "member")
    blob = bytearray(members[name])
    for _ in range(data.draw(st.integers(1, 4), "n")):
        pos = data.draw(st.integers(0, len(blob) - 1), "pos")  # the .npy header is at the front
        blob[pos] = data.draw(st.integers(0, 255), "byte")
    members[name] = bytes(blob)
    comp = data.draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]), "compression")
    _load_outcome(_zip_bytes(members, comp))


@settings(**FUZZ)
@given(st.data())
def test_fuzz_json_mutations_of_the_header(data):
    members = {k: v for k, v in _base_members().items() if k != "__file__"}
    h = header_of(members)
    for _ in range(data.draw(st.integers(1, 3), "n")):
        paths = _paths(h)
        # a depth first, then a path of that depth: top-level fields are hit as often as leaves
        depth = data.draw(st.sampled_from(sorted({len(p) for p in paths})), "depth")
        at = data.draw(st.sampled_from([p for p in paths if len(p) == depth]), "path")
        kind = data.draw(st.sampled_from(["replace", "delete", "add"]), "kind")
        if not at:
            h = data.draw(JSON, "root")
            break
        parent = h
        for k in at[:-1]:
            parent = parent[k]
        last = at[-1]
        if kind == "replace":
            parent[last] = data.draw(JSON, "value")
        elif kind == "delete":
            del parent[last]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(max_size=6), "key")] = data.draw(JSON, "value")
        else:
            parent.insert(last, data.draw(JSON, "value"))
        if not isinstance(h, (dict, list)):
            break
    _load_outcome(_zip_bytes(with_header(members, h)))


def test_headers_this_numpy_would_not_write_take_the_full_parse(small, tmp_path):
    """The loader skips parsing a member header that is byte for byte the one numpy writes for
    the node; any other spelling (format 2.0 here, or a lying shape) is parsed and checked."""
    members = read_members(small)
    v = np.load(small)["v0"]
    buf = io.BytesIO()
    np.lib.format.write_array(buf, v, version=(2, 0), allow_pickle=False)
    assert buf.getvalue() != members["v0.npy"]
    back, _ = tapefile.load(write_zip(tmp_path / "v2.tape", {**members, "v0.npy": buf.getvalue()}))
    assert back.value(0).tobytes() == v.tobytes()
    lying = npy(v.reshape(3, 2))  # same bytes, another shape: refused by the parse
    refused(write_zip(tmp_path / "lie.tape", {**members, "v0.npy": lying}), "v0")
