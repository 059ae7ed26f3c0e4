"""core.tapefile version 1 (a zip of .npy members and a JSON header), bound by bound and rule by
rule: round trips of tapes that exercise a path, meta and header values at their edges, the zip
directory and its members, and crafted files wrong in one way, each refused in one line that says
what and where (the loader's last-resort refusals too).
"""

from __future__ import annotations

import errno
import io
import json
import os
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import Tape, ops, tapefile
from tapescope.core.tapefile import MAX_NAME, Limits, TapeFileError
from tests.helpers.tapefile_v1 import (
    MiB,
    digest,
    header_of,
    npy,
    read_members,
    refused,
    with_header,
    write_zip,
)


def save_v1(*args, **kw):
    """These files craft version-1 zips (tests/core/test_tapefile_v2.py holds version 2's)."""
    return tapefile.save(*args, version=1, **kw)


@pytest.fixture
def small(tmp_path) -> Path:
    """x[2,3] param -> tanh -> sum, with gradients; meta names the loss."""
    t = Tape()
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
    loss = ops.sum(ops.tanh(x))
    t.backward(loss)
    return save_v1(t, tmp_path / "small.tape", meta={"loss": loss.id})


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---- round trips ------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [(4 * MiB) // 8 + 1, (9 * MiB) // 8 + 3])
def test_an_array_over_4_mib_round_trips(tmp_path, n):
    """The loader reads data in 4 MiB chunks: a member of more than one chunk, and of a size
    that is no multiple of it, comes back bit for bit."""
    rng = np.random.default_rng(5)
    t = Tape()
    x = t.param(rng.normal(size=n))
    loss = ops.sum(ops.muls(x, 3.0))
    t.backward(loss)
    back, _ = tapefile.load(save_v1(t, tmp_path / "big.tape"))
    assert _same(back.value(0), t.value(0)) and _same(back.grad(0), t.grad(0))
    assert _same(back.value(1), t.value(1))


@pytest.mark.parametrize("math", ["refmath", "platform"])
def test_the_math_mode_round_trips(tmp_path, math):
    t = Tape(math=math)
    x = t.param(np.linspace(0.1, 1, 4))
    ops.sum(ops.exp(x))
    back, _ = tapefile.load(save_v1(t, tmp_path / "m.tape"))
    assert back.math == math == t.math


def test_a_header_without_a_math_mode_reads_as_refmath(small, tmp_path):
    members = read_members(small)
    h = header_of(members)
    del h["math"]
    back, _ = tapefile.load(write_zip(tmp_path / "nomath.tape", with_header(members, h)))
    assert back.math == "refmath"


def test_a_failed_tape_and_its_error_round_trip(tmp_path):
    t = Tape()
    ops.sum(t.param(np.ones(3)))
    t.ok, t.error = False, "node 1 sum: overflow"
    back, meta = tapefile.load(save_v1(t, tmp_path / "bad.tape"))
    assert (back.ok, back.error, meta) == (False, "node 1 sum: overflow", {})
    ok, _ = tapefile.load(save_v1(Tape(), tmp_path / "empty.tape"))
    assert (ok.ok, ok.error, len(ok)) == (True, None, 0)


def test_attrs_names_flags_and_params_round_trip(tmp_path):
    t = Tape(np.float32)
    w = t.param(np.arange(6.0).reshape(2, 3), name="w")
    c = t.const(np.ones((2, 3)), name="c" * MAX_NAME)  # the longest name there may be
    s = ops.sum(ops.mul(w, c), axis=(np.int64(1),), name="rows")
    y = ops.muls(s, np.float64(0.25))
    u = t.param(np.zeros(2))  # a param backward never reaches: no gradient
    loss = ops.sum(ops.add(y, u))
    t.backward(loss)
    path = save_v1(t, tmp_path / "a.tape", meta={"loss": loss.id, "workload": "w",
                                                       "k": [1, 2]})
    back, meta = tapefile.load(path)
    assert meta == {"loss": loss.id, "workload": "w", "k": [1, 2]}
    assert back.dtype == np.float32 and [p.id for p in back.params()] == [w.id, u.id]
    for a, b in zip(t.nodes, back.nodes, strict=True):
        assert (a.op, a.inputs, a.shape, a.name, a.requires_grad) == (
            b.op, b.inputs, b.shape, b.name, b.requires_grad)
        assert dict(a.attrs) == dict(b.attrs)
        assert _same(np.asarray(t.value(a.id)), np.asarray(back.value(b.id)))
        ga, gb = t.grad(a.id), back.grad(b.id)
        assert (ga is None) == (gb is None) and (ga is None or _same(ga, gb))
    attrs = header_of(read_members(path))["nodes"][s.id]["attrs"]
    assert type(attrs["axis"]) is list and type(attrs["axis"][0]) is int  # plain JSON
    assert not (tmp_path / "a.tape.partial").exists()


@pytest.mark.parametrize("name", ["x" * (MAX_NAME + 1), "a\nb", "tab\there", 7])
def test_save_refuses_a_name_the_loader_would_refuse(tmp_path, name):
    t = Tape()
    t.param(np.ones(2), name="ok")
    t._nodes[0] = t._nodes[0]._replace(name=name)
    with pytest.raises(TapeFileError, match="node 0 param"):
        save_v1(t, tmp_path / "n.tape")
    assert not (tmp_path / "n.tape").exists() and not (tmp_path / "n.tape.partial").exists()


# ---- meta and header values at their edges ----------------------------------------------------
@pytest.mark.parametrize("loss,ok", [(0, True), (2, True), (3, False), (-1, False)])
def test_a_loss_at_node_0_and_the_last_node_is_accepted(small, tmp_path, loss, ok):
    members = read_members(small)
    h = header_of(members)
    h["meta"]["loss"] = loss
    path = write_zip(tmp_path / "loss.tape", with_header(members, h))
    if ok:
        assert tapefile.load(path)[1]["loss"] == loss
    else:
        refused(path, f"meta 'loss' {loss} is not a node id")


@pytest.mark.parametrize("version", [True, 2, 0, 1.0])
def test_only_format_version_1_as_an_integer_is_read(small, tmp_path, version):
    members = read_members(small)
    h = header_of(members)
    h["version"] = version
    refused(write_zip(tmp_path / "v.tape", with_header(members, h)), "format version")


def test_a_node_may_not_read_itself_or_a_negative_id(small, tmp_path):
    members = read_members(small)
    for inputs in ([1], [-1]):
        h = header_of(members)
        h["nodes"][1]["inputs"] = inputs
        refused(write_zip(tmp_path / "self.tape", with_header(members, h)), "earlier nodes")


def test_a_param_listed_twice_is_refused(small, tmp_path):
    members = read_members(small)
    h = header_of(members)
    h["params"] = [0, 0]
    refused(write_zip(tmp_path / "p.tape", with_header(members, h)), "'params' lists a node twice")
    h["params"] = [3]  # one past the last node
    refused(write_zip(tmp_path / "p3.tape", with_header(members, h)),
            "'params' [3] must list ids of param nodes")


def test_a_variadic_op_without_inputs_is_refused(small, tmp_path):
    members = read_members(small)
    h = header_of(members)
    h["nodes"][1].update(op="concat", inputs=[], attrs={"axis": 0})
    refused(write_zip(tmp_path / "c.tape", with_header(members, h)), "takes")


@pytest.mark.parametrize("rank,ok", [(32, True), (33, False)])
def test_the_rank_limit_is_32(tmp_path, rank, ok):
    t = Tape()
    t.param(np.ones((1,) * min(rank, 32)))
    path = save_v1(t, tmp_path / "r.tape")
    if ok:
        assert tapefile.load(path)[0].value(0).shape == (1,) * 32
        return
    members = read_members(path)
    h = header_of(members)
    h["nodes"][0]["shape"] = [1] * rank
    refused(write_zip(tmp_path / "r33.tape", with_header(members, h)), "not a list of sizes")


@pytest.mark.parametrize("name,ok", [("n" * MAX_NAME, True), ("n" * (MAX_NAME + 1), False),
                                     (None, True), ("ünïcode ok", True)])
def test_names_up_to_the_limit_load(small, tmp_path, name, ok):
    members = read_members(small)
    h = header_of(members)
    h["nodes"][0]["name"] = name
    path = write_zip(tmp_path / "nm.tape", with_header(members, h))
    if ok:
        assert tapefile.load(path)[0].nodes[0].name == name
    else:
        refused(path, f"at most {MAX_NAME}")


# ---- the zip directory ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["v0", "v0.npz", "v0.np", "v0.npy.npy", "V0.npy", "v00.npy",
                                  "v01.npy", "x0.npy", "v.npy", "header2.npy", "dir/v0.npy",
                                  "v0.NPY", "v1234567890.npy", "g-1.npy", ".npy"])
