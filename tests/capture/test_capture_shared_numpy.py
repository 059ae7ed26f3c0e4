"""Memory a script shares with numpy (app/capture/shared_np.py): a batch buffer refilled
through numpy between steps and a weight edited through ``p.numpy()`` are written with no aten
op and no version counter moving. The recorder had the values from before the writes, and the
judge called the transpose of the edited weight ``introduced``; now every op over such memory
reads it afresh where its bytes changed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.core.capture.file import load  # noqa: E402
from tapescope.core.capture.judge import judge  # noqa: E402


def _loop(steps: int = 2) -> tuple[list[float], list[np.ndarray]]:
    """A user's loop: the batch in a numpy buffer the model reads through ``from_numpy``,
    refilled each step; the first weight row halved through ``.numpy()`` after each step."""
    torch.manual_seed(0)
    m = torch.nn.Linear(5, 3)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    buf = np.zeros((4, 5), np.float32)
    xb = torch.from_numpy(buf)
    rng = np.random.default_rng(2)
    losses, batches = [], []
    for _ in range(steps):
        buf[:] = rng.standard_normal((4, 5))
        batches.append(buf.copy())
        loss = torch.nn.functional.mse_loss(m(xb), torch.ones(4, 3))
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            m.weight.numpy()[0, :] *= 0.5
        losses.append(loss.item())
    return losses, batches


def test_numpy_writes_are_read_afresh_and_no_op_is_blamed_for_them(tmp_path, recorder_path):
    plain, _ = _loop()
    f = tmp_path / "np.capture"
    with capture(f, steps=2) as rec:
        got, batches = _loop()
    assert got == plain  # (the script's own output: the same bits)
    assert (rec.ops_native > 0) == recorder_path
    cap = load(f)
    assert cap.meta["outside_writes"] >= 2  # (the refilled batch, the edited weight)
    ops = cap.ops
    mms = [i for i, op in enumerate(ops["op"]) if op == "aten.addmm.default"
           and ops["phase"][i] == "forward"]
    assert len(mms) == 2
    for i, want in zip(mms, batches, strict=True):  # each step's product read its own batch
        assert np.array_equal(cap.arrays[ops["args"][i][1]["T"]], want)
    rep = judge(cap)
    blamed = [(e["op"], e["step"]) for e in rep["ops"] if e["op"] in ("aten.t.default",
                                                                     "aten.view.default")
              and any(o["verdict"] == "introduced" for o in e["outputs"])]
    assert blamed == []
    assert rep["counts"].get("unjudged", 0) == 0


def test_hashed_values_are_compared_by_their_digest(tmp_path, recorder_path):
    f = tmp_path / "np.capture"
    with capture(f, steps=2, hashes_only=True):
        _loop()
    cap = load(f)
    ops = cap.ops
    mms = [i for i, op in enumerate(ops["op"]) if op == "aten.addmm.default"
           and ops["phase"][i] == "forward"]
    x1, x2 = (ops["args"][i][1]["T"] for i in mms)
    assert x1 != x2 and cap.digests[x1] != cap.digests[x2]
    assert cap.meta["outside_writes"] >= 2


def test_the_wrappers_return_torchs_own_results_and_go_with_the_capture(tmp_path):
    orig_from, orig_as = torch.from_numpy, torch.as_tensor
    assert "numpy" not in torch.Tensor.__dict__
    a = np.arange(6, dtype=np.float32)
    with capture(tmp_path / "w.capture", steps=1) as rec:
        assert torch.from_numpy is not orig_from
        t = torch.from_numpy(a)
        assert t.data_ptr() == a.ctypes.data  # (shared, as torch's own)
        assert rec._np_watch
        c = torch.as_tensor(a, dtype=torch.float64)  # a copy: not watched
        n_watch = sum(rec._np_watch.values())
        del c
        p = torch.nn.Parameter(torch.ones(3))
        v = p.detach().numpy()  # (a detached alias: its memory is p's)
        assert v.ctypes.data == p.data_ptr() and sum(rec._np_watch.values()) == n_watch + 1
        p.sum().backward()
        torch.optim.SGD([p], lr=0.1).step()
    assert torch.from_numpy is orig_from and torch.as_tensor is orig_as
    assert "numpy" not in torch.Tensor.__dict__
    assert torch.from_numpy(a).data_ptr() == a.ctypes.data


def test_arrays_a_script_drops_leave_nothing_watched_for_long(tmp_path, recorder_path):
    """``out.detach().numpy()`` each step (a metric): watched until its memory is read again
    or no tensor over it is left (swept at each step's end), not for the rest of the run
    (every op taking the slow path)."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sizes = []
    with capture(tmp_path / "m.capture", steps=3) as rec:
        for _ in range(3):
            out = m(torch.randn(5, 4))
            out.detach().numpy().argmax(1)  # (the array and the detached tensor die here)
            with torch.no_grad():
                m(torch.randn(2, 4)).numpy().sum()  # (memory no op reads again: swept)
            out.sum().backward()
            opt.step()
            opt.zero_grad()
            del out
            sizes.append(len(rec._np_watch))
    assert max(sizes) <= 1, sizes  # (no sweep: 1, 2, 3)



def test_torchs_warnings_through_a_wrapper_are_the_callers():
    """``torch.from_numpy`` of a read-only array warns from C++ at the innermost Python frame:
    under the capture that was the wrapper's (app/capture/shared_np.py), so the warning named
    our file and a script's filter by module missed it (a script's stderr differed). The
    wrapper's call now shows a C function's warnings at its caller's line, through the
    caller's filters (numpy's division by zero stands in for torch's once-a-process one)."""
    import warnings

    from tapescope.app.capture.shared_np import _call

    def wrapper(*args):  # (as the wrappers call it: one frame between the caller and _call)
        return _call(np.divide, args, {})

    with warnings.catch_warnings(record=True) as got, np.errstate(divide="warn"):
        warnings.simplefilter("always")
        wrapper(np.float32(1), np.float32(0)); line = sys._getframe().f_lineno  # noqa: E702
    assert [(w.category, w.filename, w.lineno) for w in got] == [(RuntimeWarning, __file__,
                                                                   line)]
    with warnings.catch_warnings(), np.errstate(divide="warn"):
        warnings.simplefilter("error")  # (the caller's filters: an error raises from the call)
        with pytest.raises(RuntimeWarning):
            wrapper(np.float32(1), np.float32(0))


def test_from_numpy_of_a_read_only_array_warns_at_the_scripts_line(tmp_path):
    """The same through the real wrapper, in a fresh process (torch gives that warning once a
    process): the warning names the script's line, not app/capture/shared_np.py."""
    import subprocess

    code = ("import numpy as np, torch\n"
            "from tapescope.app.capture import capture\n"
            "ro = np.ones(3, np.float32); ro.setflags(write=False)\n"
            f"with capture({str(tmp_path / 'r.capture')!r}, steps=1):\n"
            "    t = torch.from_numpy(ro)\n"
            "    lin = torch.nn.Linear(3, 1); lin(t[None]).sum().backward()\n"
            "    torch.optim.SGD(lin.parameters(), lr=0.1).step()\n")
    script = tmp_path / "ro.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "not writable" in ln]
    assert len(lines) == 1 and lines[0].startswith(f"{script}:5: UserWarning"), r.stderr


def test_the_recorders_own_reads_are_not_watched(tmp_path, recorder_path, monkeypatch):
    """The recorder's copy of a large non-contiguous value goes through ``numpy()`` (its
    C-order copy, ``_c_order``): through the wrapper it watched its own copy, and every op
    after took the slow path for the rest of the step."""
    from tapescope.app.capture import recorder as R

    monkeypatch.setattr(R, "_NUMPY_COPY_MAX", 1)  # (that path for every non-contiguous value)
    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    with capture(tmp_path / "o.capture", steps=1) as rec:
        x = torch.randn(4, 8).t()  # (a transposed input: not contiguous)
        lin(torch.tanh(x)).sum().backward()
        watched = dict(rec._np_watch)
        opt.step()
    assert watched == {}
