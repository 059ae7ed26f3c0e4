"""Ways scripts train that a capture met wrong (session 38): per-sample gradients by
``torch.func`` (the script failed under the capture: a module hook read ``grad``'s wrapper,
which has no storage), a loss scale (``GradScaler.scale(loss).backward()``: the loss reported
was the scaled one, 65536 times what the script prints), LBFGS's ``step(closure)`` (the
closure's forward was filed as the optimizer's), and several backward calls a step (gradient
accumulation, LBFGS: only the last one's loss was kept)."""

from __future__ import annotations

import copy
import io
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.file import load  # noqa: E402
from tapescope.core.capture.judge import judge  # noqa: E402


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_per_sample_gradients_by_torch_func_are_captured(tmp_path, monkeypatch, native):
    """``vmap(grad(...))`` over ``functional_call``: the script runs as it does uncaptured (its
    parameters after the step the same bits), the model's parameters are noted as the values
    the transforms wrap, and the batched ops below the transforms are recorded and judged."""
    from torch.func import functional_call, grad, vmap

    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))

    def step(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.05)

        def loss_of(p, xi, yi):
            out = functional_call(m, p, (xi[None],))
            return torch.nn.functional.cross_entropy(out, yi[None])

        p = {k: v.detach() for k, v in m.named_parameters()}
        gs = vmap(grad(loss_of), in_dims=(None, 0, 0))(p, x, y)
        for k, v in m.named_parameters():  # each sample's gradient clipped, then the mean
            n = gs[k].flatten(1).norm(dim=1).clamp(min=1.0)
            v.grad = (gs[k] / n.view(-1, *[1] * (gs[k].dim() - 1))).mean(0)
        opt.step()
        return {k: v.detach().clone() for k, v in m.named_parameters()}

    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    want = step(copy.deepcopy(model))
    f = tmp_path / "psg.capture"
    with capture(f, steps=1) as rec:
        got = step(model)
    assert (rec.ops_native > 0) == native
    assert rec.error is None
    for k in want:  # the recorder only reads
        assert torch.equal(got[k], want[k]), k
    cap = load(f)
    init = {name: cap.arrays[vid] for name, vid in cap.initial["params"]}
    assert set(init) == {f"Sequential.{k}" for k in before}
    for k, v in before.items():
        np.testing.assert_array_equal(init[f"Sequential.{k}"], v.numpy())
    ops = cap.ops["op"]
    # the transforms' ops, batched: the first layer's product over all 8 samples at once
    mms = [i for i, o in enumerate(ops) if o == "aten.mm.default"]
    assert mms and cap.arrays[cap.ops["outputs"][mms[0]][0]].shape == (8, 16)
    assert {"forward", "backward", "optimizer"} <= set(cap.ops["phase"])
    rep = judge(cap)
    assert rep["counts"]["exact"] > 0
    assert sum(rep["counts"].values()) == sum(len(o["outputs"]) for o in rep["ops"])
    assert not [o for e in rep["ops"] for o in e["outputs"] if o["verdict"] == "unjudged"]


def test_a_loss_scaled_for_backward_is_reported_as_the_loss(tmp_path):
    """A step's loss is the value ``backward()`` ran on, unless that value is the loss times a
    power of two (``GradScaler.scale``, a static ``loss * 2.0**k``): then the loss itself,
    the one the script prints, with the scale beside it. A factor that is not a power of two
    is not a scale (the product rounds): the value backward ran on, as before. An int
    factor (``loss * 8``) is a number like a float."""
    from tapescope.app.capture import capture

    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    xs = [torch.randn(6, 5) for _ in range(4)]
    printed, scaled = [], []
    f = tmp_path / "amp.capture"
    with capture(f, steps=2):
        for x in xs[:2]:
            loss = m(x).pow(2).mean()
            opt.zero_grad()
            s = scaler.scale(loss)
            s.backward()
            scaler.step(opt)
            scaler.update()
            printed.append(loss.item())
            scaled.append(s.item())
    rep = judge(load(f))
    assert [e["recorded"] for e in rep["losses"]] == printed
    assert [e["scale"] for e in rep["losses"]] == [65536.0, 65536.0]
    # the reference's own loss, not the scaled one (step 2 inherits the optimizer's rounding)
    assert np.allclose([e["reference"] for e in rep["losses"]], printed, rtol=1e-5, atol=0)
    assert scaled[0] == printed[0] * 65536.0

    f = tmp_path / "static.capture"
    printed, roots = [], []
    with capture(f, steps=4):
        for x, k in zip(xs[:4], (0.25, 3.0, torch.tensor(1024.0), 8), strict=True):
            loss = m(x).pow(2).mean()
            opt.zero_grad()
            root = loss * k
            root.backward()
            opt.step()
            printed.append(loss.item())
            roots.append(root.item())
    rep = judge(load(f))
    assert [e["recorded"] for e in rep["losses"]] == [printed[0], roots[1], *printed[2:]]
    assert [e["scale"] for e in rep["losses"]] == [0.25, None, 1024.0, 8.0]


def test_the_cli_says_the_loss_scale(tmp_path, capsys):
    """``parity --capture``'s loss lines name the scale backward ran under."""
    from tapescope.app.capture import capture
    from tapescope.app.cli import main

    torch.manual_seed(2)
    m = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    f = tmp_path / "s.capture"
    with capture(f, steps=1):
        loss = m(torch.randn(4, 3)).pow(2).mean()
        opt.zero_grad()
        (loss * 512.0).backward()
        opt.step()
    main(["parity", "--capture", str(f)])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step    1"))
    assert f"loss {loss.item()!r}" in line and "x 512.0: a loss scale" in line, line


