"""``tapescope parity --capture A --against B [--explain] [--json OUT]``: two captures of your
script, one arbiter (issue 43, core.capture.pair; ``report --capture A --against B --out R.html``
the same as a page, app/capture/pair_html.py): each run judged against the exact reference,
their ops matched by identity, and the first matched op where their outputs part, with which
run left the reference there. Exit 0 when every matched op is the same bits in both runs, 1
when one parts, 2 for a bad input (a helper of ``parity`` and ``report``; no command of its own).
"""

from __future__ import annotations

import argparse
import os


def _short(source: str) -> str:
    path, _, line = source.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else source


_SHORT = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _run_line(tag: str, s: dict) -> str:
    st, ap = s["settings"], s.get("applied") or {}
    ac = ap.get("autocast") or ("on" if st.get("autocast_cpu") else "off")
    return (f"{tag} {s['capture']}: {s['steps']} steps, {s['n_ops']} ops; torch "
            f"{st.get('torch')}, {st.get('threads')} threads, autocast {ac}"
            + (", deterministic" if st.get("deterministic") else ""))


def _verdict_line(tag: str, s: dict) -> str:
    f = s["first_divergence"]
    c = s["counts"]
    if s["exact"]:
        judged = c["exact"]
        return (f"{tag} against the reference: exact ({judged} outputs judged"
                + (f"; {c['no-reference']} without a reference" if c["no-reference"] else "")
                + ")")
    intro = f"{s['n_introduced']} introduced outputs, {c['inherited']} inherited"
    where = "" if f is None else (f"; first: step {f['step']} {tag}#{f['index']} {f['op']} "
                                  f"({f['module'] or 'no module'}, {f['phase']}) {f['verdict']}")
    return f"{tag} against the reference: DIFFERS ({intro}{where})"


def print_pair(rep: dict, explain: bool = False) -> None:
    """The human summary of A against B (stdout)."""
    print(_run_line("A", rep["a"]))
    print(_run_line("B", rep["b"]))
    sd = rep["settings_differ"]
    if sd:
        print("settings that differ: " + "; ".join(
            f"{d['setting']} {'-' if d['a'] is None else d['a']} | "
            f"{'-' if d['b'] is None else d['b']}" for d in sd))
    al = rep["alignment"]
    print(f"matched {al['matched']} ops; A only {al['only_a']}, B only {al['only_b']}")
    for tag, key in (("A", "first_only_a"), ("B", "first_only_b")):
        n = al[f"only_{tag.lower()}"]
        if n:
            print(f"  {tag} only: " + ", ".join(
                f"step {e['step']} {tag}#{e['index']} {e['op']} ({e['module'] or 'no module'}, "
                f"{e['phase']})" for e in al[key]) + (" ..." if n > len(al[key]) else ""))
    for e in rep["losses"]:
        a, b = e["a"], e["b"]
        same = "" if a is None or b is None else ("  same" if a == b else "  DIFFER")
        print(f"step {e['step']:4d}  loss A {a!r}  B {b!r}{same}")
    print(_verdict_line("A", rep["a"]))
    print(_verdict_line("B", rep["b"]))
    parted = rep["parted"]
    if parted:
        print(f"{'step':>4} {'#A':>6} {'#B':>6} {'phase':<9} {'op':<34} {'module':<22} "
              f"{'n_diff':>7} {'ulp':>10}  {'A':<11} {'B':<11}")
        for p in parted[:12]:
            o = p["outputs"][0]
            e = p["op_a"]
            nd = "?" if o["n_diff"] is None else o["n_diff"]
            ulp = o["max_ulp"] if o["dtype_a"] == o["dtype_b"] else \
                f"{_SHORT.get(o['dtype_a'], o['dtype_a'])}|{_SHORT.get(o['dtype_b'], o['dtype_b'])}"
            op = e["op"].removeprefix("aten.")
            print(f"{e['step']:>4} {p['a']:>6} {p['b']:>6} {e['phase']:<9} {op[:34]:<34} "
                  f"{(e['module'] or '')[-22:]:<22} {nd:>7} {ulp!s:>10}  "
                  f"{o['verdict_a']:<11} {o['verdict_b']:<11}")
        if rep["n_parted"] > 12:
            print(f"... {rep['n_parted'] - 12} more matched ops part (--json lists the first "
                  f"{len(parted)})")
    f = rep["first_parted"]
    if f is None:
        extra = al["only_a"] + al["only_b"]
        print(f"A and B: bit-identical on every matched op ({al['matched']} ops"
              + (f"; {extra} ops of one run only, not compared)" if extra else ")"))
        return
    o = f["outputs"][0]
    ins = f.get("inside")
    if ins is not None:  # inside a compiled graph of one run (core/capture/pair_regions.py)
        t, other = ins["run"], "B" if ins["run"] == "A" else "A"
        j = ins["counterpart"]
        of = (f" output {ins['output']}" if ins.get("output") is not None else "") + (
            f" (seen at output node {ins['seen_at']})" if ins.get("seen_at") else "")
        print(f"first parted: inside {t}'s compiled graph {t}#{ins['region']} ({ins['kind']}, "
              f"{ins['backend']}; step {f['step']}, {f['phase']}): node {ins['node']}{of} = "
              f"{ins['target']} (from {ins['original'] or '?'}, {ins['module'] or 'no module'}"
              + (f"; {other}#{j} there" if j is not None else "") + f"): {o['why']}")
    else:
        print(f"first parted: step {f['step']} A#{f['a']} / B#{f['b']} {f['op']} "
              f"({f['module'] or 'no module'}, {f['phase']}, {_short(f['source_a'])}) output "
              f"{o['output']}: {o['why']}")
    nd = f.get("node")
    if nd is not None:  # a compiled graph's call both runs made: the node where they part
        tags = [t for t in ("a", "b") if nd[f"departs_{t}"]]
        print(f"  inside the compiled graph: output node {nd['name']} = {nd['target']} (from "
              f"{nd['original'] or '?'}, {nd['module'] or 'no module'}); departs from the "
              "reference there on its own values: "
              + (", ".join(f"{t.upper()} (node {nd[f'departs_{t}']['name']})" for t in tags)
                 if tags else "neither run"))
    print(f"left the reference there: {f['left']} (A {f['verdict_a']}, B {f['verdict_b']}): "
          f"{f['cause']}")
    print(f"A and B DIFFER: {rep['n_parted']} of {al['matched']} matched ops part")


