"""``tapescope report --capture OUT --out R.html``: the rank files of one torchrun judged
together (core/capture/ranks.py) as one self-contained HTML page (no scripts, no external
resources) and its JSON beside it (the ``parity --capture OUT --json`` report).

Sections: the verdict; the ranks (each rank's losses, counts, first divergence); the
collectives (per collective: whether the ranks agree after it, each rank against the fixed
order); the first collective with a difference and who introduced it.
"""

from __future__ import annotations

import os

from tapescope.app.capture.report_html import _CSS, _e


def short_source(source: str) -> str:
    """``path/to/train.py:42`` as ``train.py:42`` (the terminal's and the page's column)."""
    path, _, line = source.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else source


def _cell(e: dict) -> str:
    v = e["verdict"]
    if v == "introduced":
        cause = f" {_e(e['cause']['cause'])}" if "cause" in e else ""
        return (f'<span class="v-introduced">introduced</span> {e["n_diff"]} of {e["n"]}, '
                f"max {e['max_ulp']} ulp{cause}")
    return f'<span class="v-{_e(v)}">{_e(v)}</span>'


def render(rep: dict) -> str:
    """The page."""
    n = rep["ranks"]
    f = rep["first_collective"]
    title = os.path.basename(rep["files"][0]).rsplit(".rank", 1)[0]
    if rep["exact"]:
        verdict = "Every collective exact, the ranks agree after each, every rank exact"
    else:
        parts = []
        if not rep["agree"]:
            parts.append("the ranks disagree after a collective")
        if not rep["collectives_exact"]:
            parts.append("a collective left the fixed order")
        if any(not p["exact"] for p in rep["per_rank"]):
            parts.append("a rank's ops differ from the reference")
        verdict = "Differs: " + "; ".join(parts)
    out = ["<!doctype html><html><head><meta charset=utf-8>",
           f"<title>tapescope: the ranks of {_e(title)}</title><style>{_CSS}</style></head>"
           "<body>", f"<h1>{n} ranks of run {_e(rep['run'][:12])}</h1>",
           f"<p class={'ok' if rep['exact'] else 'bad'}><b>{_e(verdict)}</b></p>"]
    for note in rep["notes"]:
        out.append(f"<p>Note: {_e(note)}</p>")
    out.append("<h2>The ranks</h2><table><tr><th>rank</th><th>capture</th><th>ops</th>"
               "<th>losses</th><th>outputs</th><th>first divergence</th></tr>")
    for r, (path, p) in enumerate(zip(rep["files"], rep["per_rank"], strict=True)):
        fd = p["first_divergence"]
        where = "none" if fd is None else (f"step {fd['step']} #{fd['index']} {fd['op']} "
                                          f"({fd['module'] or 'no module'}) {fd['verdict']}")
        c = p["counts"]
        out.append(f"<tr><td class=n>{r}</td><td><code>{_e(path)}</code></td>"
                   f"<td class=n>{p['n_ops']}</td><td class=n>"
                   + "<br>".join(_e(repr(e["recorded"])) for e in p["losses"])
                   + "</td><td>" + _e(", ".join(f"{c[k]} {k}" for k in c if c[k]))
                   + f"</td><td>{_e(where)}</td></tr>")
    out.append("</table><h2>Where a collective first differs</h2>")
    if f is None:
        out.append("<p>Nowhere: every collective is exact against the fixed order (the ranks' "
                   "inputs summed in rank order) and the ranks agree after each.</p>")
    else:
        who = ", ".join(map(str, f["introduced_by"])) or "no rank"
        agree = "" if f["agree"] is None else (" The ranks agree after it." if f["agree"] else
                                               " <b>The ranks disagree after it.</b>")
        out.append(f"<p>Collective #{f['collective']} <code>{_e(f['op'])}</code> (step "
                   f"{f['step']}, {_e(f['phase'])}, <code>{_e(short_source(f['source']))}</code>): "
                   f"introduced by rank {_e(who)}.{agree}</p>")
    opt = rep.get("optimizer_steps", [])
    if opt:
        out.append("<h2>Optimizer steps</h2><p>The ranks' optimizer-phase ops after each "
                   "step's last collective, against rank 0's (told, not judged: a sharded "
                   "optimizer differs by design).</p><table><tr><th>step</th><th>ops</th>"
                   "<th>every rank wrote rank 0's bits</th></tr>")
        for e in opt:
            if e["agree"] is None:
                what = f"not compared ({_e(e['why'])})"
            elif e["agree"]:
                what = "yes"
            else:
                what = (f"<b>no</b>: rank {_e(', '.join(map(str, e['ranks'])))} parts at op "
                        f"#{e['index'][e['ranks'][0]]} <code>{_e(e['op'])}</code>")
            out.append(f"<tr><td class=n>{e['step']}</td><td class=n>{e['ops']}</td>"
                       f"<td>{what}</td></tr>")
        out.append("</table>")
    out.append("<h2>Collectives</h2><table><tr><th>#</th><th>step</th><th>phase</th>"
               "<th>collective</th><th>reduce</th><th>elements</th><th>ranks agree</th>"
               + "".join(f"<th>rank {r}</th>" for r in range(n)) + "<th>source</th></tr>")
    for c in rep["collectives"]:
        agree = "-" if c["agree"] is None else ("yes" if c["agree"] else "NO")
        out.append(f"<tr><td class=n>{c['collective']}</td><td class=n>{c['step']}</td>"
                   f"<td>{_e(c['phase'])}</td><td><code>{_e(c['op'])}</code></td>"
                   f"<td>{_e(c.get('reduce', '-'))}</td><td class=n>{c['elements']}</td>"
                   f"<td class={'bad' if c['agree'] is False else 'ok'}>{agree}</td>"
                   + "".join(f"<td>{_cell(e)}</td>" for e in c["ranks"])
                   + f"<td><code>{_e(short_source(c['source']))}</code></td></tr>")
    out.append("</table><p>The fixed order: docs/reference-order.md, \"Collectives\".</p>"
               "</body></html>")
    return "\n".join(out)
