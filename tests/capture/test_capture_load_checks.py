"""The capture reader's fast paths (core/capture/file.py) decide exactly what its entry-by-entry
checks decide: a column checked whole (``_ints``, ``_texts``, ``_hexes``, ``_Spec._level``,
``_Spec._stored_fit``), the header parsed by orjson where it round-trips (``_parse``) and the
arrays read with one read (``_slab``). Each hostile header below is loaded twice, as it is and
with every fast path turned off (the walk each one stands in for), and must give the same
refusal (or the same capture), for headers written by orjson (what ``save`` writes) and by
json (older files)."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import orjson
import pytest

from tapescope.core.capture import file as F
from tapescope.core.capture.file import CaptureFileError, load, save
from tests.helpers.capture_files import rewrite_header

N_VALUES = 5  # values 0-3 stored, 4 a digest only


def _header() -> tuple[dict, list[np.ndarray]]:
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, -2], dtype=np.int64),
              np.array([True, False]), np.linspace(0, 1, 40).reshape(5, 8)]
    digests = [F.digest(a) for a in arrays] + [F.digest(np.zeros(3, np.float32))]
    header = {
        "steps": 1, "digest": "xxh3_128",
        "values": {"dtypes": ["float32", "int64", "bool", "float64"],
                   "dtype": [0, 1, 2, 3, 0], "shape": [[2, 3], [2], [2], [5, 8], [3]],
                   "digests": digests, "array": [0, 1, 2, 3, -1]},
        "ops": {"names": ["aten.add.Tensor", "aten.sum.dim_IntList"], "modules": ["", "m"],
                "sources": ["x = a + b"], "op": [0, 1, 0], "module": [0, 1, 1],
                "phase": [0, 1, 2], "step": [1, 1, 1], "source": [0, -1, 0],
                "args": [[{"T": 0}, {"T": 3}], [{"T": 1}, [0, [1, [2]]], True, None, 1.5],
                         [{"T": 2}, {"f": "nan"}, "torch.float32", {"c": [1.0, {"f": "inf"}]}]],
                "kwargs": [{}, {"dtype": "torch.float32", "dim": [[{"T": 4}]]},
                           {"alpha": 2, "g": {"g": [0, 2]}, "r": {"r": "SUM"}}],
                "outputs": [[3], [4, 0], []]},
        "losses": [3], "initial": {"params": [["w", 0]], "buffers": []},
        "settings": {"lr": 0.1}, "meta": {"torch": "2"}}
    return header, arrays


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> bytes:
    h, arrays = _header()
    f = tmp_path_factory.mktemp("checks") / "base.capture"
    save(f, h, arrays)
    return f.read_bytes()


def _nest(lists: int, inner: list) -> list:
    """``inner`` inside ``lists`` - 1 more lists. An op's argument list is at depth 0, so an
    argument of k nested lists holds its entries at depth k + 1 (at most 12: ``_MAX_DEPTH``)."""
    for _ in range(lists - 1):
        inner = [inner]
    return inner


def _set(path: str, value):
    """An edit of the header: ``value`` at ``path`` (keys and indexes split by '/')."""
    def edit(h: dict) -> None:
        *head, last = path.split("/")
        d = h
        for k in head:
            d = d[int(k)] if isinstance(d, list) else d[k]
        d[int(last) if isinstance(d, list) else last] = value(d[int(last) if isinstance(
            d, list) else last]) if callable(value) else value
    return edit


EDITS = {
    "as-written": lambda h: None,
    "dtype-bool": _set("values/dtype/0", True),
    "dtype-float": _set("values/dtype/0", 0.0),
    "dtype-range": _set("values/dtype/1", 4),
    "dtype-negative": _set("values/dtype/1", -1),
    "shape-bool": _set("values/shape/0/1", True),
    "shape-negative": _set("values/shape/3", [-5, -8]),
    "shape-float": _set("values/shape/0", [2, 3.0]),
    "shape-text": _set("values/shape/2", "ab"),
    "shape-rank": _set("values/shape/4", [1] * 33),
    "shape-rank-ok": _set("values/shape/4", [1] * 31 + [3]),
    "shape-huge": _set("values/shape/4", [1 << 40, 1 << 40]),
    "digest-upper": _set("values/digests/2", lambda d: d.upper()),
    "digest-short": _set("values/digests/4", lambda d: d[:-1]),
    "digest-int": _set("values/digests/4", 7),
    "digest-other-value": _set("values/digests/1", lambda d: "0" * len(d)),
    "digest-letter": _set("values/digests/3", lambda d: d[:5] + "g" + d[6:]),
    "digest-non-ascii": _set("values/digests/4", lambda d: "\u00e9" + d[1:]),
    "digest-space": _set("values/digests/0", lambda d: d[:-1] + " "),
    "digest-long-short": _set("values/digests", lambda c: [c[0] + c[1][:1], c[1][1:]] + c[2:]),
    "array-below": _set("values/array/4", -2),
    "array-beyond": _set("values/array/4", 4),
    "array-bool": _set("values/array/1", True),
    "array-shared": _set("values/array/4", 0),  # a digest-only value naming array 0
    "stored-dtype": _set("values/dtypes/2", "object"),
    "table-short": _set("arrays/1", lambda e: e[:2]),
    "table-bool": _set("arrays/0/1", True),
    "table-size": _set("arrays/3/1", lambda n: n + 8),
    "table-digest": _set("arrays/3/2", lambda d: d[::-1]),
    "table-digest-upper": _set("arrays/3/2", lambda d: d.upper()),
    # an array no value names, its digest not one (every named array's is a value's)
    "table-unnamed-digest": _set("arrays", lambda t: t + [[t[-1][0], 0, "g" * len(t[0][2])]]),
    "table-misaligned": _set("arrays/2/0", lambda off: off + 1),
    "table-overlap": _set("arrays/2/0", lambda off: off - 64),
    # the table out of file order (two arrays' entries and their values' indexes swapped)
    "table-unordered-ok": lambda h: (h["arrays"].__setitem__(slice(0, 2), h["arrays"][1::-1]),
                                     h["values"]["array"].__setitem__(slice(0, 2), [1, 0])),
    "table-overlap-unordered": lambda h: (
        h["arrays"].__setitem__(slice(0, 2), h["arrays"][1::-1]),
        h["values"]["array"].__setitem__(slice(0, 2), [1, 0]),
        h["arrays"][1].__setitem__(0, h["arrays"][0][0])),  # (both at one offset)
    "table-before-preamble": _set("arrays/0/0", 0),
    "table-past-header": _set("arrays", lambda t: t + [[t[-1][0] + 64, 1 << 20, t[0][2]]]),
    "table-empty-at-end-ok": _set("arrays", lambda t: t + [[t[-1][0], 0, t[0][2]]]),
    # entries no value names, placed all the same: a negative size (``end`` moved back), an
    # offset past the file under it, a negative offset
    "table-unnamed-negative-size": _set("arrays", lambda t: t + [[t[-1][0] + 320, -64,
                                                                  t[0][2]]]),
    "table-unnamed-far": _set("arrays", lambda t: t + [[1 << 62, -(1 << 62), t[0][2]]]),
    "table-unnamed-negative-offset": _set("arrays", lambda t: t + [[-64, 0, t[0][2]]]),
    "names-long": _set("ops/names/1", "x" * 5000),
    "names-int": _set("ops/names/0", 5),
    "op-bool": _set("ops/op/2", True),
    "op-range": _set("ops/op/2", 2),
    "module-negative": _set("ops/module/0", -1),
    "phase-range": _set("ops/phase/2", 3),
    "step-zero": _set("ops/step/0", 0),
    "step-beyond": _set("ops/step/0", 2),
    "source-below": _set("ops/source/0", -2),
    "outputs-bool": _set("ops/outputs/1", [True]),
    "outputs-range": _set("ops/outputs/1", [N_VALUES]),
    "outputs-nested": _set("ops/outputs/0", [[3]]),
    "outputs-text": _set("ops/outputs/2", "3"),
    "arg-value-range": _set("ops/args/0/1", {"T": N_VALUES}),
    "arg-value-bool": _set("ops/args/0/0", {"T": True}),
    "arg-value-extra": _set("ops/args/0/0", {"T": 0, "U": 1}),
    "arg-float-tag": _set("ops/args/2/1", {"f": "x"}),
    "arg-deep": _set("ops/args/1/1", _nest(12, [1])),
    "arg-deep-ok": _set("ops/args/1/1", _nest(11, [1])),
    "arg-deep-value": _set("ops/args/1/1", _nest(12, [{"T": 0}])),
    "arg-deep-value-ok": _set("ops/args/1/1", _nest(11, [{"T": 0}])),
    "arg-deep-text": _set("ops/args/1/1", _nest(12, ["x"])),
    "arg-deep-empty": _set("ops/args/1/1", _nest(13, [])),
    "arg-deep-empty-ok": _set("ops/args/1/1", _nest(12, [])),
    "arg-text-long": _set("ops/args/2/2", "x" * 5000),
    "arg-group": _set("ops/args/2/1", {"g": [2, 1]}),
    "arg-unknown-tag": _set("ops/args/2/1", {"z": 1}),
    # a complex number's parts: numbers or {"f": ...} only (a value or any object was let
    # through, and the judge's complex() of them failed later)
    "arg-complex-value": _set("ops/args/2/3", {"c": [{"T": 0}, 1.0]}),
    "arg-complex-object": _set("ops/args/2/3", {"c": [1.0, {"f": "nan", "x": 1}]}),
    "arg-complex-bool": _set("ops/args/2/3", {"c": [True, 1.0]}),
    "arg-complex-ok": _set("ops/args/2/3", {"c": [-0.5, {"f": "-inf"}]}),
    "arg-not-list": _set("ops/args/1", {"T": 1}),
    "kwarg-value-range": _set("ops/kwargs/1/dim", [[{"T": -1}]]),
    "kwarg-text-long": _set("ops/kwargs/1/dtype", "x" * 5000),
    "kwarg-deep": _set("ops/kwargs/1/dim", _nest(12, [1])),
    "kwarg-deep-ok": _set("ops/kwargs/1/dim", _nest(11, [1])),
    "kwarg-key-empty-ok": _set("ops/kwargs/0", {"": None}),
    "kwargs-not-dict": _set("ops/kwargs/0", []),
    "losses-range": _set("losses/0", N_VALUES),
    "settings-nan-ok": _set("settings/lr", float("nan")),  # json writes NaN, orjson null
    "applied-ok": _set("meta/applied", {"threads": 2, "autocast": "bfloat16", "x": None}),
    "applied-text": _set("meta/applied", "threads=2"),
    "applied-list": _set("meta/applied", [["threads", 2]]),
    "applied-nested": _set("meta/applied", {"threads": [2]}),
}


def _write(data: bytes, edit, writer: str) -> bytes:
    if writer == "json":
        return rewrite_header(data, edit)
    magic, hoff, hlen, _ = struct.unpack("<8sQQ32s", data[-56:])
    h = json.loads(data[hoff:hoff + hlen])
    edit(h)
    text = orjson.dumps(h)
    return data[:hoff] + text + struct.pack("<8sQQ32s", magic, hoff, len(text),
                                            hashlib.sha256(text).digest())


def _outcome(path) -> tuple:
    """What ``load`` made of ``path``: its refusal, or the capture's fields and bytes."""
    try:
        c = load(path)
    except CaptureFileError as e:
        return ("refused", str(e))
    return ("loaded", repr((c.steps, c.ops, c.dtypes, c.shapes, c.digests, c.losses,
                            c.initial, c.settings, c.meta, c.graphs)),
            [None if a is None else (a.dtype.str, a.shape, a.tobytes(), a.flags.writeable)
             for a in c.arrays])


