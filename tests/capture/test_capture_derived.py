"""Derived values (issue 42): a view op's output that holds exactly its input's elements
rearranged (``t``, ``transpose``, ``permute`` of C-ordered memory) is recorded without a
C-order copy or a digest of its bytes (hashed or stored: a stored one is its source's bytes,
laid out by its strides when the file is loaded): its digest is a sentinel
made from its source's digest and its strides (app/capture/recorder.py ``_derived_source``,
core/capture/file.py ``derived_digest`` and ``values.derived``); a pair of runs compares the
view op's input instead (core/capture/pair.py ``_same_sources``).

The claims checked against what a run that stores every value recorded (the same step, values
mode: torch's own ``contiguous()`` bytes of each value): a derived value is its source's stored
array laid out by its strides; two runs of one step have the same sentinels and a planted weight
changes them; the file carries the column and refuses a hostile one with one line; ``pair`` of a
hashes-only run against a values run says every op is the same."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core.capture.file import (  # noqa: E402
    CaptureFileError,
    derived_digest,
    is_dense,
    load,
)
from tests.helpers.capture_files import one_error_line, rewrite_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")
VIEWS = {"aten.t.default", "aten.transpose.int", "aten.permute.default"}


def _step(plant: float = 0.0, device: str = "cpu"):
    """Two steps of a small attention-like block: ``Linear`` (``addmm`` of the weight's
    ``t``), a head split (``view``, ``transpose``), a ``permute`` of that transpose (a view of
    a derived value), a batched product of the two; SGD. ``plant`` is added to one element of
    the weight."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(12, 24)
    with torch.no_grad():
        lin.weight[3, 5] += plant
    lin.to(device)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, foreach=False)  # (one form on any device)
    g = torch.Generator().manual_seed(1)

    def run() -> list[float]:
        losses = []
        for _ in range(2):
            x = torch.randn(2, 5, 12, generator=g).to(device)
            h = lin(x)
            q = h.view(2, 5, 4, 6).transpose(1, 2)  # (2, 4, 5, 6): not C-contiguous
            k = q.permute(0, 1, 3, 2)  # (2, 4, 6, 5): a rearrangement of the transpose
            loss = (q @ k).tanh().mean()
            # a slice (not C-contiguous, hashed by its bytes), a view of it with its elements
            # in the same order (its digest), that view rearranged (derived from the slice)
            u = h.split(8, dim=-1)[1].unsqueeze(1)
            loss = loss + (u.transpose(0, 3) * torch.arange(2.0, device=device)).sum() * 1e-3
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    return run


def _record(monkeypatch, plant: float = 0.0, derive: bool = True, device: str = "cpu",
            **kw) -> R.Recorder:
    monkeypatch.setattr(R.Recorder, "async_hash", False)
    monkeypatch.setattr(R.Recorder, "derive_views", derive)
    monkeypatch.setattr(R, "_DERIVE_MIN", 0)  # (the block's values are small: all of them)
    run = _step(plant, device)
    rec = R.Recorder(steps=2, **kw).start()
    try:
        run()
    finally:
        rec.stop()
    return rec


def _names(rec: R.Recorder) -> dict[int, str]:
    return {i: n for n, i in rec.tables["names"].items()}


def _made_by(rec: R.Recorder) -> dict[int, str]:
    names = _names(rec)
    return {v: names[r[0]] for r in rec.rows for v in r[7]}


@pytest.fixture
def c_order_calls(monkeypatch):
    """The Python path's C-order copies (the C path gathers a value that is not contiguous
    itself, the same bytes: tests/capture/test_recorder_hot.py): counted on the Python path."""
    monkeypatch.setattr(R.Recorder, "native", False)
    calls: list[tuple] = []
    real = R._c_order

    def spy(t, a):
        calls.append((tuple(t.shape), tuple(t.stride())))
        return real(t, a)
    monkeypatch.setattr(R, "_c_order", spy)
    return calls