def test_only_npy_members_named_for_a_node_are_read(small, tmp_path, name):
    """The one member renamed: "v0" without ".npy" (or any other spelling) is not the node's
    value, even if the rest of the name would do."""
    members = read_members(small)
    data = members.pop("v0.npy")
    refused(write_zip(tmp_path / "name.tape", {**members, name: data}), "unexpected member")


def test_an_unexpected_member_is_quoted_to_80_characters(small, tmp_path):
    members = read_members(small)
    refused(write_zip(tmp_path / "long.tape", {**members, "n" * 100 + ".npy": b"x"}),
            "unexpected member '" + "n" * 80 + "' (a tape holds only header.npy, v<id>.npy and "
            "g<id>.npy)")


def test_the_largest_member_id_there_may_be_is_still_a_node_check(small, tmp_path):
    members = read_members(small)
    refused(write_zip(tmp_path / "id.tape", {**members, "g999999999.npy": members["g0.npy"]}),
            "not referenced by any node")


def _local(name: bytes, data: bytes, extra: bytes = b"") -> bytes:
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(data), len(data),
                       len(data), len(name), len(extra)) + name + extra


def _central(name: bytes, data: bytes, offset: int) -> bytes:
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, zlib.crc32(data),
                       len(data), len(data), len(name), 0, 0, 0, 0, 0, offset) + name


