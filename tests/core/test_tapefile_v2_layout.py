"""core.tapefile version 2, its layout check by check: crafted headers wrong in one way (the
layout's bounds at their edges, the structure and the trailer, the header's parse, names, flags
and dedupe), refused with the message that names what and where; round trips of the tapes that
exercise an edge (empty arrays, a block over the reader's 16 MiB chunk); the lazy arrays as the
GUI's session uses them (slices, snapshots, NaN/inf flags of arrays set after the load).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import Tape, ops, tapefile
from tapescope.core.tapefile import MAX_NAME, TapeFileError
from tests.helpers.tapefile_v2 import chain, edited, parts, refused, same, set_loc, small_tape


@pytest.fixture
def small(tmp_path) -> Path:
    """x[2,3] param -> tanh -> sum, with gradients; meta names the loss; one block an array."""
    return small_tape(tmp_path)


@pytest.fixture
def many(tmp_path) -> Path:
    """~83 nodes over many 1 KiB blocks (test_tapefile_v2's)."""
    t, loss = chain()
    return tapefile.save(t, tmp_path / "many.tape", meta={"loss": loss}, block_bytes=1024)


def _fail(src: Path, tmp_path: Path, edit, want: str, name: str = "bad.tape") -> None:
    """``src`` edited is refused at the open (eager and lazy), the message saying ``want``."""
    bad = edited(src, tmp_path / name, edit)
    for lazy in (False, True):
        err = refused(bad, lazy=lazy)
        assert want in str(err), str(err)


# ---- the layout: each refusal names what and where --------------------------------------------
def _block(b: int, k: int, v):
    def edit(h):
        h["blocks"][b][k] = v
    return edit


def test_blocks_that_are_not_a_list_of_triples(small, tmp_path):
    _fail(small, tmp_path, lambda h: h.update(blocks={}),
          "'blocks' must be a list of [offset, size, sha256]")
    _fail(small, tmp_path, _block(0, 0, 64.0), "block 0 must be [offset, size, sha256 hex]")
    _fail(small, tmp_path, _block(1, 1, True), "block 1 must be [offset, size, sha256 hex]")


def test_blocks_overlapping_the_preamble_or_each_other_are_refused(small, tmp_path):
    _, h = parts(small)
    b0 = h["blocks"][0]
    _fail(small, tmp_path, _block(0, 0, 8), "block 0 at 8 overlaps the 64-byte preamble")
    inside = b0[0] + b0[1] - 8  # block 1 starting 8 bytes before block 0 ends
    _fail(small, tmp_path, _block(1, 0, inside),
          f"block 1 at {inside} overlaps the preamble or block 0 (blocks lie in file order")


def test_a_block_past_the_data_is_refused_where_it_ends(small, tmp_path):
    body, h = parts(small)
    start, size, _ = h["blocks"][-1]
    hoff = len(body)
    last = len(h["blocks"]) - 1
    _fail(small, tmp_path, _block(last, 1, hoff - start + 1),
          f"block {last} ({hoff - start + 1} bytes at {start}) is not inside the data "
          f"(which ends at {hoff})")
    _fail(small, tmp_path, _block(last, 1, -1), f"block {last} (-1 bytes at {start})")


def test_a_shape_larger_than_the_file_is_refused_by_its_bytes(small, tmp_path):
    body, _ = parts(small)
    big = len(body) // 8 + 1  # float64: one element past what the data can hold
    _fail(small, tmp_path, lambda h: h["shapes_table"].__setitem__(0, [big]),
          f"shape [{big}] declares {big * 8} bytes, more than the file holds")


@pytest.mark.parametrize("kind", ["values", "grads"])
def test_array_locations_out_of_range_are_refused_by_the_list_check(small, tmp_path, kind):
    n = len(parts(small)[1]["op"])
    _fail(small, tmp_path, lambda h: h.update({kind: h[kind][:-2]}),
          f"'{kind}' must be a list of {2 * n} integers")
    _fail(small, tmp_path, lambda h: set_loc(h, kind, 0, [0, 1 << 62]),
          f"'{kind}' holds a value outside [-1, {1 << 62})")
    _fail(small, tmp_path, lambda h: set_loc(h, kind, 0, [-2, 0]),
          f"'{kind}' holds a value outside [-1, {1 << 62})")


def test_each_array_location_refusal_names_the_node_and_the_place(small, tmp_path):
    _, h = parts(small)
    nb = len(h["blocks"])
    _fail(small, tmp_path, lambda h: set_loc(h, "values", 1, [-1, -1]),
          "node 1 tanh: value missing")
    _fail(small, tmp_path, lambda h: set_loc(h, "values", 1, [nb, 0]),
          f"node 1 tanh: its value (block {nb}, offset 0) is in no block")
    _fail(small, tmp_path, lambda h: set_loc(h, "grads", 1, [0, 3]),
          "node 1 tanh: its grad (block 0, offset 3) is not aligned (offset not a multiple of 8)")
    _fail(small, tmp_path, lambda h: set_loc(h, "values", 2, [0, -1]),
          "node 2 sum: its value (block 0, offset -1) has a negative offset")
    _fail(small, tmp_path, lambda h: set_loc(h, "values", 1, [0, 1 << 20]),
          f"node 1 tanh: its value (48 bytes at offset {1 << 20}) lies outside block 0")


def test_arrays_overlapping_inside_one_block_are_refused(many, tmp_path):
    """Two arrays of one block, the second moved to start inside the first (not at its start)."""
    _, h = parts(many)
    v = h["values"]
    i = next(k for k in range(1, len(v) // 2) if v[2 * k] == v[2 * k - 2] and v[2 * k + 1] > 0)
    blk, off = v[2 * i - 2], v[2 * i - 1]  # node i-1's value: same block, before node i's
    _fail(many, tmp_path, lambda h: set_loc(h, "values", i, [blk, off + 8]),
          "two arrays overlap in the file")


def test_empty_arrays_and_an_empty_block_round_trip(tmp_path):
    """A zero-size block (a tape of one empty array) and empty arrays sharing an offset with
    the next array are valid layouts, read back as written."""
    t = Tape()
    t.param(np.zeros(0))
    for lazy in (False, True):
        back, _ = tapefile.load(tapefile.save(t, tmp_path / "empty.tape"), lazy=lazy)
        assert back.value(0).shape == (0,)
    t = Tape()
    x = t.param(np.zeros((0, 3)))
    y = t.param(np.array([1.0, 2.0]))
    loss = ops.add(ops.sum(x), ops.sum(y))
    t.backward(loss)
    path = tapefile.save(t, tmp_path / "e.tape")
    for lazy in (False, True):
        back, _ = tapefile.load(path, lazy=lazy)
        same(t, back)


# ---- meta ---------------------------------------------------------------------------------------
def test_meta_loss_at_node_0_and_the_last_node_is_accepted_one_past_is_not(small, tmp_path):
    n = len(parts(small)[1]["op"])
    for loss in (0, n - 1):
        ok = edited(small, tmp_path / f"ok{loss}.tape", lambda h, v=loss: h["meta"].update(loss=v))
        assert tapefile.load(ok)[1]["loss"] == loss
    _fail(small, tmp_path, lambda h: h["meta"].update(loss=n), f"meta 'loss' {n} is not a node id")
    _fail(small, tmp_path, lambda h: h["meta"].update(workload=5),
          "meta 'workload' must be a string")
    _fail(small, tmp_path, lambda h: h.update(meta=[1]), "'meta' must be an object")


@pytest.mark.parametrize("math", ["refmath", "platform"])
def test_the_math_mode_round_trips(tmp_path, math):
    t = Tape(math=math)
    ops.sum(ops.exp(t.param(np.linspace(0.1, 1, 4))))
    for lazy in (False, True):
        assert tapefile.load(tapefile.save(t, tmp_path / "m.tape"), lazy=lazy)[0].math == math


# ---- blocks as read --------------------------------------------------------------------------
def test_a_block_over_the_readers_chunk_round_trips(tmp_path):
    """The reader takes a block in 16 MiB reads: one of 16 MiB and a bit comes back whole."""
    t = Tape(np.float32)
    t.param(np.arange((16 << 20) // 4 + 17, dtype=np.float32))
    back, _ = tapefile.load(tapefile.save(t, tmp_path / "big.tape"), lazy=True)
    assert np.array_equal(back.value(0), t.value(0))


def test_arrays_read_from_a_file_are_read_only_and_counted(many):
    back, _ = tapefile.load(many, lazy=True)
    v = back._values
    a = v[0]
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[...] = 0
    first = v.bytes_read
    assert v.blocks_read == 1 and first > 0
    h = parts(many)[1]
    far = next(i for i in range(len(h["op"])) if h["values"][2 * i] != h["values"][0])
    v[far]
    sizes = {b: s for b, (_, s, _) in enumerate(h["blocks"])}
    assert v.blocks_read == 2
    assert v.bytes_read == first + sizes[h["values"][2 * far]]


def test_a_gradient_with_an_inf_beside_a_finite_value_is_no_false_claim(tmp_path):
    """x = [0, 1] -> sqrt: x's value is finite, its gradient holds an inf (1 / (2 sqrt 0))."""
    t = Tape()
    x = t.param(np.array([0.0, 1.0]))
    with np.errstate(divide="ignore"):
        loss = ops.sum(ops.sqrt(x))
        t.backward(loss)
    assert np.isinf(t.grad(x)[0]) and np.isfinite(t.value(x)).all()
    back, _ = tapefile.load(tapefile.save(t, tmp_path / "g.tape"), lazy=True)
    assert back._grads.nonfinite()[x.id] and not back._values.nonfinite()[x.id]
    same(t, back)  # every block read, every claim checked: none raised


# ---- the lazy arrays: slices, cuts, snapshots, flags ---------------------------------------------
def _lazy(many):
    back, _ = tapefile.load(many, lazy=True)
    eager, _ = tapefile.load(many)
    return back, eager


def test_a_slice_of_the_lazy_values_reads_the_right_nodes(many):
    back, eager = _lazy(many)
    v = back._values
    sl = v[3:9]
    assert len(sl) == 6
    assert all(np.array_equal(sl[k], eager.value(3 + k)) for k in range(6))
    st = v[1:12:2]
    assert isinstance(st, list) and len(st) == 6
    assert all(np.array_equal(st[k], eager.value(1 + 2 * k)) for k in range(6))
    assert len(v[len(v):len(v) + 4]) == 0


def test_arrays_set_after_the_load_are_flagged_by_their_own_data(many):
    back, _ = _lazy(many)
    v = back._values
    n = len(v)
    v[4] = np.array([np.nan])
    flags = v.nonfinite()
    assert len(flags) == n and flags.tolist() == [i == 4 for i in range(n)]
    sl = v[4:10]  # the set item at the slice's start, and one before it out of the slice
    assert sl.nonfinite().tolist() == [True] + [False] * 5
    assert v[5:10].nonfinite().tolist() == [False] * 5
    del v[4:]
    assert v.nonfinite().tolist() == [False] * 4
    v.append(np.array([np.inf]))
    assert v.nonfinite().tolist() == [False] * 4 + [True]


def test_a_lazy_array_list_is_cut_only_at_its_end(many):
    back, _ = _lazy(many)
    v = back._values
    for cut in (0, slice(2, 4), slice(0, None, 2)):
        with pytest.raises(TypeError, match="only ever cut at the end"):
            del v[cut]


def test_a_snapshot_reads_the_same_file_and_keeps_its_own_items(many):
    back, eager = _lazy(many)
    g = back._grads
    s = g.snapshot()
    assert len(s) == len(g) and s.nonfinite().tolist() == g.nonfinite().tolist()
    i = next(k for k in range(len(g)) if eager.grad(k) is not None)
    assert np.array_equal(s[i], eager.grad(i))
    assert g.blocks_read == s.blocks_read >= 1  # one store: what the snapshot read, both see
    g[i] = np.array([np.inf])
    assert np.array_equal(s[i], eager.grad(i)) and not s.nonfinite()[i] and g.nonfinite()[i]
    s[i + 1] = np.array([np.nan])
    assert s.nonfinite()[i + 1] and not g.nonfinite()[i + 1]
    assert all((s[k] is None) == (eager.grad(k) is None) for k in range(len(s)))


# ---- the structure and the trailer: each refusal names what, exactly ---------------------------
def _set(key, value):
    return lambda h: h.update({key: value})


def _item(key, i, value):
    def edit(h):
        h[key][i] = value
    return edit


STRUCTURE = [  # (edit of the small tape's header: x param, tanh, sum; message)
    (_set("ops", "tanh"), "'ops' must be a list of op names"),
    (_item("ops", 0, "e" * 60), "unknown op '" + "e" * 24 + "…(60 characters)'"),
    (_item("op", 1, 3), "'op' holds a value outside [0, 3)"),
    (_item("op", 1, -1), "'op' holds a value outside [0, 3)"),
    (_set("op", 5), "'op' must be a list of integers"),
    (lambda h: h.update(inputs=h["inputs"][:-1]), "'inputs' must be a list of 3 lists of node ids"),
    (_item("inputs", 2, [3]), "'inputs' must hold node ids (integers from 0 to 2)"),
    (_item("inputs", 1, [1]), "node 1 tanh: inputs must be ids of earlier nodes"),
    (_set("shapes_table", {}), "'shapes_table' must be a list of shapes"),
    (lambda h: h["shapes_table"].__setitem__(0, [1 << 62]),
     f"shape 0 [{1 << 62}] of 'shapes_table' is not a list of at most 32 sizes"),
    (lambda h: h.update(shape=h["shape"][:-1]), "'shape' must be a list of 3 integers"),
    (_item("shape", 0, -1), "'shape' holds a value outside [0, "),
    (_item("attrs_table", 0, 5), "'attrs_table': attrs must be an object, not int"),
    (_item("attrs", 0, -1), "'attrs' holds a value outside [0, "),
    (lambda h: h.update(names=h["names"][:-1]), "'names' must be a list of 3 names"),
    (_set("params", [3]), "'params' [3] must list ids of param nodes"),
    (_set("version", 1), "header version 1 is not 2 (the preamble's)"),
    (_set("dtype", "int64"), "dtype 'int64' is not supported (float64 or float32"),
    (_set("byteorder", "big"), "byte order 'big' is not this machine's"),
    (_set("math", "fast"), "math mode 'fast' is not one of"),
    (_set("ok", "yes"), "'ok' must be true/false and 'error' a string or null"),
    (lambda h: h["shapes_table"].append([3, 2]) or h["shape"].__setitem__(1, 2),
     "node 1 tanh: inputs and attrs give shape [2, 3], the header says [3, 2]"),
]


@pytest.mark.parametrize("k", range(len(STRUCTURE)))
def test_each_structure_refusal_says_exactly_what(small, tmp_path, k):
    edit, want = STRUCTURE[k]
    _fail(small, tmp_path, edit, want)


def test_attrs_are_checked_for_each_node_not_each_shape(tmp_path):
    """Two sums of the same shapes, differing only in their attrs: the second one's attrs wrong
    for the op is refused though a node of the same shapes passed."""
    t = Tape()
    x = t.param(np.arange(9.0).reshape(3, 3))
    ops.sum(x, axis=0)
    ops.sum(x, axis=1)
    path = tapefile.save(t, tmp_path / "s.tape")
    assert len(tapefile.load(path)[0]) == 3

    def edit(h):
        h["attrs_table"].append({"axis": 7, "keepdims": False})
        h["attrs"][2] = len(h["attrs_table"]) - 1
    bad = edited(path, tmp_path / "b.tape", edit)
    err = str(refused(bad))
    assert "node 2 sum: attrs {'axis': 7, 'keepdims': False} do not fit (" in err, err


@pytest.mark.parametrize("k", [2, 4, 5])
def test_concat_of_many_inputs_round_trips_and_its_shape_is_checked(tmp_path, k):
    t = Tape()
    xs = [t.param(np.full((2, 1 + j), float(j))) for j in range(k)]
    y = ops.concat(xs, axis=1)
    ops.sum(y)
    path = tapefile.save(t, tmp_path / "c.tape")
    same(t, tapefile.load(path)[0])
    wide = sum(1 + j for j in range(k))
    bad = edited(path, tmp_path / "cb.tape",
                 lambda h: h["shapes_table"].append([2, wide + 1])
                 or h["shape"].__setitem__(y.id, len(h["shapes_table"]) - 1))
    err = str(refused(bad))
    assert f"node {y.id} concat: inputs and attrs give shape [2, {wide}]" in err, err


def test_the_trailer_and_the_header_edges(small, tmp_path):
    import hashlib
    import struct

    from tapescope.core.tapefile import MAGIC, TRAILER_MAGIC, Limits

    body, h = parts(small)
    raw = small.read_bytes()
    short = tmp_path / "short.tape"
    short.write_bytes(raw[:64] + raw[-36:])
    assert "truncated (100 bytes: shorter than a preamble and a trailer)" in str(refused(short))
    tiny = tmp_path / "tiny.tape"  # exactly a preamble and a trailer: an empty header
    tiny.write_bytes(MAGIC + struct.pack("<H", 2) + bytes(64 - len(MAGIC) - 2) + struct.pack(
        "<8sQQ32s", TRAILER_MAGIC, 64, 0, hashlib.sha256(b"").digest()))
    assert "header is not valid JSON" in str(refused(tiny))
    hoff, hlen = len(body), len(raw) - len(body) - 56
    moved = tmp_path / "moved.tape"
    moved.write_bytes(raw[:-56] + struct.pack("<8sQQ32s", TRAILER_MAGIC, hoff + 8, hlen,
                                              raw[-32:]))
    assert (f"the trailer puts a {hlen}-byte header at {hoff + 8} in a file of {len(raw)} bytes"
            in str(refused(moved)))
    assert tapefile.load(small, limits=Limits(max_header_bytes=hlen))[0] is not None
    assert f"header is {hlen} bytes, over the limit of {hlen - 1}" in str(
        refused(small, limits=Limits(max_header_bytes=hlen - 1)))
    deep = tmp_path / "deep.tape"
    text = ("[" * 100000 + "]" * 100000).encode()
    deep.write_bytes(body + text + struct.pack("<8sQQ32s", TRAILER_MAGIC, hoff, len(text),
                                               hashlib.sha256(text).digest()))
    assert "header JSON is nested too deeply" in str(refused(deep))


# ---- both versions: round trips at the edges --------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
def test_concat_and_empty_arrays_round_trip_in_both_versions(tmp_path, version):
    t = Tape()
    a, b = t.param(np.ones((2, 3))), t.param(np.zeros((2, 0)))
    loss = ops.sum(ops.concat([a, b], axis=1))
    t.backward(loss)
    same(t, tapefile.load(tapefile.save(t, tmp_path / "c.tape", version=version))[0])


def test_large_finite_values_are_not_flagged_nonfinite(tmp_path):
    """[1e308, 1e308] sums to inf but holds no inf: the file's NaN/inf list leaves it out."""
    t = Tape()
    t.param(np.array([1e308, 1e308]))
    back, _ = tapefile.load(tapefile.save(t, tmp_path / "f.tape"), lazy=True)
    assert not back._values.nonfinite()[0]
    assert np.array_equal(back.value(0), t.value(0))


def test_version_2_refuses_to_write_a_name_the_loader_would_refuse(tmp_path):
    t = Tape()
    t.param(np.ones(2), name="ok")
    t._nodes[0] = t._nodes[0]._replace(name="a\nb")
    with pytest.raises(TapeFileError, match="node 0 param: name"):
        tapefile.save(t, tmp_path / "n.tape")
    assert not (tmp_path / "n.tape").exists()


def test_blocks_close_at_the_size_aimed_at(many):
    _, h = parts(many)
    sizes = [s for _, s, _ in h["blocks"]]
    assert len(sizes) > 10 and max(sizes) <= 1024


# ---- the lazy lists as the session uses them -----------------------------------------------------
def test_the_lazy_flags_are_bool_masks_and_the_nodes_keep_the_dtype(many):
    back, eager = _lazy(many)
    for seq in (back._values, back._grads):
        flags = seq.nonfinite()
        assert flags.dtype == np.bool_ and len(flags) == len(back)
    for t in (back, eager):
        assert {nd.dtype for nd in t.nodes} == {np.dtype(np.float64)} == {t.dtype}


def test_iterating_the_lazy_lists_gives_every_array(many):
    back, eager = _lazy(many)
    vals, grads = list(back._values), list(back._grads)
    assert len(vals) == len(grads) == len(eager)
    for i in range(len(eager)):
        assert np.array_equal(vals[i], eager.value(i))
        assert (grads[i] is None) == (eager.grad(i) is None)
        assert grads[i] is None or np.array_equal(grads[i], eager.grad(i))


def test_a_snapshot_after_a_set_and_an_append_keeps_both(many):
    back, eager = _lazy(many)
    g = back._grads
    n = len(g)
    i = next(k for k in range(n) if eager.grad(k) is not None)
    g[i] = np.array([np.nan])
    g.append(np.array([1.0]))
    s = g.snapshot()
    assert len(s) == n + 1 and np.isnan(s[i]).all() and np.array_equal(s[n], [1.0])
    flags = s.nonfinite()
    assert flags.tolist() == [k == i for k in range(n + 1)]
    assert flags.tolist() == g.nonfinite().tolist()


def test_a_slice_ending_at_a_set_item_leaves_it_out(many):
    back, _ = _lazy(many)
    v = back._values
    v[5] = np.array([np.inf])
    assert v[0:5].nonfinite().tolist() == [False] * 5
    assert v[0:6].nonfinite().tolist() == [False] * 5 + [True]


def test_a_lazy_tape_warns_of_nothing_and_closes_its_file(many):
    """Its own descriptor of the file is closed when the tape goes (no unclosed-file warning,
    no failing finalizer)."""
    import gc
    import sys
    import warnings

    caught = []
    old = sys.unraisablehook
    sys.unraisablehook = caught.append
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            back, _ = tapefile.load(many, lazy=True)
            back.value(0)
            del back
            gc.collect()
    finally:
        sys.unraisablehook = old
    assert not caught and not seen, (caught, [str(w.message) for w in seen])


# ---- the layout's bounds at their edges, each refusal exact --------------------------------------
def test_a_shape_of_exactly_the_datas_bytes_is_allowed_one_element_more_is_not(small, tmp_path):
    """The bound is "more than the file holds": an (unused) shapes_table entry of exactly the
    bytes before the header passes it; 8 bytes more is refused before anything is read."""
    hoff = len(parts(small)[0])
    assert hoff % 8 == 0
    ok = edited(small, tmp_path / "ok.tape", lambda h: h["shapes_table"].append([hoff // 8]))
    assert len(tapefile.load(ok)[0]) == 3
    _fail(small, tmp_path, lambda h: h["shapes_table"].append([hoff // 8 + 1]),
          f"shape [{hoff // 8 + 1}] declares {hoff + 8} bytes, more than the file holds")


@pytest.fixture
def with_const(tmp_path) -> Path:
    """x param, c const (no gradient), x * c, sum: node 1 has no gradient."""
    t = Tape()
    x = t.param(np.arange(4.0))
    loss = ops.sum(ops.mul(x, t.const(np.full(4, 2.0))))
    t.backward(loss)
    assert t.grad(1) is None and t.grad(0) is not None
    return tapefile.save(t, tmp_path / "c.tape")


def test_an_absent_gradient_must_say_so_in_both_places(with_const, tmp_path):
    _fail(with_const, tmp_path, lambda h: set_loc(h, "grads", 1, [-1, 0]),
          "'grads': an absent array's offset must be -1")


@pytest.mark.parametrize("case", ["not-a-list", "negative", "one-past", "twice", "no-gradient"])
def test_the_nonfinite_lists_are_distinct_ids_of_arrays_there_are(with_const, tmp_path, case):
    edit, says = {
        "not-a-list": (_set("nonfinite_values", 0),
                       "'nonfinite_values' must be a list of integers"),
        "negative": (_set("nonfinite_values", [-1]),
                     "'nonfinite_values' holds a value outside [0, 4)"),
        "one-past": (_set("nonfinite_grads", [4]),
                     "'nonfinite_grads' holds a value outside [0, 4)"),
        "twice": (_set("nonfinite_values", [2, 2]),
                  "'nonfinite_values' must list distinct nodes that have a value"),
        "no-gradient": (_set("nonfinite_grads", [1]),
                        "'nonfinite_grads' must list distinct nodes that have a grad"),
    }[case]
    _fail(with_const, tmp_path, edit, says)


def test_the_nonfinite_lists_of_a_one_node_tape(tmp_path):
    t = Tape()
    t.param(np.array([np.inf]))
    one = tapefile.save(t, tmp_path / "one.tape")
    back, _ = tapefile.load(one, lazy=True)
    assert back._values.nonfinite().tolist() == [True] and np.isinf(back.value(0)).all()
    _fail(one, tmp_path, _set("nonfinite_values", [1]),
          "'nonfinite_values' holds a value outside [0, 1)")


def test_the_first_short_block_is_the_one_named(small, tmp_path):
    """x's shape [2, 3] made [2, 2] (tanh's rule agrees): every block of such an array now ends
    16 bytes past its arrays; the refusal names the first."""
    _, h = parts(small)
    k = h["shapes_table"].index([2, 3])
    first = min(h["values"][2 * i] for i in range(3) if h["shape"][i] == k)
    size = h["blocks"][first][1]
    _fail(small, tmp_path, lambda h: h["shapes_table"].__setitem__(k, [2, 2]),
          f"block {first} is {size} bytes but its arrays end at byte {size - 16} (the header's "
          "dtype or shapes are not the file's)")


def test_an_overlap_deep_in_a_block_is_found_and_named_by_its_bytes(many, tmp_path):
    """Node b's value moved to start 8 bytes into node a's gradient, which is neither its
    block's first array nor the file's: the two are named by their bytes in the file."""
    _, h = parts(many)
    v, g, blocks = h["values"], h["grads"], h["blocks"]
    nb = 32 * 8  # the chain's arrays are [4, 8] float64: four to a 1 KiB block, v g v g
    a = next(k for k in range(2, len(v) // 2 - 2)
             if v[2 * k + 1] == 0 and g[2 * k:2 * k + 2] == [v[2 * k], nb]
             and v[2 * k + 2] == v[2 * k])
    blk = v[2 * a]
    start = blocks[blk][0] + nb  # node a's gradient, in the file
    _fail(many, tmp_path, lambda h: set_loc(h, "values", a + 1, [blk, nb + 8]),
          f"two arrays overlap in the file (bytes {start}..{start + nb} and {start + 8}..)")


def test_a_long_loss_is_quoted_to_40_characters(small, tmp_path):
    _fail(small, tmp_path, lambda h: h["meta"].update(loss="x" * 50),
          "meta 'loss' " + "x" * 40 + " is not a node id")


@pytest.mark.parametrize("version,says", [
    (None, "truncated (the file ends inside its preamble)"),
    (0xFFFF, "format version 65535 is not supported (this build reads (1, 2))"),
    (0x8000, "format version 32768 is not supported"),
])
def test_the_preamble_version_is_an_unsigned_16_bit_number(small, tmp_path, version, says):
    import struct

    from tapescope.core.tapefile import MAGIC

    raw = small.read_bytes()
    bad = tmp_path / "v.tape"
    bad.write_bytes(MAGIC + b"\x02" if version is None
                    else MAGIC + struct.pack("<H", version) + raw[len(MAGIC) + 2:])
    assert says in str(refused(bad))


def test_a_file_without_its_trailer_says_so(small, tmp_path):
    bad = tmp_path / "t.tape"
    bad.write_bytes(small.read_bytes() + b"\0" * 8)  # the trailer no longer at the end
    assert "truncated or corrupt (no trailer at the end of the file)" in str(refused(bad))


def test_a_header_that_is_not_json_says_why(small, tmp_path):
    _fail(small, tmp_path, lambda h: "{not json",
          "header is not valid JSON (Expecting property name enclosed in double quotes")


def test_a_variadic_op_takes_one_input_or_more_never_none(tmp_path):
    t = Tape()
    x = t.param(np.ones((2, 3)))
    ops.sum(ops.concat([x], axis=1))
    path = tapefile.save(t, tmp_path / "c1.tape")
    same(t, tapefile.load(path)[0])
    _fail(path, tmp_path, _item("inputs", 1, []),
          "node 1 concat: takes None inputs, the header gives 0")


def test_the_shapes_table_holds_lists_of_at_most_32_sizes(small, tmp_path):
    t = Tape()
    t.param(np.ones((1,) * 32))
    assert tapefile.load(tapefile.save(t, tmp_path / "r32.tape"))[0].value(0).shape == (1,) * 32
    _fail(small, tmp_path, lambda h: h["shapes_table"].append({}),
          "shape 2 {} of 'shapes_table' is not a list of at most 32 sizes")
    long = [1 << 62] * 10
    _fail(small, tmp_path, lambda h: h["shapes_table"].append(long),
          f"shape 2 {str(long)[:80]} of 'shapes_table' is not a list")


def test_the_shape_and_attrs_columns_are_bounded_both_ways(small, tmp_path):
    _, h = parts(small)
    ns, na = len(h["shapes_table"]), len(h["attrs_table"])
    for edit, says in [
            (_item("shape", 2, ns), f"'shape' holds a value outside [0, {ns})"),
            (_item("attrs", 2, na), f"'attrs' holds a value outside [0, {na})"),
            (lambda h: h.update(attrs=h["attrs"][:-1]), "'attrs' must be a list of 3 integers"),
            (_set("attrs_table", {}), "'attrs_table' must be a list of objects")]:
        _fail(small, tmp_path, edit, says)
    t = Tape()
    t.param(np.ones(2))
    one = tapefile.save(t, tmp_path / "one.tape")  # one shape in the table
    _fail(one, tmp_path, _item("shape", 0, 1), "'shape' holds a value outside [0, 1)")


# ---- the header's parse, names, flags, dedupe ----------------------------------------------------
def test_a_duplicated_key_is_the_one_named_cut_to_40_characters(small, tmp_path):
    """The key that appears twice is named (not the object's first key, not None), cut to 40."""
    from tests.helpers.tapefile_v2 import assemble

    body, h = parts(small)
    long = "k" * 60
    text = json.dumps(h).replace('"meta": {', f'"meta": {{"a": 0, "{long}": 1, "{long}": 2, ', 1)
    assert text.count(long) == 2
    err = str(refused(assemble(tmp_path / "dup.tape", body, text)))
    assert f"header: key '{'k' * 24}…(60 characters)' appears twice in one object" in err, err


def test_saving_and_checking_nan_and_inf_warns_of_nothing(tmp_path):
    """A sum that overflows ([1e308, 1e308]) or is inf - inf is how the NaN/inf lists are found:
    no RuntimeWarning reaches the user, writing or checking the file."""
    import warnings

    t = Tape()
    t.param(np.array([1e308, 1e308]))
    t.param(np.array([np.inf, -np.inf]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = tapefile.save(t, tmp_path / "w.tape")
        back, _ = tapefile.load(path)
        lazy, _ = tapefile.load(path, lazy=True)
        flags = lazy._values.nonfinite().tolist()
    assert flags == [False, True]
    same(t, back)


def test_version_2_refuses_to_write_a_dtype_it_cannot_read(tmp_path):
    """No Tape holds such a dtype; a tape-like object that does is refused by name, nothing
    written."""
    from types import SimpleNamespace

    path = tmp_path / "i.tape"
    with pytest.raises(TapeFileError) as ei:
        tapefile.save(SimpleNamespace(dtype=np.dtype(np.int64)), path)
    assert str(ei.value) == f"{path}: dtype int64 cannot be written to a tape file"
    assert not path.exists()


def test_equal_attrs_share_one_table_entry_whatever_their_key_order(tmp_path):
    t = Tape()
    x = t.param(np.ones((2, 3)))
    for _ in range(3):
        ops.tanh(x)
    a = ops.sum(x, axis=0)
    b = ops.sum(x, axis=0)
    t._nodes[b.id] = t._nodes[b.id]._replace(attrs={"keepdims": False, "axis": 0})
    assert list(t.nodes[a.id].attrs) != list(t.nodes[b.id].attrs)
    path = tapefile.save(t, tmp_path / "a.tape")
    _, h = parts(path)
    assert h["attrs_table"] == [{}, {"axis": 0, "keepdims": False}]
    assert h["attrs"] == [0, 0, 0, 0, 1, 1]
    same(t, tapefile.load(path)[0])


@pytest.mark.parametrize("name,says", [
    ("a\nb", "node 1 tanh: name 'a\\nb' has a non-printable character"),
    (5, "node 1 tanh: name must be a string or null, not int"),
    ("n" * (MAX_NAME + 1), f"node 1 tanh: name is {MAX_NAME + 1} characters (at most {MAX_NAME})"),
])
def test_a_bad_name_among_names_that_are_all_strings_is_refused(small, tmp_path, name, says):
    """No None among the names (the one-call check's list is the non-None names)."""
    def edit(h):
        h["names"] = ["x", name, "s"]
    _fail(small, tmp_path, edit, says)
    ok = edited(small, tmp_path / "ok.tape", lambda h: h.update(names=["x", "t" * MAX_NAME, "s"]))
    assert tapefile.load(ok)[0].nodes[1].name == "t" * MAX_NAME


@pytest.mark.parametrize("rg", [[True, True], [True, True, True, True], 5, None])
def test_requires_grad_must_be_a_list_of_one_bool_per_node(small, tmp_path, rg):
    _fail(small, tmp_path, _set("requires_grad", rg),
          "'requires_grad' must be a list of 3 true/false")


def test_the_attrs_column_of_a_one_entry_table_is_bounded(tmp_path):
    t = Tape()
    t.param(np.ones(2))
    one = tapefile.save(t, tmp_path / "one.tape")
    assert parts(one)[1]["attrs_table"] == [{}]
    _fail(one, tmp_path, _item("attrs", 0, 1), "'attrs' holds a value outside [0, 1)")


def test_a_shape_rules_refusal_keeps_its_type_and_its_words(small, tmp_path):
    def edit(h):
        h["attrs_table"][h["attrs"][2]] = {"axis": 7, "keepdims": False}
    _fail(small, tmp_path, edit, "node 2 sum: attrs {'axis': 7, 'keepdims': False} do not fit "
          "(ShapeError: axis 7 is out of range for rank 2)")


def test_a_long_params_list_is_quoted_to_80_characters(small, tmp_path):
    params = list(range(3, 60))
    text = str(params)
    assert text[80] != " "
    _fail(small, tmp_path, _set("params", params), f"'params' {text[:80]} must list ids of param")


@pytest.fixture
def repeats(tmp_path) -> Path:
    """Nodes whose shape rows repeat (the loader checks one node of each distinct row): x[2,3]
    (shape 0), w[2,2] (shape 1), tanh(x) x5 (2..6), tanh(w) (7), concat([x] * 4, axis=0) (8),
    concat([x], axis=1) (9), concat([x, w], axis=1) x2 (10, 11), sum(x) (12)."""
    t = Tape()
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3))
    w = t.param(np.full((2, 2), 0.5))
    for _ in range(5):
        ops.tanh(x)
    ops.tanh(w)
    ops.concat([x, x, x, x], axis=0)
    ops.concat([x], axis=1)
    ops.concat([x, w], axis=1)
    ops.concat([x, w], axis=1)
    ops.sum(x)
    path = tapefile.save(t, tmp_path / "rep.tape")
    _, h = parts(path)
    assert h["shapes_table"][:2] == [[2, 3], [2, 2]] and h["ops"][:3] == ["param", "tanh", "concat"]
    same(t, tapefile.load(path)[0])
    return path


def _reshape(i, shape):
    def edit(h):
        if shape not in h["shapes_table"]:
            h["shapes_table"].append(shape)
        h["shape"][i] = h["shapes_table"].index(shape)
    return edit


def _as_sum(h):  # node 6, a tanh(x) like nodes 2..5, made a sum with tanh's attrs ({})
    h["op"][6] = h["ops"].index("sum")


@pytest.mark.parametrize("edit,says", [
    (_as_sum, "node 6 sum: inputs and attrs give shape [], the header says [2, 3]"),
    (_reshape(6, [3, 2]), "node 6 tanh: inputs and attrs give shape [2, 3], the header says "
                          "[3, 2]"),
    (_reshape(7, [2, 3]), "node 7 tanh: inputs and attrs give shape [2, 2], the header says "
                          "[2, 3]"),
    (_reshape(8, [3, 8]), "node 8 concat: inputs and attrs give shape [8, 3], the header says "
                          "[3, 8]"),
    (_reshape(10, [2, 3]), "node 10 concat: inputs and attrs give shape [2, 5], the header says "
                           "[2, 3]"),
    (_reshape(11, [2, 3]), "node 11 concat: inputs and attrs give shape [2, 5], the header says "
                           "[2, 3]"),
], ids=["op", "shape", "input-late", "all-columns-differ", "absent-input", "second-input"])
def test_a_node_like_an_earlier_one_but_for_one_column_is_checked(repeats, tmp_path, edit, says):
    """A node is skipped only when its op, attrs, shape and input shapes all equal an earlier
    checked one's: one differing column (and an input that is absent, not of shape 1) makes it
    checked, wherever it sits in the tape."""
    _fail(repeats, tmp_path, edit, says)


def test_the_header_holds_exactly_the_documented_keys(small):
    """docs/tapefile.md's table of keys, no more (a stray key is a field no reader knows)."""
    _, h = parts(small)
    assert set(h) == {
        "format", "version", "dtype", "byteorder", "math", "ok", "error", "ops", "op", "inputs",
        "shapes_table", "shape", "attrs_table", "attrs", "names", "requires_grad", "params",
        "blocks", "values", "grads", "nonfinite_values", "nonfinite_grads", "meta"}
    assert len(h["blocks"]) >= 1 and all(len(b) == 3 for b in h["blocks"])


def test_an_array_over_the_block_size_opens_no_empty_block(tmp_path):
    """The first array over block_bytes (and one after an empty array) is a block of its own;
    no empty block is written before it."""
    t = Tape()
    t.param(np.ones(256))  # 2 KiB, over the 1 KiB aimed at
    t.param(np.zeros(0))
    t.param(np.ones(200))
    path = tapefile.save(t, tmp_path / "b.tape", block_bytes=1024)
    _, h = parts(path)
    assert [s for _, s, _ in h["blocks"]] == [2048, 1600], h["blocks"]
    same(t, tapefile.load(path)[0])


# ---- gradients absent between present ones -------------------------------------------------------
@pytest.mark.parametrize("lazy", [False, True])
def test_gradients_absent_between_and_after_present_ones_round_trip(tmp_path, lazy):
    """Nodes without a gradient (not on the loss's path, or made after the backward pass) in
    the middle and at the end of the tape: each node's two 'grads' slots are its own, the
    column one pair per node however the absent ones fall."""
    t = Tape()
    x = t.param(np.linspace(-1, 1, 6).reshape(2, 3), name="x")
    a = ops.tanh(x)
    ops.exp(x)  # off the loss's path: no gradient
    loss = ops.sum(ops.tanh(a))
    t.backward(loss)
    ops.exp(a)  # after the backward pass: no gradient
    ops.tanh(x)
    have = [t.grad(i) is not None for i in range(len(t))]
    assert have == [True, True, False, True, True, False, False], have
    path = tapefile.save(t, tmp_path / "g.tape", meta={"loss": loss.id})
    back, _ = tapefile.load(path, lazy=lazy)
    same(t, back)
    assert len(parts(path)[1]["grads"]) == 2 * len(t)
