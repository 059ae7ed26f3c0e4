"""``tapescope parity --capture OUT`` over the rank files of one torchrun (``OUT.rank0.capture``
...; or ``--capture OUT.rank0.capture --ranks [FILE ...]``): every collective against the fixed
order and the ranks against each other, each rank judged as a capture is (core/capture/ranks.py,
docs/capture.md "Ranks"). Exit 0 when every collective is exact and the ranks agree after each
and every rank's judged ops are exact; 1 when something differs; 2 for rank files that are not
one complete run.
"""

from __future__ import annotations

import argparse
import os


def ranks_asked(args: argparse.Namespace) -> bool:
    """``--ranks`` given, or ``--capture`` names no file but has rank files (``OUT``)."""
    from tapescope.core.capture.ranks import rank_files

    return getattr(args, "ranks", None) is not None or bool(rank_files(args.capture))


def _paths(args: argparse.Namespace) -> list[str]:
    from tapescope.core.capture.ranks import rank_files

    given = getattr(args, "ranks", None)
    if given:
        return [args.capture, *given]
    found = rank_files(args.capture)
    if not found:
        raise ValueError(f"{args.capture}: no rank files beside it (OUT.rank0.capture, "
                         "OUT.rank1.capture ...; give them after --ranks)")
    if given is not None and os.path.abspath(args.capture) not in map(os.path.abspath, found):
        found = [args.capture, *found]
    return found


def judge_rank_files(args: argparse.Namespace) -> int:
    import json

    from tapescope.core.atomic import check_writable, write_atomic
    from tapescope.core.parity import strict_json

    if args.json:
        check_writable(args.json, "--json")
    rep = _judged(args)
    print_ranks(rep, bool(getattr(args, "explain", False)))
    if args.json:
        write_atomic(args.json, json.dumps(strict_json(_slim(rep)), indent=1, allow_nan=False))
    return 0 if rep["exact"] else 1


def report_rank_files(args: argparse.Namespace) -> int:
    """``report --capture OUT --out R.html``: the ranks judged together as a self-contained
    page and its JSON beside it (both or neither); 0 when exact, 1 when something differs."""
    import json
    from pathlib import Path

    from tapescope.app.capture import ranks_html, report_html
    from tapescope.core.atomic import write_all
    from tapescope.core.parity import strict_json

    report_html.check(args.out)  # before the judging, not after it
    rep = _judged(args)
    print_ranks(rep, bool(getattr(args, "explain", False)))
    side = Path(args.out).with_suffix(".json")
    page, side = write_all([(args.out, ranks_html.render(rep)),
                            (side, json.dumps(strict_json(_slim(rep)), indent=1,
                                              allow_nan=False))])
    print(f"wrote {page} and {side}")
    return 0 if rep["exact"] else 1


def _slim(rep: dict) -> dict:
    """The report without each rank's per-op list (``parity --capture RANKFILE`` has it)."""
    return {**rep, "per_rank": [{k: v for k, v in p.items() if k != "ops"}
                                for p in rep["per_rank"]]}


def _judged(args: argparse.Namespace) -> dict:
    from tapescope.core.capture.ranks import judge_ranks, load_ranks
    from tapescope.core.progress import progress

    paths = _paths(args)
    with progress(f"loading {len(paths)} rank files"):
        rs = load_ranks(paths)
    with progress("judging the ranks", total=sum(c.n_ops for c in rs.caps)) as bar:
        return judge_ranks(rs, explain=bool(getattr(args, "explain", False)),
                           advance=bar.advance)


def _rank_cell(e: dict) -> str:
    v = e["verdict"]
    if v == "introduced":
        return f"introduced {e['n_diff']}/{e['n']}" + (f" {e['cause']['cause']}"
                                                      if "cause" in e else "")
    return v