def _hidden_member_zip(path: Path, n1: int = 2000, comment: bytes = b"") -> Path:
    """v0's stored bytes contain v1's whole member (its local header and data): each member
    reads back with a good CRC, and together they claim len(header) + len(v0) + len(v1)
    bytes of a file that holds v1's only once."""
    v1 = np.arange(float(n1))
    b1 = npy(v1)
    lh1 = _local(b"v1.npy", b1, extra=b"\0" * 4)  # 40 bytes: v0's data stays whole float64s
    payload0 = b"\0" * 8 + lh1 + b1
    assert len(payload0) % 8 == 0
    v0 = np.frombuffer(payload0, "<f8")
    d0 = npy(v0)
    assert d0.endswith(payload0)
    header = {"format": "tapescope.tape", "version": 1, "dtype": "float64", "math": "refmath",
              "ok": True, "error": None,
              "nodes": [{"id": i, "op": "param", "inputs": [], "attrs": {}, "shape": [a.size],
                         "name": None, "requires_grad": True} for i, a in enumerate((v0, v1))],
              "params": [0, 1], "digests": {"v0": digest(v0), "v1": digest(v1)}, "meta": {}}
    hdr = npy(np.frombuffer(json.dumps(header).encode(), np.uint8))
    out = io.BytesIO()
    off_h = out.tell()
    out.write(_local(b"header.npy", hdr) + hdr)
    off_0 = out.tell()
    lh0 = _local(b"v0.npy", d0)
    out.write(lh0 + d0)
    off_1 = off_0 + len(lh0) + len(d0) - len(payload0) + 8  # v1's local header, inside v0
    cd_at = out.tell()
    cd = (_central(b"header.npy", hdr, off_h) + _central(b"v0.npy", d0, off_0)
          + _central(b"v1.npy", b1, off_1))
    out.write(cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 3, 3, len(cd), cd_at,
                               len(comment)) + comment)
    path.write_bytes(out.getvalue())
    with zipfile.ZipFile(path) as z:  # a well-formed zip to zipfile: every member reads
        assert z.testzip() is None
        assert z.read("v1.npy") == b1 and z.read("v0.npy") == d0
    return path


def test_a_member_hidden_inside_another_is_refused_by_the_claimed_size(tmp_path):
    refused(_hidden_member_zip(tmp_path / "hidden.tape"), "members claim")


def test_the_claimed_bytes_bound_is_the_files_size_exactly(tmp_path):
    """A small v1 hidden in v0: the members claim exactly the file's size (accepted; the bound
    is "more than the file holds"), then one byte more than a file one byte shorter."""
    probe = _hidden_member_zip(tmp_path / "probe.tape", n1=17)
    with zipfile.ZipFile(probe) as z:
        claimed = sum(zi.compress_size for zi in z.infolist())
    room = claimed - probe.stat().st_size  # comment bytes that make the file exactly that long
    assert room > 1
    ok = _hidden_member_zip(tmp_path / "ok.tape", n1=17, comment=b"c" * room)
    assert ok.stat().st_size == claimed
    back, _ = tapefile.load(ok)
    assert np.array_equal(back.value(1), np.arange(17.0))
    over = _hidden_member_zip(tmp_path / "over.tape", n1=17, comment=b"c" * (room - 1))
    refused(over, f"members claim {claimed} bytes but the file holds {claimed - 1} (corrupt)")


@pytest.mark.parametrize("extra", [0, 1])
def test_the_header_limit_edge(small, tmp_path, extra):
    size = zipfile.ZipFile(small).getinfo("header.npy").file_size
    if extra:
        refused(small, "header is", limits=Limits(max_header_bytes=size - 1))
    else:
        assert len(tapefile.load(small, limits=Limits(max_header_bytes=size))[0]) == 3


