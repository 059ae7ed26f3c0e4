"""Inspector: the right drawing per rank, stats, copy-as-numpy, clickable inputs."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QGuiApplication

from tapescope.views.array_view import PAGE_IMAGE, PAGE_NUMBER, PAGE_PLOT
from tapescope.views.inspector import InspectorPanel, NodeDetails


def details(value, grad=None, inputs=()):
    return NodeDetails(7, "matmul", "block0/q", value.shape, str(value.dtype), value, grad,
                       list(inputs))


def test_drawing_follows_rank(qtbot):
    p = InspectorPanel()
    qtbot.addWidget(p)
    p.show_details(details(np.array(2.5)))
    assert p.value_view.page() == PAGE_NUMBER and p.value_view.number.text() == "2.5"
    p.show_details(details(np.arange(200.0)))
    assert p.value_view.page() == PAGE_PLOT
    a = np.arange(24.0).reshape(2, 3, 4)
    p.show_details(details(a, grad=-a))
    assert p.value_view.page() == PAGE_IMAGE and len(p.value_view.spins) == 1
    p.value_view.spins[0].setValue(1)
    assert np.array_equal(p.value_view.current_slice(), a[1])
    assert np.array_equal(p.value_view.image.image, a[1])
    assert p.stats.stats["value"]["max"] == 23.0 and p.stats.stats["gradient"]["min"] == -23.0
    assert p.hist.counts["value"].sum() == 24 and p.hist.counts["gradient"].sum() == 24


def test_nan_counts_and_copy_as_numpy(qtbot):
    p = InspectorPanel()
    qtbot.addWidget(p)
    v = np.array([[0.1, np.nan], [np.inf, 1 / 3]])
    p.show_details(details(v))
    st = p.stats.stats["value"]
    assert (st["nan"], st["inf"]) == (1, 1)
    assert p.stats.item(4, 0).text() == "1 / 1"  # the NaN / inf row of the value's column
    text = p.copy_as_numpy("value")
    assert QGuiApplication.clipboard().text() == text
    back = eval(text, {"np": np})  # noqa: S307 — our own text
    assert np.array_equal(back, v, equal_nan=True) and back.tobytes() == v.tobytes()
    assert not p.copy_grad.isEnabled()


def test_clicking_an_input_selects_it(qtbot):
    p = InspectorPanel()
    qtbot.addWidget(p)
    p.show_details(details(np.ones((2, 2)), inputs=[(3, "param W"), (5, "const x")]))
    assert "#5 const x" in p.inputs.text()
    with qtbot.waitSignal(p.node_selected) as sig:
        p.inputs.linkActivated.emit("node:5")
    assert sig.args == [5]


def test_device_side_by_side_and_ulp_map(qtbot):
    p = InspectorPanel()
    qtbot.addWidget(p)
    cpu = np.linspace(-1, 1, 12).reshape(3, 4)
    dev = cpu.copy()
    dev[1, 2] = np.nextafter(dev[1, 2], np.inf)  # one element one ulp up
    dev[2, 3] = np.nextafter(np.nextafter(dev[2, 3], -np.inf), -np.inf)  # another two down
    d = details(cpu)
    d.device_value = dev
    p.show_details(d)
    assert p.tabs.indexOf(p.device_view) >= 0
    ulp = p.device_view.ulp
    assert ulp[1, 2] == 1 and ulp[2, 3] == 2 and np.count_nonzero(ulp) == 2
    assert np.array_equal(p.device_view.dev_view.array, dev)
    assert "device value" in p.stats.stats
    p.show_details(details(cpu))  # no device run: the tab goes away
    assert p.tabs.indexOf(p.device_view) < 0


def test_a_single_row_is_drawn_as_a_line(qtbot):
    p = InspectorPanel()
    qtbot.addWidget(p)
    p.show_details(details(np.arange(5.0).reshape(1, 5)))
    assert p.value_view.page() == PAGE_PLOT
