"""Uninitialised memory never reaches a capture file (hostile case: a capture is a file people
send). An ``empty`` output holds whatever the process's memory held, another tensor's freed
bytes, text a file read left behind; the capture stored it as a value, so a capture of a zoo
GPT carried ~30 KB of the process's memory (Python source text was found in one). Its output
is now a sentinel digest and no array; the op stays ``recorded``, and an op that reads it
before writing it is ``unjudged``, saying why."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.core.capture.file import UNINITIALISED_OPS, load, uninitialised_digest  # noqa: E402
from tapescope.core.capture.judge import base_name, judge  # noqa: E402

MARK = 1234.5678  # a "secret": the bytes a freed tensor leaves behind
N = 256  # (1 KB: from the heap, which holds what freed objects left there)


def _script():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(N))
    opt = torch.optim.SGD([w], lr=0.1)

    def step() -> tuple[float, np.ndarray]:
        e = torch.empty(N)  # uninitialised: whatever the heap held there
        seen = e.numpy().copy()
        mask = e.bernoulli_(0.5)  # written before anything reads it (an RNG draw)
        torch.empty(8) * 1.0  # an op that reads one before anything writes it
        loss = (w * mask).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item(), seen
    return step


def _free_a_secret() -> None:
    """Leave MARK's bytes in freed memory (made outside any capture: not a recorded value)."""
    secret = torch.full((N,), MARK)
    del secret


def test_an_empty_output_is_neither_stored_nor_hashed(tmp_path):
    f = tmp_path / "u.capture"
    step = _script()
    _free_a_secret()
    with capture(f, steps=1):
        _, seen = step()
    cap = load(f)
    ops = cap.ops
    empties = [i for i, op in enumerate(ops["op"]) if base_name(op) in UNINITIALISED_OPS]
    assert len(empties) == 2
    for i in empties:
        (v,) = ops["outputs"][i]
        assert cap.arrays[v] is None
        assert cap.digests[v] == uninitialised_digest(cap.digest_algorithm, cap.dtypes[v],
                                                      cap.shapes[v])
    # what the empty held (the heap's leftovers: pointers, a freed tensor's bytes) is not in
    # the file (where it held anything but zeros; the checks above hold either way)
    if np.count_nonzero(seen):
        assert seen.tobytes() not in f.read_bytes()
    # the judge: the empty ops are recorded; the op that read one before any write is
    # unjudged and says why; the one that wrote it first (bernoulli_) is recorded as ever
    rep = judge(cap)
    by_op = {e["index"]: e for e in rep["ops"]}
    assert all(o["verdict"] == "recorded" for i in empties for o in by_op[i]["outputs"])
    reader = next(i for i, op in enumerate(ops["op"]) if op == "aten.mul.Tensor"
                  and ops["args"][i][0] == {"T": ops["outputs"][empties[1]][0]})
    assert by_op[reader]["outputs"][0]["verdict"] == "unjudged"
    assert "uninitialised memory" in by_op[reader]["reason"]
    bern = next(i for i, op in enumerate(ops["op"]) if op == "aten.bernoulli_.float")
    assert by_op[bern]["outputs"][0]["verdict"] == "recorded"


def test_the_script_runs_the_same_bits_captured(tmp_path):
    plain = _script()
    want = [plain()[0] for _ in range(3)]
    step = _script()
    with capture(tmp_path / "u.capture", steps=2):
        got = [step()[0] for _ in range(3)]
    assert got == want  # the losses, every bit (the RNG's mask drawn into empty memory)


