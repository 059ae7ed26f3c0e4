"""`tapescope report` without Qt (issue 47 item 4): PySide6 blocked as on a machine without it,
the report is written with its graph picture, an SVG drawn from views' Qt-free layout
(app.report_svg), and says on stderr that the training plots need Qt. The SVG shows what the Qt
picture shows (app.report_svg.report_scene, one rule): a box per node, the parity colour of
each compared node, the first divergence flagged."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from tapescope.app.report_html import NO_PLOTS
from tests.helpers.qt_block import BLOCK_QT

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"

RUN = BLOCK_QT + """
from tapescope.app.cli import main
rc = main(["report", "--workload", "mlp", "--device", "host", "--steps", "1", "--out", sys.argv[1]])
print("RESULT", rc, sorted(m for m in sys.modules if m.split(".")[0] in
                           ("PySide6", "pyqtgraph", "shiboken6")))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("noqt") / "r.html"
    p = subprocess.run([sys.executable, "-c", RUN, str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=240)
    return p, out


def _svg(page: str) -> ET.Element:
    m = re.search(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)
    assert m, "no SVG picture in the page"
    return ET.fromstring(base64.b64decode(m.group(1)))


def test_report_writes_its_graph_picture_without_qt(report):
    p, out = report
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines()[-1] == "RESULT 0 []"  # no Qt module loaded, none needed
    assert "tapescope report: no Qt (Qt is blocked: " in p.stderr
    assert "training plots need PySide6" in p.stderr
    page = out.read_text(encoding="utf-8")
    assert NO_PLOTS in page and "data:image/png" not in page
    assert "<script" not in page and "http" not in page  # self-contained, as with Qt
    data = json.loads(out.with_suffix(".json").read_text())
    svg = _svg(page)
    assert svg.tag == f"{SVG}svg" and int(svg.get("width")) > 100
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    boxes = [r for r in svg.iter(f"{SVG}rect") if r.get("width") == "170"]
    assert len(boxes) == len(data["nodes"]) == 23  # the mlp: every node, one box each
    ops = Counter(n["op"] for n in data["nodes"])  # each node's op on its box
    assert Counter(t for t in texts if t in ops) == ops
    assert "layer0/W" in texts and "loss" in texts  # names too


def test_the_svg_shows_the_parity_colours_and_the_first_divergence(report):
    from tapescope.app.report_svg import FLAG_TEXT, dag_svg, report_scene
    from tapescope.app.session import parity_colors

    p, out = report
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    # a planted difference: node 20 differs by 4096 ulp in its value, and is the first
    node = next(n for n in data["nodes"] if n["id"] == 20)
    node["value"] = {**node["value"], "n_diff": 3, "max_ulp": 4096, "max_abs": 1e-12}
    data["first_divergence"] = {"step": 1, "node": 20, "op": node["op"], "which": "value",
                                "name": node["name"], "roots": []}
    want = parity_colors([n for n in data["nodes"] if n["value"] is not None])
    assert len(set(want.values())) == 2  # exact green and the one differing colour
    sc = report_scene(data)
    ni = sc.display.node_item
    assert sc.colors == {int(ni[k]): v for k, v in want.items()}
    assert sc.first == {int(ni[20])}
    svg = ET.fromstring(dag_svg(data))
    stripes = [r.get("fill") for r in svg.iter(f"{SVG}rect") if r.get("width") == "10"]
    assert sorted(stripes) == sorted(want.values())  # one stripe per compared node
    assert stripes.count(want[20]) == 1 and want[20] != want[0]
    assert [t.text for t in svg.iter(f"{SVG}text")].count(FLAG_TEXT) == 1
    outline = [r for r in svg.iter(f"{SVG}rect") if r.get("stroke-width") == "3.5"]
    assert len(outline) == 1 and outline[0].get("fill") == "none"