@pytest.mark.parametrize("hook", ["_pre", "_post", "_step_pre", "_step_post"])
def test_a_hook_that_fails_never_breaks_the_step(tmp_path, monkeypatch, hook):
    """A module or optimizer hook of the recorder that raises (as the module hook did on
    ``torch.func``'s wrappers) stops the recording there and says where; the user's step runs
    on to the same bits."""
    from tapescope.app.capture import capture
    from tapescope.app.capture.recorder import Recorder

    def run():
        torch.manual_seed(3)
        m = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        out = []
        for _ in range(2):
            opt.zero_grad()
            loss = m(torch.randn(3, 4)).square().mean()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out, m.weight.detach().clone()

    want = run()

    def boom(self, *args):
        raise RuntimeError("boom")

    monkeypatch.setattr(Recorder, hook, boom)
    where = "optimizer.step" if "step" in hook else "a module's forward"
    with pytest.raises(RuntimeError, match=f"the recorder failed at {where} .*boom"):
        with capture(tmp_path / "h.capture", steps=2):
            got = run()
    assert got[0] == want[0] and torch.equal(got[1], want[1])


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_an_optimizers_closure_is_forward_and_backward(tmp_path, monkeypatch, native):
    """``LBFGS.step(closure)`` evaluates the closure (forward, loss, backward) inside the
    optimizer's step, several times: its forward ops (the model's and the loss's) are
    ``forward``, its backward's ``backward``, the optimizer's own ops between ``optimizer``;
    each step holds all three, and the printed losses are the uncaptured run's."""
    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    x = torch.linspace(-1, 1, 16).unsqueeze(1)
    y = torch.sin(3 * x)

    def run(record):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        opt = torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=3)
        out = []

        def closure():
            opt.zero_grad()
            loss = (m(x) - y).pow(2).mean()
            loss.backward()
            return loss

        with record:
            for _ in range(2):
                out.append(opt.step(closure).item())
        return out

    import contextlib

    want = run(contextlib.nullcontext())
    f = tmp_path / "lbfgs.capture"
    assert run(capture(f, steps=2)) == want
    cap = load(f)
    rows = list(zip(cap.ops["op"], cap.ops["phase"], cap.ops["module"], cap.ops["step"],
                    strict=True))
    for s in (1, 2):
        mine = [r for r in rows if r[3] == s]
        assert {ph for _, ph, _, _ in mine} == {"forward", "backward", "optimizer"}
        # the model's ops: forward (or their backward), never the optimizer's; the loss's
        # (outside any module) forward once a closure
        assert {ph for _, ph, mod, _ in mine if mod} == {"forward", "backward"}
        n_fwd = sum(op == "aten.tanh.default" for op, _, _, _ in mine)
        assert sum(op == "aten.pow.Tensor_Scalar" and ph == "forward"
                   for op, ph, _, _ in mine) == n_fwd
        # LBFGS's own arithmetic after each backward (its flat gradient, the direction)
        assert any(op == "aten.cat.default" and ph == "optimizer" for op, ph, _, _ in mine)
        # max_iter 3: the closure ran more than once in the step
        assert sum(op == "aten.tanh.default" for op, _, _, _ in mine) >= 2


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_every_backward_call_of_a_step_is_a_loss_call(tmp_path, monkeypatch, native):
    """Gradient accumulation (micro-batches of a step, each ``(loss / 2).backward()``): the
    step's ``calls`` are every micro-batch's value in order, their sum the bits the script
    adds up, the step's loss the last call's; the CLI's loss line says so."""
    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder
    from tapescope.app.cli import main

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    torch.manual_seed(5)
    m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 2))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    batches = [(torch.randn(4, 6), torch.randint(0, 2, (4,))) for _ in range(6)]
    f = tmp_path / "acc.capture"
    printed, each = [], []
    with capture(f, steps=2):
        for s in range(2):
            opt.zero_grad()
            total = 0.0
            for x, y in batches[3 * s:3 * s + 3]:
                loss = torch.nn.functional.cross_entropy(m(x), y) / 3
                loss.backward()
                total += loss.item()
                each.append(loss.item())
            opt.step()
            printed.append(total)
    cap = load(f)
    assert [len(c) for c in cap.loss_calls] == [3, 3]
    rep = judge(cap)
    for s, e in enumerate(rep["losses"]):
        calls = [c["recorded"] for c in e["calls"]]
        assert calls == each[3 * s:3 * s + 3]
        assert sum(calls, 0.0) == printed[s]
        assert e["recorded"] == calls[-1] and e["value"] == e["calls"][-1]["value"]
        assert all(c["reference"] is not None for c in e["calls"])
    main(["parity", "--capture", str(f)])


def test_the_cli_names_a_steps_backward_calls(tmp_path, capsys):
    """The loss line of a step with several backward calls lists them and their sum."""
    from tapescope.app.capture import capture
    from tapescope.app.cli import main

    torch.manual_seed(6)
    m = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    vals = []
    with capture(tmp_path / "c.capture", steps=1):
        opt.zero_grad()
        for _ in range(2):
            loss = m(torch.randn(4, 3)).pow(2).mean()
            loss.backward()
            vals.append(loss.item())
        opt.step()
    main(["parity", "--capture", str(tmp_path / "c.capture")])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step    1"))
    assert f"the last of 2 backward calls: {vals[0]!r}, {vals[1]!r}; their sum " \
        f"{vals[0] + vals[1]!r}" in line, line


@pytest.mark.parametrize("edit, says", [
    (lambda h: h.update(loss_calls=5), "'loss_calls' is not a list"),
    (lambda h: h.update(loss_calls=[[0], [0]]), "'loss_calls' has 2 entries, not 1"),
    (lambda h: h.update(loss_calls=[[10 ** 9]]), "'loss_calls' entry 0"),
    (lambda h: h.update(loss_calls=[[-1]]), "'loss_calls' entry 0"),
    (lambda h: h.update(loss_calls=[["0"]]), "'loss_calls' entry 0"),
    (lambda h: h.update(loss_calls=[list(range(70000))]), "'loss_calls' entry 0"),
], ids=["not-a-list", "count", "out-of-range", "negative", "text", "too-many"])
def test_a_hostile_loss_calls_list_is_refused(tmp_path, edit, says):
    """The header's optional ``loss_calls`` is checked like ``losses``: a list of one list a
    step, of value ids in range, bounded; a file without it loads as before."""
    from tapescope.app.capture import capture
    from tapescope.core.capture.file import CaptureFileError
    from tests.helpers.capture_files import rewrite_header

    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    f = tmp_path / "ok.capture"
    with capture(f, steps=1):
        opt.zero_grad()
        m(torch.randn(3, 2)).sum().backward()
        opt.step()
    data = f.read_bytes()
    old = tmp_path / "old.capture"
    old.write_bytes(rewrite_header(data, lambda h: h.pop("loss_calls")))
    assert load(old).loss_calls is None and judge(load(old))["losses"][0]["calls"]
    bad = tmp_path / "bad.capture"
    bad.write_bytes(rewrite_header(data, edit))
    with pytest.raises(CaptureFileError, match=says):
        load(bad)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])
