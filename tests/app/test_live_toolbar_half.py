"""The Live toolbar offers the half types and mixed precision (issue 28), driven as a user."""

from __future__ import annotations

from tapescope.app.runs import SessionConfig


def test_dtype_box_sets_half_and_amp(qtbot):
    from tapescope.app.qt.live_toolbar import LiveToolbar

    bar = LiveToolbar(_all_slots())
    qtbot.addWidget(bar)
    base = SessionConfig(workload="mlp", device="host")
    bar.dtype_box.setCurrentIndex(bar.dtype_box.findData("amp float16"))
    cfg = base.with_(**bar.choices())
    assert cfg.amp == "float16" and cfg.dtype == "float16"
    bar.show_config(cfg)
    assert bar.dtype_box.currentData() == "amp float16"
    bar.dtype_box.setCurrentIndex(bar.dtype_box.findData("bfloat16"))
    cfg = cfg.with_(**bar.choices())
    assert cfg.amp is None and cfg.dtype == "bfloat16"
    assert "amp" not in cfg.pair()[1].label() and "float32 accumulate" in cfg.pair()[1].label()


def _all_slots() -> dict:
    from tapescope.app.qt.live_toolbar import ACTIONS

    return {e[0]: (lambda: None) for e in ACTIONS if e is not None}
