"""The recorder's per-op path in C (app/capture/recorder_hot.c) against its Python: the same
capture byte for byte (the zoo's scripts, values and hashes only; a step of every argument
kind the C path reads), the same failure, the script's losses the same bits; and the C path ran
(``Recorder.ops_native``), so that an equal file is no accident of both running the Python."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture, recorder_native  # noqa: E402
from tapescope.app.capture import recorder as R  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ZOO = Path(__file__).resolve().parent / "zoo"
# NOTE: two runs of one path are made byte-identical with deterministic algorithms (torch then
# fills ``empty``'s memory): none of a zoo capture's values holds the heap's garbage any more (an
# ``empty``'s output and a ``Parameter(torch.empty(...))`` first met by ``uniform_`` or ``fill_``
# are sentinels: test_capture_uninitialised.py), but the switch keeps any other uninitialised
# read of the scripts' out of this comparison; one thread: no reduction split by the load
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0", OMP_NUM_THREADS="1",
           MKL_NUM_THREADS="1")
ENV.pop("TAPESCOPE_NO_NATIVE", None)


def _parts(path: Path) -> tuple[bytes, dict]:
    """A capture file's bytes before its header, and its header (the recording's seconds out:
    the one field that differs between two runs)."""
    b = path.read_bytes()
    _, off, n, _ = struct.unpack("<8sQQ32s", b[-56:])
    header = json.loads(b[off:off + n])
    header["meta"].pop("record_seconds")
    return b[:off], header


# the zoo run in-process under ``capture`` (C path on or off), its output and the C path's op
# count printed after the script's own
_CHILD = """
import runpy, sys
from tapescope.app.capture import capture
from tapescope.app.capture.recorder import Recorder
Recorder.native = sys.argv[1] == "on"
import torch
torch.use_deterministic_algorithms(True)  # (and torch.empty's memory filled: see ENV)
script, out, hashes_only = sys.argv[2], sys.argv[3], sys.argv[4] == "h"
sys.argv = [script]
with capture(out, steps=2, hashes_only=hashes_only) as rec:
    runpy.run_path(script, run_name="__main__")