def _slow(monkeypatch) -> None:
    """Every fast path off: each column walked entry by entry, json's parse, a read per
    array."""
    monkeypatch.setattr(F, "_ints", lambda *a: False)
    monkeypatch.setattr(F, "_texts", lambda *a: False)
    monkeypatch.setattr(F, "_hexes", lambda *a: False)
    monkeypatch.setattr(F._Spec, "_level", lambda *a: False)
    monkeypatch.setattr(F._Spec, "_stored_fit", lambda *a: False)
    monkeypatch.setattr(F, "_SLAB_MAX", -1)
    monkeypatch.setattr(F, "_parse", lambda text: json.loads(
        text.decode("utf-8"), object_pairs_hook=F._no_duplicates))


@pytest.mark.parametrize("writer", ["orjson", "json"])
@pytest.mark.parametrize("case", sorted(EDITS))
def test_fast_checks_decide_as_the_walk(base, tmp_path, monkeypatch, case, writer):
    f = tmp_path / "c.capture"
    f.write_bytes(_write(base, EDITS[case], writer))
    fast = _outcome(f)
    with monkeypatch.context() as m:
        _slow(m)
        slow = _outcome(f)
    assert fast == slow
    ok = case == "as-written" or case.endswith("-ok")
    assert (fast[0] == "loaded") == ok, fast[:2]