def test_the_inflate_limit_edge_exactly_at_and_one_past(small, tmp_path):
    path = write_zip(tmp_path / "d.tape", read_members(small), zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as z:
        # the header is held to its own limit (max_header_bytes), the arrays to this one
        infl = sum(zi.file_size for zi in z.infolist() if zi.filename != "header.npy")
        assert all(zi.compress_type == zipfile.ZIP_DEFLATED for zi in z.infolist())
    assert len(tapefile.load(path, limits=Limits(max_inflate_bytes=infl))[0]) == 3
    err = refused(path, f"inflate to {infl} bytes", limits=Limits(max_inflate_bytes=infl - 1))
    assert f"limit of {infl - 1}" in str(err)
    # stored members never inflate: a limit of 0 still reads a stored file
    assert len(tapefile.load(small, limits=Limits(max_inflate_bytes=0))[0]) == 3


def test_only_the_deflated_members_count_toward_the_inflate_limit(small, tmp_path):
    members = read_members(small)
    path = tmp_path / "mixed.tape"
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data, zipfile.ZIP_DEFLATED if n == "v1.npy" else zipfile.ZIP_STORED)
    one = len(members["v1.npy"])
    assert len(tapefile.load(path, limits=Limits(max_inflate_bytes=one))[0]) == 3
    refused(path, "inflate", limits=Limits(max_inflate_bytes=one - 1))


@pytest.mark.parametrize("raw,want", [("1024", 1024), ("64M", 64 << 20), ("2G", 2 << 30),
                                      ("3k", 3 << 10), ("1KiB", 1 << 10), ("5 MB", 5 << 20),
                                      ("1T", 1 << 40), (" 7 ", 7)])
def test_limits_from_the_environment(monkeypatch, raw, want):
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_HEADER", raw)
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_INFLATE", raw)
    lim = Limits.from_env()
    assert lim.max_header_bytes == want and lim.max_inflate_bytes == want
    assert lim.max_rank == 32


@pytest.mark.parametrize("raw", ["1.5G", "-1", "G", "12X", "1 G B x"])
def test_a_malformed_limit_in_the_environment_is_one_error(monkeypatch, raw, small):
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_HEADER", raw)
    with pytest.raises(ValueError, match="TAPESCOPE_TAPE_MAX_HEADER"):
        Limits.from_env()
    refused(small, "cannot read it with these limits")


def test_unset_limits_are_the_defaults(monkeypatch):
    monkeypatch.delenv("TAPESCOPE_TAPE_MAX_HEADER", raising=False)
    monkeypatch.setenv("TAPESCOPE_TAPE_MAX_INFLATE", "  ")
    assert Limits.from_env() == Limits() == Limits(128 * MiB, 512 * MiB, 32)


# ---- members --------------------------------------------------------------------------------
def test_a_npy_format_3_member_is_refused(small, tmp_path):
    members = read_members(small)
    v = np.load(small)["v0"]
    buf = io.BytesIO()
    np.lib.format.write_array(buf, v, version=(3, 0), allow_pickle=False)
    refused(write_zip(tmp_path / "v3.tape", {**members, "v0.npy": buf.getvalue()}),
            "format version (3, 0)")


def test_a_stored_header_member_altered_in_place_fails_the_zip_crc(small, tmp_path):
    """The header has no SHA-256 of its own: the zip CRC-32 is what notices a changed byte."""
    data = bytearray(small.read_bytes())
    at = data.find(b'"name": "x"')
    assert at > 0
    data[at + 9] = ord("y")
    bad = tmp_path / "crc.tape"
    bad.write_bytes(bytes(data))
    refused(bad, "corrupt")


def test_a_header_that_is_not_a_byte_vector_is_refused(small, tmp_path):
    members = read_members(small)
    text = np.frombuffer(members["header.npy"][128:], np.uint8)
    for arr in (text.astype(np.int8), text.reshape(1, -1)):
        refused(write_zip(tmp_path / "h.tape", {**members, "header.npy": npy(arr)}),
                "not a byte array")


# ---- what each refusal says ----------------------------------------------------------------------
def test_one_line_messages_are_joined_and_cut_at_200_characters():
    from tapescope.core.tapefile import _one_line, _short

    assert _one_line(ValueError("a\n  b\tc ")) == "a b c"
    assert _one_line(ValueError("x" * 200)) == "x" * 200
    assert _one_line(ValueError("x" * 201)) == "x" * 200 + "..."
    assert _short("ab") == "'ab'" and _short(2) == "2" and _short(None) == "None"
    assert _short("x" * 58) == repr("x" * 58)  # 60 characters quoted: kept
    assert _short("x" * 59) == repr("x" * 59)[:60] + "..."


@pytest.mark.parametrize("depth,ok", [(1, True), (2, True), (4, True), (5, False)])
def test_list_attributes_nest_at_most_four_deep(small, tmp_path, depth, ok):
    members = read_members(small)
    h = header_of(members)
    value: object = 1
    for _ in range(depth):
        value = [value]
    h["nodes"][1]["attrs"]["extra"] = value  # tanh's shape rule ignores it
    path = write_zip(tmp_path / "deep.tape", with_header(members, h))
    if ok:
        got = tapefile.load(path)[0].nodes[1].attrs["extra"]
        for _ in range(depth):
            assert type(got) is tuple and len(got) == 1
            got = got[0]
        assert got == 1
    else:
        refused(path, "attribute value of type list")