def pair_captures(args: argparse.Namespace) -> int:
    """``parity --capture A --against B``: load both captures, judge and pair them, print,
    write ``--json``; 0 agree, 1 part."""
    import json

    from tapescope.core.atomic import check_writable, write_atomic
    from tapescope.core.parity import strict_json

    out = getattr(args, "json", None)
    if out:
        check_writable(out, "--json")
    rep = _paired(args)
    if out:
        write_atomic(out, json.dumps(strict_json(rep), indent=1, allow_nan=False))
    return 0 if rep["agree"] else 1


def report_pair(args: argparse.Namespace) -> int:
    """``report --capture A --against B --out R.html``: the pair as a self-contained page and
    its JSON beside it (both or neither); 0 agree, 1 part."""
    import json
    from pathlib import Path

    from tapescope.app.capture import pair_html, report_html
    from tapescope.core.atomic import write_all
    from tapescope.core.parity import strict_json

    report_html.check(args.out)  # before the judging, not after it
    rep = _paired(args)
    side = Path(args.out).with_suffix(".json")
    page, side = write_all([(args.out, pair_html.render(rep)),
                            (side, json.dumps(strict_json(rep), indent=1, allow_nan=False))])
    print(f"wrote {page} and {side}")
    return 0 if rep["agree"] else 1


def _paired(args: argparse.Namespace) -> dict:
    from tapescope.app.capture import eager_kernels
    from tapescope.core.capture.file import comparable, load
    from tapescope.core.capture.judge import judge
    from tapescope.core.capture.pair import pair
    from tapescope.core.progress import file_label, progress

    explain = bool(getattr(args, "explain", False))
    caps = []
    for path in (args.capture, args.against):
        if not os.path.exists(path):
            raise ValueError(f"{path}: no such capture file")
        with progress(file_label("loading", path)):
            cap = load(path)
        if cap.steps == 0:
            raise ValueError(f"{path}: the capture holds no complete step")
        caps.append(cap)
    a, b = comparable(caps)  # digests of one algorithm, or refused before any judging
    caps = [a, b]
    judged = []
    for cap in caps:
        with progress(f"judging {os.path.basename(cap.path)}", total=cap.n_ops) as bar:
            judged.append(judge(cap, explain=explain, advance=bar.advance,
                                eager=eager_kernels() if cap.graphs else None))
    rep = pair(a, b, explain=explain, judged=(judged[0], judged[1]))
    rep.pop("reports")
    print_pair(rep, explain=explain)
    return rep