def test_a_model_cast_after_its_construction_was_captured(tmp_path, monkeypatch, native, dtype):
    """``model.to(dtype)`` with the capture already on (the model built inside it, as under
    ``tapescope capture``): ``.to`` swaps each parameter's data (``p.data = ...``: no aten op,
    its version counter unchanged), so the parameters must be noted as the cast values, not as
    the float32 ones made before. Before session 42 the step's ops read the float32 values (a
    bfloat16 GPT: 116 of 1,249 ops 'no reference', their inputs of the wrong type)."""
    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    dt = getattr(torch, dtype)
    f = tmp_path / "cast.capture"
    torch.manual_seed(0)
    with capture(f, steps=1):
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 2)).to(dt)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x, y = torch.randn(8, 6).to(dt), torch.randint(0, 2, (8,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    cap = load(f)
    init = {name: cap.arrays[vid] for name, vid in cap.initial["params"]}
    assert {str(a.dtype) for a in init.values()} == {dtype}
    rep = judge(cap)
    wrong_type = [e for e in rep["ops"] if "the recorded one" in (e.get("reason") or "")]
    assert not wrong_type, wrong_type[:2]
    assert rep["counts"]["exact"] > 0


def _plain_then_captured(run, path, steps: int) -> tuple:
    """``run()`` as the script runs it, then under a capture of ``steps`` steps written to
    ``path``: (the plain result, the captured one, the capture loaded, the recorder); the
    recorder failed nothing."""
    from tapescope.app.capture import capture

    plain = run()
    with capture(path, steps=steps) as rec:
        got = run()
    assert rec.error is None
    return plain, got, load(path), rec


def _same_bits_captured(run, path, steps: int, native: bool, monkeypatch) -> tuple:
    """``run()`` plain, then captured (``steps`` steps to ``path``) on the C or the Python path
    (``native``): its every value the same bits both times, the recorder failed nothing and
    took the path asked. (the plain values, the recorder, the capture loaded)"""
    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    want, got, cap, rec = _plain_then_captured(run, path, steps)
    assert rec.failed is None
    assert (rec.ops_native > 0) == native
    for a, b in zip(want, got, strict=True):  # the recorder only reads
        assert torch.equal(a, b)
    assert cap.steps == steps
    return want, rec, cap


def _first_weight_read_as(cap, weights) -> None:
    """Each step's forward read the first layer's (16, 6) weight (its ``t``) as ``weights``
    holds it for that step: the values the script had then."""
    for s in range(1, len(weights) + 1):
        if s > cap.steps:
            break
        read = [cap.arrays[a["T"]] for i, args in enumerate(cap.ops["args"])
                if cap.ops["step"][i] == s and cap.ops["phase"][i] == "forward"
                and cap.ops["op"][i] == "aten.t.default"
                for a in args if isinstance(a, dict) and "T" in a
                and cap.shapes[a["T"]] == (16, 6)]
        assert read, s
        for a in read:
            np.testing.assert_array_equal(a, weights[s - 1].numpy())


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_data_swapped_for_data_of_the_same_type_and_shape(tmp_path, monkeypatch, native):
    """``p.data = x`` with x of p's own dtype and shape: an initialisation written so (the model
    built inside the capture), and ``vector_to_parameters`` between two steps (which assigns
    each parameter a view of one flat vector: lookahead, SWA and evolution-strategy scripts do
    it). Neither is an aten op and neither moves p's version counter, so a tensor keyed by
    identity and version alone kept naming its old value: the initial parameters and the
    second step's forward read values the script no longer had."""
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    f = tmp_path / "swap.capture"
    torch.manual_seed(0)
    x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))
    with capture(f, steps=2):
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 2))
        model[0].weight.data = torch.full_like(model[0].weight, 0.01)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        w0 = model[0].weight.detach().clone()
        before = []
        for step in range(2):
            if step == 1:  # the step's parameters pulled halfway back to zero
                vector_to_parameters(parameters_to_vector(model.parameters()) * 0.5,
                                     model.parameters())
            before.append(model[0].weight.detach().clone())
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    cap = load(f)
    init = {name: cap.arrays[vid] for name, vid in cap.initial["params"]}
    np.testing.assert_array_equal(init["Sequential.0.weight"], w0.numpy())
    _first_weight_read_as(cap, before)
    rep = judge(cap)
    assert rep["counts"]["exact"] > 0


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_activation_checkpointing_names_the_recompute_by_its_forward_modules(
        tmp_path, monkeypatch, native, reentrant):
    """``torch.utils.checkpoint`` runs each block's forward again inside the backward. Before
    session 43 the recompute's ops were filed under the module whose backward node asked for
    the saved tensors (``Net.blocks.0.drop``), the reentrant recompute under the block's type
    as if a new model (``Block.fc1``, its parameters noted again as initial ones), and the
    non-reentrant one, which stops its recompute by raising inside a forward, left the module
    stack growing (``Net.blocks.2.drop.Block.drop.Block.fc1``)."""
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)

    class Block(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln, self.fc1 = torch.nn.LayerNorm(d), torch.nn.Linear(d, 2 * d)
            self.fc2, self.drop = torch.nn.Linear(2 * d, d), torch.nn.Dropout(0.1)

        def forward(self, x):
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln(x)))))

    class Net(torch.nn.Module):
        def __init__(self, d=8):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(d) for _ in range(2)])
            self.head = torch.nn.Linear(d, 3)

        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=reentrant)
            return self.head(x)

    def run(cap_file=None):
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 8, requires_grad=reentrant)
        y = torch.randint(0, 3, (4,))
        losses = []
        for _ in range(2):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    want = run()
    f = tmp_path / "ck.capture"
    with capture(f, steps=2) as rec:
        got = run()
    assert rec.error is None
    assert got == want  # the recorder only reads
    cap = load(f)
    mods = set(cap.ops["module"])
    assert all(m == "" or m == "Net" or m.startswith("Net.") for m in mods), sorted(mods)
    assert not [m for m in mods if m.count("blocks") > 1 or "Block" in m], sorted(mods)
    assert {n for n, _ in cap.initial["params"]} == {
        f"Net.{n}" for n, _ in Net().named_parameters()}
    for b in (0, 1):  # each block's forward product run again in the backward, under fc1
        again = [i for i, o in enumerate(cap.ops["op"]) if o == "aten.addmm.default"
                 and cap.ops["phase"][i] == "backward" and cap.ops["step"][i] == 1
                 and cap.ops["module"][i] == f"Net.blocks.{b}.fc1"]
        assert again, b
    rep = judge(cap)
    assert rep["counts"]["no-reference"] == 0 and rep["counts"]["exact"] > 0


def test_the_inspector_shows_the_elements_from_the_first_that_differs(tmp_path, qtbot):
    """An output whose first elements agree (a padding row, a masked block, here a product's
    first 8 rows, zero): the Inspector's recorded / reference lines showed its first six
    elements, equal, and hid what differs (session 43). They start at the first element whose
    bits differ, its index said, as a user clicking the op sees."""
    pytest.importorskip("PySide6")
    from PySide6.QtCore import Qt

    from tapescope.app.capture import capture
    from tapescope.app.qt.capture_window import _OP, CaptureWindow, first_differing

    f = tmp_path / "pad.capture"
    torch.manual_seed(0)
    with capture(f, steps=1):
        lin = torch.nn.Linear(100, 32, bias=False)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        x = torch.randn(64, 100)
        x[:8] = 0
        lin(x).square().sum().backward()
        opt.step()
    cap = load(f)
    win = CaptureWindow(cap, judge(cap))
    qtbot.addWidget(win)
    i = next(e["index"] for e in win.rep["ops"] if e["op"] == "aten.mm.default"
             and e["phase"] == "forward" and e["outputs"][0]["verdict"] == "introduced")
    items = win.tree.findItems("*", Qt.MatchFlag.MatchWildcard | Qt.MatchFlag.MatchRecursive)
    win.tree.setCurrentItem(next(it for it in items if it.data(0, _OP) == i))  # a click
    lines = win.inspector.toPlainText().splitlines()
    rec = next(ln for ln in lines if ln.startswith("  recorded "))
    ref = lines[lines.index(rec) + 1]
    assert "from element (" in rec and ref.startswith("  reference ")
    row = int(rec.split("from element (")[1].split(",")[0])
    assert row >= 8  # past the zero rows
    got = rec.split("[")[1].split("]")[0].split()
    want = ref.split("[")[1].split("]")[0].split()
    assert got[0] != want[0]  # the first shown differs
    a = np.zeros(10, np.float32)
    b = a.copy()
    b[7] = 1
    assert first_differing(a, b) == 7 and first_differing(a, a) == 0


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("idiom", ["no_grad", "data"])
def test_a_script_that_updates_its_parameters_itself(tmp_path, monkeypatch, native, idiom):
    """No torch.optim: ``with torch.no_grad(): p -= lr * p.grad``, or the older ``p.data.add_(
    p.grad.data, alpha=-lr)`` (tutorials, research code). Before session 43 nothing was
    recorded ('never called optimizer.step()'): a step now ends at the next forward after the
    script wrote its parameters. Through ``p.data`` (a version counter of its own) the
    parameter is read afresh after the write, not as the value it held: each step's forward
    reads the parameters the script had then; the losses are the script's own bits."""
    import torch.nn.functional as F

    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)

    def run(steps=3):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        g = torch.Generator().manual_seed(1)
        losses, weights = [], []
        for _ in range(steps):
            x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
            weights.append(m[0].weight.detach().clone())
            loss = F.cross_entropy(m(x), y)
            m.zero_grad()
            loss.backward()
            for p in m.parameters():
                if idiom == "data":
                    p.data.add_(p.grad.data, alpha=-0.1)
                else:
                    with torch.no_grad():
                        p -= 0.1 * p.grad
            losses.append(loss.item())
        return losses, weights

    (want, _), (got, weights), cap, _ = _plain_then_captured(run, tmp_path / "manual.capture", 2)
    assert got == want and cap.steps == 2
    _first_weight_read_as(cap, weights)
    assert "optimizer" in set(cap.ops["phase"])
    rep = judge(cap)
    assert [e["recorded"] for e in rep["losses"]] == want[:2]
    assert rep["counts"]["no-reference"] == 0