def test_an_object_attribute_is_refused_even_where_the_op_ignores_it(small, tmp_path):
    members = read_members(small)
    h = header_of(members)
    h["nodes"][1]["attrs"]["extra"] = {"a": 1}
    refused(write_zip(tmp_path / "obj.tape", with_header(members, h)),
            "attribute value of type dict")


def _crafted(small: Path, tmp_path: Path, case: str) -> Path:
    members = read_members(small)
    h = header_of(members)
    if case == "meta":
        h["meta"] = [1]
    elif case == "workload":
        h["meta"]["workload"] = 3
    elif case == "missing-value":
        del members["v1.npy"]
        del h["digests"]["v1"]
    elif case == "no-digest":
        del h["digests"]["g0"]
    elif case == "extra-digest":
        h["digests"]["g9"] = "0" * 64
    elif case == "member-one-past":
        members["v3.npy"] = members["v2.npy"]
        h["digests"]["v3"] = h["digests"]["v2"]
    elif case == "trailing-bytes":
        members["v0.npy"] = members["v0.npy"] + b"\0" * 8
    elif case == "npy-v3":
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.load(small)["v0"], version=(3, 0), allow_pickle=False)
        members["v0.npy"] = buf.getvalue()
    return write_zip(tmp_path / f"{case}.tape", with_header(members, h))


@pytest.mark.parametrize("case,says", [
    ("meta", "'meta' must be an object"),
    ("workload", "meta 'workload' must be a string"),
    ("missing-value", "node 1 tanh: value missing"),
    ("no-digest", "member g0 has no SHA-256 checksum"),
    ("extra-digest", "a checksum for 'g9' but no such member"),
    ("member-one-past", "member v3.npy is not referenced by any node"),
    ("trailing-bytes", "member v0: declares (2, 3) float64 = 48 bytes but carries 56"),
    ("npy-v3", "member v0: .npy format version (3, 0) is not supported"),
])
def test_each_refusal_says_what_is_wrong_and_where(small, tmp_path, case, says):
    refused(_crafted(small, tmp_path, case), says)


def test_numpy_scalar_attributes_are_saved_as_plain_json_and_load_equal(tmp_path):
    t = Tape()
    x = t.param(np.arange(6.0).reshape(2, 3))
    t.record("muls", [x], {"s": np.float64(0.25)})
    t.record("sum", [x], {"axis": (np.int64(1),), "keepdims": np.bool_(False)})
    path = save_v1(t, tmp_path / "np.tape")
    nodes = header_of(read_members(path))["nodes"]
    assert nodes[1]["attrs"] == {"s": 0.25} and type(nodes[1]["attrs"]["s"]) is float
    assert nodes[2]["attrs"]["axis"] == [1] and type(nodes[2]["attrs"]["axis"][0]) is int
    back, _ = tapefile.load(path)
    assert dict(back.nodes[1].attrs) == {"s": 0.25}
    assert back.nodes[2].attrs["axis"] == (1,)


# ---- each refusal quotes the value at fault, cut short -------------------------------------------
# (a refusal with no message, or None quoted for the value at fault, or the wrong value let
# through to a later, vaguer refusal, passes the looser matches above)
def _edited(small: Path, tmp_path: Path, edit, name: str = "e.tape") -> Path:
    members = read_members(small)
    h = header_of(members)
    edit(h)
    return write_zip(tmp_path / name, with_header(members, h))


def _node_is(i: int, **kw):
    return lambda h: h["nodes"][i].update(kw)


V1_REFUSALS = {
    "version": (lambda h: h.update(version=2),
                "format version 2 is not supported in a zip tape (version 1)"),
    "dtype-name": (lambda h: h.update(dtype="int8"),
                   f"dtype 'int8' is not supported ({' or '.join(tapefile.FILE_DTYPES)})"),
    "dtype-number": (lambda h: h.update(dtype=5), "dtype 5 is not supported"),
    "math": (lambda h: h.update(math="fast"), "math mode 'fast' is not one of"),
    "ok": (lambda h: h.update(ok="yes"), "'ok' must be true/false and 'error' a string or null"),
    "nodes": (lambda h: h.update(nodes={}), "'nodes' must be a list"),
    "digest-not-hex": (lambda h: h["digests"].update(v0="z" * 64),
                       "'digests' must map member names to SHA-256 hex strings"),
    "digest-number": (lambda h: h["digests"].update(v0=5),
                      "'digests' must map member names to SHA-256 hex strings"),
    "node-not-object": (lambda h: h["nodes"].__setitem__(1, 5), "node 1: must be an object"),
    "node-missing": (lambda h: h["nodes"][1].pop("shape"), "node 1: missing ['shape']"),
    "node-id": (_node_is(1, id=7), "node 1: id 7 out of order"),
    "node-op": (_node_is(1, op="nope"), "node 1: unknown op 'nope'"),
    "requires-grad": (_node_is(1, requires_grad=1),
                      "node 1 tanh: requires_grad must be true or false"),
    "attrs-not-object": (_node_is(1, attrs=[1]), "node 1 tanh: attrs [1] do not fit "
                         "(TypeError: attrs must be an object, not list)"),
    "attrs-wrong-shape": (_node_is(2, shape=[5]), "do not fit (ValueError: inputs and attrs "
                          "give shape [])"),
    "shape-float": (_node_is(0, shape=[2.0, 3]),
                    "node 0 param: shape [2.0, 3] is not a list of sizes"),
    "shape-2**62": (_node_is(0, shape=[1 << 62, 3]),
                    f"node 0 param: shape [{1 << 62}, 3] is not a list of sizes"),
}


