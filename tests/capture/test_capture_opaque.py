"""Values numpy cannot hold (a sparse gradient, a quantized tensor) in a capture. A script with
``nn.Embedding(sparse=True)`` and ``SparseAdam`` made the recorder fail at its first sparse op
(``_same_bytes`` asked a sparse argument for its data pointer), so the script was not captured
at all; and such a value's digest was of its dtype and shape only, so two different sparse
gradients had one digest. Now the step is recorded: a sparse or quantized value is hashed by
its index and value tensors' bytes (app/capture/recorder.py ``_opaque_bytes``), listed in the
file's optional ``values.opaque`` column with its kind, and every op it leaves without an array
is ``unjudged`` with that reason; the dense ops around it are judged as always."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.app.capture.recorder import _opaque_bytes  # noqa: E402
from tapescope.core.capture.file import load  # noqa: E402
from tapescope.core.capture.judge import judge  # noqa: E402
from tests.helpers.capture_files import assert_refused, rewrite_header  # noqa: E402


def _sparse_step(seed: int = 0):
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    head = torch.nn.Linear(4, 1)
    sopt = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-2)
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)

    def step() -> float:
        idx = torch.randint(0, 10, (6,), generator=g)
        loss = head(emb(idx)).square().mean()
        sopt.zero_grad()
        opt.zero_grad()
        loss.backward()
        sopt.step()
        opt.step()
        return loss.item()
    return step


@pytest.fixture(params=[True, False], ids=["c-path", "python-path"])
def native(request) -> bool:
    if request.param:
        request.getfixturevalue("hot")
    return request.param


def _captured(path, native: bool, monkeypatch, seed: int = 0) -> tuple:
    monkeypatch.setattr(R.Recorder, "native", native)
    step = _sparse_step(seed)
    with capture(path, steps=2) as rec:
        losses = [step(), step()]
    assert not rec.failed, rec.failed
    return load(path), losses


def test_a_sparse_gradient_step_is_recorded_and_its_dense_ops_judged(tmp_path, monkeypatch,
                                                                     native):
    cap, losses = _captured(tmp_path / "sparse.capture", native, monkeypatch)
    plain = _sparse_step()
    assert losses == [plain(), plain()]  # (the recorder only reads)
    assert cap.opaque and set(cap.opaque.values()) == {"sparse_coo"}
    assert all(cap.arrays[v] is None for v in cap.opaque)
    rep = judge(cap)
    sparse_ops = {e["op"].split(".")[1] for e in rep["ops"]
                  if any(o["value"] in cap.opaque for o in e["outputs"])}
    assert {"_sparse_coo_tensor_with_dims_and_tensors", "_coalesce"} <= sparse_ops
    for e in rep["ops"]:
        vs = [o["value"] for o in e["outputs"]]
        if any(v in cap.opaque for v in vs):
            assert {o["verdict"] for o in e["outputs"]} == {"unjudged"}, e
            assert "sparse_coo tensor" in e["reason"], e
    judged = [e for e in rep["ops"] if e["outputs"] and e["outputs"][0]["verdict"]
              in ("exact", "introduced", "inherited")]
    ops = {e["op"].split(".")[1] for e in judged}
    assert {"embedding", "addmm", "mean"} <= ops  # (the dense step around it)
    assert rep["counts"]["no-reference"] == 0


def test_a_sparse_values_digest_is_of_its_contents(tmp_path, monkeypatch):
    """Two runs of one script give the sparse gradients the same digests; another
    initialisation, other digests (they were of the dtype and shape only)."""
    a, _ = _captured(tmp_path / "a.capture", False, monkeypatch)
    b, _ = _captured(tmp_path / "b.capture", False, monkeypatch)
    c, _ = _captured(tmp_path / "c.capture", False, monkeypatch, seed=7)
    assert sorted(a.opaque) == sorted(b.opaque) == sorted(c.opaque)
    same = [a.digests[v] == b.digests[v] for v in a.opaque]
    other = [a.digests[v] != c.digests[v] for v in a.opaque]
    assert all(same) and any(other), (same, other)


@pytest.mark.filterwarnings("ignore::UserWarning")  # (torch's sparse beta notices)
def test_each_kind_of_opaque_value_is_hashed_by_its_contents():
    i = torch.tensor([[0, 2, 2], [1, 0, 3]])
    v = torch.tensor([1.0, 2.0, 3.0])
    coo = torch.sparse_coo_tensor(i, v, (3, 4))
    coo2 = torch.sparse_coo_tensor(i, v + 1, (3, 4))
    dense = torch.arange(12.0).reshape(3, 4)
    q = torch.quantize_per_tensor(dense, 0.5, 2, torch.qint8)
    qc = torch.quantize_per_channel(dense, torch.tensor([0.5, 0.25, 1.0]),
                                    torch.tensor([0, 1, 2]), 0, torch.qint8)
    cases = [(coo, coo2, "sparse_coo"),
             (dense.to_sparse_csr(), (dense + 1).to_sparse_csr(), "sparse_csr"),
             (dense.to_sparse_csc(), (dense + 1).to_sparse_csc(), "sparse_csc"),
             (q, torch.quantize_per_tensor(dense, 0.25, 2, torch.qint8), "quantized"),
             (qc, torch.quantize_per_channel(dense + 4, torch.tensor([0.5, 0.25, 1.0]),
                                             torch.tensor([0, 1, 2]), 0, torch.qint8),
              "quantized")]
    for x, y, kind in cases:
        kx, bx = _opaque_bytes(x)
        ky, by = _opaque_bytes(y)
        assert kx == ky == kind and bx != by and bx == _opaque_bytes(x)[1], kind
    # a strided tensor of a dtype without a numpy type: its own bytes, no kind
    f8 = torch.arange(4.0).to(torch.float8_e4m3fn)
    kind, raw = _opaque_bytes(f8)
    assert kind is None and raw == f8.view(torch.uint8).numpy().tobytes()


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> object:
    f = tmp_path_factory.mktemp("opaque") / "made.capture"
    step = _sparse_step()
    with capture(f, steps=2):
        step(), step()
    return f


def _first(h: dict) -> list:
    return h["values"]["opaque"][0]


def _stored_value(h: dict) -> int:
    return next(v for v, a in enumerate(h["values"]["array"]) if a != -1)


HOSTILE = {
    "not-a-list": (lambda h: h["values"].__setitem__("opaque", {"0": "sparse_coo"}),
                   "not a list"),
    "too-many": (lambda h: h["values"].__setitem__(
        "opaque", h["values"]["opaque"] * len(h["values"]["array"])), "more than the"),
    "entry-short": (lambda h: _first(h).pop(), "malformed"),
    "value-out-of-range": (lambda h: _first(h).__setitem__(0, len(h["values"]["array"])),
                           "malformed"),
    "value-bool": (lambda h: _first(h).__setitem__(0, True), "malformed"),
    "kind-unknown": (lambda h: _first(h).__setitem__(1, "sparse_xyz"), "not one of"),
    "kind-not-text": (lambda h: _first(h).__setitem__(1, 3), "malformed"),
    "twice": (lambda h: h["values"]["opaque"].append(list(_first(h))), "listed twice"),
    "stored": (lambda h: _first(h).__setitem__(0, _stored_value(h)), "stored array"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_opaque_column_is_refused_with_one_line(tmp_path, made, case):
    edit, want = HOSTILE[case]
    g = tmp_path / f"{case}.capture"
    g.write_bytes(rewrite_header(made.read_bytes(), edit))
    assert_refused(g, want, "values.opaque")


def test_the_inspector_names_a_sparse_output(made, qtbot):
    """Selecting a sparse gradient's op in the window: its note and its output line say it is
    a sparse_coo tensor with its digest only (not "over the size budget")."""
    pytest.importorskip("PySide6")
    from PySide6.QtCore import Qt

    from tapescope.app.qt.capture_window import _OP, CaptureWindow

    cap = load(made)
    win = CaptureWindow(cap, judge(cap))
    qtbot.addWidget(win)
    i = next(e["index"] for e in win.rep["ops"]
             if any(o["value"] in cap.opaque for o in e["outputs"]))
    items = win.tree.findItems("*", Qt.MatchFlag.MatchWildcard | Qt.MatchFlag.MatchRecursive)
    win.tree.setCurrentItem(next(it for it in items if it.data(0, _OP) == i))  # a click
    text = win.inspector.toPlainText()
    assert "a sparse_coo tensor, digest only: unjudged" in text
    assert "note    an output is a sparse_coo tensor" in text
    assert "size budget" not in text


def test_a_sparse_view_is_recorded_not_the_recorders_failure(tmp_path, recorder_path):
    """``torch.sparse.mm``'s backward transposes the sparse matrix (``aten.t`` of a
    ``sparse_coo`` tensor); deciding whether that view was derived asked its ``nbytes``, which
    a sparse tensor has not: the recorder failed at it and the rest ran unrecorded."""
    torch.manual_seed(0)
    idx = torch.randint(0, 6, (2, 12))
    adj = torch.sparse_coo_tensor(idx, torch.ones(12), (6, 6)).coalesce()
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(6, 3)
    with capture(tmp_path / "s.capture", steps=1) as rec:
        torch.sparse.mm(adj, lin(x)).sum().backward()
        opt.step()
    assert rec.failed is None and rec.steps_done() == 1
    cap = load(tmp_path / "s.capture")
    assert "aten.t.default" in cap.ops["op"]