def test_memory_an_op_overwrites_unread_is_neither_stored_nor_hashed(tmp_path):
    """A tensor the recorder first meets as the first argument of an op that overwrites every
    element unread (a module's ``Parameter(torch.empty(...))``, a new tensor to the recorder,
    filled by ``uniform_``; ``fill_``, ``zero_``, ``copy_``) holds bytes no op of the step
    reads, maybe the heap's garbage: they are neither stored nor hashed (the sentinel digest,
    no array; two runs then agree there), and the ops are judged as ever (``uniform_``
    recorded, the others against the reference: they read only the shape and dtype)."""
    a, b, c, d = (torch.full((N,), MARK + k) for k in range(4))  # unseen by the recorder
    src = torch.arange(N, dtype=torch.float32)
    f = tmp_path / "o.capture"
    with capture(f, steps=1):
        torch.nn.init.uniform_(a)
        b.fill_(2.0)
        c.zero_()
        d.copy_(src)
        w = torch.nn.Parameter(a * 1.0)
        opt = torch.optim.SGD([w], lr=0.1)
        (w * b + c + d).sum().backward()
        b.fill_(3.0)  # an argument the recorder has: recorded as ever (the first fill's value)
        opt.step()
    data = f.read_bytes()
    for k in range(4):
        assert np.full(N, MARK + k, np.float32).tobytes() not in data
    cap = load(f)
    ops = cap.ops
    rep = judge(cap)
    by_op = {e["index"]: e for e in rep["ops"]}
    firsts = {}
    for i, op in enumerate(ops["op"]):
        base = base_name(op)
        if base in ("uniform_", "fill_", "zero_", "copy_") and base not in firsts:
            firsts[base] = i
    assert set(firsts) == {"uniform_", "fill_", "zero_", "copy_"}
    for base, i in firsts.items():
        v = ops["args"][i][0]["T"]
        assert cap.arrays[v] is None
        assert cap.digests[v] == uninitialised_digest(cap.digest_algorithm, cap.dtypes[v],
                                                      cap.shapes[v])
        want = "recorded" if base == "uniform_" else "exact"
        assert [o["verdict"] for o in by_op[i]["outputs"]] == [want], (base, by_op[i])
    last_fill = max(i for i, op in enumerate(ops["op"]) if base_name(op) == "fill_")
    v = ops["args"][last_fill][0]["T"]
    assert last_fill != firsts["fill_"]
    assert v == ops["outputs"][firsts["fill_"]][0]  # the first fill's value, read as ever


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_view_of_uninitialised_memory_is_neither_stored_nor_hashed(tmp_path, monkeypatch,
                                                                      native):
    """DDP's gradient buckets: an ``empty`` flat tensor and ``as_strided`` views of it, each
    then written by ``mul(grad, 1 / world, out=view)``. The views' bytes are the heap's as much
    as the ``empty``'s (a capture carried them: -7.4e19, 2.8e-23 ... from a DDP script): the
    sentinel, no array; the views ``recorded`` ("a view of uninitialised memory"), the ``.out``
    op judged (its ``out=`` only written) as ever."""
    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 8))
    opt = torch.optim.SGD([w], lr=0.1)
    x = torch.randn(8)
    f = tmp_path / "b.capture"
    _free_a_secret()
    with capture(f, steps=1) as rec:
        bucket = torch.empty(N)
        v1 = bucket.as_strided((4, 8), (8, 1), 0)
        v2 = bucket[32:64].view(4, 8)
        seen = bucket.numpy().copy()
        (w @ x).sum().backward()
        torch.mul(w.grad, 0.5, out=v1)
        torch.mul(w.grad, 0.25, out=v2)
        w.grad.copy_(v1 + v2)
        opt.step()
    assert (rec.ops_native > 0) == native
    if (seen[:64] == np.float32(MARK)).all():  # (where the heap gave back the secret's bytes)
        assert np.full(64, MARK, np.float32).tobytes() not in f.read_bytes()
    cap = load(f)
    ops = cap.ops
    rep = judge(cap)
    by_op = {e["index"]: e for e in rep["ops"]}
    views = [i for i, op in enumerate(ops["op"])
             if base_name(op) in ("as_strided", "slice", "view") and ops["args"][i][0]
             in ({"T": ops["outputs"][j][0]} for j, o in enumerate(ops["op"])
                 if base_name(o) in ("empty", "slice"))]
    assert len(views) == 3, [ops["op"][i] for i in views]  # as_strided, slice, view
    for i in views:
        (v,) = ops["outputs"][i]
        assert cap.arrays[v] is None
        assert cap.digests[v] == uninitialised_digest(cap.digest_algorithm, cap.dtypes[v],
                                                      cap.shapes[v])
        assert [o["verdict"] for o in by_op[i]["outputs"]] == ["recorded"]
        assert by_op[i]["reason"] == "a view of uninitialised memory"
    outs = [i for i, op in enumerate(ops["op"]) if op == "aten.mul.out"]
    assert len(outs) == 2
    for i in outs:
        assert [o["verdict"] for o in by_op[i]["outputs"]] == ["exact"], by_op[i]
    assert rep["counts"].get("unjudged", 0) == 0


