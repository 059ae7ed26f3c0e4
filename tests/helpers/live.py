"""A live session in the window, driven as a user drives it: wait for the worker's "ready", click
a node's row or box, ask whether the inspector shows a node's live sides at a step
(tests/app: test_live*, test_explain_inspector, test_torch_live, test_window_frame, test_worker,
test_progress_dialog)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

READY_MS = 240_000  # a hang guard: with an empty kernel cache the worker compiles before "ready"
#: a workload script whose branches a live session takes (tests/app/data/branches.py)
BRANCHES = str(Path(__file__).parents[1] / "app" / "data" / "branches.py")


def wait_ready(qtbot, win) -> None:
    """Wait for the live worker's own "ready" (or its failure), however long its start takes."""
    from tapescope.app.qt.live import FAILED

    qtbot.waitUntil(lambda: win.live.live is not None and (
        win.live.live.info is not None or win.live.live.state == FAILED), timeout=READY_MS)


def click_row(qtbot, win, node_id: int) -> None:
    """Click the parity table's row of ``node_id``, as a user would."""
    p = win.parity
    idx = p.proxy.mapFromSource(p.model.index(p.model.row_of(node_id), 1))
    p.table.scrollTo(idx)
    qtbot.mouseClick(p.table.viewport(), Qt.LeftButton, pos=p.table.visualRect(idx).center())


def click_node(qtbot, win, node_id: int) -> None:
    """Click ``node_id``'s box in the graph."""
    v = win.graph.view
    r = v.canvas.item_rect(int(v.display.node_item[node_id]))
    v.centerOn(r.center())
    qtbot.mouseClick(v.viewport(), Qt.LeftButton, pos=v.mapFromScene(r.center()))


def shown_live(win, node_id: int, step: int) -> bool:
    """The inspector shows ``node_id``'s two live sides, fetched for ``step``."""
    d = win.inspector.details
    sh = win.live.shown
    return (d is not None and d.id == node_id and d.sides is not None and sh is not None
            and sh.node == node_id and sh.step == step)