print("ops_native", rec.ops_native, len(rec.rows))
"""


# each zoo script once, each mode on two of them (values: the spool's writes from the tensor's
# memory; hashes only: the digests where they lie, the derived views): ~9 s of two children
# each, so not the whole product of the two lists
@pytest.mark.parametrize(("script", "mode"), [("gpt.py", "v"), ("unet.py", "v"),
                                              ("cnn.py", "h"), ("lstm.py", "h")])
def test_the_zoo_captures_the_same_bytes_on_both_paths(hot, tmp_path, script, mode):
    runs = {}
    for path in ("on", "off"):
        out = tmp_path / f"{path}.capture"
        p = subprocess.run([sys.executable, "-c", _CHILD, path, str(ZOO / script), str(out),
                            mode], capture_output=True, text=True, timeout=600, env=ENV,
                           cwd=str(ZOO))
        assert p.returncode == 0, p.stderr[-3000:]
        *printed, last = p.stdout.strip().splitlines()
        _, n_native, n_rows = last.split()
        runs[path] = (printed, int(n_native), int(n_rows), _parts(out))
    assert runs["on"][1] > runs["on"][2] // 2  # most ops whole in C ...
    assert runs["off"][1] == 0  # ... and none with it off
    assert runs["on"][0] == runs["off"][0]  # the script's own output (its losses)
    assert runs["on"][3][0] == runs["off"][3][0]  # the values' bytes
    assert runs["on"][3][1] == runs["off"][3][1]  # every op, value, digest, source, module
    assert runs["on"][3][1]["meta"]["values"] > 0


def _kinds_step():
    """A step that passes the C path every argument kind it reads: ints, bools, None, str,
    finite and infinite floats, lists of ints, a tuple with tensors (``cat``), kwargs (a
    tensor among them), float16/int64/bool tensors, a zero-size tensor (no data pointer), an
    inference tensor (no version counter), a tensor subclass, a transpose (not contiguous), a
    view of the same bytes, values that are not contiguous (gathered), in-place writes, a
    backward and an optimizer step."""
    torch.manual_seed(0)

    class Sub(torch.Tensor):
        pass

    lin = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    with torch.inference_mode():
        frozen = torch.ones(4, 8)

    def step() -> float:
        x = torch.randn(4, 8)
        h = lin(x).relu()
        y = torch.cat((h, x.t().contiguous().t()), dim=1).view(4, 2, 8)
        z = y.transpose(0, 2).sum(dim=[0, 1], keepdim=False)
        c = torch.clamp(z, min=-float("inf"), max=1e3)
        m = torch.where(c > 0, c, torch.zeros_like(c))
        e = torch.empty(0).sum() + torch.tensor([1, 2], dtype=torch.int64).sum()
        w = torch.full((3,), 2.0, dtype=torch.float16).to(torch.float32).sum()
        flags = (torch.arange(6) > 2).sum()
        s = torch.randn(2).as_subclass(Sub).sum().as_subclass(torch.Tensor)
        f = torch.add(frozen.clone().sum(), 1.0, alpha=2)
        buf = torch.empty(4, 8)
        torch.mul(x, 2.0, out=buf)  # (a write through a kwarg-only argument)
        g = torch.nn.functional.gelu(h, approximate="tanh").mean()
        # values that are not contiguous, gathered in C order (recorder_hot.c ``gathered``):
        # a row's elements adjacent or not, 8-, 4-, 2- and 1-byte items, a stride of 0
        odd = (x.double()[:, 1::3].sum() + x[:, ::3].sum() + x.unsqueeze(2).expand(4, 8, 3)
               [:, ::2].sum() + torch.arange(12, dtype=torch.int16).view(3, 4).t().sum()
               + (x.t() > 0)[1:, ::2].sum() + h[1:3, 2:7].t().sum())
        loss = m.sum() + e + w + flags + s + f + g + buf.sum() + odd
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def _record(native: bool, hashes_only: bool, tmp_path: Path, step=None,
            max_bytes: int = 1 << 30) -> tuple:
    R.Recorder.native = native
    try:
        step = step or _kinds_step()
        out = tmp_path / f"{native}-{hashes_only}.capture"
        with capture(out, steps=2, hashes_only=hashes_only, max_bytes=max_bytes) as rec:
            losses = [step() for _ in range(3)]
    finally:
        R.Recorder.native = True
    return losses, rec, _parts(out)


@pytest.mark.parametrize("hashes_only,max_bytes", [(False, 1 << 30), (True, 1 << 30),
                                                   (False, 1500)])
def test_every_argument_kind_records_the_same_on_both_paths(hot, tmp_path, hashes_only,
                                                            max_bytes):
    """(1500 bytes: the budget runs out within the first step: values stored, then hashed)"""
    on = _record(True, hashes_only, tmp_path, max_bytes=max_bytes)
    off = _record(False, hashes_only, tmp_path, max_bytes=max_bytes)
    if max_bytes < 2000:
        meta = on[2][1]["meta"]
        assert 0 < meta["stored_bytes"] <= max_bytes and meta["values_hashed"] > 0
    assert on[1].ops_native > 0 and off[1].ops_native == 0
    assert np.array(on[0]).tobytes() == np.array(off[0]).tobytes()  # the losses' bits
    assert on[2] == off[2]


def test_the_same_failure_on_both_paths(hot, tmp_path):
    """A digest that fails inside the C path stops recording as the Python's does: the same
    ``failed``, the complete steps before it kept, the script untouched."""
    def run(native: bool) -> tuple:
        R.Recorder.native = native
        step = _kinds_step()
        calls = [0]

        def hexdigest(b):  # the 40th digest fails
            calls[0] += 1
            if calls[0] == 40:
                raise ValueError("planted")
            return R.DIGESTS["xxh3_128"][1](b)
        try:
            rec = R.Recorder(steps=2, hashes_only=True)
            rec._hex = hexdigest
            rec.start()
            try:
                losses = [step() for _ in range(2)]
            finally:
                rec.stop()
        finally:
            R.Recorder.native = True
        return losses, rec.failed, len(rec.rows), rec.v_sha
    on, off = run(True), run(False)
    assert on[1] is not None and "planted" in on[1]
    assert on == off


def test_a_replaced_method_turns_the_c_path_off(hot, monkeypatch):
    """A method the C path stands in for, replaced (a test's spy, a subclass's override), is
    called: the recorder stays Python."""
    seen = []
    made = R.Recorder._made

    def spy(self, t, written=False):
        seen.append(1)
        return made(self, t, written)
    monkeypatch.setattr(R.Recorder, "_made", spy)
    rec = R.Recorder(steps=1).start()
    try:
        for _ in range(2):
            torch.ones(3).mul(2)
        assert rec._hot is None
    finally:
        rec.stop()
    assert seen
    monkeypatch.undo()
    rec = R.Recorder(steps=1).start()
    try:
        for _ in range(2):  # (an op met the first time too: its facts from ``_op``, then C)
            torch.ones(3).mul(2)
        assert rec._hot is not None
    finally:
        rec.stop()
    assert rec.ops_native == 4


def test_a_large_step_records_the_same_on_both_paths(hot, tmp_path):
    """The benchmark's gpt-wide (issue 42's target), hashes only: every value hashed where it
    lies, views derived, the optimizer's in-place writes."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_capture
    finally:
        sys.path.pop(0)
    on = _record(True, True, tmp_path, bench_capture.MODELS["gpt-wide"]())
    off = _record(False, True, tmp_path, bench_capture.MODELS["gpt-wide"]())
    assert on[1].ops_native > len(on[1].rows) // 2
    assert on[0] == off[0] and on[2] == off[2]


def test_the_cli_builds_the_c_path_and_the_script_runs_on_it(tmp_path):
    """``tapescope capture`` builds the C path in its own process before it starts the script
    (an empty kernel cache: nothing built yet), and the script's recorder runs on it (the
    script itself reads the dispatch mode in force: a Recorder with its C path set); without
    gcc or where TAPESCOPE_NO_NATIVE is set, skipped (the Python path, tested above)."""
    if os.environ.get("TAPESCOPE_NO_NATIVE"):
        pytest.skip("TAPESCOPE_NO_NATIVE: the recorder's Python path alone")
    if recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    cache = tmp_path / "cache"
    cache.mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as modes\n"
        "w = torch.nn.Parameter(torch.ones(4))\n"
        "opt = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(2):\n"
        "    (w * w).sum().backward()\n"
        "    print('hot', [getattr(m, '_hot', None) is not None for m in modes()])\n"
        "    opt.step()\n")
    env = dict(ENV, TAPESCOPE_CACHE_DIR=str(cache))
    out = tmp_path / "t.capture"
    r = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "capture", "--out", str(out),
                        "--", sys.executable, str(script)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    built = [f for _, _, fs in os.walk(cache) for f in fs if f.startswith("recorder-hot-")]
    assert built, "the CLI did not build the recorder's C path"
    assert "hot [True]" in r.stdout, r.stdout
    assert out.is_file()