def test_rearranged_views_are_derived_without_a_copy(monkeypatch, c_order_calls):
    """Hashes only: the weights' ``t``, the heads' ``transpose`` and the ``permute`` of it are
    derived (the permute from the transpose's root, the ``addmm`` output); not one C-order
    copy is made for them; each is its source's stored bytes (a values run) laid out by its
    strides, and its digest the sentinel of its source's digest and strides."""
    plain = _step()()
    rec = _record(monkeypatch, hashes_only=True)
    with_derived = len(c_order_calls)
    c_order_calls.clear()
    ref = _record(monkeypatch, derive=False, hashes_only=True)
    # every derived value is a C-order copy (and its digest) the recorder no longer makes, and
    # so is the slice's ``unsqueeze`` (each step's: the slice's digest, its elements' order)
    assert len(c_order_calls) - with_derived == len(rec.derived) + 2 > 2
    assert ref.derived == {}
    made = _made_by(rec)
    kinds = {made.get(v) for v in rec.derived}  # (None: a view first seen as an input)
    assert VIEWS <= kinds, kinds
    vals = _record(monkeypatch, hashes_only=False, derive=False)  # torch's bytes of each
    assert vals.derived == {}
    # values mode derives the same views (stored as their source's bytes: no copy, no charge
    # to the budget), with the same sentinels
    stored = _record(monkeypatch, hashes_only=False)
    assert stored.derived == rec.derived and stored.v_sha == rec.v_sha
    assert len(vals.v_sha) == len(rec.v_sha)  # one value each, in one order
    # every value not derived has the digest of its bytes (the views whose elements are in
    # their source's order share its digest)
    assert all(rec.v_sha[v] == vals.v_sha[v] for v in range(len(rec.v_sha))
               if v not in rec.derived)
    slices = [v for v, (src, _) in rec.derived.items() if made.get(src) == "aten.split.Tensor"
              or made.get(src) == "aten.unsqueeze.default"]
    assert slices  # a rearranged view of a tensor that is not C-contiguous
    names = _names(rec)
    permuted = 0
    for r in rec.rows:  # the permute of a transpose: derived from the transpose's source
        if names[r[0]] == "aten.permute.default" and r[2] == 0:  # (forward)
            (vid,), x = r[7], r[5][0]["T"]
            assert x in rec.derived and rec.derived[vid][0] == rec.derived[x][0]
            permuted += 1
    for vid, (src, strides) in rec.derived.items():
        assert src not in rec.derived and rec.v_sha[src] == vals.v_sha[src]
        assert rec.v_array[vid] is None and is_dense(rec.v_shape[vid], strides)
        assert rec.v_sha[vid] == derived_digest("xxh3_128", rec.v_sha[src], rec.v_dtype[vid],
                                                rec.v_shape[vid], strides)
        assert rec.v_sha[vid] != vals.v_sha[vid]  # a sentinel, never the bytes' digest
        s = vals.v_array[src].reshape(-1)
        got = np.lib.stride_tricks.as_strided(
            s, rec.v_shape[vid], [st * s.itemsize for st in strides])
        assert np.array_equal(got, vals.v_array[vid]), (vid, made.get(vid))
    assert permuted  # a view of a derived value resolves to the root
    # one source laid out two ways: two sentinels (the geometry is in each)
    by_source: dict[int, set] = {}
    for vid, (src, strides) in rec.derived.items():
        by_source.setdefault(src, set()).add((rec.v_shape[vid], strides, rec.v_sha[vid]))
    assert any(len(s) > 1 for s in by_source.values())
    assert all(len({g[:2] for g in s}) == len({g[2] for g in s}) for s in by_source.values())
    assert _step()() == plain  # (the script's results: untouched)


def test_sentinels_are_equal_in_two_runs_and_a_planted_weight_changes_them(monkeypatch):
    a = _record(monkeypatch, hashes_only=True)
    b = _record(monkeypatch, hashes_only=True)
    assert a.v_sha == b.v_sha and a.derived == b.derived
    c = _record(monkeypatch, plant=1e-3, hashes_only=True)
    assert c.derived == a.derived
    made = _made_by(a)
    # the first ``t``: of the weight, the planted value's first reader
    first_t = min(v for v in a.derived if made.get(v) == "aten.t.default")
    src = a.derived[first_t][0]
    assert a.v_sha[src] != c.v_sha[src] and a.v_sha[first_t] != c.v_sha[first_t]


