"""``tapescope report --capture A --against B --out R.html``: two captures paired
(core.capture.pair) as one self-contained HTML page (no scripts, no external resources) and its
JSON beside it (the ``parity --capture A --against B --json`` report).

Sections: the verdict; the two runs and the settings that differ; the losses; where the runs
first part and which run left the reference there; the ops of one run only; every matched op
that parts (the first 200).
"""

from __future__ import annotations

import os

from tapescope.app.capture.report_html import _CSS, _e


def _short(source: str) -> str:
    path, _, line = source.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else source


def _v(verdict: str) -> str:
    return f'<span class="v-{_e(verdict)}">{_e(verdict)}</span>'


def render(rep: dict) -> str:
    """The page."""
    a, b, al, f = rep["a"], rep["b"], rep["alignment"], rep["first_parted"]
    ok = rep["agree"]
    out = ["<!doctype html><html><head><meta charset=utf-8>",
           f"<title>tapescope: {_e(os.path.basename(a['capture']))} against "
           f"{_e(os.path.basename(b['capture']))}</title><style>{_CSS}</style></head><body>",
           f"<h1>{_e(a['capture'])} against {_e(b['capture'])}</h1>",
           f"<p class={'ok' if ok else 'bad'}><b>"
           + (f"The same bits on every matched op ({al['matched']})" if ok else
              f"The runs part: {rep['n_parted']} of {al['matched']} matched ops differ")
           + "</b></p>", "<h2>The runs</h2><table><tr><th></th><th>capture</th><th>steps</th>"
           "<th>ops</th><th>threads</th><th>applied</th><th>against the reference</th>"
           "<th>first divergence</th></tr>"]
    for tag, s in (("A", a), ("B", b)):
        fd = s["first_divergence"]
        where = "none" if fd is None else (f"step {fd['step']} #{fd['index']} {fd['op']} "
                                          f"({fd['module'] or 'no module'}) {fd['verdict']}")
        applied = ", ".join(f"{k}={v}" for k, v in (s.get("applied") or {}).items()) or "-"
        verdict = "exact" if s["exact"] else f"{_v('introduced')} {_e(s['n_introduced'])}"
        out.append(f"<tr><td>{tag}</td><td><code>{_e(s['capture'])}</code></td>"
                   f"<td class=n>{s['steps']}</td><td class=n>{s['n_ops']}</td>"
                   f"<td class=n>{_e(s['settings'].get('threads'))}</td><td>{_e(applied)}</td>"
                   f"<td>{verdict}</td><td>{_e(where)}</td></tr>")
    out.append("</table>")
    if rep["settings_differ"]:
        out.append("<p>Settings that differ: " + "; ".join(
            f"<code>{_e(d['setting'])}</code> {_e(d['a'])} | {_e(d['b'])}"
            for d in rep["settings_differ"]) + "</p>")
    out.append("<h2>Losses</h2><table><tr><th>step</th><th>A</th><th>B</th><th></th></tr>")
    for e in rep["losses"]:
        same = e["a"] == e["b"]
        out.append(f"<tr><td class=n>{e['step']}</td><td class=n>{_e(repr(e['a']))}</td>"
                   f"<td class=n>{_e(repr(e['b']))}</td><td class={'ok' if same else 'bad'}>"
                   f"{'same' if same else 'differ'}</td></tr>")
    out.append("</table><h2>Where they part</h2>")
    if f is None:
        out.append("<p>Nowhere: every matched op is the same bits in both runs.</p>")
    else:
        o = f["outputs"][0]
        out.append(f"<p>Step {f['step']}, A#{f['a']} / B#{f['b']} <code>{_e(f['op'])}</code> "
                   f"({_e(f['module'] or 'no module')}, {_e(f['phase'])}, "
                   f"<code>{_e(_short(f['source_a']))}</code>), output {o['output']}: "
                   f"{_e(o['why'])}.</p><p><b>Left the reference there: {_e(f['left'])}</b> "
                   f"(A {_v(f['verdict_a'])}, B {_v(f['verdict_b'])}): {_e(f['cause'])}</p>")
        ins = f.get("inside")
        if ins:  # inside a compiled graph of one run (core/capture/pair_regions.py)
            out.append(f"<p>Inside {_e(ins['run'])}'s compiled graph {_e(ins['run'])}#"
                       f"{ins['region']} ({_e(ins['kind'])}, {_e(ins['backend'])}): node "
                       f"<code>{_e(ins['node'])}</code> = <code>{_e(ins['target'])}</code> "
                       f"(from <code>{_e(ins['original'] or '?')}</code>, "
                       f"{_e(ins['module'] or 'no module')}); its kernel "
                       f"({ins['kernel_nodes']} nodes): <code>"
                       f"{_e(', '.join(k.split(' ')[0] for k in ins['kernel']))}</code></p>")
    out.append(f"<h2>Ops of one run only</h2><p>Matched {al['matched']}; A only "
               f"{al['only_a']}, B only {al['only_b']} (the first five of each below).</p>")
    rows = [("A", e) for e in al["first_only_a"]] + [("B", e) for e in al["first_only_b"]]
    if rows:
        out.append("<table><tr><th>run</th><th>step</th><th>#</th><th>phase</th><th>op</th>"
                   "<th>module</th></tr>")
        for tag, e in rows:
            out.append(f"<tr><td>{tag}</td><td class=n>{e['step']}</td><td class=n>"
                       f"{e['index']}</td><td>{_e(e['phase'])}</td><td><code>{_e(e['op'])}"
                       f"</code></td><td><code>{_e(e['module'])}</code></td></tr>")
        out.append("</table>")
    if rep["parted"]:
        out.append(f"<h2>Matched ops that part ({rep['n_parted']}"
                   + (f", the first {len(rep['parted'])}" if rep["n_parted"] > len(rep["parted"])
                      else "") + ")</h2><table><tr><th>step</th><th>#A</th><th>#B</th>"
                   "<th>phase</th><th>op</th><th>module</th><th>A vs B</th><th>A</th><th>B</th>"
                   "</tr>")
        for p in rep["parted"]:
            o, e = p["outputs"][0], p["op_a"]
            out.append(f"<tr><td class=n>{e['step']}</td><td class=n>{p['a']}</td>"
                       f"<td class=n>{p['b']}</td><td>{_e(e['phase'])}</td><td><code>"
                       f"{_e(e['op'])}</code></td><td><code>{_e(e['module'])}</code></td>"
                       f"<td>{_e(o['why'])}</td><td>{_v(o['verdict_a'])}</td>"
                       f"<td>{_v(o['verdict_b'])}</td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)
