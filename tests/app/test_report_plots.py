"""The HTML report's plots image holds the nodes × steps heatmap its alt text promises
(issue 25, item 16): drawn with the Training panel, as the window draws it."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _count(img, rgb, y0: int) -> int:
    """Pixels of colour ``rgb`` (within 8 per channel) at or below row ``y0``."""
    n = 0
    for y in range(y0, img.height(), 2):
        for x in range(0, img.width(), 2):
            c = img.pixelColor(x, y)
            if max(abs(c.red() - rgb[0]), abs(c.green() - rgb[1]), abs(c.blue() - rgb[2])) <= 8:
                n += 1
    return n


def test_the_plots_image_has_the_heatmap(qtbot):
    from PySide6.QtGui import QImage

    from tapescope.app.qt.report_render import render_training
    from tapescope.views.models.ulp_scale import heat_levels, heat_lut

    steps = [{"step": k, "loss_ref": 1.0 / k, "loss_cand": 1.0 / k, "seconds": 0.01,
              "exact": k < 3, "max_ulp": 0.0 if k < 3 else 2.0 ** 10} for k in (1, 2, 3, 4)]
    cols = [[0.0] * 20, [0.0] * 20, [0.0] * 10 + [2.0 ** 10] * 10, [2.0 ** 10] * 20]
    data = {"reference": "CPU refmath", "candidate": "device", "steps": steps,
            "steps_per_s": 10.0, "heatmap": {"steps": [1, 2, 3, 4], "columns": cols}}
    img = QImage.fromData(render_training(data))
    assert not img.isNull()
    green = tuple(int(v) for v in heat_lut()[0][:3])  # exact
    orange = tuple(int(v) for v in heat_lut()[int(heat_levels([2.0 ** 10])[0])][:3])
    half = img.height() // 2  # the heatmap is the lower row of plots
    assert _count(img, green, half) > 200
    assert _count(img, orange, half) > 200