@pytest.mark.parametrize("case", sorted(V1_REFUSALS))
def test_each_version_1_header_refusal_names_the_field_and_the_value(small, tmp_path, case):
    edit, says = V1_REFUSALS[case]
    err = refused(_edited(small, tmp_path, edit))
    assert says in str(err), str(err)


def test_the_largest_size_there_may_be_is_still_a_size(small, tmp_path):
    """2**62 - 1 is a size: node 0 passes, the refusal is node 1's, whose shape rule gives it."""
    err = refused(_edited(small, tmp_path, _node_is(0, shape=[(1 << 62) - 1])))
    assert f"node 1 tanh: attrs {{}} do not fit (ValueError: inputs and attrs give shape " \
           f"[{(1 << 62) - 1}])" in str(err), str(err)


def test_a_header_without_ok_or_error_reads_as_a_good_tape(small, tmp_path):
    def edit(h):
        del h["ok"], h["error"]
    back, _ = tapefile.load(_edited(small, tmp_path, edit))
    assert (back.ok, back.error) == (True, None)


def test_empty_arrays_round_trip_in_version_1(tmp_path):
    t = Tape()
    x = t.param(np.zeros((0, 3)))
    loss = ops.sum(x)
    t.backward(loss)
    back, _ = tapefile.load(save_v1(t, tmp_path / "e.tape"))
    assert back.value(0).shape == (0, 3) and back.grad(0).shape == (0, 3)
    assert back.nodes[0].shape == (0, 3) and float(back.value(1)) == 0.0


def test_a_numpy_true_attribute_is_saved_true(tmp_path):
    for version in (1, 2):
        t = Tape()
        x = t.param(np.arange(6.0).reshape(2, 3))
        t.record("sum", [x], {"axis": (1,), "keepdims": np.bool_(True)})
        back, _ = tapefile.load(tapefile.save(t, tmp_path / f"k{version}.tape", version=version))
        assert back.nodes[1].attrs["keepdims"] is True and back.nodes[1].shape == (2, 1)


def test_a_member_named_twice_is_refused_by_name(small, tmp_path):
    members = read_members(small)
    bad = tmp_path / "dup.tape"
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(bad, "w") as z:
        for n, data in [*members.items(), ("v1.npy", members["v1.npy"])]:
            z.writestr(n, data)
    refused(bad, "member v1.npy appears twice")


@pytest.mark.parametrize("flag", [0x1, 0x40])
def test_an_encrypted_member_is_refused_as_encrypted(small, tmp_path, flag):
    from tests.helpers.tapefile_v1 import patch_member_flags

    bad = tmp_path / "enc.tape"
    bad.write_bytes(small.read_bytes())
    patch_member_flags(bad, "v1.npy", flag=flag)
    refused(bad, "member v1.npy is encrypted (not supported)")


def _set_size(path: Path, name: str, size: int) -> None:
    """Patch ``name``'s uncompressed size in its local (offset 22) and central (24) headers."""
    data = bytearray(path.read_bytes())
    enc = name.encode()
    for sig, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        pos = data.find(sig)
        while pos >= 0:
            if data[pos + name_at: pos + name_at + len(enc)] == enc:
                data[pos + size_at: pos + size_at + 4] = struct.pack("<I", size)
            pos = data.find(sig, pos + 4)
    path.write_bytes(bytes(data))


def test_a_deflated_member_that_inflates_short_is_refused_as_truncated(small, tmp_path):
    """v0's deflate stream (and CRC) hold 8 bytes less than its directory entry says: every
    size check passes, the read comes up short."""
    members = read_members(small)
    full = len(members["v0.npy"])
    path = write_zip(tmp_path / "short.tape", {**members, "v0.npy": members["v0.npy"][:-8]},
                     zipfile.ZIP_DEFLATED)
    _set_size(path, "v0.npy", full)
    refused(path, "member v0 is truncated")