def test_a_collective_of_one_rank_is_judged_in_its_own_file(tmp_path):
    """DDP on one rank (a script that always wraps its model, run without torchrun): the
    collectives (the parameters' broadcast, the bucket's all-reduce) are judged as every
    rank's, this file being every rank; they were ``no-reference`` ("needs every rank's
    inputs"). A broadcast from a rank the group does not have stays no-reference."""
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("this torch has no gloo backend (torch.distributed.is_gloo_available())")
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        f = tmp_path / "d.capture"
        with capture(f, steps=1):
            model = DDP(torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                            torch.nn.Linear(8, 2)))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loss = model(torch.randn(5, 6)).square().mean()
            loss.backward()
            opt.step()
    finally:
        dist.destroy_process_group()
    cap = load(f)
    rep = judge(cap)
    by_op = {e["index"]: e for e in rep["ops"]}
    colls = [i for i, op in enumerate(cap.ops["op"]) if op.startswith("c10d.")]
    names = {cap.ops["op"][i] for i in colls}
    assert {"c10d.broadcast_.default", "c10d.allreduce_.default"} <= names
    for i in colls:
        assert {"g": [0, 1]} in cap.ops["args"][i]
        assert [o["verdict"] for o in by_op[i]["outputs"]] == ["exact"] * len(
            cap.ops["outputs"][i]), by_op[i]
    assert rep["no_reference"] == []
    assert rep["counts"].get("unjudged", 0) <= 2  # (DDP's C++-filled bucket indices, step 2)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_memory_cpp_writes_outside_aten_is_recorded_where_an_op_reads_it(tmp_path, monkeypatch,
                                                                        native):
    """``pad_packed_sequence`` makes its lengths with ``empty`` and fills them through their
    pointer in C++ (no aten op, no version bump); the script's ``lengths[unsorted_indices]``
    read them and was ``unjudged`` ("uninitialised memory as far as the recorded ops go").
    Bytes that changed since the ``empty`` are what C++ wrote: recorded when an op reads them
    (the lengths themselves, in the file), the reading op judged; an ``empty`` read as the
    heap left it stays out of the file (the first test). Planted (the reads not refreshed, or
    refreshed without the change check): fails here or there."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    torch.manual_seed(0)
    rnn = torch.nn.RNN(3, 4, batch_first=True)
    opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
    x = torch.randn(3, 5, 3)
    lens = torch.tensor([2, 5, 3])  # unsorted: the lengths come back through the index
    f = tmp_path / "p.capture"
    with capture(f, steps=1) as rec:
        h, _ = rnn(pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False))
        y, got = pad_packed_sequence(h, batch_first=True)
        y.sum().backward()
        opt.step()
    assert got.tolist() == [2, 5, 3]
    assert (rec.ops_native > 0) == native
    cap = load(f)
    assert cap.meta["outside_writes"] >= 1
    rep = judge(cap)
    assert rep["counts"].get("unjudged", 0) == 0, [
        (e["op"], e.get("reason")) for e in rep["ops"]
        if any(o["verdict"] == "unjudged" for o in e["outputs"])]
    ops = cap.ops
    idx = [i for i, op in enumerate(ops["op"]) if op == "aten.index.Tensor"
           and cap.dtypes[ops["outputs"][i][0]] == "int64"]
    assert idx
    by_op = {e["index"]: e for e in rep["ops"]}
    for i in idx:
        src = ops["args"][i][0]["T"]  # the sorted lengths, as C++ wrote them
        assert cap.arrays[src] is not None and sorted(cap.arrays[src].tolist()) == [2, 3, 5]
        assert [o["verdict"] for o in by_op[i]["outputs"]] == ["exact"]