def test_a_small_value_is_hashed_not_derived(monkeypatch):
    """Below ``_DERIVE_MIN`` bytes a copy and a digest cost less than deciding: none of the
    block's values (the largest, the weight: 1152 bytes) is derived by default."""
    monkeypatch.setattr(R.Recorder, "async_hash", False)
    rec = R.Recorder(steps=2, hashes_only=True).start()
    try:
        _step()()
    finally:
        rec.stop()
    assert R._DERIVE_MIN > 1152 and rec.derived == {}


def test_over_the_budget_the_same_values_are_derived(monkeypatch):
    """Values mode past its byte budget hashes what it cannot store: the same rule applies
    there (the decision is where a value is hashed, not which flag made it so)."""
    h = _record(monkeypatch, hashes_only=True)
    over = _record(monkeypatch, max_bytes=0)
    assert over.derived == h.derived and over.v_sha == h.v_sha


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_capture_derives_what_a_cpu_capture_derives(monkeypatch):
    """The decision reads no element: on a GPU the same views are derived, laid out alike
    (their values, computed by other kernels, may differ: their digests are not compared)."""
    def derived(rec: R.Recorder) -> list[tuple]:
        made = _made_by(rec)
        return sorted((str(made.get(v)), str(made.get(src)), rec.v_shape[v], st)
                      for v, (src, st) in rec.derived.items())

    cpu = _record(monkeypatch, hashes_only=True)
    gpu = _record(monkeypatch, hashes_only=True, device="cuda")
    assert derived(gpu) == derived(cpu) and derived(cpu)
    assert "cuda:0" in gpu.devices or "cuda" in gpu.devices


@pytest.fixture
def files(monkeypatch, tmp_path) -> dict[str, Path]:
    out = {}
    for name, kw in (("hashes", {"hashes_only": True}), ("values", {}),
                     ("planted", {"hashes_only": True, "plant": 1e-3}),
                     ("plain_hashes", {"hashes_only": True, "derive": False}),
                     ("plain_values", {"derive": False})):
        rec = _record(monkeypatch, **kw)
        out[name] = tmp_path / f"{name}.capture"
        rec.save(str(out[name]))
    return out


def test_the_file_carries_derived_values_and_pair_compares_their_sources(files, monkeypatch,
                                                                        tmp_path):
    from tapescope.core.capture.judge import judge
    from tapescope.core.capture.pair import pair

    h, v, plain = load(files["hashes"]), load(files["values"]), load(files["plain_values"])
    assert h.derived and set(h.derived_strides) == set(h.derived)
    assert v.derived == h.derived and v.derived_strides == h.derived_strides
    assert plain.derived == {} and load(files["plain_hashes"]).derived == {}
    for vid, src in h.derived.items():
        assert h.arrays[vid] is None and h.digests[src] == v.digests[src] == plain.digests[src]
        assert h.digests[vid] == v.digests[vid] != plain.digests[vid]  # a sentinel
        # a values run's derived value: its source's stored bytes laid out by its strides,
        # read-only, the very elements torch's own ``contiguous()`` copy holds
        assert v.arrays[vid] is not None and not v.arrays[vid].flags.writeable
        assert np.array_equal(v.arrays[vid], plain.arrays[vid])
    # one run recorded them derived, the other their bytes (or hashed them): every op the same
    for other in ("values", "plain_hashes", "plain_values"):
        rep = pair(h, load(files[other]))
        assert rep["agree"] and rep["n_parted"] == 0, rep["first_parted"]
        assert rep["alignment"]["matched"] == h.n_ops
        rep = pair(load(files[other]), h)
        assert rep["agree"] and rep["n_parted"] == 0
    # a planted weight: the pair parts at the weight's first reader (a derived ``t``), found
    # through its source (the weight), not a false difference of layouts
    p = load(files["planted"])
    rep = pair(p, v)
    first = rep["first_parted"]
    assert first is not None and first["op"] == "aten.t.default"
    assert "view op's input differs" in first["outputs"][0]["why"]
    # a view first seen as an input (no view op to follow): by its source, its strides and
    # the other run's stored array put back in the source's order
    from tapescope.core.capture.pair import _Producers, _same

    seen = {k: load(_view_made_before(monkeypatch, tmp_path, k, **kw)) for k, kw in (
        ("h", {"hashes_only": True}), ("v", {}), ("p", {"hashes_only": True, "plant": 1.0}))}
    hv, vv, pv = seen["h"], seen["v"], seen["p"]
    made = {x for outs in hv.ops["outputs"] for x in outs}
    inputs = [vid for vid in hv.derived if vid not in made]
    assert inputs
    for vid in inputs:
        assert _same(hv, vid, vv, vid, _Producers(hv, vv)) is None
        assert _same(vv, vid, hv, vid, _Producers(vv, hv)) is None
    assert any(_same(pv, vid, vv, vid, _Producers(pv, vv)) is not None for vid in inputs)
    # the judge: a derived value hashed is unjudged as any hashed value; one over a stored
    # source is judged, with the verdicts of the run that stored its bytes
    r = judge(h)
    by_value = {o["value"]: o["verdict"] for e in r["ops"] for o in e["outputs"]}
    assert {by_value[vid] for vid in h.derived if vid in by_value} == {"unjudged"}
    verdicts = [{o["value"]: o["verdict"] for e in judge(c)["ops"] for o in e["outputs"]}
                for c in (v, plain)]
    judged = [vid for vid in v.derived if vid in verdicts[0]]
    assert judged and all(verdicts[0][vid] == verdicts[1][vid] != "unjudged" for vid in judged)


