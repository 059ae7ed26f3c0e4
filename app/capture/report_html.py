"""``tapescope report --capture FILE --out R.html``: a judged capture as one self-contained HTML
page (no scripts, no external resources) plus its JSON beside it (the ``parity --capture
--json`` report). No Qt, no torch: tables and inline bars only.

Sections: the verdict and the settings; the losses (recorded vs the reference's); where the run
first leaves exact arithmetic and every introduced output; the module tree (nested, each
module's ops per verdict, folded below the model's top-level children); the ops without a
reference; every op that differs.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from tapescope.core.atomic import check_writable, write_all
from tapescope.core.capture.judge import loss_note
from tapescope.core.parity import strict_json

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d1d1f;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12.5px}td,th{padding:2px 8px;text-align:left;
vertical-align:top}th{background:#f2f2f4}tr:nth-child(even) td{background:#fafafa}
.n{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12px}
.v-exact{color:#1b7f3b}.v-introduced{color:#c62828;font-weight:600}.v-inherited{color:#b26a00}
.v-no-reference{color:#6a1b9a}.v-recorded,.v-unjudged{color:#666}
.bar{display:inline-block;height:9px;vertical-align:middle}
.b-exact{background:#4caf50}.b-introduced{background:#e53935}.b-inherited{background:#ffb300}
.b-no-reference{background:#8e24aa}.b-recorded,.b-unjudged{background:#bdbdbd}
details{margin-left:14px}summary{cursor:pointer}.ok{color:#1b7f3b}.bad{color:#c62828}
"""
_ORDER = ("exact", "introduced", "inherited", "no-reference", "recorded", "unjudged")


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _short(source: str) -> str:
    path, _, line = source.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else source


def _bars(counts: dict[str, int]) -> str:
    total = sum(counts.values()) or 1
    return "".join(f'<span class="bar b-{k}" style="width:{max(2, 120 * counts[k] // total)}px"'
                   f' title="{counts[k]} {k}"></span>' for k in _ORDER if counts.get(k))


def _tree(rep: dict) -> dict:
    """Per module path (and every prefix), the verdict counts of its ops' outputs."""
    root: dict = {"name": "(no module)", "counts": {}, "children": {}, "ops": 0}
    for e in rep["ops"]:
        parts = e["module"].split(".") if e["module"] else []
        node = root
        chain = [root]
        for p in parts:
            node = node["children"].setdefault(p, {"name": p, "counts": {}, "children": {},
                                                   "ops": 0})
            chain.append(node)
        for n in chain:
            n["ops"] += 1
            for o in e["outputs"]:
                n["counts"][o["verdict"]] = n["counts"].get(o["verdict"], 0) + 1
    return root


def _tree_html(node: dict, depth: int, path: str) -> str:
    counts = ", ".join(f'<span class="v-{k}">{node["counts"][k]} {k}</span>' for k in _ORDER
                       if node["counts"].get(k))
    label = (f'<code>{_e(path or node["name"])}</code> — {node["ops"]} ops {_bars(node["counts"])}'
             f" {counts}")
    kids = "".join(_tree_html(c, depth + 1, f"{path}.{c['name']}" if path else c["name"])
                   for c in node["children"].values())
    if not kids:
        return f"<div style='margin-left:14px'>{label}</div>"
    # folded below the model's top-level children (depth 0: all, 1: the model, 2: its children)
    return f"<details{' open' if depth < 2 else ''}><summary>{label}</summary>{kids}</details>"


