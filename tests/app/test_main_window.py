"""The main window driven as a user would: open, click, step, search, bad files, drops."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QByteArray, QMimeData, QPoint, Qt, QUrl
from PySide6.QtGui import QDropEvent

from tapescope.app.qt.main_window import MainWindow
from tapescope.core import Tape, ops, tapefile, workloads


@pytest.fixture
def tape_file(tmp_path):
    """A recorded transformer episode (values + gradients) saved as a .tape file."""
    wl = workloads.get("transformer")
    loss = wl.record(0)
    wl.tape.backward(loss)
    path = tmp_path / "episode.tape"
    tapefile.save(wl.tape, path, meta={"loss": loss.id})
    return path


@pytest.fixture
def win(qtbot, settings):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    return w


def open_and_wait(qtbot, win, path) -> None:
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=5000):
        assert win.open_file(str(path))


def click_node(qtbot, win, node_id: int) -> None:
    v = win.graph.view
    r = v.canvas.item_rect(int(v.display.node_item[node_id]))
    v.centerOn(r.center())
    qtbot.mouseClick(v.viewport(), Qt.LeftButton, pos=v.mapFromScene(r.center()))


def test_open_click_inspect(qtbot, win, tape_file):
    open_and_wait(qtbot, win, tape_file)
    ref, _ = tapefile.load(tape_file)
    node = next(n for n in ref.nodes if n.op == "matmul" and len(n.shape) >= 2)
    click_node(qtbot, win, node.id)
    d = win.inspector.details
    assert d is not None and d.id == node.id and d.op == "matmul"
    assert np.asarray(d.value).tobytes() == ref.value(node.id).tobytes()
    assert np.array_equal(win.inspector.value_view.array, ref.value(node.id))
    assert np.asarray(d.grad).tobytes() == ref.grad(node.id).tobytes()
    assert f"#{node.id} matmul" in win.inspector.header.text()
    st = win.inspector.stats.stats["value"]
    assert st["max"] == float(ref.value(node.id).max())
    # the table follows the graph's selection
    assert win.parity.table.currentIndex().siblingAtColumn(0).data() == str(node.id)
    assert str(tape_file) in win.recent_files()[0]


def test_step_backward_three_times_shows_the_tapes_gradient(qtbot, win, tape_file):
    open_and_wait(qtbot, win, tape_file)
    ref, meta = tapefile.load(tape_file)  # the gradients as the full backward left them
    win.activateWindow()
    win.graph.view.setFocus()
    for _ in range(3):
        qtbot.keyClick(win.graph.view, Qt.Key_F11)  # the debugger's "step" key
    s = win.stepper
    assert s.pos == 2
    cur = s.current.node.id
    assert cur == win.graph.view.canvas.graph.item_node[win.graph.view.canvas.current_item]
    shown = win.stepper_panel.incoming.array
    assert shown.tobytes() == ref.grad(cur).tobytes()
    # each input's accumulated gradient after this step matches the event's "after"
    for c in s.current.contributions:
        assert s.accumulated(c.input_id).tobytes() == np.asarray(c.after).tobytes()
    assert win.stepper_panel.table.rowCount() == len(s.current.contributions)
    assert all(win.stepper_panel.table.item(r, 4).text().startswith("✓")
               for r in range(win.stepper_panel.table.rowCount()))
    qtbot.keyClick(win.graph.view, Qt.Key_F11, Qt.ShiftModifier)  # step back
    assert s.pos == 1


def test_search_finds_a_node(qtbot, win, tape_file):
    open_and_wait(qtbot, win, tape_file)
    qtbot.keyClick(win.graph.view, Qt.Key_F, Qt.ControlModifier)
    assert win.graph.search.isVisible() and win.graph.search.edit.hasFocus()
    qtbot.keyClicks(win.graph.search.edit, "head/W")
    qtbot.keyClick(win.graph.search.edit, Qt.Key_Return)
    ref, _ = tapefile.load(tape_file)
    want = next(n.id for n in ref.nodes if n.name == "head/W")
    assert win.selected == want and win.inspector.details.id == want


def test_corrupt_file_shows_error_and_keeps_session(qtbot, win, tape_file, tmp_path):
    open_and_wait(qtbot, win, tape_file)
    click_node(qtbot, win, 3)
    before = (win.session, win.windowTitle(), win.selected)
    bad = tmp_path / "broken.tape"
    data = tape_file.read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # truncated mid-archive
    assert not win.open_file(str(bad))
    box = win.last_error
    assert box is not None and box.isVisible()
    assert "broken.tape" in box.text() and ("corrupt" in box.text() or "truncated" in box.text())
    assert (win.session, win.windowTitle(), win.selected) == before
    assert win.inspector.details.id == 3 and win.graph.view.is_ready()
    assert str(bad) not in win.recent_files()
    box.close()
    assert not win.open_file(str(tmp_path / "missing.tape"))
    assert "no such file" in win.last_error.text()


def test_drop_a_file_and_jump_to_first_nan(qtbot, win, tmp_path):
    t = Tape()
    x = t.param(np.array([1.0, -1.0, 4.0]), name="x")
    y = ops.log(x)  # log(-1) is NaN: y is the first node holding one
    z = ops.exp(x)
    loss = ops.sum(y * z)
    t.backward(loss)
    path = tmp_path / "nan.tape"
    tapefile.save(t, path)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    ev = QDropEvent(QPoint(10, 10), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=5000):
        win.dropEvent(ev)
    assert win.session is not None and win.session.source == str(path)
    # alarms mark the nodes that produced a NaN: y = log(-1), and z's gradient (y * dL/d(yz)
    # from finite gradients); x's NaN gradient only flowed in from z: not an alarm of its own
    assert win.graph.view._marks["nan"] == {y.id, z.id}
    win.act_nan.trigger()
    # x's value is finite; y = log(x) is the first NaN value in tape order
    assert win.selected == y.id
    assert win.inspector.stats.stats["value"]["nan"] == 1


USER_WORKLOAD = '''
from pathlib import Path

import numpy as np
from tapescope.core import ops
from tapescope.core.workloads import Workload


class Tiny(Workload):
    name = "tiny"

    def build(self):
        self.w = self.tape.param(self.init(3, 2), name="layer/w")

    def batch(self, step):
        return {"x": np.full((4, 3), 0.5 + step)}

    def episode(self, data):
        return ops.mean(ops.tanh(data["x"] @ self.w) * 2.0)
'''


def test_user_workload_opens_and_a_broken_one_shows_its_traceback(qtbot, win, tmp_path):
    good = tmp_path / "tiny.py"
    good.write_text(USER_WORKLOAD)
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=5000):
        assert win.open_workload(str(good))
    s = win.session
    assert s.source == f"workload:{good}" and s.tape.node(s.loss_id).op == "mean"
    assert any(n.name == "layer/w" for n in s.tape.nodes)
    broken = tmp_path / "broken.py"
    broken.write_text(USER_WORKLOAD.replace("ops.tanh(", "ops.no_such_op("))
    assert not win.open_workload(str(broken))
    box = win.last_error
    assert "broken.py" in box.text() and "no_such_op" in box.text()
    assert "Traceback" in box.detailedText() and "episode" in box.detailedText()
    assert win.session is s


def test_open_an_onnx_model_imports_it_onto_a_tape(qtbot, win, tmp_path):
    from tapescope.core.onnx import Session, default_inputs

    model = Path(__file__).resolve().parents[2] / "resources" / "models" / "tiny_mlp.onnx"
    open_and_wait(qtbot, win, model)
    s = win.session
    ref = Session(str(model))
    want = ref.run(default_inputs(ref, 0))
    out_name, out_value = next(iter(want.items()))
    loss = s.tape.node(s.loss_id)
    assert loss.op == "sum" and loss.name == f"sum({out_name})"
    out_id = loss.inputs[0]
    assert np.array_equal(s.tape.value(out_id), out_value)  # the tape reproduces the executor
    click_node(qtbot, win, out_id)
    assert win.inspector.details.id == out_id and win.inspector.details.grad is not None
    assert win.stepper is not None and s.tape.params()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    assert not win.open_file(str(bad))
    assert "bad.onnx" in win.last_error.text() and win.session is s


def test_an_onnx_model_without_a_tape_form_opens_read_only(qtbot, win, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    # Hardmax has no tape form: the importer refuses, the executor still runs it
    g = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], name="hm")], "g", [x], [y])
    path = tmp_path / "hardmax.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    open_and_wait(qtbot, win, path)
    s = win.session
    assert s.loss_id is None and win.stepper is None and "no tape form" in s.meta["import_error"]
    node = next(n for n in s.tape.nodes if n.op == "Hardmax")
    assert s.tape.value(node.id).sum() == 2.0  # one 1 per row
    assert "forward only" in win.status_label.text()


def test_breakpoint_continue_and_recent_menu(qtbot, win, tape_file):
    open_and_wait(qtbot, win, tape_file)
    ref, _ = tapefile.load(tape_file)
    target = next(n.id for n in reversed(ref.nodes) if n.op == "softmax")
    win.select_node(target)
    qtbot.keyClick(win.graph.view, Qt.Key_F9)  # breakpoint on the selected node
    assert win.stepper.breakpoints == {target}
    assert int(win.graph.view.display.node_item[target]) in win.graph.view.canvas.breakpoint_items
    qtbot.keyClick(win.graph.view, Qt.Key_F5)  # continue: stops at the breakpoint
    assert win.stepper.current.node.id == target
    assert "breakpoint" in win.stepper_panel.where.text()
    assert win.stepper_panel.incoming.array.tobytes() == ref.grad(target).tobytes()
    # the recent list holds the file and reopens it from the menu
    actions = win.recent_menu.actions()
    assert [a.text() for a in actions] == [str(tape_file)]
    with qtbot.waitSignal(win.session_changed):
        actions[0].trigger()
    assert win.stepper.current is None  # a fresh session: the stepper restarted


def test_run_backward_to_a_node_from_the_graph(qtbot, win, tape_file):
    open_and_wait(qtbot, win, tape_file)
    ref, _ = tapefile.load(tape_file)
    target = next(n.id for n in ref.nodes if n.op == "matmul" and n.requires_grad)
    win.graph.view.run_to_requested.emit(target)  # what the context menu item sends
    assert win.stepper.current.node.id == target and win.selected == target
    assert win.graph.view.canvas.current_item == int(win.graph.view.display.node_item[target])
    # every node after the target (in tape order) that pushes a gradient was stepped through
    stepped = [ev.node.id for ev in win.stepper.history]
    assert stepped == sorted(stepped, reverse=True) and stepped[-1] == target


def test_comparison_fills_the_table_and_colours_the_graph(qtbot, win, tape_file):
    open_and_wait(qtbot, win, tape_file)
    ref, _ = tapefile.load(tape_file)
    mm = next(n.id for n in ref.nodes if n.op == "matmul")
    comp = [{"id": 0, "value": {"n_diff": 0, "max_ulp": 0}},
            {"id": mm, "value": {"n_diff": 3, "max_ulp": 4}, "grad": {"n_diff": 1, "max_ulp": 1}}]
    win.set_comparison(comp)
    m = win.parity.model
    assert m.data(m.index(mm, 4)) == "3" and m.data(m.index(mm, 7)) == "1"
    ov = win.graph.view.canvas.overlay
    item = int(win.graph.view.display.node_item[mm])
    assert ov[int(win.graph.view.display.node_item[0])].name() == "#16a34a"
    assert ov[item].red() > ov[item].green() > 0  # a few ulp: amber
    # the device's values show beside the CPU's in the inspector
    dev = np.array(ref.value(mm))
    dev.reshape(-1)[0] = np.nextafter(dev.reshape(-1)[0], np.inf)
    win.select_node(mm)
    win.inspector.show_details(replace(win.session.details(mm), device_value=dev))
    assert win.inspector.tabs.indexOf(win.inspector.device_view) >= 0
    assert win.inspector.device_view.ulp.reshape(-1)[0] == 1
    win.set_comparison([{"id": 10**6}])  # a bad comparison keeps the table as it was
    assert "not on the tape" in win.last_error.text() and m.data(m.index(mm, 4)) == "3"


def test_a_poisoned_tape_opens_and_the_stepper_reports_why(qtbot, win, tmp_path):
    t = Tape()
    a = t.param(np.ones((2, 3)), name="a")
    b = ops.sum(a * a)  # a fine scalar first
    c = t.const(np.ones((4, 5)), name="c")
    _ = a + c  # (2, 3) + (4, 5): poisons the tape
    assert not t.ok
    path = tmp_path / "poisoned.tape"
    tapefile.save(t, path, meta={"loss": b.id})
    open_and_wait(qtbot, win, path)
    qtbot.keyClick(win.graph.view, Qt.Key_F11)
    text = win.stepper_panel.where.text()
    assert "backward failed" in text and "do not broadcast" in text
    assert "poisoned: node 4 add" in win.status_label.text()
    assert win.session.source == str(path)


def test_save_a_workload_episode_and_reopen_it(qtbot, win, tmp_path):
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=5000):
        assert win.open_workload("mlp")
    first = win.session
    path = tmp_path / "saved.tape"
    assert win.save_tape(str(path))
    open_and_wait(qtbot, win, path)
    s = win.session
    assert s is not first and s.loss_id == first.loss_id
    for n in first.tape.nodes:
        assert s.tape.value(n.id).tobytes() == first.tape.value(n.id).tobytes()
        g0, g1 = first.grads[n.id], s.grads[n.id]
        assert (g0 is None and g1 is None) or g0.tobytes() == g1.tobytes()
    assert not win.save_tape(str(tmp_path / "no_such_dir" / "x.tape"))
    assert "no_such_dir" in win.last_error.text()


# ---- window layout: fitted to the screen, remembered between runs, View ▸ Reset layout -------
def view_action(win, text: str):
    view = next(a.menu() for a in win.menuBar().actions() if a.text() == "&View")
    return next(a for a in view.actions() if a.text() == text)


def new_window(qtbot, settings) -> MainWindow:
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def test_the_layout_is_remembered_between_runs_and_reset_from_the_view_menu(qtbot, settings):
    w = new_window(qtbot, settings)
    default_size = w.size()
    default_inspector = w.docks["Inspector"].width()
    # the user makes it theirs: a smaller window, Training closed (Live ▸ Training), Kernels
    # moved to the left, a wider Inspector
    w.resize(1300, 820)
    w.docks["Training"].toggleViewAction().trigger()
    w.addDockWidget(Qt.LeftDockWidgetArea, w.docks["Kernels"])
    w.resizeDocks([w.docks["Inspector"]], [720], Qt.Horizontal)
    qtbot.wait(50)
    inspector = w.docks["Inspector"].width()
    assert abs(inspector - default_inspector) > 50
    w.close()
    assert not settings.value("window/state", QByteArray()).isEmpty()

    w2 = new_window(qtbot, settings)  # the next run
    assert (w2.width(), w2.height()) == (1300, 820)
    assert not w2.docks["Training"].isVisible()
    assert w2.dockWidgetArea(w2.docks["Kernels"]) == Qt.LeftDockWidgetArea
    assert abs(w2.docks["Inspector"].width() - inspector) <= 4

    view_action(w2, "&Reset layout").trigger()
    qtbot.wait(50)
    assert w2.size() == default_size
    assert w2.docks["Training"].isVisible()
    assert w2.dockWidgetArea(w2.docks["Kernels"]) == Qt.RightDockWidgetArea
    assert w2.docks["Kernels"] in w2.tabifiedDockWidgets(w2.docks["Backward stepper"])
    assert abs(w2.docks["Inspector"].width() - default_inspector) <= 4
    assert settings.value("window/state") is None  # the next run starts from the default too


def test_a_new_user_gets_the_default_layout(qtbot, settings):
    w = new_window(qtbot, settings)
    assert not w.window_layout.restore()  # nothing saved yet
    assert (w.width(), w.height()) == (1440, 900)
    assert all(d.isVisible() for t, d in w.docks.items() if t != "Kernels")


@pytest.fixture
def screen_1280x800(monkeypatch):
    """Pretend the window opens on a 1280x800 screen (offscreen has no real one)."""
    from PySide6.QtCore import QRect

    from tapescope.app.qt.window_layout import WindowLayout

    monkeypatch.setattr(WindowLayout, "available", lambda self: QRect(0, 0, 1280, 800))


def assert_fits_and_every_dock_is_usable(win) -> None:
    f = win.frameGeometry()
    assert f.left() >= 0 and f.top() >= 0 and f.right() < 1280 and f.bottom() < 800, f
    assert win.graph.width() >= 400 and win.graph.height() >= 250
    shown = {t: d for t, d in win.docks.items() if not d.visibleRegion().isEmpty()}
    assert {"Inspector", "Backward stepper", "Parity table", "Training"} <= set(shown)
    for title, d in shown.items():
        assert d.width() >= 250 and d.height() >= 150, (title, d.size())


def test_the_window_fits_a_1280x800_screen(qtbot, settings, screen_1280x800):
    w = new_window(qtbot, settings)
    qtbot.wait(50)
    assert_fits_and_every_dock_is_usable(w)


def test_a_layout_saved_on_a_big_screen_fits_a_small_one(qtbot, settings, screen_1280x800):
    from PySide6.QtCore import QRect

    from tapescope.app.qt.window_layout import WindowLayout

    big = MainWindow(settings=settings)
    qtbot.addWidget(big)
    big.window_layout.available = lambda: QRect(0, 0, 2560, 1440)
    big.setGeometry(900, 500, 1600, 1000)  # saved on a 2560x1440 monitor
    big.show()
    big.close()
    assert not settings.value("window/geometry", QByteArray()).isEmpty()
    w = new_window(qtbot, settings)  # the laptop screen: the window shrinks and moves onto it
    assert isinstance(w.window_layout, WindowLayout)
    qtbot.wait(50)
    assert_fits_and_every_dock_is_usable(w)


def test_an_error_on_a_fresh_window_replaces_no_tape_open(qtbot, win, tmp_path):
    bad = tmp_path / "junk.tape"
    bad.write_bytes(b"junk")
    assert "No tape open" in win.status_label.text()
    assert not win.open_file(str(bad))
    assert win.status_label.text().startswith("Cannot open file: ")
    assert "junk.tape" in win.status_label.text()
    assert win.statusBar().currentMessage() == ""  # nothing drawn over the label