def test_hexes_holds_where_every_entry_is_a_digest():
    """``_hexes`` (the column joined, its hex digits deleted from its ASCII bytes) holds
    exactly where each entry is ``n_hex`` lowercase hex digits (``_Spec._digest_ok``'s test):
    every non-hex ASCII character, non-ASCII ones, other lengths, lengths that sum alike, and
    entries of other types. Planted: uppercase let through (a case-blind translate), or the
    lengths checked as a sum, fails it."""
    def walk(v, n_hex):
        return all(isinstance(d, str) and len(d) == n_hex and F._HEX.issuperset(d) for d in v)

    good = [hashlib.md5(bytes([i])).hexdigest() for i in range(6)]
    cases = [[], good, good[:1], [good[0][:-1]], [good[0][:-1], good[1] + "a"] + good[2:],
             [good[0] + good[1]], [None], good[:2] + [7], good + [b"0" * 32], [good[0], 1.5],
             [good[0].upper()], ["\u00e9" + good[0][1:]], ["\U0001f600" + good[0][2:]],
             [good[0][:-1] + "\x00"]]
    cases += [good[:3] + [good[3][:9] + chr(c) + good[3][10:]] for c in range(128)]
    for v in cases:
        for n_hex in (32, 31, 64):
            assert F._hexes(v, n_hex) == walk(v, n_hex), (v, n_hex)
        assert F._hexes(tuple(v), 32) == walk(v, 32)
    assert sum(F._hexes(v, 32) for v in cases) == 3 + 16  # (empty, good, good[:1]; 0-9, a-f)


