"""The graph's parity colours as arrays (views.overlay): what a live step hands over (a code per
node, a palette) shows the same colours, fades and outlines as the dict of the same colours."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QColor

from tapescope.views.graph_panel import GraphPanel
from tapescope.views.graph_view import severity
from tapescope.views.models.graph_model import GraphModel, GraphNode
from tapescope.views.models.synthetic import transformer_like
from tapescope.views.overlay import ItemColors, NodeColors

# exact green, two ambers of one green (equally severe: the first given wins), red, NaN violet
PALETTE = ["#16a34a", "#f59e0b", "#e09e0b", "#dc000b", "#7c3aed"]


def panel(qtbot, n: int, collapsed=False) -> GraphPanel:
    ops, ins, names = transformer_like(n)
    m = GraphModel([GraphNode(i, o, tuple(x), nm, (4, 8)) for i, (o, x, nm) in
                    enumerate(zip(ops, ins, names, strict=True))], loss_id=n - 1)
    if collapsed:
        m.collapsed = {g for g in m.groups if g.endswith("/attn")}
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(900, 700)
    p.show()
    with qtbot.waitSignal(p.view.layout_ready, timeout=5000):
        p.set_model(m)
    return p


def planted(n: int, seed: int = 0):
    """Node ids (shuffled, one off the tape), a palette code each, and who is muted/outlined."""
    rng = np.random.default_rng(seed)
    ids = np.r_[rng.permutation(n), 10**6]
    code = np.where(rng.random(ids.size) < 0.9, 0, rng.integers(1, len(PALETTE), ids.size))
    differ = code > 0
    intro = differ & (rng.random(ids.size) < 0.4)
    return ids, code, ids[differ & ~intro], ids[intro]


def the_former_loop(ni: np.ndarray, colors: dict) -> dict[int, str]:
    """The colour per item as the view's loop over the dict chose it (worst last, ties: first)."""
    want: dict[int, str] = {}
    for k, c in colors.items():
        if 0 <= k < len(ni):
            it, cur = int(ni[k]), want.get(int(ni[k]))
            if cur is None or severity(QColor(c)) > severity(QColor(cur)):
                want[it] = c
    return {it: QColor(c).name(QColor.HexArgb) for it, c in want.items()}


def shown(v) -> tuple[dict, set, set]:
    c = v.canvas
    return ({it: q.name(QColor.HexArgb) for it, q in c.overlay.items()},
            set(np.flatnonzero(c.muted).tolist()), set(np.flatnonzero(c.introduced).tolist()))


@pytest.mark.parametrize("collapsed", [False, True])
def test_codes_show_the_colours_fades_and_outlines_of_the_dict(qtbot, collapsed):
    p = panel(qtbot, 600, collapsed)
    v, ov = p.view, p.overview
    ids, code, muted, intro = planted(600)
    v.set_overlay(NodeColors(ids, code, PALETTE), muted=muted, introduced=intro)
    got = shown(v)
    bands = ({b: q.name() for b, q in ov.band_color.items()}, dict(ov.band_worst))
    img = v.viewport().grab().toImage()
    as_dict = {int(i): PALETTE[c] for i, c in zip(ids.tolist(), code.tolist(), strict=True)}
    v.set_overlay(as_dict, muted=muted.tolist(), introduced=set(intro.tolist()))
    assert shown(v) == got
    assert ({b: q.name() for b, q in ov.band_color.items()}, dict(ov.band_worst)) == bands
    assert v.viewport().grab().toImage() == img  # painted pixel for pixel the same
    ni = v.display.node_item
    assert got[0] == the_former_loop(ni, as_dict)
    assert got[1] == set(ni[muted[muted < len(ni)]].tolist())
    assert got[2] == set(ni[intro[intro < len(ni)]].tolist())
    assert len(set(got[0].values())) >= 3  # planted: several colours, not all green
    if collapsed:  # a folded scope's box took its worst child's colour
        assert any(v.display.item_node[it] < 0 and c != QColor(PALETTE[0]).name(QColor.HexArgb)
                   for it, c in got[0].items())
    v.set_overlay(None)
    assert not v.canvas.overlay and not v.canvas.muted.any()


def test_item_colors_read_as_the_mapping_they_replace():
    red, green = QColor("#dc000b"), QColor("#16a34a")
    ic = ItemColors.from_mapping({4: red, 1: green, 2: "#dc000b"}, 6)
    assert list(ic) == [1, 2, 4] and len(ic) == 3 and 4 in ic and 3 not in ic and 9 not in ic
    assert ic[4] == red and ic[2] == red and ic.get(0) is None and ic.get(4) == red
    assert ic[4] is ic[2]  # one QColor per distinct colour
    with pytest.raises(KeyError):
        ic[0]
    assert dict(ic.items()) == {1: green, 2: red, 4: red}
    assert int(ic.sev[ic.code[4]]) > int(ic.sev[ic.code[1]])  # red is worse than green


def test_node_colors_refuse_codes_outside_their_palette():
    with pytest.raises(ValueError, match="outside the palette"):
        NodeColors([0, 1], [0, 2], ["#16a34a", "#dc000b"])
    with pytest.raises(ValueError, match="2 colour codes for 3 nodes"):
        NodeColors([0, 1, 2], [0, 1], ["#16a34a", "#dc000b"])
