"""The report's DAG picture without Qt: an SVG drawn from views' Qt-free graph model and layout.

``report_scene`` says what the picture shows (the display graph, its layout, each box's parity
colour, the first divergence, the fused segments' frames): the one rule, which the offscreen
Qt renderer (``app.qt.report_render``) paints where PySide6 is installed and ``dag_svg`` writes
as SVG text where it is not. The SVG holds boxes (filled and bordered by kind, as the window
draws them), a parity stripe at each compared box's left edge, the edges, the op and name of
each box, the first divergence's black outline and flag, and the segments' frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np

from tapescope.app.session import parity_colors
from tapescope.views.models.graph_model import (
    KIND_CONST,
    KIND_GROUP,
    KIND_LOSS,
    KIND_STYLE,
    GraphModel,
    GraphNode,
)
from tapescope.views.models.layout import CACHE, NODE_H, NODE_W, Layout
from tapescope.views.models.plain import cut

MAX_W, MAX_H = 1200, 5000  # the picture's largest size in pixels (the PNG's too)
STRIPE_W = 10.0  # the parity stripe (views.graph_canvas.STRIPE_W)
FIRST = "#111827"  # the first divergence's outline and flag (views.graph_canvas.FIRST_COLOR)
FRAME = "#0e7490"  # a fused segment's frame (views.graph_canvas.FRAME_COLOR)
EDGE = "#6e788c"
BACKGROUND = "#f7f8fa"
FLAG_TEXT = "▼ first divergence"
PAD = 20.0
BORDER_W = {KIND_LOSS: 2.6, KIND_GROUP: 2.2}  # the window's pens (else 1.4)


def fused_groups(plan: dict | None) -> dict[str, list[int]]:
    """Graph groups for a fusion plan's segments (the labels the app draws too)."""
    out = {}
    for seg in (plan or {}).get("segments", []):
        kind = "loss tail" if seg["kind"] == "serial" else f"{seg['rows']} rows"
        out[f"fused s{seg['index']} · {kind} · {len(seg['node_ids'])} ops"] = list(seg["node_ids"])
    return out


@dataclass
class Scene:
    """What the report's DAG shows, by display item (``display.node_item`` maps a node id)."""

    display: object  # views.models.graph_model.DisplayGraph
    layout: Layout
    colors: dict[int, str]  # item -> parity colour (compared nodes only)
    first: set[int]  # the first divergence's item
    frames: list[tuple[str, list[int]]]  # (label, items) per fused segment


def report_scene(data: dict) -> Scene:
    """The report data's graph, laid out, with the parity colours of its compared nodes."""
    info = data["nodes"]
    nodes = [GraphNode(n["id"], n["op"], tuple(n["inputs"]), n["name"], tuple(n["shape"]))
             for n in info]
    model = GraphModel(nodes, len(nodes) - 1 if nodes else None)
    groups = fused_groups(data.get("fusion"))
    model.set_extra_groups(groups)
    display = model.display()
    lay = CACHE.get_or_compute(display.key, display.inputs, display.order_key)
    ni = display.node_item
    comp = [n for n in info if n["value"] is not None]
    colors = {int(ni[k]): v for k, v in parity_colors(comp).items()}
    first = data.get("first_divergence")
    first_items = {int(ni[first["node"]])} if first is not None else set()
    frames = [(label, sorted({int(ni[i]) for i in ids})) for label, ids in groups.items()]
    return Scene(display, lay, colors, first_items, frames)


def _text(x: float, y: float, s: str, size: float, weight: str = "normal",
          color: str = "#141820") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" font-weight="{weight}" '
            f'fill="{color}">{escape(s)}</text>')


def dag_svg(data: dict) -> str:
    """The report's DAG as one SVG document (text; no script, no external reference)."""
    sc = report_scene(data)
    lay, g = sc.layout, sc.display
    x, y = np.asarray(lay.x, dtype=np.float64), np.asarray(lay.y, dtype=np.float64)
    w, h = float(lay.width) + 2 * PAD + 150.0, float(lay.height) + 2 * PAD  # 150: the flag
    s = min(1.0, MAX_W / max(w, 1.0), MAX_H / max(h, 1.0))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{max(1, int(w * s))}" '
           f'height="{max(1, int(h * s))}" viewBox="{-PAD:g} {-PAD:g} {w:.1f} {h:.1f}" '
           'font-family="sans-serif">',
           f'<rect x="{-PAD:g}" y="{-PAD:g}" width="{w:.1f}" height="{h:.1f}" '
           f'fill="{BACKGROUND}"/>']
    for label, items in sc.frames:
        if not items:
            continue
        x0 = float(x[items].min()) - NODE_W / 2 - 8
        y0 = float(y[items].min()) - NODE_H / 2 - 8
        x1 = float(x[items].max()) + NODE_W / 2 + 8
        y1 = float(y[items].max()) + NODE_H / 2 + 8
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
                   f'height="{y1 - y0:.1f}" fill="{FRAME}" fill-opacity="0.07" '
                   f'stroke="{FRAME}" stroke-width="1.5" rx="6"/>')
        out.append(_text(x0 + 4, y0 - 4, cut(label), 11, color=FRAME))
    out.append(f'<g stroke="{EDGE}" stroke-width="1.2">')
    for d, srcs in enumerate(g.inputs):
        for sidx in srcs:
            out.append(f'<line x1="{x[sidx]:.1f}" y1="{y[sidx] + NODE_H / 2:.1f}" '
                       f'x2="{x[d]:.1f}" y2="{y[d] - NODE_H / 2:.1f}"/>')
    out.append("</g>")
    for it in range(len(lay)):
        kind = int(g.kinds[it])
        fill, border = KIND_STYLE[kind]
        bx, by = float(x[it]) - NODE_W / 2, float(y[it]) - NODE_H / 2
        dash = ' stroke-dasharray="4 3"' if kind == KIND_CONST else ""
        out.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{NODE_W:g}" height="{NODE_H:g}" '
                   f'fill="{fill}" stroke="{border}" stroke-width="{BORDER_W.get(kind, 1.4)}"'
                   f'{dash}/>')
        c = sc.colors.get(it)
        if c is not None:
            out.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{STRIPE_W:g}" '
                       f'height="{NODE_H:g}" fill="{c}"/>')
        op, name, shape = g.labels[it]
        tx = bx + STRIPE_W + 4
        out.append(_text(tx, by + 15, cut(op)[:24], 12, "bold"))
        out.append(_text(tx, by + 29, cut(name)[:26], 10))
        out.append(_text(tx, by + 41, cut(shape)[:26], 9, color="#4b5563"))
        if it in sc.first:
            out.append(f'<rect x="{bx - 3:.1f}" y="{by - 3:.1f}" width="{NODE_W + 6:g}" '
                       f'height="{NODE_H + 6:g}" fill="none" stroke="{FIRST}" '
                       'stroke-width="3.5"/>')
            out.append(_text(bx, by - 8, FLAG_TEXT, 12, "bold", FIRST))
    out.append("</svg>")
    return "\n".join(out)