def test_an_unstable_sort_or_top_k_of_ties_is_exact_in_any_order_it_may_take():
    """``pack_padded_sequence(enforce_sorted=False)`` sorts the lengths with
    ``torch.sort(descending=True)``, unstable: equal lengths (common) came out 'no reference'
    (session 43). The exact semantics allow any order of equal elements, so the recorded order
    is the reference's where it is a sort of these values; one that is no sort of them (an
    index twice, values out of order, another element's bits) gets the stable order, and so
    does a call with nothing recorded (outside the judge)."""
    from tapescope.core.capture.aten_ref import reference
    from tapescope.core.capture.aten_ref_table import OUT_ELEMS

    def ref(op, args, rec):
        tok = OUT_ELEMS.set(rec)
        try:
            return reference(op, args, {})
        finally:
            OUT_ELEMS.reset(tok)

    x = np.array([9, 7, 5, 9, 3, 7, 9])
    stable = np.array([0, 3, 6, 1, 5, 2, 4])
    vals = x[stable]
    for idx, ok in (([3, 0, 6, 1, 5, 2, 4], True), ([6, 3, 0, 5, 1, 2, 4], True),
                    ([0, 0, 6, 1, 5, 2, 4], False), ([0, 3, 6, 1, 5, 4, 2], False)):
        idx = np.array(idx)
        got = ref("aten.sort.default", [x, -1, True], [x[idx], idx])
        assert np.array_equal(got[1], idx if ok else stable), idx
        assert np.array_equal(got[0], x[idx] if ok else vals)
    assert np.array_equal(reference("aten.sort.default", [x, -1, True], {})[1], stable)
    # signed zeros and NaN tie too; the values' bits follow the indices
    f = np.array([0.0, -0.0, np.nan, 1.0, np.nan], np.float32)
    idx = np.array([1, 0, 3, 4, 2])
    got = ref("aten.sort.default", [f, 0], [f[idx], idx])
    assert np.array_equal(got[1], idx)
    assert np.array_equal(got[0].view(np.uint32), f[idx].view(np.uint32))
    # a sort asked to be stable keeps its own order whatever was recorded
    tok = OUT_ELEMS.set([x[[3, 0, 6, 1, 5, 2, 4]], np.array([3, 0, 6, 1, 5, 2, 4])])
    try:
        got = reference("aten.sort.stable", [x], {"stable": True, "descending": True})
    finally:
        OUT_ELEMS.reset(tok)
    assert np.array_equal(got[1], stable)
    # top-k: which of the equal elements, and in which order
    t = np.array([[1.0, 5.0, 5.0, 2.0, 5.0], [0.0, 3.0, 1.0, 3.0, 3.0]], np.float32)
    tv, ti = torch.topk(torch.from_numpy(t), 2)
    got = ref("aten.topk.default", [t, 2], [tv.numpy(), ti.numpy()])
    assert np.array_equal(got[1], ti.numpy())
    other = np.array([[4, 1], [4, 3]])
    got = ref("aten.topk.default", [t, 2], [np.take_along_axis(t, other, 1), other])
    assert np.array_equal(got[1], other)
    twice = np.array([[1, 1], [1, 3]])
    got = ref("aten.topk.default", [t, 2], [np.take_along_axis(t, twice, 1), twice])
    assert np.array_equal(got[1], [[1, 2], [1, 3]])  # the stable choice


