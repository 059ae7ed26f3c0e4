"""Memory layouts in the capture (issue 42): ``as_strided`` shows the elements of its input's
*storage*, so its output depends on the input's strides and storage offset, not only on its
values. A script on ``torch.channels_last`` (PyTorch's advice for convolutions on CPU) runs
``as_strided_`` in the forward of ``AdaptiveAvgPool2d`` and ``as_strided`` in its backward; a
user's sliding window is an ``as_strided``. The capture recorded values only, so every one of
them was ``no reference``. The recorder now records the first argument's layout of each such op
(``ops.layouts``; app/capture/recorder.py ``_layout``), the file checks it, and the reference
form finds each output element's storage position among the input's own
(core/capture/aten_ref_shape.py ``_as_strided``); a position outside them is not in the capture:
no reference, never a guess."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.aten_ref_table import NoReference  # noqa: E402
from tapescope.core.capture.file import LAYOUT_KW, load  # noqa: E402
from tapescope.core.capture.judge import judge  # noqa: E402
from tests.helpers.capture_files import assert_refused, rewrite_header  # noqa: E402

OP = "aten.as_strided.default"


def _base() -> torch.Tensor:
    return torch.arange(96, dtype=torch.float32).mul_(0.37).sin_()


# (name, the input made from a 96-element storage, size, stride, storage offset or None)
CASES = {
    "contiguous-window": (lambda b: b[:60].view(6, 10), [4, 3, 3], [10, 10, 1], 2),
    "own-offset": (lambda b: b[10:70].view(6, 10), [5, 4], [10, 2], None),
    "transposed": (lambda b: b[:60].view(6, 10).t(), [10, 3], [1, 12], 0),
    "channels-last": (lambda b: b[:48].view(2, 3, 2, 4).contiguous(
        memory_format=torch.channels_last), [2, 3, 1, 1], [24, 1, 24, 24], 5),
    "slice-of-rows": (lambda b: b.view(8, 12)[2:7, 3:9], [5, 6], [12, 1], None),
    "slice-inside": (lambda b: b.view(8, 12)[2:7, 3:9], [2, 2], [13, 1], 28),
    "expanded": (lambda b: b[:4].view(4, 1).expand(4, 5), [4, 2], [1, 0], 0),
    "empty": (lambda b: b[:12].view(3, 4), [0, 4], [4, 1], 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("op", [OP, "aten.as_strided_.default", "aten.as_strided_copy.default"])
def test_the_form_shows_what_torch_shows(case, op):
    make, size, stride, offset = CASES[case]
    x = make(_base())
    want = x.as_strided(size, stride, offset) if offset is not None else \
        x.as_strided(size, stride)
    args = [x.numpy().copy(), size, stride] + ([offset] if offset is not None else [])
    (got,) = reference(op, args, {LAYOUT_KW: (tuple(x.stride()), x.storage_offset())})
    assert got.shape == tuple(want.shape) and got.dtype == np.float32
    assert got.tobytes() == want.contiguous().numpy().tobytes()


def test_a_wrong_layout_shows_other_elements():
    """The layout is what decides: the same values laid out by the strides of their transpose
    show other elements (a form that ignored it would pass the cases above by luck)."""
    x = _base()[:60].view(6, 10)
    args = [x.numpy().copy(), [3, 3], [1, 10], 0]
    (right,) = reference(OP, args, {LAYOUT_KW: ((10, 1), 0)})
    (wrong,) = reference(OP, args, {LAYOUT_KW: ((1, 6), 0)})
    assert right.tobytes() == x.as_strided([3, 3], [1, 10], 0).contiguous().numpy().tobytes()
    assert right.tobytes() != wrong.tobytes()


HOSTILE = {  # (input, size, stride, offset, layout) -> the refusal's words
    "before-the-input": ((3, 4), [2, 2], [4, 1], 0, ((4, 1), 4), "outside its input"),
    "past-the-input": ((3, 4), [2, 2], [4, 1], 9, ((4, 1), 0), "outside its input"),
    "a-gap-of-a-slice": ((2, 3), [4], [1], 0, ((12, 1), 0), "outside its input"),
    "no-layout": ((3, 4), [2, 2], [4, 1], 0, None, "memory layout is not in the capture"),
    "huge-stride": ((3, 4), [2, 2], [1 << 62, 1], 0, ((4, 1), 0), "62 bits"),
    "negative-stride": ((3, 4), [2, 2], [-4, 1], 8, ((4, 1), 0), "not a list of counts"),
    "float-size": ((3, 4), [2.0, 2], [4, 1], 0, ((4, 1), 0), "not a list of counts"),
    "rank-mismatch": ((3, 4), [2, 2], [4, 1], 0, ((1,), 0), "not a list of counts"),
    "over-the-recorded": ((3, 4), [1 << 40], [0], 0, ((4, 1), 0), "elements"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_view_the_capture_cannot_show_has_no_reference(case):
    from tapescope.core.capture.aten_ref_table import OUT_ELEMS

    shape, size, stride, offset, layout, words = HOSTILE[case]
    x = np.ones(shape, np.float32)
    kw = {} if layout is None else {LAYOUT_KW: layout}
    token = OUT_ELEMS.set([np.ones(12, np.float32)])  # (as the judge bounds a form)
    try:
        with pytest.raises(NoReference, match=words):
            reference(OP, [x, size, stride, offset], kw)
    finally:
        OUT_ELEMS.reset(token)


# ---- recorded and judged -------------------------------------------------------------------
def _script():
    """A channels-last CNN (``AdaptiveAvgPool2d``: ``as_strided_`` forward, ``as_strided``
    backward) and a user's sliding window over a transposed activation, SGD."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(8, 4)).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)

    def step() -> float:
        x = torch.randn(2, 3, 6, 6, generator=g).contiguous(memory_format=torch.channels_last)
        out = net(x)  # (2, 4)
        t = out.t()  # (4, 2): strides (1, 4)
        win = t.as_strided((3, 2, 2), (1, 4, 1))  # a window of 2 rows, sliding down
        # a copy restrided in place: the layout before it ran (C order) is the one read
        z = out.detach().clone().as_strided_((4, 2), (1, 4))
        loss = out.square().mean() + win.sum() * 1e-2 + (z[1:] * z[:-1]).sum() * 0.0
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def _capture(tmp_path, native: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(R.Recorder, "native", native)
    f = tmp_path / f"layouts-{native}.capture"
    step = _script()
    with capture(f, steps=2) as rec:
        losses = [step(), step()]
    assert (rec.ops_native > 0) == native  # (the path asked for is the one that ran)
    return load(f), losses, f


@pytest.fixture(params=[True, False], ids=["c-path", "python-path"])
def native(request) -> bool:
    """Both of the recorder's paths (the C one built here: ``hot``, skipped without gcc)."""
    if request.param:
        request.getfixturevalue("hot")
    return request.param


def test_every_as_strided_op_is_judged_with_its_recorded_layout(tmp_path, monkeypatch, native):
    cap, losses, _ = _capture(tmp_path, native, monkeypatch)
    plain = _script()
    assert losses == [plain(), plain()]  # (the recorder only reads)
    strided = [i for i, op in enumerate(cap.ops["op"]) if ".as_strided" in op]
    names = {cap.ops["op"][i] for i in strided}
    assert {"aten.as_strided.default", "aten.as_strided_.default"} <= names
    assert sorted(cap.layouts) == strided  # (each has its input's layout, no other op)
    # the user's window over the transpose: its layout is the transpose's
    user = [i for i in strided if cap.ops["args"][i][1] == [3, 2, 2]
            and cap.ops["phase"][i] == "forward"]
    assert len(user) == 2 and all(cap.layouts[i] == ((1, 4), 0) for i in user)
    rep = judge(cap)
    by_op = {e["index"]: e for e in rep["ops"]}
    for i in strided:
        for o in by_op[i]["outputs"]:
            assert o["verdict"] in ("exact", "inherited"), (i, cap.ops["op"][i], by_op[i])
            assert o["n_diff"] == 0
    assert not any(".as_strided" in n["op"] for n in rep["no_reference"])


def test_the_inspector_reruns_an_as_strided_op_with_its_layout(made):
    """The window's Inspector re-runs the selected op by the reference (``rerun_op``): with
    the op's recorded layout, as the judge does (it said the layout was not in the capture)."""
    from tapescope.core.capture.judge import rerun_op

    cap = load(made)
    ops = sorted(cap.layouts)
    assert ops
    for i in ops:
        got, why = rerun_op(cap, i)
        assert why == "" and got is not None, (i, why)
        (v,) = cap.ops["outputs"][i]
        if cap.arrays[v] is not None:
            assert got[0].tobytes() == np.ascontiguousarray(cap.arrays[v]).tobytes()


def test_a_layout_the_file_lies_about_is_an_introduced_difference(tmp_path, monkeypatch, hot):
    """The judge reads the file's layout: the user's window's offset moved by one element
    shows other elements than the run recorded (introduced there), so the judgement rests on
    the layout and not on a guess."""
    cap, _, f = _capture(tmp_path, True, monkeypatch)
    i = next(i for i in sorted(cap.layouts) if cap.ops["args"][i][1] == [3, 2, 2]
             and cap.ops["phase"][i] == "forward")

    def lie(h: dict) -> None:
        for e in h["ops"]["layouts"]:
            if e[0] == i:
                e[1] = [2, 1]  # (the values as if C-ordered: another element order)
    g = tmp_path / "lie.capture"
    g.write_bytes(rewrite_header(f.read_bytes(), lie))
    rep = judge(load(g))
    by_op = {e["index"]: e for e in rep["ops"]}
    assert by_op[i]["outputs"][0]["verdict"] == "introduced"
    # and a file without the column (one made before layouts were recorded) says why
    g.write_bytes(rewrite_header(f.read_bytes(), lambda h: h["ops"].pop("layouts")))
    rep = judge(load(g))
    (nr,) = [n for n in rep["no_reference"] if n["op"] == OP]
    assert "memory layout is not in the capture" in nr["reason"]


def _edit(fn):
    return lambda h: fn(h["ops"])


def _first(o: dict) -> list:
    return o["layouts"][0]


HOSTILE_FILE = {
    "not-a-list": (_edit(lambda o: o.__setitem__("layouts", {"0": 1})), "not a list"),
    "huge": (_edit(lambda o: o.__setitem__("layouts", o["layouts"] * len(o["op"]))),
             "more than the"),
    "entry-short": (_edit(lambda o: _first(o).pop()), "malformed"),
    "op-string": (_edit(lambda o: _first(o).__setitem__(0, "3")), "malformed"),
    "op-out-of-range": (_edit(lambda o: _first(o).__setitem__(0, len(o["op"]))), "malformed"),
    "stride-negative": (_edit(lambda o: _first(o)[1].__setitem__(0, -1)), "malformed"),
    "stride-float": (_edit(lambda o: _first(o)[1].__setitem__(0, 1.5)), "malformed"),
    "offset-negative": (_edit(lambda o: _first(o).__setitem__(2, -1)), "malformed"),
    "offset-bool": (_edit(lambda o: _first(o).__setitem__(2, True)), "malformed"),
    "duplicate": (_edit(lambda o: o["layouts"].append(list(_first(o)))), "listed twice"),
    "another-op": (_edit(lambda o: _first(o).__setitem__(0, 0)), "reads no layout"),
    "rank": (_edit(lambda o: _first(o)[1].append(1)), "strides for a value of"),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> object:
    """One capture of the script (the default recorder), for the file's hostile cases."""
    f = tmp_path_factory.mktemp("layouts") / "made.capture"
    step = _script()
    with capture(f, steps=2):
        step(), step()
    return f


@pytest.mark.parametrize("case", sorted(HOSTILE_FILE))
def test_a_hostile_layouts_column_is_refused_with_one_line(tmp_path, made, case):
    f = made
    edit, want = HOSTILE_FILE[case]
    g = tmp_path / f"{case}.capture"
    g.write_bytes(rewrite_header(f.read_bytes(), edit))
    assert_refused(g, want, "ops.layouts")