def test_the_edits_are_refused_where_the_walk_refuses(base, tmp_path):
    # (the test above compares the two; this one pins that the walk itself still refuses:
    # a fast check that let a bad entry through and a walk gone lax would agree)
    for case in ("dtype-bool", "shape-bool", "outputs-bool", "arg-value-bool", "arg-deep",
                 "digest-upper", "table-size", "array-beyond"):
        f = tmp_path / f"{case}.capture"
        f.write_bytes(_write(base, EDITS[case], "orjson"))
        with pytest.raises(CaptureFileError, match="malformed|digest|bytes but|names array"):
            load(f)


def test_every_table_entry_is_placed_named_or_not(base, tmp_path):
    """An array no value names is never read, but its entry is placed with the others: one
    line naming it, for a negative size or offset, however far the offset."""
    want = {"table-unnamed-negative-size": r"array 4 \(offset \d+, -64 bytes\) has a negative "
                                           "size",
            "table-unnamed-far": rf"array 4 \(offset {1 << 62}, -{1 << 62} bytes\) has a "
                                 "negative size",
            "table-unnamed-negative-offset": r"array 4 \(offset -64, 0 bytes\) is misplaced",
            "applied-text": "meta 'applied' 'threads=2' is not an object"}
    for case, why in want.items():
        f = tmp_path / f"{case}.capture"
        f.write_bytes(_write(base, EDITS[case], "orjson"))
        with pytest.raises(CaptureFileError, match=why) as e:
            load(f)
        assert "\n" not in str(e.value) and str(e.value).startswith(str(f))