def _view_made_before(monkeypatch, tmp_path, name: str, plant: float = 0.0, **kw) -> Path:
    """A capture in which a view is first seen as an op's input: ``v``, a transpose made
    before the recorder started (no view op recorded), read after its base was (a view made
    inside the block is its view op's output, however it is read next)."""
    monkeypatch.setattr(R.Recorder, "async_hash", False)
    monkeypatch.setattr(R.Recorder, "derive_views", True)
    monkeypatch.setattr(R, "_DERIVE_MIN", 0)
    base = torch.arange(48.0).reshape(6, 8).clone()  # (its own root: a view's _base is that)
    base[2, 3] += plant
    v = base.t()
    w = torch.nn.Parameter(torch.ones(6))
    opt = torch.optim.SGD([w], lr=0.1)
    rec = R.Recorder(steps=1, **kw).start()
    try:
        y = (base * 2.0).sum(0)  # the base recorded first, at its version now
        loss = (v * w).sum() + y.sum()  # then the view: first seen here, derived from it
        loss.backward()
        opt.step()
    finally:
        rec.stop()
    out = tmp_path / f"before-{name}.capture"
    rec.save(str(out))
    return out


def _edit_derived(fn):
    def edit(hd: dict) -> None:
        fn(hd["values"])
    return edit


def _first(values: dict) -> list:
    return values["derived"][0]


