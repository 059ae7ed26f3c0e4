"""One ulp colour scale (issue 47 item 1): the graph's stripe, the minimap, the parity table,
the report's page and picture and the heatmap all take a worst ulp's colour from
views.models.ulp_scale, and no other module spells a colour of its own for an ulp."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tapescope.core.summary import entry_worst
from tapescope.views.models.ulp_scale import (
    EXACT_COLOR,
    NAN_COLOR,
    heat_levels,
    heat_lut,
    level_color,
    ulp_color,
    ulp_colors,
)

ROOT = Path(__file__).resolve().parents[2]
# 480 worst values over the whole scale: 1..80 ulp one by one, then log-spaced up past 2**20
# (the sample on which the stripe's old formula and the heatmap's levels disagreed 73 times)
SAMPLE = np.unique(np.concatenate([np.arange(1.0, 81.0), np.round(2.0 ** np.linspace(
    6.4, 24.0, 410))]))[:480]


def _rgb(name: str) -> tuple[int, int, int]:
    return tuple(int(name[k:k + 2], 16) for k in (1, 3, 5))


def test_a_worst_has_the_heatmaps_colour_at_every_sampled_ulp():
    assert SAMPLE.size == 480
    lut = heat_lut()
    for u in SAMPLE:
        lv = int(round(float(heat_levels(np.array([u]))[0])))
        assert _rgb(ulp_color(u)) == tuple(int(c) for c in lut[lv][:3]), u
    assert ulp_colors(SAMPLE) == [ulp_color(u) for u in SAMPLE]
    # the ends: exact green, 1 ulp amber, 2**20 and beyond red, a NaN mismatch violet
    assert ulp_color(0.0) == EXACT_COLOR == level_color(0) == "#16a34a"
    assert ulp_color(-1.0) == ulp_color(float("nan")) == NAN_COLOR == level_color(255)
    assert ulp_color(1.0) == "#f59e0b" and ulp_color(2.0 ** 20) == ulp_color(2.0 ** 60)
    assert ulp_color(0.5) == ulp_color(1.0)  # differs: never the exact colour
    # darker with more ulp: the stripe order (views.overlay.severity) is the scale's order
    greens = [_rgb(ulp_color(u))[1] for u in SAMPLE]
    assert greens == sorted(greens, reverse=True)


def test_the_app_and_views_read_the_one_scale():
    from tapescope.app import session
    from tapescope.views import minimap, overlay

    assert session.ulp_color is ulp_color
    assert (session.EXACT_COLOR, session.NAN_COLOR) == (EXACT_COLOR, NAN_COLOR)
    assert overlay.NAN_COLOR == NAN_COLOR and minimap.EXACT == EXACT_COLOR
    # the graph's and the minimap's palette (what time travel and the live view hand them)
    w = np.concatenate([[0.0, -1.0], SAMPLE, SAMPLE[::3]])
    code, palette = session.worst_codes(w)
    assert [palette[k] for k in code.tolist()] == ulp_colors(w)


def _nodes():
    out = []
    for i, u in enumerate([0.0, -1.0, *SAMPLE.tolist()]):
        side = {"n": 4, "n_diff": int(u != 0), "max_ulp": int(max(u, 0)), "max_abs": 0.0,
                "n_nan": int(u < 0), "nan_bits_differ": 0}
        out.append({"id": i, "op": "add", "name": f"n{i}", "shape": [4], "inputs": [],
                    "value": side, "grad": None, "first_step_differing": 1 if u else None})
    return out


def test_the_report_page_and_its_graph_use_the_windows_colours():
    from tapescope.app.report_html import _legend, _node_table
    from tapescope.app.session import parity_colors

    nodes = _nodes()
    want = {n["id"]: ulp_color(entry_worst(n)) for n in nodes}
    # the graph picture's overlay (app.qt.report_render) and the window's graph both colour
    # through parity_colors
    assert parity_colors(nodes) == want
    table = _node_table({"nodes": nodes})
    got = re.findall(r"background:(#[0-9a-f]{6})", table)
    assert got == [want[n["id"]] for n in nodes]
    # the legend above the picture names the scale's colours
    legend = re.findall(r"background:(#[0-9a-f]{6})", _legend())
    assert legend == [EXACT_COLOR, ulp_color(1), ulp_color(2.0 ** 20), NAN_COLOR]


def test_no_other_module_spells_a_colour_from_an_ulp():
    """The scale's formula and its colours live in views/models/ulp_scale.py; a worst ulp's rule in
    core/summary.py. A second copy (a hex colour built from numbers, the exact green typed
    again, a max of an ulp with 1.0) is what drifted before."""
    spelled = re.compile(r"#\{[^}]*:02x\}")
    green = re.compile(r"#16a34a", re.I)
    ulp_rule = re.compile(r"np\.(fmax|maximum)\([^)]*ulp[^)]*,\s*1(\.0)?\)")
    from tapescope.core import summary
    from tapescope.views.models import ulp_scale

    # (where the two modules are, wherever a move puts them)
    scale_file = Path(ulp_scale.__file__).resolve().relative_to(ROOT).as_posix()
    rule_file = Path(summary.__file__).resolve().relative_to(ROOT).as_posix()
    hits = []
    for folder in ("app", "core", "views", "gpu"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            text = p.read_text(encoding="utf-8")
            if rel != scale_file:
                hits += [f"{rel}: colour from numbers" for _ in spelled.finditer(text)]
                hits += [f"{rel}: the exact green typed again" for _ in green.finditer(text)]
            if rel != rule_file:
                hits += [f"{rel}: {m.group(0)}" for m in ulp_rule.finditer(text)]
    assert not hits, hits


def test_the_parity_tables_chip_is_the_graphs_colour(qapp):
    """A differing row's op cell carries the node's worst in the one scale: from the dicts (a
    file's comparison) and from a live step's columns (the NaN mismatch as a flag bit)."""
    from types import SimpleNamespace

    from PySide6.QtCore import Qt

    from tapescope.app.step_history import StepHistory, compact
    from tapescope.core.parity import NodeParity, TensorDiff
    from tapescope.core.step_record import record_of
    from tapescope.views.models.parity_rows import build_rows
    from tapescope.views.parity_table import ParityTableModel

    nodes = []
    for i, u in enumerate([0, 1, 3, 1 << 12, 1 << 30, -1]):
        nd = 0 if u == 0 else 2
        d = TensorDiff(4, nd, max(u, 0), 0.0, 0.0, 0 if nd else None, int(u < 0))
        nodes.append(NodeParity(i, "add", f"n{i}", d, TensorDiff(4, 0, 0, 0.0, 0.0, None)))
    tape = [SimpleNamespace(id=n.id, op=n.op, name=n.name, shape=(4,)) for n in nodes]
    want = [None] + [ulp_color(entry_worst(n.to_json())) for n in nodes[1:]]
    assert want[-1] == NAN_COLOR and len(set(want[1:])) == 5
    rec = record_of(nodes)
    h = StepHistory(tape)
    h.add(SimpleNamespace(record=rec, step=1, first=None, loss_ref=0.0, loss_cand=0.0,
                          exact=False, provenance=False, kernels=[], produced=[],
                          introduced=[], derived={"history": compact(rec)}))
    for comparison in ([n.to_json() for n in nodes], h.comparison(1)):
        model = ParityTableModel(build_rows(tape, comparison))
        got = [model.data(model.index(k, 1), Qt.DecorationRole) for k in range(len(nodes))]
        assert [None if c is None else c.name() for c in got] == want
        assert model.data(model.index(1, 2), Qt.DecorationRole) is None  # the op cell only
