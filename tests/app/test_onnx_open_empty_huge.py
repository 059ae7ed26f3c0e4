"""A model with a 0 x 2**61 node opens in the window as one error naming the node, never
numpy's bare "ValueError: array is too big" (issue 49, red team 3)."""

from __future__ import annotations

import pytest

from tests.helpers.onnx_budgets import empty_but_huge


@pytest.mark.parametrize("op", ["Reshape", "ConstantOfShape"])
def test_a_zero_by_2_61_node_is_an_error_naming_it(qtbot, win, tmp_path, op):
    path = empty_but_huge(tmp_path / f"{op}.onnx", op)
    assert win.open_file(path) is False
    text = win.last_error.text()
    assert f"'big' ({op})" in text and "no array can have" in text, text
    assert "ValueError" not in text and "Traceback" not in text, text
