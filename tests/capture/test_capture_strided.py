"""The layout of an op's first argument where it was not C-contiguous (``ops.strided``;
session 45): a ``sum`` over a transposed view (``MultiheadAttention``'s key projection bias
gradient with ``batch_first`` and its own ``kdim``: a (7, 3, 16) gradient of strides (1, 112,
7)) runs TensorIterator's dimension order over the memory as it lay, so ``--explain`` had only
guesses of the layout and said ``unknown``. The recorder notes each such layout (C and Python
paths), the file checks it, and ``core.explain_aten.aten_sum_strided`` follows ATen's order
over it: torch's every bit on random permuted and sliced sums."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.file import load  # noqa: E402
from tapescope.core.capture.judge import judge  # noqa: E402
from tapescope.core.explain_aten import aten_sum_strided  # noqa: E402
from tests.helpers.capture_files import assert_refused, rewrite_header  # noqa: E402


def test_a_sum_over_any_layout_is_torchs_every_bit():
    """300 random sums over permuted and sliced float32 / float64 views of 1 to 4 dimensions
    (up to 30,000 elements: one thread's order), any axes, kept or not: the values laid out
    with the view's strides and summed in ATen's order equal torch's bits. Planted (the
    dimensions left in C order, or the output's strides ignored when ordering): fails."""
    rng = np.random.default_rng(7)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    checked = 0
    try:
        while checked < 300:
            nd = int(rng.integers(1, 5))
            shape = [int(v) for v in rng.integers(1, 20, nd)]
            if np.prod(shape) > 30000:
                continue
            perm = list(rng.permutation(nd))
            dt = (torch.float32, torch.float64)[checked % 2]
            x = (torch.randn(*[shape[p] for p in perm], dtype=dt) * 3).permute(
                *np.argsort(perm).tolist())
            if rng.random() < 0.3:
                d = int(rng.integers(0, nd))
                if x.shape[d] > 2:
                    x = x.narrow(d, 1, x.shape[d] - 2)
            axes = sorted(rng.choice(nd, int(rng.integers(1, nd + 1)), replace=False).tolist())
            keep = bool(rng.integers(0, 2))
            want = np.asarray(x.sum(axes, keepdim=keep).numpy())
            got = np.asarray(aten_sum_strided(x.contiguous().numpy(), list(x.stride()), axes,
                                              keep))
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), \
                (tuple(x.shape), x.stride(), axes, keep)
            checked += 1
    finally:
        torch.set_num_threads(before)


def test_a_layout_past_the_span_limit_is_refused_not_allocated():
    with pytest.raises(ValueError, match="spanning"):
        aten_sum_strided(np.ones((2, 3), np.float32), [1 << 40, 1], [0])
    with pytest.raises(ValueError, match="a stride from 0"):
        aten_sum_strided(np.ones((2, 3), np.float32), [3], [0])


def _mha_script():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True, kdim=12, vdim=10)
    q_in = torch.nn.Linear(8, 16)
    opt = torch.optim.Adam([*mha.parameters(), *q_in.parameters()], lr=1e-3)
    g = torch.Generator().manual_seed(4)

    def step() -> float:
        q = torch.randn(3, 5, 8, generator=g)
        k, v = torch.randn(3, 7, 12, generator=g), torch.randn(3, 7, 10, generator=g)
        o, w = mha(q_in(q), k, v, need_weights=True)
        loss = o.square().mean() + 0.01 * (w ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_multihead_attentions_bias_gradient_sum_is_named(tmp_path, monkeypatch, native):
    """Captured (C and Python paths: the same layouts noted), the sums over the transposed
    key / value projections' gradients are ``reassociation`` over the recorded layout, none
    ``unknown``; a file without the column (made before it) leaves them to the guesses."""
    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    f = tmp_path / "m.capture"
    step = _mha_script()
    with capture(f, steps=2) as rec:
        step(), step()
    assert (rec.ops_native > 0) == native
    cap = load(f)
    sums = [i for i, op in enumerate(cap.ops["op"]) if op == "aten.sum.dim_IntList"
            and i in cap.strided]
    assert sums, "no sum over a non-contiguous input was noted"
    for i in sums:  # (the layout is the view's: its strides are not C-ordered)
        st, _ = cap.strided[i]
        shape = cap.shapes[cap.ops["args"][i][0]["T"]]
        c_order = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
        assert list(st) != c_order
    rep = judge(cap, explain=True)
    named = [x for x in rep["introduced"] if x["index"] in sums]
    assert named and all(x["cause"] != "unknown" for x in named), named
    assert any("as it lay in memory" in x["explain"]["variant"] for x in named)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> object:
    from tapescope.app.capture import capture

    f = tmp_path_factory.mktemp("strided") / "made.capture"
    step = _mha_script()
    with capture(f, steps=1):
        step()
    return f


def _first(o: dict) -> list:
    return o["strided"][0]


def _edit(fn):
    return lambda h: fn(h["ops"])


HOSTILE = {
    "not-a-list": (_edit(lambda o: o.__setitem__("strided", {"0": 1})), "not a list"),
    "huge": (_edit(lambda o: o.__setitem__("strided", o["strided"] * len(o["op"]))),
             "more than the"),
    "entry-short": (_edit(lambda o: _first(o).pop()), "malformed"),
    "op-out-of-range": (_edit(lambda o: _first(o).__setitem__(0, len(o["op"]))), "malformed"),
    "stride-negative": (_edit(lambda o: _first(o)[1].__setitem__(0, -1)), "malformed"),
    "offset-bool": (_edit(lambda o: _first(o).__setitem__(2, True)), "malformed"),
    "duplicate": (_edit(lambda o: o["strided"].append(list(_first(o)))), "listed twice"),
    "rank": (_edit(lambda o: _first(o)[1].append(1)), "strides for a value of"),
    "not-a-value": (_edit(lambda o: _first(o).__setitem__(0, next(
        i for i, a in enumerate(o["args"]) if not (a and isinstance(a[0], dict))))),
        "first argument is not a value"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_strided_column_is_refused_with_one_line(tmp_path, made, case):
    edit, want = HOSTILE[case]
    g = tmp_path / f"{case}.capture"
    g.write_bytes(rewrite_header(made.read_bytes(), edit))
    assert_refused(g, want, "ops.strided")


def test_a_layout_spanning_past_the_limit_in_a_file_is_unknown_not_allocated(tmp_path, made):
    """A file whose strides span 2**40 elements: loaded (numbers only), and --explain's
    variant refuses it (no 4 TiB allocation): the op's cause is another variant's or
    unknown, and the judgement finishes."""
    def huge(h: dict) -> None:
        for e in h["ops"]["strided"]:
            e[1] = [1 << 40] * len(e[1])
    g = tmp_path / "span.capture"
    g.write_bytes(rewrite_header(made.read_bytes(), huge))
    rep = judge(load(g), explain=True)
    assert rep["counts"]["introduced"] >= 0