def test_packed_sequences_of_equal_lengths_are_judged(tmp_path):
    """``pack_padded_sequence(enforce_sorted=False)`` with two equal lengths: its unstable sort
    of the lengths was 'no reference' and its inverted permutation (``empty_like`` then
    ``scatter_``) 'unjudged' (uninitialised memory read) before session 43. The sort is exact
    in the order it took, the scatter judged on the elements it writes. (``pad_packed_sequence``
    fills its lengths in C++, no aten op: that read stays unjudged, said so.)"""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from tapescope.app.capture import capture

    f = tmp_path / "packed.capture"
    torch.manual_seed(0)
    with capture(f, steps=1):
        emb, lstm = torch.nn.Embedding(20, 8), torch.nn.LSTM(8, 8, batch_first=True)
        opt = torch.optim.SGD([*emb.parameters(), *lstm.parameters()], lr=0.1)
        idx, lens = torch.randint(1, 20, (5, 7)), torch.tensor([7, 5, 7, 2, 5])
        p = pack_padded_sequence(emb(idx), lens, batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(lstm(p)[0], batch_first=True)
        h.square().mean().backward()
        opt.step()
    rep = judge(load(f))
    by_op: dict = {}
    for e in rep["ops"]:
        by_op.setdefault(e["op"], []).extend(o["verdict"] for o in e["outputs"])
    assert set(by_op["aten.sort.default"]) == {"exact"}
    assert set(by_op["aten.scatter_.src"]) == {"exact"}
    assert rep["counts"]["no-reference"] == 0
    why = {e.get("reason") for e in rep["ops"]
           if any(o["verdict"] == "unjudged" for o in e["outputs"])}
    assert all("uninitialised memory" in w for w in why), why


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_writes_through_data_reach_the_tensor_they_alias(tmp_path, monkeypatch, native):
    """``module.weight.data.normal_(0, 0.02)`` (Hugging Face's ``_init_weights``, the model
    built inside the capture) and a mean teacher's ``ema.data.mul_(d).add_(p.data, ...)``:
    ``t.data`` is an alias with a version counter of its own, so a write through it moved
    neither ``t``'s version nor its pointer, and ``t`` kept naming its old value (session 43:
    the initial parameters were the default init's, std 0.24 for 0.02, and a teacher's forward
    read its first weights: 44 'unknown' introduced outputs, up to 1.9e9 ulp, in a view op).
    A write now makes every other tensor known at its memory be read afresh: the initial
    parameters are the script's, and no view op introduces anything."""
    import copy

    import torch.nn.functional as F

    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)

    def run():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight.data.normal_(mean=0.0, std=0.02)
                mod.bias.data.zero_()
        init = {k: v.detach().clone() for k, v in m.named_parameters()}
        ema = copy.deepcopy(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        g = torch.Generator().manual_seed(1)
        out = []
        for _ in range(3):
            x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for pe, p in zip(ema.parameters(), m.parameters(), strict=True):
                    pe.data.mul_(0.5).add_(p.data, alpha=0.5)
                out.append((loss.item(), F.cross_entropy(ema(x), y).item()))
        return init, out

    (_, want), (init, got), cap, _ = _plain_then_captured(run, tmp_path / "alias.capture", 3)
    assert got == want
    noted = {name: cap.arrays[vid] for name, vid in cap.initial["params"]}
    for k, v in init.items():
        np.testing.assert_array_equal(noted[f"Sequential.{k}"], v.numpy())
    rep = judge(cap)
    views = [e for e in rep["ops"] if e["op"] in ("aten.t.default", "aten.detach.default",
                                                  "aten.view.default")]
    assert views and not [e for e in views
                          if any(o["verdict"] == "introduced" for o in e["outputs"])]
    assert rep["losses"][0]["recorded"] == want[0][0]


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_write_through_part_of_an_alias_reaches_the_tensor(tmp_path, monkeypatch, native):
    """``emb.weight.data[padding_idx].zero_()`` (Hugging Face's embedding init, RoBERTa's
    padding index 1), the weight read before it (a norm logged): the row's view starts
    elsewhere than the weight, on the same storage, through an alias with its own version
    counter. The weight must be read afresh after the write (keyed by its storage), or its
    initial value keeps the row (session 43: the same data pointer only was tracked)."""
    import torch.nn.functional as F

    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    f = tmp_path / "row.capture"
    torch.manual_seed(0)
    with capture(f, steps=1):
        emb, head = torch.nn.Embedding(10, 4, padding_idx=1), torch.nn.Linear(4, 3)
        emb.weight.data.normal_(0.0, 0.02)
        logged = emb.weight.norm().item()  # the weight read: known to the recorder
        emb.weight.data[1].zero_()  # (an op that overwrites unread: the Python path)
        logged += emb.weight.norm().item()
        emb.weight.data[3].mul_(2.0)  # (one that reads first: the C path where it runs)
        w0 = emb.weight.detach().clone()
        opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)
        idx, y = torch.tensor([0, 2, 1, 5]), torch.tensor([0, 1, 2, 0])
        F.cross_entropy(head(emb(idx)), y).backward()
        opt.step()
    assert logged > 0
    cap = load(f)
    init = {name: cap.arrays[vid] for name, vid in cap.initial["params"]}
    np.testing.assert_array_equal(init["Embedding.weight"], w0.numpy())
    assert not init["Embedding.weight"][1].any()


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "hashing-thread"])
def test_a_recorded_tensor_stays_resizable(tmp_path, monkeypatch, native, threaded):
    """``Tensor.numpy()`` marks a storage not resizable for good; the recorder read values
    so, and a script that later resized one failed under the capture ("Trying to resize
    storage that is not resizable"): a QAT model's first forward (the per-channel observer's
    ``running_min`` of 0 elements, resized by ``_fused_moving_avg_obs_fq_helper``). Each read
    here, then each resize: an empty tensor, a bfloat16 one, a non-contiguous view's base, a
    large output hashed in place on the hashing thread (``--digest sha256``, hashes only) whose
    storage is then freed from Python as FSDP frees one (``UntypedStorage.resize_(0)``: its
    digest is still its bytes'), and the QAT observer itself; the script's values the same
    bits as without the capture."""
    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder
    from tapescope.core.capture.file import DIGESTS

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    monkeypatch.setattr(Recorder, "async_hash", threaded)
    tq = pytest.importorskip("torch.ao.quantization")

    def script():
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(4, 3))
        opt = torch.optim.SGD([w], lr=0.1)
        fq = tq.get_default_qat_qconfig("x86").weight()  # per-channel, running_min empty
        empty = torch.tensor([])
        bf = torch.randn(5).bfloat16()
        base = torch.randn(4, 6)
        big = torch.randn(64, 1024)
        r = [empty + 1, bf * 2, base.t() * 1]
        big2 = big * 3  # (256 KiB: hashed on the thread, in place, when threaded)
        want = big2.clone().numpy().tobytes()  # (a copy: numpy() would make big2 not resizable)
        big2.untyped_storage().resize_(0)
        empty.resize_(4).fill_(1.0)
        bf.resize_(9)
        base.resize_(40)
        q = fq(w)  # the observer's buffers resized in its first call
        (q.sum() + w.square().sum()).backward()
        opt.step()
        return [w.detach().clone(), q.detach().clone(), empty.clone(), *r], want

    plain, _ = script()
    f = tmp_path / "r.capture"
    with capture(f, steps=1, hashes_only=threaded, digest="sha256" if threaded else "xxh3_128") \
            as rec:
        got, want = script()
    assert rec.failed is None and rec.error is None
    assert (rec.ops_native > 0) == (native and not threaded)  # (the thread's: the Python's)
    for a, b in zip(plain, got, strict=True):  # the recorder only reads
        assert torch.equal(a, b)
    assert "resize_" not in torch.UntypedStorage.__dict__  # (the guard taken away)
    cap = load(f)
    ops = cap.ops
    mul = next(i for i, op in enumerate(ops["op"]) if op == "aten.mul.Tensor"
               and ops["args"][i][1] == 3)
    assert cap.digests[ops["outputs"][mul][0]] == DIGESTS[cap.digest_algorithm][1](want)
    assert any(op == "aten._fused_moving_avg_obs_fq_helper.default" for op in ops["op"])