def _header_member(text: bytes, shape: tuple) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue() + text


def npy_v3(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, version=(3, 0), allow_pickle=False)
    return buf.getvalue()


def test_the_header_member_is_named_in_its_own_refusals(small, tmp_path):
    members = read_members(small)
    text = json.dumps(header_of(members)).encode()
    n = len(text)
    cases = [(_header_member(text, (n + 8,)), f"member header: declares ({n + 8},) uint8 = "
              f"{n + 8} bytes but carries {n}"),
             (npy_v3(np.frombuffer(text, np.uint8)),
              "member header: .npy format version (3, 0) is not supported")]
    for k, (data, says) in enumerate(cases):
        refused(write_zip(tmp_path / f"h{k}.tape", {**members, "header.npy": data}), says)


@pytest.mark.parametrize("text,says", [
    ("{not json", "header is not valid JSON (Expecting property name"),
    ("[" * 200_000 + "]" * 200_000, "header JSON is nested too deeply"),
], ids=["not-json", "200k-deep"])
def test_a_header_that_is_not_json_says_so(small, tmp_path, text, says):
    refused(write_zip(tmp_path / "j.tape", with_header(read_members(small), text)), says)


def test_a_checksum_for_no_member_is_quoted_to_40_characters(small, tmp_path):
    err = refused(_edited(small, tmp_path, lambda h: h["digests"].update({"k" * 50: "0" * 64})))
    assert "the header has a checksum for '" + "k" * 40 + "' but no such member" in str(err)


def test_a_stored_member_whose_sizes_differ_is_refused_naming_both(small, tmp_path):
    """v1.npy's compressed size in the directory 8 more than its size: refused from the
    directory, before any member is read."""
    n = len(read_members(small)["v1.npy"])
    bad = tmp_path / "sizes.tape"
    data = bytearray(small.read_bytes())
    enc = b"v1.npy"
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:
        if data[pos + 46: pos + 46 + len(enc)] == enc:
            data[pos + 20: pos + 24] = struct.pack("<I", n + 8)  # compressed size
        pos = data.find(b"PK\x01\x02", pos + 4)
    bad.write_bytes(bytes(data))
    refused(bad, f"member v1.npy: stored size {n + 8} != size {n}")


def test_a_long_loss_is_quoted_to_40_characters(small, tmp_path):
    err = refused(_edited(small, tmp_path, lambda h: h["meta"].update(loss="x" * 50)))
    assert "meta 'loss' " + "x" * 40 + " is not a node id" in str(err), str(err)


# ---- long names quoted cut short, the meta, a header of another format ---------------------------
def test_a_long_params_list_is_quoted_to_80_characters(small, tmp_path):
    params = list(range(3, 60))
    text = str(params)
    assert text[80] != " "
    err = refused(_edited(small, tmp_path, lambda h: h.update(params=params)))
    assert f"'params' {text[:80]} must list ids of param nodes" in str(err), str(err)


def test_a_long_unknown_op_is_quoted_to_40_characters(small, tmp_path):
    err = refused(_edited(small, tmp_path, lambda h: h["nodes"][1].update(op="e" * 60)))
    assert f"node 1: unknown op '{'e' * 40}'" in str(err), str(err)


_LONG_INPUTS, _LONG_SHAPE, _LONG_ATTRS = list(range(40)), [2.25] * 30, [1] * 40
LONG_VALUES = {  # a value at fault quoted to 80 characters (a name to 40), escaped
    "inputs": (_node_is(1, inputs=_LONG_INPUTS),
               f"node 1 tanh: inputs {str(_LONG_INPUTS)[:80]} must be ids of earlier nodes"),
    "shape": (_node_is(0, shape=_LONG_SHAPE),
              f"node 0 param: shape {str(_LONG_SHAPE)[:80]} is not a list of sizes"),
    "attrs": (_node_is(1, attrs=_LONG_ATTRS),
              f"node 1 tanh: attrs {str(_LONG_ATTRS)[:80]} do not fit (TypeError: attrs must be "
              "an object, not list)"),
    "name": (_node_is(1, name="a\n" + "b" * 60),
             "node 1 tanh: name 'a\\n" + "b" * 21 + "…(62 characters)' has a non-printable "
             "character"),
}


@pytest.mark.parametrize("case", sorted(LONG_VALUES))
def test_a_long_value_at_fault_is_quoted_cut_short(small, tmp_path, case):
    edit, says = LONG_VALUES[case]
    for v in (_LONG_INPUTS, _LONG_SHAPE, _LONG_ATTRS):
        assert str(v)[80] != " "
    err = refused(_edited(small, tmp_path, edit))
    assert says in str(err), str(err)