def print_ranks(rep: dict, explain: bool = False) -> None:
    """The human summary of the ranks judged together."""
    from tapescope.app.capture.ranks_html import short_source

    n = rep["ranks"]
    caps = rep["per_rank"]
    print(f"ranks {', '.join(rep['files'])}: {n} ranks of run {rep['run'][:12]}, "
          f"{rep['steps']} steps, {len(rep['collectives'])} collectives each; ops per rank "
          + ", ".join(str(p["n_ops"]) for p in caps))
    for note in rep["notes"]:
        print(f"note: {note}")
    print(f"{'#':>3} {'step':>4} {'phase':<9} {'collective':<30} {'reduce':<6} {'elements':>8} "
          f"{'ranks agree':<11}  " + "  ".join(f"{'rank ' + str(r):<14}" for r in range(n))
          + "  source")
    for c in rep["collectives"]:
        print(f"{c['collective']:>3} {c['step']:>4} {c['phase']:<9} {c['op'][:30]:<30} "
              f"{c.get('reduce', '-'):<6} {c['elements']:>8} "
              f"{'-' if c['agree'] is None else 'yes' if c['agree'] else 'NO':<11}  "
              + "  ".join(f"{_rank_cell(e):<14}" for e in c["ranks"])
              + f"  {short_source(c['source'])}")
    f = rep["first_collective"]
    if not rep["collectives"]:
        print("collectives: none recorded (the ranks never communicated)")
    elif f is None:
        print("collectives: every one exact against the fixed order (ranks in order), and the "
              "ranks agree after each")
    else:
        c = rep["collectives"][f["collective"] - 1]
        who = f["introduced_by"]
        said: dict[str, list[int]] = {}  # ranks with the same numbers said once
        for e in c["ranks"]:
            if e["verdict"] == "introduced":
                said.setdefault(f"{e['n_diff']} of {e['n']} elements (max {e['max_ulp']} ulp)"
                                + (f", cause {e['cause']['cause']}" if "cause" in e else ""),
                                []).append(e["rank"])
        intro = "; ".join(
            f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} "
            f"{'differ' if len(rs) > 1 else 'differs'} from the fixed order on the ranks' "
            f"recorded inputs in {what}" for what, rs in said.items())
        print(f"first collective with a difference: #{f['collective']} {f['op']} (step "
              f"{f['step']}, {f['phase']}, {short_source(f['source'])}): "
              + (f"introduced by rank{'s' if len(who) > 1 else ''} "
                 f"{', '.join(map(str, who))}: {intro}" if who else "no rank introduced it")
              + ("" if f["agree"] is None else "; the ranks agree after it" if f["agree"]
                 else "; the ranks DISAGREE after it"))
    for e in rep.get("optimizer_steps", []):
        if e["agree"] is None:
            print(f"step {e['step']} optimizer: not compared ({e['why']})")
        elif e["agree"]:
            print(f"step {e['step']} optimizer: every rank wrote rank 0's bits ({e['ops']} ops)")
        else:
            many = len(e["ranks"]) > 1
            print(f"step {e['step']} optimizer: rank{'s' if many else ''} "
                  f"{', '.join(map(str, e['ranks']))} part{'' if many else 's'} from rank 0 at op "
                  f"#{e['index'][e['ranks'][0]]} {e['op']} ({e['module'] or 'no module'})")
    for r, p in enumerate(caps):
        fd = p["first_divergence"]
        c = p["counts"]
        losses = ", ".join(repr(e["recorded"]) for e in p["losses"])
        print(f"rank {r}: losses {losses}; outputs " + ", ".join(f"{c[k]} {k}" for k in c if c[k])
              + "; first divergence: " + ("none" if fd is None else
                                          f"step {fd['step']} op #{fd['index']} {fd['op']} "
                                          f"({fd['module'] or 'no module'}, {fd['phase']}) "
                                          f"{fd['verdict']}"))
    if rep["exact"]:
        print("ranks bit-identical to the reference")
    else:
        what = []
        if not rep["agree"]:
            what.append("the ranks disagree after a collective")
        if not rep["collectives_exact"]:
            what.append("a collective left the fixed order")
        if any(not p["exact"] for p in caps):
            what.append("a rank's ops differ from the reference")
        print("DIFFERS: " + "; ".join(what))