def _validating_script():
    """Train, then validate under ``torch.inference_mode`` after every step (eval mode: batch
    norm's running statistics, dropout off), as scripts do."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                              torch.nn.Dropout(0.2), torch.nn.Linear(32, 3))
    opt = torch.optim.SGD(net.parameters(), 0.1, momentum=0.9)
    g = torch.Generator().manual_seed(2)
    vx, vy = torch.randn(20, 10, generator=g), torch.randint(0, 3, (20,), generator=g)

    def run(steps: int) -> list:
        out = []
        for _ in range(steps):
            net.train()
            x, y = torch.randn(16, 10, generator=g), torch.randint(0, 3, (16,), generator=g)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            net.eval()
            with torch.inference_mode():
                val = torch.nn.functional.cross_entropy(net(vx), vy)
            out += [loss.detach().clone(), val.clone()]
        return out
    return run


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_validation_under_inference_mode_is_captured_and_the_script_runs_on(tmp_path,
                                                                           monkeypatch, native):
    """Validation under ``torch.inference_mode`` right after the last recorded step: the
    recorder left its mode there, and ``inference_mode``'s end put the mode's dispatch key
    back with no mode to take it: the script's next op failed ("Hit Python dispatch key but no
    arguments had PyInterpreter"). It now leaves at the next hook outside ``inference_mode``.
    Inside it, autograd's keys are off and the mode met ``batch_norm``, ``dropout``,
    ``linear``, ``cross_entropy_loss`` whole (CompositeImplicitAutograd: no reference form,
    6 ``no reference`` outputs): each is now run as its decomposition, its pieces recorded,
    every op judged."""
    def run() -> list:  # (the third step after the capture has ended; then an op of its own)
        out = _validating_script()(3)
        assert torch.randn(2).shape == (2,)  # the script's ops run on
        return out
    want, rec, cap = _same_bits_captured(run, tmp_path / "v.capture", 2, native, monkeypatch)
    names = set(cap.ops["op"])
    assert not names & {"aten.batch_norm.default", "aten.dropout.default", "aten.linear.default",
                        "aten.cross_entropy_loss.default"}, names
    assert "aten.native_batch_norm.default" in names or \
        "aten._native_batch_norm_legit_no_training.default" in names
    rep = judge(cap)
    assert rep["no_reference"] == [] and rep["counts"].get("unjudged", 0) == 0


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_lazy_module_made_inside_the_capture_is_captured(tmp_path, monkeypatch, native):
    """``nn.LazyConv2d`` / ``nn.LazyLinear`` made by their first forward inside the capture
    (``tapescope capture`` runs the whole script): the recorder read their parameters before
    they had memory (the initial parameters; ``materialize``'s ``self.data.device``, an
    ``aten.detach`` of the uninitialised parameter) and stopped: "Can't access the shape of an
    uninitialized parameter", nothing recorded. Those reads are passed over (the parameters
    are made by recorded ops: ``empty``, then their init), every step recorded and judged."""

    def run() -> list:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.LazyConv2d(4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.LazyLinear(3))
        g = torch.Generator().manual_seed(3)
        m(torch.randn(2, 2, 6, 6, generator=g))  # made
        opt = torch.optim.AdamW(m.parameters(), 1e-2)
        out = []
        for _ in range(2):
            x, y = torch.randn(4, 2, 6, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
            loss = torch.nn.functional.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.detach().clone())
        return out + [p.detach().clone() for p in m.parameters()]

    want, rec, cap = _same_bits_captured(run, tmp_path / "l.capture", 2, native, monkeypatch)
    rep = judge(cap)
    assert rep["no_reference"] == [] and rep["counts"].get("unjudged", 0) == 0
    assert [x["recorded"] for x in rep["losses"]] == [float(w) for w in want[:2]]


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_an_optimizer_stepped_inside_backward_is_a_step(tmp_path, monkeypatch, native):
    """The "optimizer step in backward" pattern (PyTorch's tutorial: one optimizer per
    parameter, stepped by its ``register_post_accumulate_grad_hook``): the first hook's
    ``step()`` ended the recorded step inside the backward, so "step 2" was the rest of that
    backward (no forward, no loss) and the capture stopped there. A step whose optimizers
    step inside backward now ends at the next forward, its optimizers' ops in the optimizer
    phase; both steps have a forward, a backward, a loss and every parameter's Adam."""

    def run() -> list:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        opts = {p: torch.optim.Adam([p], lr=1e-2) for p in net.parameters()}

        def hook(p: torch.Tensor) -> None:
            opts[p].step()
            opts[p].zero_grad()
        for p in net.parameters():
            p.register_post_accumulate_grad_hook(hook)
        g = torch.Generator().manual_seed(1)
        out = []
        for _ in range(3):
            x, y = torch.randn(5, 6, generator=g), torch.randint(0, 2, (5,), generator=g)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            out.append(loss.detach().clone())
        return out + [p.detach().clone() for p in net.parameters()]

    want, rec, cap = _same_bits_captured(run, tmp_path / "b.capture", 2, native, monkeypatch)
    rep = judge(cap)
    assert [x["recorded"] for x in rep["losses"]] == [float(w) for w in want[:2]]
    for s in (1, 2):
        phases = [e["phase"] for e in rep["ops"] if e["step"] == s]
        assert phases[0] == "forward" and {"forward", "backward", "optimizer"} <= set(phases)
        adam = [e for e in rep["ops"] if e["step"] == s and e["op"].startswith("aten.addcdiv")]
        assert len(adam) == 4 and all(e["phase"] == "optimizer" for e in adam)  # 4 parameters
    assert rep["no_reference"] == [] and rep["counts"].get("unjudged", 0) == 0


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_transformer_encoders_nested_fast_path_is_captured(tmp_path, monkeypatch, native):
    """``nn.TransformerEncoder`` evaluated under ``no_grad`` with a padding mask takes its fast
    path: ``_nested_tensor_from_mask``, ``_transformer_encoder_layer_fwd`` on a nested tensor,
    ``to_padded_tensor``. A nested tensor has no one shape, and the recorder stopped at the
    first ("NestedTensorImpl doesn't support sizes"): nothing after it recorded. It is now
    hashed by its components' sizes and bytes (an opaque ``nested`` value, as sparse ones are),
    the ops that make or read one ``unjudged`` saying so, every other op judged."""

    def run() -> list:
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)
        opt = torch.optim.SGD(enc.parameters(), 0.1)
        g = torch.Generator().manual_seed(2)
        pad = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])
        out = []
        for _ in range(2):
            enc.train()
            x = torch.randn(2, 6, 8, generator=g)
            loss = enc(x, src_key_padding_mask=pad)[:, 0].square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            enc.eval()
            with torch.no_grad():
                val = enc(x, src_key_padding_mask=pad)
            out += [loss.detach().clone(), val.clone()]
        return out

    want, rec, cap = _same_bits_captured(run, tmp_path / "n.capture", 2, native, monkeypatch)
    assert "aten._transformer_encoder_layer_fwd.default" in cap.ops["op"]
    assert "nested" in set(cap.opaque.values())
    rep = judge(cap)
    unj = [e for e in rep["ops"] if any(o["verdict"] == "unjudged" for o in e["outputs"])]
    assert unj and all("nested tensor" in e["reason"] for e in unj)
    assert {e["op"] for e in unj} <= {"aten._nested_tensor_from_mask.default",
                                      "aten._transformer_encoder_layer_fwd.default",
                                      "aten.to_padded_tensor.default"}


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_sams_two_passes_are_one_step(tmp_path, monkeypatch, native):
    """Sharpness-aware minimisation: forward, backward, the parameters moved by ``p.add_(e_w)``
    under ``no_grad`` (not an optimizer's ``step()``), forward and backward again, the moves
    undone and the base optimizer stepped. The moves looked like a script's own update (no
    torch.optim), so the step ended at the second forward: a capture of one step held half of
    SAM's. A parameter a torch.optim optimizer holds now ends its step at that ``step()``
    only (the optimizers found by the garbage collector, without a warning on stderr); a
    script without one still ends its steps at the next forward."""
    import warnings

    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)

    def run() -> list:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        base = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        out = []
        for _ in range(2):
            x, y = torch.randn(6, 5, generator=g), torch.randint(0, 2, (6,), generator=g)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            with torch.no_grad():
                n = torch.norm(torch.stack([p.grad.norm(2) for p in net.parameters()]))
                es = [p.grad * (0.05 / (n + 1e-12)) for p in net.parameters()]
                for p, e in zip(net.parameters(), es, strict=True):
                    p.add_(e)
            base.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            with torch.no_grad():
                for p, e in zip(net.parameters(), es, strict=True):
                    p.sub_(e)
            base.step()
            base.zero_grad()
            out.append(loss.detach().clone())
        return out + [p.detach().clone() for p in net.parameters()]

    class Sneaky:  # (as torch.distributed's deprecated ``reduce_op``: one of gc's objects
        @property  # that warns when its ``__class__`` is read)
        def __class__(self):  # noqa: ANN204
            warnings.warn("__class__ read", FutureWarning, stacklevel=2)
            return Sneaky
    sneaky = [Sneaky()]
    want = run()
    f = tmp_path / "s.capture"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with capture(f, steps=1) as rec:
            got = run()
    ours = os.path.dirname(os.path.dirname(recorder_native.__file__))  # (app/: the recorder's)
    assert not [w for w in seen if str(w.filename).startswith(ours)], [str(w) for w in seen]
    assert sneaky
    assert rec.failed is None and rec.error is None
    assert (rec.ops_native > 0) == native
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a, b)
    cap = load(f)
    assert cap.steps == 1
    rep = judge(cap)
    ops = [e for e in rep["ops"] if e["step"] == 1]
    assert sum(e["op"] == "aten.ones_like.default" for e in ops) == 2  # two backward passes
    assert any(e["phase"] == "optimizer" and e["op"].startswith("aten.add_") for e in ops)
    assert rep["losses"][0]["recorded"] in (float(want[0]),) or \
        float(want[0]) in [c["recorded"] for c in rep["losses"][0]["calls"]]


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_model_traced_inside_the_capture_is_traced_as_without_it(tmp_path, monkeypatch,
                                                                   native):
    """``torch.jit.trace`` under any Python dispatch mode fails or bakes the example's sizes
    into the graph: a model traced on a (1, 2, 10) example inside the capture then ran every
    batch as one example ("Expected input batch_size (1) to match target batch_size (4)");
    ``torch.export`` / ``torch.onnx.export`` of a checkpoint mid-training stopped the recording
    at their fake tensors. They now run with the modes off (their runs unrecorded, counted in
    ``meta["traced"]``); the traced module's training is recorded and judged (both steps), and
    the entry points are torch's own again after the block. ``--explain`` names the traced
    graph's ``_convolution`` as ``convolution``'s."""
    from tapescope.app.capture import capture, recorder_native
    from tapescope.app.capture.recorder import Recorder

    if native and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", native)
    orig = torch.jit.trace

    def run() -> list:
        torch.manual_seed(0)
        core = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3, padding=1), torch.nn.Tanh(),
                                   torch.nn.Flatten(), torch.nn.Linear(40, 2))
        traced = torch.jit.trace(core, torch.randn(1, 2, 10))
        opt = torch.optim.Adam(traced.parameters(), 1e-2)
        g = torch.Generator().manual_seed(3)
        out = []
        for _ in range(2):
            x, y = torch.randn(4, 2, 10, generator=g), torch.randint(0, 2, (4,), generator=g)
            loss = torch.nn.functional.cross_entropy(traced(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.detach().clone())
            if len(out) == 1:  # a checkpoint exported mid-training (its fake tensors)
                torch.export.export(core, (torch.randn(3, 2, 10),))
                torch.onnx.export(core, (torch.randn(3, 2, 10),), io.BytesIO(), dynamo=False)
        return out

    want = run()
    f = tmp_path / "t.capture"
    with capture(f, steps=2) as rec:
        got = run()
    assert torch.jit.trace is orig
    assert rec.failed is None and rec.error is None
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a, b)
    cap = load(f)
    assert cap.meta.get("traced") == {"jit.trace": 1, "export.export": 1, "onnx.export": 1}
    rep = judge(cap, explain=True)
    convs = [e for e in rep["ops"] if e["op"] == "aten._convolution.default"]
    assert len(convs) == 2  # one forward a step, through the traced graph
    assert rep["no_reference"] == []
    assert not [i for i in rep["introduced"] if i["cause"] == "unknown"], \
        [i for i in rep["introduced"] if i["cause"] == "unknown"]



