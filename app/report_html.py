"""The parity report: ONE self-contained HTML file (inline CSS, base64 PNGs, no script, no
network) and its JSON sidecar (same name, ``.json``) with the same data, images left out."""

from __future__ import annotations

import base64
import json
import re
import secrets
from html import escape
from pathlib import Path

from tapescope.app.session import parity_colors
from tapescope.core.atomic import remove_stale_temporaries, write_all
from tapescope.core.parity import entry_differs, strict_json
from tapescope.views.models.numbers import count_text, ulp_exact, ulp_text
from tapescope.views.models.ulp_scale import EXACT_COLOR, NAN_COLOR, ulp_color

SECTIONS = ("verdict", "environment", "first-divergence", "introduced", "dag", "plots",
            "nodes")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:#1f2937;background:#f3f4f6;margin:0}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:0 0 10px;color:#111827}
.sub{color:#6b7280;margin-bottom:18px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:10px;padding:16px 20px;
 margin:0 0 18px;box-shadow:0 1px 2px rgba(0,0,0,.04)}
.verdict{font-size:18px;font-weight:600;padding:14px 18px;border-radius:8px;color:#fff}
.ok{background:#15803d}.bad{background:#b91c1c}
table{border-collapse:collapse;width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #eef0f3;text-align:left;vertical-align:top}
th{background:#f9fafb;font-weight:600;color:#374151;position:sticky;top:0}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#fff5f5}
.kv td:first-child{width:210px;color:#6b7280}
code,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
.sw{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:6px;
 vertical-align:-1px}
.img{overflow:auto;max-height:900px;border:1px solid #e5e7eb;border-radius:6px}
.img img{display:block;max-width:100%}
.scroll{max-height:640px;overflow:auto}
.legend span{margin-right:16px}
.note{color:#6b7280}
"""


def _b64(picture: bytes | str) -> str:
    """A data URI: PNG bytes, or an SVG document's text (``app.report_svg``; an SVG in an
    ``<img>`` runs no script and fetches nothing)."""
    if isinstance(picture, str):
        return "data:image/svg+xml;base64," + base64.b64encode(picture.encode()).decode("ascii")
    return "data:image/png;base64," + base64.b64encode(picture).decode("ascii")


NO_PLOTS = ("<p class=note>The training plots (loss, max ulp per step, the nodes × steps "
            "heatmap) are drawn with Qt, which was not installed where this report was written; "
            "their numbers are in the JSON beside this page.</p>")


def _kv(rows: dict) -> str:
    return "<table class=kv>" + "".join(
        f"<tr><td>{escape(str(k))}</td><td class=mono>{escape(str(v))}</td></tr>"
        for k, v in rows.items()) + "</table>"


def _num(v, fmt: str = "{:g}") -> str:
    return "" if v is None else escape(fmt.format(v))


def _count(v) -> str:
    """A count as the window writes it (views.models.numbers): 4,488."""
    return "" if v is None else count_text(v)


def _ulp(v) -> str:
    """A distance in ulp as the window writes it: 63,054, 5.87e+06 (the exact count on
    hover when that rounds it)."""
    if v is None:
        return ""
    text = ulp_text(v)
    return text if text == ulp_exact(v) else f"<span title='{ulp_exact(v)}'>{text}</span>"


def _node_table(data: dict) -> str:
    colors = parity_colors([n for n in data["nodes"] if n["value"] is not None])
    head = ("<tr><th class=n>id</th><th>op</th><th>name</th><th>shape</th>"
            "<th class=n>value n_diff</th><th class=n>value max ulp</th><th class=n>value max "
            "abs</th><th class=n>grad n_diff</th><th class=n>grad max ulp</th>"
            "<th class=n>grad max abs</th></tr>")
    rows = []
    for n in data["nodes"]:
        v, g = n["value"] or {}, n["grad"] or {}
        name = n["name"] or ""
        name = f"{name}#{n['id']}" if name.endswith("/") else name  # unnamed, in a scope
        differs = entry_differs(n)
        sw = colors.get(n["id"])
        swatch = f"<span class=sw style='background:{sw}'></span>" if sw else ""
        rows.append(
            f"<tr{' class=diff' if differs else ''}><td class=n>{n['id']}</td>"
            f"<td>{swatch}{escape(n['op'])}</td><td class=mono>{escape(name)}</td>"
            f"<td class=mono>{escape('×'.join(map(str, n['shape'])) or 'scalar')}</td>"
            f"<td class=n>{_count(v.get('n_diff'))}</td><td class=n>{_ulp(v.get('max_ulp'))}</td>"
            f"<td class=n>{_num(v.get('max_abs'), '{:.3g}')}</td>"
            f"<td class=n>{_count(g.get('n_diff'))}</td><td class=n>{_ulp(g.get('max_ulp'))}</td>"
            f"<td class=n>{_num(g.get('max_abs'), '{:.3g}')}</td></tr>")
    return f"<div class=scroll><table>{head}{''.join(rows)}</table></div>"


def _first(data: dict) -> str:
    f = data.get("first_divergence")
    if f is None:
        return "<p>None: every value and gradient agreed bit for bit on every step.</p>"
    roots = ", ".join(f"#{r['id']} {escape(r['op'])} <code>{escape(r['name'] or '')}</code>"
                      for r in f.get("roots", []))
    fi = data.get("first_introduced")
    if fi is not None:  # provenance ran: the introduced arrays say where error is made
        where = (f"<p>Where the error is made: introduced at step <b>{fi['step']}</b> by "
                 f"{_entries(fi['entries']) or 'no node (every difference is inherited)'}.</p>")
    else:
        where = (f"<p>Where drift starts in that step's forward pass (differing values whose "
                 f"inputs all agree): {roots}</p>" if roots else "")
    return (f"<p>Step <b>{f['step']}</b>, node <b>#{f['node']} {escape(f['op'])}</b> "
            f"<code>{escape(f.get('name') or '')}</code>, its <b>{escape(f['which'])}</b>: the "
            "first node in tape order whose bits differ (for gradients: the first backward "
            "produced, the highest id).</p>" + where)


def _entries(entries: list[dict]) -> str:
    return ", ".join(f"#{e['node']} {escape(e['op'])} <code>{escape(e.get('name') or '')}</code>"
                     f" {escape(e['which'])} ({_count(e['n_diff'])} elements, "
                     f"{_ulp(e['max_ulp'])} ulp)"
                     for e in entries)


INTRODUCED_ROWS = 200


def _introduced(data: dict) -> str:
    prov = data.get("provenance") or {}
    rows = data.get("introduced") or []
    if not prov.get("steps_checked"):
        return "<p>Provenance was not computed for this run.</p>"
    head = (f"<p>A node <b>introduced</b> error at a step when its reference op, run on the "
            f"candidate's own inputs, does not reproduce the candidate's output bit for bit; "
            f"every other difference is <b>inherited</b>. {prov['total']} introduced arrays "
            f"over {prov['steps_checked']} steps checked"
            + (" (the first ones kept)" if prov.get("truncated") else "") + ".</p>")
    if not rows:
        return head
    names = {n["id"]: n["name"] or "" for n in data["nodes"]}
    explained = any("explain" in e for e in rows)
    body = "".join(
        f"<tr><td class=n>{e['step']}</td><td class=n>{e['node']}</td><td>{escape(e['op'])}"
        f"</td><td class=mono>{escape(names.get(e['node'], ''))}</td><td>{escape(e['which'])}"
        + (f" <span class=mono>by #{', #'.join(map(str, e['by']))}</span>" if e.get('by')
           else "") + (f" <span class=mono>{escape(e['part'])}</span>" if e.get("part") else "")
        + f"</td><td class=n>{_count(e['n_diff'])}</td><td class=n>{_ulp(e['max_ulp'])}</td>"
        + (f"<td>{escape(_cause(e))}</td>" if explained else "") + "</tr>"
        for e in rows[:INTRODUCED_ROWS])
    more = (f"<p>… {len(rows) - INTRODUCED_ROWS} more in the JSON.</p>"
            if len(rows) > INTRODUCED_ROWS else "")
    return (f"{head}<div class=scroll><table><tr><th class=n>step</th><th class=n>node</th>"
            f"<th>op</th><th>name</th><th>which</th><th class=n>n_diff</th><th class=n>max ulp"
            f"</th>{'<th>cause (--explain)</th>' if explained else ''}</tr>{body}</table></div>"
            f"{more}")


def _cause(e: dict) -> str:
    from tapescope.app.commands.parity import cause_text

    if not e.get("explain"):
        return "-"
    # cause_text already starts "unknown (closest ...)" for an unexplained one
    return cause_text(e) if e["cause"] == "unknown" else f"{e['cause']}: {cause_text(e)}"


def _against(data: dict) -> str:
    """``--against B``: per node A and B against the reference, and A against B."""
    ag = data.get("against")
    if not ag:
        return ""
    a = {n["id"]: n for n in data["nodes"]}
    between = {n["id"]: n for n in ag["between"]["nodes"]}

    def ulp(n: dict | None, w: str) -> str:
        d = None if n is None else n.get(w)
        return "" if d is None else _ulp(d["max_ulp"]) if d["n_diff"] else "0"

    rows = []
    for n in ag["nodes"]:
        i = n["id"]
        cls = " class=diff" if entry_differs(between.get(i, n)) else ""
        rows.append(f"<tr{cls}><td class=n>{i}</td><td>{escape(n['op'])}</td>"
                    f"<td class=mono>{escape(n['name'] or '')}</td>"
                    + "".join(f"<td class=n>{ulp(x, w)}</td>" for x in (a.get(i), n,
                                                                          between.get(i))
                              for w in ("value", "grad")) + "</tr>")
    fa = ag["between"]["first_apart"]
    where = "never" if fa is None else (f"first at step {fa['step']}, node #{fa['node']} "
                                        f"{escape(fa['op'])} ({fa['which']})")
    head = ("<tr><th class=n>id</th><th>op</th><th>name</th><th class=n>A value ulp</th>"
            "<th class=n>A grad ulp</th><th class=n>B value ulp</th><th class=n>B grad ulp</th>"
            "<th class=n>A↔B value ulp</th><th class=n>A↔B grad ulp</th></tr>")
    b_intro = sorted({e["node"] for e in ag["introduced"]})
    return (f"<section id=against><h2>Two candidates: A = {escape(data['candidate'])}, "
            f"B = {escape(ag['label'])}</h2><p>Both against the reference, each with its own "
            f"provenance; A and B part {where}. B is "
            f"{'bit-identical to the reference' if ag['exact'] else 'not bit-identical'}"
            f"; B introduced error at {len(b_intro)} nodes.</p>"
            f"<div class=scroll><table>{head}{''.join(rows)}</table></div></section>")


def _fusion(plan: dict | None) -> str:
    if not plan:
        return ""
    b, a = plan["launches_before"], plan["launches_after"]
    segs = "".join(f"<tr><td class=n>{s['index']}</td><td>{s['lo']}..{s['hi']}</td>"
                   f"<td>{escape(s['kind'])}</td><td class=n>{s['rows']}</td>"
                   f"<td class=mono>{escape(' '.join(s['ops']))}</td>"
                   f"<td class=mono>{escape(s['forward'] or '')}</td></tr>"
                   for s in plan["segments"])
    return (f"<section id=fusion><h2>Fusion plan {escape(plan['plan_id'])}</h2><p>Launches per "
            f"episode: <b>{b['episode']} unfused → {a['episode']} fused</b> (forward "
            f"{b['forward']}→{a['forward']}, backward {b['backward']}→{a['backward']}, "
            f"optimizer {b['optimizer']}→{a['optimizer']}).</p><table><tr><th class=n>seg</th>"
            f"<th>nodes</th><th>kind</th><th class=n>rows</th><th>ops</th><th>forward kernel"
            f"</th></tr>{segs}</table></section>")


def _settings(c: dict) -> dict:
    """The candidate's settings that change its bits: a replay's fuse and math, a torch run's
    threads, TF32, determinism and optimizer (a torch run has no fused plan and no refmath: its
    report said ``fuse False``, ``math refmath``)."""
    dev = str(c.get("device") or "")
    if dev != "torch" and not dev.startswith("torch:"):
        return {"fuse": c["fuse"], "dtype": c["dtype"], "math (candidate)": c["math"]}
    tf32 = c.get("tf32")
    return {"dtype": c["dtype"],
            "torch threads": c.get("torch_threads") or "PyTorch's default",
            "tf32": "PyTorch's default" if tf32 is None else ("on" if tf32 else "off"),
            "deterministic algorithms": "on" if c.get("deterministic") else "off",
            "optimizer": ("torch.optim" if c.get("torch_optimizer") == "torch"
                          else "the tape's update in torch ops"),
            "math (candidate)": "PyTorch's own kernels and libm"}


def _legend() -> str:
    """The DAG picture's legend, in the window's one ulp scale (views.models.ulp_scale)."""
    return (f"<p class=legend><span><span class=sw style='background:{EXACT_COLOR}'></span>"
            f"bit-exact</span><span><span class=sw style='background:{ulp_color(1)}'></span>"
            f"1 ulp</span><span><span class=sw style='background:{ulp_color(2.0 ** 20)}'>"
            "</span>≥ 2<sup>20</sup> ulp (log scale)</span><span><span class=sw "
            f"style='background:{NAN_COLOR}'></span>NaN mismatch</span></p>")


def _plots(png: bytes | None) -> str:
    if png is None:
        return NO_PLOTS
    return ('<div class=img><img alt="loss, max ulp per step, nodes × steps heatmap" '
            f'src="{_b64(png)}">\n</div>')


def build_html(data: dict, dag_png: bytes | str, plots_png: bytes | None) -> str:
    """The report page from its data and two pictures: the DAG (PNG bytes, or SVG text when
    drawn without Qt) and the training plots (PNG; None without Qt: a note says so)."""
    v = data["verdict"]
    c = data["config"]
    cfg = {"workload": c["workload"], "reference": data["reference"],
           "candidate": data["candidate"], "device": c["device"], **_settings(c),
           "compare": c["compare"], "seed": c["seed"], "steps": v["steps"],
           "steps per second": f"{data.get('steps_per_s', 0):.2f}"}
    legend = _legend()
    title = f"tapescope parity report — {c['workload']}"
    return f"""<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>
<meta name={PAIR_META} content="{escape(str(data.get('pair', '')))}">
<meta name=viewport content="width=device-width,initial-scale=1"><style>{CSS}</style></head>
<body><main>
<h1>{escape(title)}</h1>
<div class=sub>{escape(data['reference'])} ↔ {escape(data['candidate'])} ·
{escape(data['environment']['device'])}</div>
<section id=verdict><div class="verdict {'ok' if v['exact'] else 'bad'}">{escape(v['text'])}
</div><p>NaNs differing only in sign or payload (equal under the NaN policy):
{v.get('nan_bits_differ', 0)}</p>{_kv(cfg)}</section>
<section id=first-divergence><h2>First divergence</h2>{_first(data)}</section>
<section id=introduced><h2>Introduced vs inherited error</h2>{_introduced(data)}</section>
<section id=dag><h2>DAG with parity overlay</h2>{legend}
<div class=img><img alt="tape DAG coloured by parity" src="{_b64(dag_png)}"></div></section>
<section id=plots><h2>Loss and parity over the steps</h2>
{_plots(plots_png)}</section>
<section id=nodes><h2>Per node (worst step)</h2>{_node_table(data)}</section>
{_against(data)}
{_fusion(data.get('fusion'))}
<section id=environment><h2>Environment</h2>{_kv(data['environment'])}</section>
</main></body></html>
"""


PAIR_META = "tapescope-pair"  # the HTML's <meta> carrying the pair id the JSON's "pair" holds
_PAIR_RE = re.compile(rb'<meta name=' + PAIR_META.encode() + rb' content="([0-9a-f]*)">')


def qt_missing() -> str | None:
    """Why the pictures cannot be drawn with Qt here (PySide6 or pyqtgraph missing, or blocked),
    or None when they can."""
    try:
        import tapescope.app.qt.report_render  # noqa: F401
    except ImportError as e:
        return str(e) or type(e).__name__
    return None


def pictures(data: dict, debug: bool = False) -> tuple[bytes | str, bytes | None]:
    """The DAG and the training plots: offscreen with Qt (as the window draws them) where it is
    installed, else the DAG as SVG from the layout (``app.report_svg``) and no plots."""
    if qt_missing() is not None:
        from tapescope.app.report_svg import dag_svg

        return dag_svg(data), None
    from tapescope.app.qt import report_render

    report_render.offscreen_app(debug)
    return report_render.render_dag(data), report_render.render_training(data)


def write_report(data: dict, path: str | Path, debug: bool = False) -> tuple[Path, Path]:
    """Draw the pictures (``pictures``) and write ``path`` and ``path.json``: one pair id in both
    (the JSON's ``pair``, the HTML's ``<meta name=tapescope-pair>``), so a reader
    (``read_report``) can tell a matched pair from what a kill between the renames left."""
    path = Path(path)
    data = {**data, "pair": secrets.token_hex(8)}
    html = build_html(data, *pictures(data, debug))
    side = path.with_suffix(".json")
    # a pair: both complete on disk before either replaces the old one, and a failed rename
    # puts the first back (core.atomic); the HTML, what a person opens, goes last
    write_all([(side, json.dumps(strict_json(data), indent=1, allow_nan=False)), (path, html)])
    for p in (side, path):  # what an earlier writer killed mid-write left behind
        remove_stale_temporaries(p)
    return path, side


def read_report(path: str | Path) -> dict:
    """The JSON of the report ``path`` (the HTML), checked to be its pair: a ValueError naming
    both files when the JSON beside it is from another run (a write was killed between its
    renames) or either lacks the pair id."""
    path = Path(path)
    side = path.with_suffix(".json")
    with open(path, "rb") as f:
        m = _PAIR_RE.search(f.read(4096))  # the <meta> is in the head, within its first lines
    data = json.loads(side.read_text(encoding="utf-8"))
    pair = data.get("pair") if isinstance(data, dict) else None
    if not m or not pair or m.group(1).decode() != pair:
        raise ValueError(f"{path} and {side.name} are not one report (a write was interrupted, "
                         "or one was replaced): run the report again")
    return data
