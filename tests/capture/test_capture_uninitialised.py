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