def test_two_live_models_of_one_class_have_two_names(tmp_path, monkeypatch):
    """Distillation: a teacher and a student, both ``nn.Sequential``, were both named
    ``Sequential``: their ops under one module and their initial parameters under the same
    names (``Sequential.0.weight`` twice). The second live root of a class is now
    ``Sequential#2``; a loss module made afresh each step keeps one name (the dead one's
    slot)."""
    def run() -> list:
        torch.manual_seed(0)
        teacher = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(),
                                      torch.nn.Linear(6, 3)).eval()
        student = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU(),
                                      torch.nn.Linear(2, 3))
        opt = torch.optim.SGD(student.parameters(), 0.1)
        g = torch.Generator().manual_seed(1)
        out = []
        for _ in range(2):
            x = torch.randn(5, 4, generator=g)
            with torch.no_grad():
                t = teacher(x).softmax(-1)
            loss = torch.nn.KLDivLoss(reduction="batchmean")(student(x).log_softmax(-1), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.detach().clone())
        return out

    _, _, cap = _same_bits_captured(run, tmp_path / "d.capture", 2, False, monkeypatch)
    names = [n for n, _ in cap.initial["params"]]
    assert len(names) == len(set(names)) == 8, names
    assert {n.split(".")[0] for n in names} == {"Sequential", "Sequential#2"}
    roots = {m.split(".")[0] for m in cap.ops["module"] if m}
    assert roots == {"Sequential", "Sequential#2", "KLDivLoss"}, roots
    for s in (1, 2):  # the student's forward ops under its own name, every step
        mods = {m for m, st in zip(cap.ops["module"], cap.ops["step"], strict=True) if st == s}
        assert "Sequential#2.0" in mods and "KLDivLoss" in mods


