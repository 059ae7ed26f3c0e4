"""A capture block's recorder, and the values it stored, are freed when the block's last user
reference goes, not at some later full garbage collection: the wrapped ``torch.compile`` (a
closure that names itself) and the backends of models compiled inside the block reach the
recorder only while the block runs."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import capture  # noqa: E402


def _captured(path, compile_model: bool) -> tuple[weakref.ref, object]:
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with capture(path, steps=1) as rec:
        model = torch.compile(m, backend="eager") if compile_model else m
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    assert rec.steps_done() == 1 and rec.stored_bytes > 0
    return weakref.ref(rec), model


@pytest.mark.parametrize("compile_model", [False, True])
def test_the_recorder_dies_with_its_last_reference(tmp_path, compile_model):
    # once before: the first optimizer a process makes leaves a frame of its own in a cycle
    # (torch's lazy imports), and with it the caller's frame: not the recorder's doing
    _captured(tmp_path / "warm.capture", compile_model)
    gc.collect()
    gc.disable()  # only reference counting: a cycle through the recorder would keep it
    try:
        ref, model = _captured(tmp_path / "a.capture", compile_model)
        assert ref() is None
        # the compiled model outlives the block and still runs (its backend finds no recorder)
        assert model(torch.ones(2, 8)).shape == (2, 8)
    finally:
        gc.enable()
    assert (tmp_path / "a.capture").stat().st_size > 0