HOSTILE = {
    "not-a-list": (_edit_derived(lambda v: v.__setitem__("derived", {"0": 1})), "not a list"),
    "huge": (_edit_derived(lambda v: v.__setitem__("derived", v["derived"] * (
        len(v["dtype"]) // len(v["derived"]) + 2))), "more than the"),
    "entry-type": (_edit_derived(lambda v: _first(v).__setitem__(0, "3")), "malformed"),
    "entry-bool": (_edit_derived(lambda v: _first(v).__setitem__(1, True)), "malformed"),
    "entry-short": (_edit_derived(lambda v: _first(v).pop()), "malformed"),
    "stride-negative": (_edit_derived(lambda v: _first(v)[2].__setitem__(0, -1)), "malformed"),
    "src-after": (_edit_derived(lambda v: _first(v).__setitem__(1, _first(v)[0] + 1)),
                  "not an earlier value"),
    "src-self": (_edit_derived(lambda v: _first(v).__setitem__(1, _first(v)[0])),
                 "not an earlier value"),
    "out-of-range": (_edit_derived(lambda v: _first(v).__setitem__(0, len(v["dtype"]))),
                     "not an earlier value"),
    "duplicate": (_edit_derived(lambda v: v["derived"].append(list(_first(v)))),
                  "listed twice"),
    "stored": (_edit_derived(lambda v: v["array"].__setitem__(_first(v)[0], 0)),
               "has a stored array"),
    "not-dense": (_edit_derived(lambda v: _first(v).__setitem__(2, [1] * len(_first(v)[2]))),
                  "densely"),
    "digest": (_edit_derived(lambda v: v["digests"].__setitem__(_first(v)[0], "0" * 32)),
               "digest is not the one"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_derived_column_is_refused_with_one_line(files, tmp_path, case):
    edit, want = HOSTILE[case]
    f = tmp_path / f"{case}.capture"
    f.write_bytes(rewrite_header(files["hashes"].read_bytes(), edit))
    with pytest.raises(CaptureFileError, match=want) as e:
        load(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: ") and "\n" not in msg and "values.derived" in msg


def test_a_derived_columns_other_lies_are_refused(files, tmp_path):
    """A source that is derived itself, a dtype or element count not the source's."""
    data = files["hashes"].read_bytes()
    h = load(files["hashes"])
    vid, src = next(iter(h.derived.items()))
    other = next(v for v in h.derived if v > vid)

    def chain(v: dict) -> None:  # ``other`` from ``vid``, a derived value
        for e in v["derived"]:
            if e[0] == other:
                e[1] = vid

    def dtype(v: dict) -> None:
        v["dtypes"].append("float64")
        v["dtype"][vid] = len(v["dtypes"]) - 1

    def numel(v: dict) -> None:
        v["shape"][src] = [*v["shape"][src], 2]

    for name, fn, want in (("chain", chain, "derived itself"),
                           ("dtype", dtype, "dtype or element count"),
                           ("numel", numel, "dtype or element count")):
        f = tmp_path / f"{name}.capture"
        f.write_bytes(rewrite_header(data, _edit_derived(fn)))
        with pytest.raises(CaptureFileError, match=want):
            load(f)
    # a file without the column (every earlier one) reads as before: no derived values
    f = tmp_path / "old.capture"
    f.write_bytes(rewrite_header(data, _edit_derived(lambda v: v.pop("derived"))))
    old = load(f)
    assert old.derived == {} and old.digests == h.digests


def test_a_hostile_derived_column_is_exit_2_on_the_command_line(files, tmp_path):
    f = tmp_path / "bad.capture"
    f.write_bytes(rewrite_header(files["hashes"].read_bytes(), HOSTILE["src-after"][0]))
    p = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "parity", "--capture", str(f)],
                       env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=300)
    line = one_error_line(p, "parity")
    assert str(f) in line and "values.derived" in line


def test_the_window_says_a_value_is_derived(files):
    """The capture window opens a file with derived values; the Inspector names the source."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QApplication

    from tapescope.app.qt.capture_window import CaptureWindow
    from tapescope.core.capture.judge import judge

    _app = QApplication.instance() or QApplication([])
    cap = load(files["hashes"])
    win = CaptureWindow(cap, judge(cap))
    i = next(i for i, outs in enumerate(cap.ops["outputs"])
             if cap.ops["op"][i] == "aten.t.default" and outs[0] in cap.derived)
    win.show_op(i)
    v = cap.ops["outputs"][i][0]
    assert f"value {v} derived: value {cap.derived[v]}'s elements" in win.inspector.toPlainText()
    win.close()


def test_a_write_to_the_source_makes_the_view_a_new_value(monkeypatch):
    """A view derived, its base written in place, the view read again: a new value, derived
    from the base as written (its version moved), never the first one's sentinel."""
    monkeypatch.setattr(R.Recorder, "async_hash", False)
    monkeypatch.setattr(R, "_DERIVE_MIN", 0)
    w = torch.arange(12.0).reshape(3, 4).requires_grad_()
    opt = torch.optim.SGD([w], lr=0.5)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            b = w * 1.0  # a fresh (made) tensor, C-contiguous
            v = b.t()  # derived from b
            first = v.sum(0)  # reads v as made
            b.mul_(3.0)  # b written: v's values move with it
            second = v.sum(0)  # reads v again: a new value
        loss = (w * w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return first, second

    for hashes_only, kw in ((True, {"hashes_only": True}), (False, {})):
        # (the values run's witness: torch's own bytes of each view, not derived)
        monkeypatch.setattr(R.Recorder, "derive_views", hashes_only)
        rec = R.Recorder(steps=1, **kw).start()
        try:
            first, second = run()
        finally:
            rec.stop()
        names = _names(rec)
        sums = [r for r in rec.rows if names[r[0]] == "aten.sum.dim_IntList"][:2]
        v1, v2 = (r[5][0]["T"] for r in sums)
        if hashes_only:
            h = rec
            assert v1 != v2 and v1 in h.derived and v2 in h.derived
            assert h.derived[v1][0] != h.derived[v2][0]  # b before and after the write
            assert h.v_sha[v1] != h.v_sha[v2]
        else:
            vals = rec
    for v in (v1, v2):  # each the values run's bytes, laid out by its strides
        src, strides = h.derived[v]
        s = vals.v_array[src].reshape(-1)
        got = np.lib.stride_tricks.as_strided(s, h.v_shape[v], [x * s.itemsize for x in strides])
        assert np.array_equal(got, vals.v_array[v])
    assert torch.equal(second, first * 3.0)


def test_a_sentinel_waits_for_its_sources_digest_on_the_hashing_thread(monkeypatch):
    """SHA-256 on the hashing thread: a derived value's source may not be hashed yet when it
    is recorded; its sentinel is made when the thread is done, the same as inline."""
    monkeypatch.setattr(R, "_ASYNC_MIN", 1 << 6)  # every output of the block to the thread
    waited: list[int] = []
    done = R.Recorder._hashes_done

    def hashes_done(self) -> None:
        waited.append(len(self.derived_later))
        done(self)
    monkeypatch.setattr(R.Recorder, "_hashes_done", hashes_done)
    # the thread behind the step by a few ms a digest, whatever the machine's load (without
    # it, a thread that keeps up under no load, or a main thread slowed by a loaded one, can
    # leave no sentinel waiting: the case this test is about)
    init = R._Hasher.__init__

    def lagging(self, sha, hexdigest=R.DIGESTS["sha256"][1]) -> None:  # noqa: ANN001
        def slow(b):  # noqa: ANN001, ANN202
            time.sleep(0.005)
            return hexdigest(b)
        init(self, sha, slow)
    monkeypatch.setattr(R._Hasher, "__init__", lagging)
    got = []
    for threaded in (True, False):
        monkeypatch.setattr(R.Recorder, "async_hash", threaded)
        monkeypatch.setattr(R, "_DERIVE_MIN", 0)
        run = _step()
        rec = R.Recorder(steps=2, hashes_only=True, digest="sha256").start()
        try:
            run()
        finally:
            rec.stop()
        assert None not in rec.v_sha and rec.derived and rec.derived_later == []
        got.append(rec)
    assert got[0].v_sha == got[1].v_sha and got[0].derived == got[1].derived
    assert waited[0] > 0 and waited[-1] == 0  # threaded: some waited; inline: none


def test_a_values_run_of_another_digest_is_rehashed_with_its_derived_sentinels(
        monkeypatch, tmp_path):
    """A values run hashed by SHA-256 against one by XXH3 (``comparable``: the stored run's
    digests recomputed from its arrays): a derived value, laid over its source's bytes, gets
    the sentinel of its source's new digest, never a digest of its own bytes; the pair says
    every op is the same."""
    from tapescope.core.capture.file import comparable
    from tapescope.core.capture.pair import pair

    files = {}
    for alg in ("sha256", "xxh3_128"):
        rec = _record(monkeypatch, digest=alg)
        files[alg] = tmp_path / f"{alg}.capture"
        rec.save(str(files[alg]))
    s, x = load(files["sha256"]), load(files["xxh3_128"])
    assert s.derived and s.derived == x.derived
    s2, x2 = comparable([s, x])
    assert x2 is x and s2.digest_algorithm == "xxh3_128"
    assert s2.digests == x.digests  # the derived values' sentinels included
    for vid, src in s.derived.items():
        assert s2.digests[vid] == derived_digest("xxh3_128", x.digests[src], x.dtypes[vid],
                                                 x.shapes[vid], x.derived_strides[vid])
    rep = pair(s, x)
    assert rep["agree"] and rep["n_parted"] == 0