def test_a_repeated_key_is_refused_in_orjson_writing_too(base, tmp_path):
    magic, hoff, hlen, _ = struct.unpack("<8sQQ32s", base[-56:])
    text = base[hoff:hoff + hlen]
    assert orjson.dumps(orjson.loads(text)) == text  # save writes what orjson writes
    for extra in (b',"steps":1}', b',"meta":{}}'):  # the same value again, and another one
        t = text[:-1] + extra
        f = tmp_path / "dup.capture"
        f.write_bytes(base[:hoff] + t + struct.pack("<8sQQ32s", magic, hoff, len(t),
                                                    hashlib.sha256(t).digest()))
        with pytest.raises(CaptureFileError, match="a key appears twice"):
            load(f)


@pytest.mark.parametrize("flip", ["first", "last"])
def test_a_corrupt_array_is_named_alike_by_one_read_and_by_many(base, tmp_path, monkeypatch,
                                                                  flip):
    magic, hoff, hlen, _ = struct.unpack("<8sQQ32s", base[-56:])
    table = json.loads(base[hoff:hoff + hlen])["arrays"]
    off, n, _ = table[0 if flip == "first" else -1]
    data = bytearray(base)
    data[off + n - 1] ^= 1
    f = tmp_path / "c.capture"
    f.write_bytes(bytes(data))
    fast = _outcome(f)
    monkeypatch.setattr(F, "_SLAB_MAX", -1)
    assert fast == _outcome(f) and fast[0] == "refused" and "digest does not match" in fast[1]


def test_a_file_cut_short_while_read_names_the_same_array(base, tmp_path, monkeypatch):
    # the header is checked against the whole file; the arrays are read from one cut short
    # (a file that shrinks between the two): the one read comes back short, and the arrays
    # read one by one name the first that is cut
    magic, hoff, hlen, _ = struct.unpack("<8sQQ32s", base[-56:])
    h = json.loads(base[hoff:hoff + hlen])
    spec = F._Spec(h, hoff, F.Limits(), lambda why: CaptureFileError(why))
    cut = tmp_path / "cut.capture"
    cut.write_bytes(base[:h["arrays"][3][0] + 3])
    got = []
    for slab_max in (F._SLAB_MAX, -1):
        monkeypatch.setattr(F, "_SLAB_MAX", slab_max)
        with open(cut, "rb") as fh, pytest.raises(CaptureFileError) as e:
            F._read_arrays(fh, spec, lambda why: CaptureFileError(why))
        got.append(str(e.value))
    assert got[0] == got[1] and "array 3 (value 3) is truncated (3 of 320" in got[0]


def test_one_read_is_used_and_gives_private_read_only_arrays(base, tmp_path, monkeypatch):
    f = tmp_path / "c.capture"
    f.write_bytes(base)
    calls = []
    real = F._read
    monkeypatch.setattr(F, "_read", lambda *a: calls.append(a[4]) or real(*a))
    c = load(f)
    assert calls.count("the arrays") == 1 and not [w for w in calls if w.startswith("array")]
    assert [a is None for a in c.arrays] == [False] * 4 + [True]
    for a in c.arrays[:4]:
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[...] = 0