def test_a_checkpoint_loaded_mid_capture_is_the_steps_data(tmp_path, monkeypatch):
    """``torch.load`` (and a DataLoader worker's batch in shared memory) makes each tensor by
    ``set_`` over a storage whose bytes C++ wrote (the file's): the judge called those ops
    ``unjudged`` ("input value ... is uninitialised memory"), 17 in a script that saved and
    restored its model, optimizer, schedule and RNG after step 1. They are ``recorded`` now,
    a tensor over a storage, as a step's data is; the restored state's ops judged."""
    from tapescope.core.capture.judge import judge

    def run() -> list:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
        opt = torch.optim.Adam(net.parameters(), 1e-2)
        g = torch.Generator().manual_seed(1)
        out = []
        for i in range(2):
            x, y = torch.randn(5, 4, generator=g), torch.randint(0, 2, (5,), generator=g)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.detach().clone())
            if i == 0:
                buf = io.BytesIO()
                torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, buf)
                buf.seek(0)
                ck = torch.load(buf, weights_only=True)
                net.load_state_dict(ck["model"])
                opt.load_state_dict(ck["opt"])
        return out

    _, _, cap = _same_bits_captured(run, tmp_path / "k.capture", 2, False, monkeypatch)
    rep = judge(cap)
    sets = [e for e in rep["ops"] if e["op"].startswith("aten.set_.source_Storage")]
    assert len(sets) >= 8  # (4 parameters, Adam's moments, its steps)
    assert all(o["verdict"] == "recorded" for e in sets for o in e["outputs"])
    assert all("a tensor over a storage" in e["reason"] for e in sets)
    assert all(cap.arrays[o["value"]] is not None for e in sets for o in e["outputs"])
    assert rep["counts"].get("unjudged", 0) == 0 and rep["no_reference"] == []


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_model_ensembled_with_a_meta_template_is_judged(tmp_path, monkeypatch, native):
    """``torch.func``'s ensembling recipe: ``stack_module_state`` of three models and a copy
    moved to the meta device as ``functional_call``'s template, run under ``vmap``. The copy's
    ``_to_copy`` outputs are meta tensors (a shape, no data): they were ``unjudged`` ("a
    tensor numpy cannot read"); they are ``recorded`` now (an opaque ``meta`` value), every
    other op judged. Planted (meta read as unreadable): fails."""
    import copy

    from torch.func import functional_call, stack_module_state, vmap

    def run() -> list:
        torch.manual_seed(0)
        models = [torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(),
                                      torch.nn.Linear(8, 1)) for _ in range(3)]
        params, buffers = stack_module_state(models)
        base = copy.deepcopy(models[0]).to("meta")
        opt = torch.optim.Adam(list(params.values()), lr=1e-2)
        g = torch.Generator().manual_seed(3)
        out = []
        for _ in range(2):
            x, y = torch.randn(7, 5, generator=g), torch.randn(7, 1, generator=g)
            pred = vmap(lambda p, b, v: functional_call(base, (p, b), (v,)),
                        in_dims=(0, 0, None))(params, buffers, x)
            loss = ((pred - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.detach().clone())
        return out

    _, _, cap = _same_bits_captured(run, tmp_path / "e.capture", 2, native, monkeypatch)
    assert "meta" in set(cap.opaque.values())
    rep = judge(cap)
    assert rep["counts"].get("unjudged", 0) == 0 and rep["no_reference"] == []
    metas = [e for e in rep["ops"] if e.get("reason", "").startswith("a meta tensor")]
    assert len(metas) == 4  # (the two Linears' weight and bias)
    assert all(o["verdict"] == "recorded" for e in metas for o in e["outputs"])


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_forward_mode_ad_zero_tangents_are_zeros_not_the_heap(tmp_path, monkeypatch, native):
    """Forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``) makes zero tangents
    as ZeroTensors (``_efficientzerotensor``): zeros whose memory is never written. The
    recorder read that memory: the heap's bytes went into the file (6.6e28, 3.1e-41 ...) and
    every such op was ``no reference``. A ZeroTensor is recorded as the zeros it is, and the
    factory judged (exact). Planted (the memory read): fails."""
    import torch.autograd.forward_ad as fwAD

    def run() -> list:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        out = []
        for _ in range(2):
            x, v = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
            with fwAD.dual_level():
                y = net(fwAD.make_dual(x, v))
                tangent = fwAD.unpack_dual(y).tangent
            loss = y.pow(2).mean() + 0.1 * tangent.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.detach().clone())
        return out

    _, _, cap = _same_bits_captured(run, tmp_path / "z.capture", 2, native, monkeypatch)
    zeros = [i for i, op in enumerate(cap.ops["op"]) if op == "aten._efficientzerotensor.default"]
    assert zeros
    for i in zeros:
        (v,) = cap.ops["outputs"][i]
        assert cap.arrays[v] is not None and not np.any(cap.arrays[v])
    rep = judge(cap)
    by_op = {e["index"]: e for e in rep["ops"]}
    assert all(o["verdict"] == "exact" for i in zeros for o in by_op[i]["outputs"])
    assert rep["no_reference"] == [] and rep["counts"].get("unjudged", 0) == 0


class _Counting(torch.Tensor):
    """A ``__torch_dispatch__`` wrapper subclass (``_make_wrapper_subclass``: no memory of its
    own) that counts the ops it sees, as a user's logging tensor would."""

    calls = 0

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(),
                                                   dtype=elem.dtype, device=elem.device,
                                                   requires_grad=elem.requires_grad)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        _Counting.calls += 1
        out = func(*tree_map(lambda t: t.elem if isinstance(t, _Counting) else t, args),
                   **tree_map(lambda t: t.elem if isinstance(t, _Counting) else t, kwargs or {}))
        return tree_map(lambda t: _Counting(t) if isinstance(t, torch.Tensor) else t, out)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_wrapper_subclass_is_neither_read_nor_run_on(tmp_path, monkeypatch, native):
    """A tensor subclass with no memory of its own (a user's logging tensor through the
    model): the recorder read its data pointer of 0 and stored the heap's bytes as its values
    (every op then ``introduced`` by millions of ulps), took two such tensors for the same
    bytes, and its reads ran ops the subclass saw. Now such a value is an opaque ``subclass``
    (its type's name, dtype and shape hashed), nothing is run on it (the subclass's own count of
    ops is the same with and without the capture), and its ops are ``unjudged``, saying why.
    Planted (its memory read; detach run on it): fails."""
    def run() -> list:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(2)
        _Counting.calls = 0
        out = []
        for _ in range(2):
            x = _Counting(torch.randn(6, 4, generator=g))
            y = torch.randint(0, 2, (6,), generator=g)
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out += [loss.elem.detach().clone(), torch.tensor(float(_Counting.calls))]
        return out

    _, _, cap = _same_bits_captured(run, tmp_path / "w.capture", 2, native, monkeypatch)
    sub = [v for v, k in cap.opaque.items() if k == "subclass"]
    assert sub and all(cap.arrays[v] is None for v in sub)
    rep = judge(cap)
    assert rep["counts"].get("introduced", 0) == 0  # (no verdict on the heap's bytes)
    unj = [e for e in rep["ops"] if any(o["verdict"] == "unjudged" for o in e["outputs"])]
    assert unj and all("subclass with no memory of its own" in e["reason"] for e in unj)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_fsdp2_on_one_rank_is_captured_not_crashed(tmp_path, monkeypatch, native):
    """FSDP2 (``fully_shard``) makes its parameters ``DTensor``s: a ``__torch_dispatch__``
    subclass whose data pointer is no memory's (288 here). The recorder read 288 as an
    address: the script died with SIGSEGV under the capture. Such values are opaque now
    (``subclass``), the script runs on with the same losses, and the capture is written and
    judged. Planted (the subclass test by a 0 pointer only): the script crashes."""
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("this torch has no gloo backend (torch.distributed.is_gloo_available())")
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)")

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        def run() -> list:
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(),
                                      torch.nn.Linear(12, 3))
            fully_shard(net[0])
            fully_shard(net)
            opt = torch.optim.Adam(net.parameters(), lr=1e-2)
            g = torch.Generator().manual_seed(1)
            out = []
            for _ in range(2):
                x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                out.append(loss.detach().clone())
            return out

        _, _, cap = _same_bits_captured(run, tmp_path / "f.capture", 2, native, monkeypatch)
    finally:
        dist.destroy_process_group()
    assert "subclass" in set(cap.opaque.values())
    rep = judge(cap)
    assert rep["counts"].get("exact", 0) > 0


def test_a_scripts_torch_function_mode_sees_none_of_the_recorders_reads(tmp_path,
                                                                       recorder_path):
    """A script's own ``TorchFunctionMode`` around its loop (a counter of torch calls) counted
    12 calls more under the capture: the recorder's reads in its module and optimizer hooks
    (the initial parameters, the optimizer's state) went through the mode. Session 46."""
    from torch.overrides import TorchFunctionMode

    from tapescope.app.capture import capture

    class Count(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    def run() -> tuple[int, list[float]]:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        opt = torch.optim.Adam(m.parameters(), lr=0.1)
        losses = []
        with Count() as c:
            for _ in range(2):
                x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
                loss = torch.nn.functional.cross_entropy(m(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return c.n, losses

    plain = run()
    with capture(tmp_path / "f.capture", steps=2) as rec:
        got = run()
    assert rec.steps_done() == 2
    assert got == plain