def test_the_meta_round_trips_and_a_header_without_one_reads_as_empty(small, tmp_path):
    t = Tape()
    x = t.param(np.ones(3))
    loss = ops.sum(x)
    meta = {"loss": loss.id, "workload": "w", "step": 3}
    assert tapefile.load(save_v1(t, tmp_path / "m.tape", meta=meta))[1] == meta

    def edit(h):
        del h["meta"]
    back, got = tapefile.load(_edited(small, tmp_path, edit))
    assert got == {} and len(back) == 3


@pytest.mark.parametrize("case", ["other-format", "not-an-object"])
def test_a_header_of_another_format_or_not_an_object_is_refused_by_its_tag(small, tmp_path,
                                                                           case):
    members = read_members(small)
    h = header_of(members)  # every other field as saved: only the tag is wrong
    text = json.dumps({**h, "format": "other.tape"} if case == "other-format" else [1, 2])
    err = refused(write_zip(tmp_path / "f.tape", with_header(members, text)))
    assert str(err).endswith("not a tapescope tape file (wrong format tag)"), str(err)


# ---- the loader's last-resort refusals -----------------------------------------------------------
# load()'s except arms: each turns what went wrong into one line that still says what it was
def test_a_path_through_a_regular_file_cannot_be_opened_and_says_why(small):
    """The open itself fails (ENOTDIR: an OSError with an errno and a file name)."""
    err = refused(small / "inside.tape")
    assert str(err).endswith(f"cannot open it ({os.strerror(errno.ENOTDIR)})"), str(err)


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc/self/mem")
def test_a_file_whose_read_fails_is_corrupt_with_the_os_error_named():
    """/proc/self/mem is a regular file that opens, then fails its first read (EIO at address
    0): an OSError with an errno but no file name, so not 'cannot open it'."""
    err = refused(Path("/proc/self/mem"))
    assert str(err).endswith(
        f"truncated or corrupt (OSError: [Errno {errno.EIO}] {os.strerror(errno.EIO)})"), str(err)


def test_a_zip_without_a_directory_names_zipfiles_error(tmp_path):
    path = tmp_path / "pk.tape"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    err = refused(path)
    assert str(err).endswith("truncated or corrupt (BadZipFile: File is not a zip file)"), str(err)


def test_a_corrupt_deflate_stream_is_corrupt_not_unreadable(small, tmp_path):
    """v0's deflate stream starts with a block of the reserved type: zlib's own error, which
    zipfile passes through, is the file's corruption (as a bad CRC-32 is), with zlib's words."""
    path = write_zip(tmp_path / "z.tape", read_members(small), zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    pos = data.find(b"PK\x03\x04")
    while pos >= 0:
        nl, el = struct.unpack("<HH", data[pos + 26:pos + 30])
        if data[pos + 30:pos + 30 + nl] == b"v0.npy":
            data[pos + 30 + nl + el] = 0xFF  # BFINAL 1, BTYPE 11 (reserved)
        pos = data.find(b"PK\x03\x04", pos + 4)
    path.write_bytes(bytes(data))
    err = refused(path)
    assert str(err).endswith("truncated or corrupt (error: Error -3 while decompressing data: "
                             "invalid block type)"), str(err)


def test_a_file_the_user_may_not_read_is_refused_as_permission_denied(small, monkeypatch):
    """The suite may run as root (who reads any file), so the open's EACCES is the OS's answer
    played back: os.open refusing this one path."""
    real = os.open

    def deny(p, *a, **kw):
        if Path(p) == small:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
        return real(p, *a, **kw)
    monkeypatch.setattr(os, "open", deny)
    err = refused(small)
    assert str(err) == f"{small}: permission denied"


def test_running_out_of_memory_while_loading_says_so(small, monkeypatch):
    """A member the raised limits admit but this process cannot hold: numpy's MemoryError
    (played back by np.empty, which _read_into allocates each member with) is one line."""
    def no_memory(*a, **kw):
        raise MemoryError("Unable to allocate")
    monkeypatch.setattr(np, "empty", no_memory)
    with pytest.raises(TapeFileError) as ei:
        tapefile.load(small)
    monkeypatch.undo()
    assert str(ei.value) == f"{small}: too large to load in this process's memory"


def test_a_member_is_read_in_pieces_not_copied_whole(tmp_path):
    """A 12 MiB array loads into its own buffer through 4 MiB reads: the peak is the array and
    a few reads' worth (zipfile's copy of each), not a second and third whole copy of it."""
    t = Tape()
    t.param(np.arange(12 * MiB // 8, dtype=np.float64))
    path = save_v1(t, tmp_path / "big.tape")
    tracemalloc.start()
    try:
        back, _ = tapefile.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert back.value(0).tobytes() == t.value(0).tobytes()
    assert peak < 12 * MiB + 3 * tapefile._CHUNK, f"peak {peak / MiB:.1f} MiB"
