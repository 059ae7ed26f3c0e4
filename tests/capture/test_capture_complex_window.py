"""A complex output in the capture window (a Llama's rotary embeddings in complex numbers:
``polar``, ``view_as_complex``, a complex ``mul``): the Inspector's ulp map is of its real and
imaginary parts side by side (it said "no float output with a reference"), and its line says
so; a difference in one part lights that part's pixel only."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("PySide6")

from tapescope.app.capture import capture  # noqa: E402
from tapescope.core.capture.file import load  # noqa: E402
from tapescope.core.capture.judge import judge, reference_available  # noqa: E402


def test_a_complex_ulp_map_is_its_parts_side_by_side(qtbot):
    from tapescope.app.qt.capture_window import ulp_image
    from tapescope.core.parity import complex_parts

    ref = (np.arange(12, dtype=np.float32) + 1j * np.arange(12, dtype=np.float32) / 3
           ).astype(np.complex64).reshape(3, 4)
    rec = ref.copy()
    rec[1, 2] = rec[1, 2].real + 1j * np.nextafter(rec[1, 2].imag, np.float32(np.inf))
    parts = complex_parts(rec)
    assert parts.shape == (3, 8) and parts[1, 5] == rec[1, 2].imag  # (re, im interleaved)
    pix, line = ulp_image(ref, rec)
    assert not pix.isNull() and "complex" in line
    img = pix.toImage()
    sx, sy = img.width() // 8, img.height() // 3  # (one element a block of pixels)
    col = {(r, c): img.pixelColor(c * sx + sx // 2, r * sy + sy // 2).name()
           for r in range(3) for c in range(8)}
    lit = {k for k, v in col.items() if v != col[(0, 0)]}
    assert lit == {(1, 5)}, lit  # (the imaginary part of element [1, 2]; its real part not)
    # a 0-d complex output has a map of two pixels
    pix0, _ = ulp_image(np.complex128(1 + 2j).reshape(()), np.complex128(1 + 2j).reshape(()))
    assert not pix0.isNull()
    # complex against another dtype: no map (nothing to compare element by element)
    assert ulp_image(ref.real.copy(), rec) is None


def _rotary_step():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    freqs = torch.polar(torch.ones(5, 4), torch.arange(20.0).reshape(5, 4) * 0.37)

    def step() -> float:
        x = lin(torch.randn(5, 8))
        xc = torch.view_as_complex(x.reshape(5, 4, 2))
        y = torch.view_as_real(xc * freqs).reshape(5, 8)
        loss = y.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


@pytest.mark.skipif(not reference_available(), reason="core.capture.aten_ref is not there")
def test_selecting_a_complex_op_shows_its_ulp_map(tmp_path, qtbot):
    from PySide6.QtCore import Qt

    from tapescope.app.qt.capture_window import _OP, CaptureWindow

    f = tmp_path / "rotary.capture"
    step = _rotary_step()
    with capture(f, steps=1):
        step()
    cap = load(f)
    win = CaptureWindow(cap, judge(cap))
    qtbot.addWidget(win)
    mul = next(e["index"] for e in win.rep["ops"] if e["op"] == "aten.mul.Tensor"
               and cap.arrays[e["outputs"][0]["value"]] is not None
               and cap.arrays[e["outputs"][0]["value"]].dtype == np.complex64)
    items = win.tree.findItems("*", Qt.MatchFlag.MatchWildcard | Qt.MatchFlag.MatchRecursive)
    win.tree.setCurrentItem(next(it for it in items if it.data(0, _OP) == mul))  # a click
    assert win.bands.selected == mul
    assert not win.ulp_map.pixmap().isNull()
    assert "complex" in win.ulp_layout.text() and "output 0" in win.ulp_layout.text()
    assert "no float output" not in win.ulp_map.text()