def render(rep: dict) -> str:
    """The page."""
    c = rep["counts"]
    judged = c["exact"] + c["introduced"] + c["inherited"]
    verdict = ("bit-identical to the reference" if rep["exact"] and judged else
               "nothing judged" if rep["exact"] else "DIFFERS from the reference")
    s = rep["settings"]
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>tapescope capture "
           f"{_e(os.path.basename(rep['capture']))}</title><style>{_CSS}</style></head><body>",
           f"<h1>Capture <code>{_e(rep['capture'])}</code>: "
           f"<span class='{'ok' if rep['exact'] else 'bad'}'>{_e(verdict)}</span></h1>",
           f"<p>{rep['steps']} steps, {rep['n_ops']} ops (forward {rep['phases']['forward']}, "
           f"backward {rep['phases']['backward']}, optimizer {rep['phases']['optimizer']}); "
           f"outputs: " + ", ".join(f"<span class='v-{k}'>{c[k]} {k}</span>" for k in _ORDER
                                    if c[k]) + "</p>",
           "<h2>Settings</h2><table>" + "".join(
               f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in s.items()) + "</table>",
           "<h2>Losses</h2><table><tr><th>step</th><th>recorded</th><th>reference (whole "
           "step re-run)</th><th></th></tr>"]
    for e in rep["losses"]:
        same = e["reference"] is not None and e["reference"] == e["recorded"]
        out.append(f"<tr><td class=n>{e['step']}</td><td class=n>{_e(repr(e['recorded']))}</td>"
                   f"<td class=n>{_e(repr(e['reference']))}</td><td class="
                   f"{'ok' if same else 'bad'}>{'exact' if same else 'differs'}"
                   + _e(loss_note(e))
                   + "</td></tr>")
    out.append("</table>")
    f = rep["first_divergence"]
    out.append("<h2>First divergence</h2><p>" + (
        "none" if f is None else
        f"step {f['step']}, op #{f['index']} <code>{_e(f['op'])}</code> in "
        f"<code>{_e(f['module'] or '(no module)')}</code> ({_e(f['phase'])}, "
        f"<code>{_e(_short(f['source']))}</code>): <span class='v-{_e(f['verdict'])}'>"
        f"{_e(f['verdict'])}</span>") + "</p>")
    intro = rep["introduced"]
    region = next((e for e in intro if e.get("node")), None)
    if region is not None:  # a compiled graph's first departing node (core/capture/regions.py)
        from tapescope.core.capture.regions import node_line

        out.append(f"<p>Inside compiled graph #{region['index']} (step {region['step']}, "
                   f"{_e(region['phase'])}): {_e(node_line(region['node']))}</p>")
    if intro:
        out.append(f"<h2>Introduced ({len(intro)} outputs)</h2><table><tr><th>step</th>"
                   "<th>#</th><th>phase</th><th>op</th><th>module</th><th>output</th>"
                   "<th>n_diff</th><th>max ulp</th><th>cause</th><th>source</th></tr>")
        for e in intro[:500]:
            out.append(f"<tr><td class=n>{e['step']}</td><td class=n>{e['index']}</td>"
                       f"<td>{_e(e['phase'])}</td><td><code>{_e(e['op'])}</code></td>"
                       f"<td><code>{_e(e['module'])}</code></td><td class=n>{e['output']}</td>"
                       f"<td class=n>{e['n_diff']}</td><td class=n>{e['max_ulp']}</td>"
                       f"<td>{_cause_cell(e)}</td><td><code>{_e(_short(e['source']))}"
                       "</code></td></tr>")
        out.append("</table>")
    out.append("<h2>Module tree</h2>" + _tree_html(_tree(rep), 0, ""))
    if rep["no_reference"]:
        out.append("<h2>No reference</h2><table><tr><th>op</th><th>count</th><th>reason</th>"
                   "</tr>" + "".join(f"<tr><td><code>{_e(d['op'])}</code></td><td class=n>"
                                     f"{d['count']}</td><td>{_e(d['reason'])}</td></tr>"
                                     for d in rep["no_reference"]) + "</table>")
    bad = [e for e in rep["ops"] if any(o["verdict"] in ("introduced", "inherited")
                                        for o in e["outputs"])]
    if bad:
        out.append(f"<h2>Ops that differ ({len(bad)})</h2><table><tr><th>step</th><th>#</th>"
                   "<th>phase</th><th>op</th><th>module</th><th>verdicts</th><th>n_diff "
                   "(introduced / total)</th><th>max ulp (introduced / total)</th><th>source"
                   "</th></tr>")
        for e in bad[:2000]:
            vs = " ".join(f"<span class='v-{o['verdict']}'>{o['verdict']}</span>"
                          for o in e["outputs"])
            nd = " ".join(f"{o.get('n_diff', '-')}/{o.get('total_n_diff', '-')}"
                          for o in e["outputs"])
            mu = " ".join(f"{o.get('max_ulp', '-')}/{o.get('total_max_ulp', '-')}"
                          for o in e["outputs"])
            out.append(f"<tr><td class=n>{e['step']}</td><td class=n>{e['index']}</td>"
                       f"<td>{_e(e['phase'])}</td><td><code>{_e(e['op'])}</code></td>"
                       f"<td><code>{_e(e['module'])}</code></td><td>{vs}</td><td class=n>"
                       f"{nd}</td><td class=n>{mu}</td><td><code>{_e(_short(e['source']))}"
                       "</code></td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)


def write(rep: dict, out: str) -> tuple[Path, Path]:
    """The HTML and its JSON beside it, both or neither."""
    side = Path(out).with_suffix(".json")
    paths = write_all([(out, render(rep)),
                       (side, json.dumps(strict_json(rep), indent=1, allow_nan=False))])
    return paths[0], paths[1]


def check(out: str) -> None:
    """Before the judging: ``--out`` is an .html that can be written, and its JSON too."""
    if not out.lower().endswith((".html", ".htm")):
        raise ValueError(f"--out {out!r} must end in .html")
    check_writable(out, "--out")
    check_writable(Path(out).with_suffix(".json"), "--out's JSON")


def _cause_cell(e: dict) -> str:
    """An introduced output's cause (``--explain``): its kind, then what reproduced the bits
    (or, unknown, what was tried), escaped."""
    c = e.get("explain")
    if not c:
        return _e(e.get("cause", ""))
    if c["cause"] == "unknown":
        from tapescope.core.explain import cause_text

        return _e(cause_text(c))
    return f"{_e(c['cause'])}<br><small>{_e(c.get('variant', ''))}</small>"
