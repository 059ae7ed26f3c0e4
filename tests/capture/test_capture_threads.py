"""A script whose training loop runs in a ``threading.Thread``: a dispatch mode is a thread's
own, so the recorder saw none of the loop's ops, while the optimizer's hooks (global) counted
its steps: "captured 1 steps: 4 ops" (the model's initialisation), no loss, no forward. Now the
recording follows the thread of the first module forward (``Recorder._adopt``), and another
thread's forwards and optimizer steps after that are not the step's."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.core.capture.file import load  # noqa: E402
from tapescope.core.capture.judge import judge  # noqa: E402


def _train(model: torch.nn.Module, steps: int, seed: int, losses: list) -> None:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())


def test_a_loop_in_a_thread_is_recorded(tmp_path, recorder_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    losses: list = []
    f = tmp_path / "t.capture"
    with capture(f, steps=2) as rec:
        t = threading.Thread(target=_train, args=(model, 3, 1, losses), name="trainer")
        t.start()
        t.join()
    assert torch._C._len_torch_dispatch_stack() == 0  # (no mode left on this thread)
    assert rec.steps_done() == 2 and rec.failed is None
    assert (rec.ops_native > 0) == recorder_path
    cap = load(f)
    assert cap.meta["thread"] == "trainer"
    assert {"forward", "backward", "optimizer"} <= set(cap.ops["phase"])
    assert [float(cap.arrays[v]) for v in cap.losses] == losses[:2]
    rep = judge(cap)
    assert rep["counts"].get("unjudged", 0) == 0 and rep["no_reference"] == []


def test_another_threads_steps_after_the_first_forward_are_not_the_steps(tmp_path,
                                                                       recorder_path):
    torch.manual_seed(0)
    model, other = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)
    mine: list = []
    theirs: list = []
    f = tmp_path / "m.capture"
    with capture(f, steps=2) as rec:
        _train(model, 1, 1, mine)  # (the recording thread's first forward: it stays here)
        t = threading.Thread(target=_train, args=(other, 2, 2, theirs))
        t.start()
        t.join()
        _train(model, 1, 3, mine)
    assert rec.steps_done() == 2
    cap = load(f)
    assert "thread" not in cap.meta
    assert [float(cap.arrays[v]) for v in cap.losses] == mine
    n_linear = sum(op == "aten.addmm.default" for op in cap.ops["op"])
    assert n_linear == 2  # (one forward a step: the other thread's two not among them)


def test_a_loader_threads_parameterless_transform_first_is_not_followed(tmp_path,
                                                                        recorder_path):
    """A prefetching thread runs a transform (a module without parameters, as torchvision's
    v2 transforms are) before the model's first forward: the recording stays with the thread
    that trains."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    norm = torch.nn.Tanh()
    mine: list = []
    with capture(tmp_path / "p.capture", steps=1) as rec:
        t = threading.Thread(target=lambda: norm(torch.randn(4, 6)))
        t.start()
        t.join()
        _train(model, 1, 1, mine)
    assert rec.steps_done() == 1 and rec.thread_name is None
    cap = load(tmp_path / "p.capture")
    assert [float(cap.arrays[v]) for v in cap.losses] == mine
