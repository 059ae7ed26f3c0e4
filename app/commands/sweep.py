"""``tapescope sweep --out DIR [--settings threads,deterministic,autocast,compile] [--steps N]
-- python train.py ARGS...``: which setting changes my numbers (issue 43 item 3).

The script is captured once as the user runs it (the baseline) and once per setting flipped
from it, one at a time (``tapescope capture --set``: the child flips it before the script
runs, app/capture/flip.py); each capture is judged against the exact reference and against the
baseline (core.capture.pair), and one table says, per setting: the loss after N steps, the ops
that introduced a difference from the reference, the first op that parts from the baseline and
its cause. Exit 0 when every flipped run is the baseline's bits on every matched op, 1 when one
parts, 2 for a bad input (the script failing in its baseline run included).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os

SETTINGS = ("threads", "deterministic", "autocast", "matmul", "compile")
DEFAULT = "threads,deterministic,autocast,compile"
_SHORT = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` subcommand."""
    from tapescope.app.commands.argtypes import positive_int
    from tapescope.app.commands.capture import byte_size

    p = sub.add_parser(
        "sweep", help="which setting changes my numbers: capture the script once per setting "
                      "flipped, each judged against the reference and the baseline",
        description="Capture `python train.py ARGS` as it is (the baseline) and once per "
                    "setting flipped from it (threads, deterministic, autocast, matmul, "
                    "compile), judge each against the exact reference and "
                    "the baseline, print one table. Exit 0 every flipped run is the baseline's "
                    "bits, 1 one parts, 2 bad input.",
        usage="tapescope sweep --out DIR [--settings threads,deterministic,autocast,compile] "
              "[--steps N] -- python train.py ARGS...")
    p.add_argument("--out", metavar="DIR", help="folder for the captures, the scripts' output "
                   "and sweep.json (required; created)")
    p.add_argument("--settings", default=DEFAULT,
                   help=f"comma-separated, from {', '.join(SETTINGS)} (default {DEFAULT})")
    p.add_argument("--steps", type=positive_int, default=2, help="optimizer steps per capture")
    p.add_argument("--max-bytes", type=byte_size, default=None, metavar="N",
                   help="each capture's value budget (capture --max-bytes)")
    p.add_argument("--explain", action="store_true", help="causes in the judgements")
    p.add_argument("script_command", nargs=argparse.REMAINDER, metavar="-- python SCRIPT ARGS",
                   help="the command that trains, after --")
    p.set_defaults(func=run)


def _flip(name: str, base: dict) -> tuple[str | None, str]:
    """``(capture --set value, what it is)`` for a setting flipped from the baseline's
    settings, or ``(None, why not)``."""
    if name == "threads":
        n = int(base.get("threads") or 1)
        other = 1 if n > 1 else 2
        return f"threads={other}", f"{n} -> {other} threads"
    if name == "deterministic":
        on = bool(base.get("deterministic"))
        return f"deterministic={'off' if on else 'on'}", \
            f"deterministic {'on -> off' if on else 'off -> on'}"
    if name == "autocast":
        if base.get("autocast_cpu"):
            return None, "the baseline runs under autocast already"
        return "autocast=bfloat16", "CPU bf16 autocast around the model's forward"
    if name == "matmul":
        cur = base.get("float32_matmul_precision", "highest")
        other = "medium" if cur == "highest" else "highest"
        return f"matmul={other}", f"float32 matmul precision {cur} -> {other}"
    if name == "compile":
        return "compile=inductor", "the model's calls through torch.compile (inductor)"
    raise ValueError(f"unknown setting {name!r}")


def _capture(args: argparse.Namespace, name: str, flip: str | None) -> str:
    """Capture the script into DIR/NAME.capture (its output in DIR/NAME.log); the file."""
    from tapescope.app.commands import capture

    out = os.path.join(args.out, f"{name}.capture")
    log = os.path.join(args.out, f"{name}.log")
    with open(log, "w") as f:
        ns = argparse.Namespace(out=out, steps=args.steps, max_bytes=args.max_bytes,
                                hashes_only=False, flip=[flip] if flip else None,
                                script_command=list(args.script_command), child_out=f)
        with contextlib.redirect_stdout(io.StringIO()):
            capture.run(ns)
    return out


def _short_cause(f: dict | None) -> str:
    """The first parted op's cause in a few words (the full one is printed below the table)."""
    if f is None:
        return ""
    o = f["outputs"][0]
    va, vb = f["verdict_a"], f["verdict_b"]
    if o["dtype_a"] != o["dtype_b"]:
        return f"computes in {o['dtype_b']} (the baseline in {o['dtype_a']})"
    if va == vb == "introduced":
        head = "both kernels introduced a difference"
    elif vb == "introduced":
        head = "its kernel introduced it"
    elif va == "introduced":
        head = "the baseline's kernel introduced it"
    elif f["left"] == "neither":
        head = "both exact on their own inputs, which differ"
    else:
        head = f"baseline {va}, this run {vb}"
    return f"{head}; the runs differ in {o['why']}"


def _loss(rep: dict) -> float | None:
    ls = [e["recorded"] for e in rep["losses"] if e["recorded"] is not None]
    return ls[-1] if ls else None


def _n_introduced_ops(rep: dict) -> int:
    return len({(e["step"], e["index"]) for e in rep["introduced"]})


def run(args: argparse.Namespace) -> int:
    """Capture, judge, pair, print the table; 0 all agree with the baseline, 1 one parts."""
    import json

    from tapescope.app.commands.capture import _target
    from tapescope.core.atomic import write_atomic
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge
    from tapescope.core.capture.pair import pair
    from tapescope.core.parity import strict_json
    from tapescope.core.progress import progress

    _target(list(args.script_command))  # a bad command line (its script named) first
    if not args.out:
        raise ValueError("--out DIR is required (the folder for the captures)")
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    bad = [s for s in names if s not in SETTINGS]
    if bad or not names:
        raise ValueError(f"--settings {args.settings!r}: "
                         + (f"unknown {', '.join(bad)}" if bad else "none given")
                         + f" (known: {', '.join(SETTINGS)})")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out {args.out!r}: cannot create it ({e.strerror or e})") from None
    explain = bool(args.explain)
    try:
        base_file = _capture(args, "baseline", None)
    except ValueError as e:
        raise ValueError(f"the baseline run: {e}") from None
    base = load(base_file)
    with progress("judging the baseline", total=base.n_ops) as bar:
        rbase = judge(base, explain=explain, advance=bar.advance)
    rows = [{"setting": "baseline", "flip": "", "what": "as the script runs",
             "capture": base_file, "loss": _loss(rbase), "ops_introduced":
             _n_introduced_ops(rbase), "exact": rbase["exact"], "agree": True,
             "first_parted": None, "cause": "", "settings": base.settings}]
    for name in names:
        flip, what = _flip(name, base.settings)
        if name == "compile" and base.meta.get("compile_called"):
            flip, what = None, "the script compiles already (its baseline is compiled)"
        if flip is None:
            rows.append({"setting": name, "flip": None, "what": what, "skipped": what})
            continue
        try:
            f = _capture(args, name, flip)
        except ValueError as e:
            rows.append({"setting": name, "flip": flip, "what": what,
                         "skipped": f"capture failed: {e}"})
            continue
        cap = load(f)
        with progress(f"judging {name}", total=cap.n_ops) as bar:
            r = judge(cap, explain=explain, advance=bar.advance)
        rep = pair(base, cap, explain=explain, judged=(rbase, r))
        rep.pop("reports")
        fp = rep["first_parted"]
        rows.append({"setting": name, "flip": flip, "what": what, "capture": f,
                     "loss": _loss(r), "ops_introduced": _n_introduced_ops(r),
                     "exact": r["exact"], "agree": rep["agree"], "first_parted": fp,
                     "cause": _short_cause(fp), "left": None if fp is None else fp["left"],
                     "full_cause": None if fp is None else fp["cause"],
                     "matched": rep["alignment"]["matched"],
                     "only_baseline": rep["alignment"]["only_a"],
                     "only_flipped": rep["alignment"]["only_b"]})
    print_table(rows, args.steps)
    write_atomic(os.path.join(args.out, "sweep.json"),
                 json.dumps(strict_json({"steps": args.steps, "rows": rows,
                                         "command": list(args.script_command)}),
                            indent=1, allow_nan=False))
    return 0 if all(r.get("agree", True) for r in rows) else 1


def print_table(rows: list[dict], steps: int) -> None:
    """setting | loss after N steps | ops introduced | first op that parts | its cause."""
    print(f"{'setting':<14} {'flipped':<22} {f'loss after {steps} steps':<22} "
          f"{'introduced':>10}  {'first op that parts from the baseline':<56} cause")
    for r in rows:
        if "skipped" in r:
            print(f"{r['setting']:<14} {(r['flip'] or '-'):<22} {'-':<22} {'-':>10}  "
                  f"{'-':<56} {r['skipped']}")
            continue
        fp = r["first_parted"]
        if r["setting"] == "baseline":
            first = "(the baseline)"
        elif fp is None:
            first = "none: the same bits on every matched op"
        else:
            op = fp["op"].removeprefix("aten.").removesuffix(".default")
            if fp.get("inside"):  # a node inside the flipped run's compiled graph
                op = f"{op.split('.')[0]} (compiled graph)"
            first = f"step {fp['step']} #{fp['b']} {op} {fp['module'] or '(no module)'}"
        loss = "?" if r["loss"] is None else repr(r["loss"])
        left = {"A": "the baseline", "B": "this run", "both": "both runs",
                "neither": "neither run"}.get(fp["left"], fp["left"]) if fp else ""
        cause = r["cause"] if fp is None else f"{left} left the reference: {r['cause']}"
        print(f"{r['setting']:<14} {(r['flip'] or '-'):<22} {loss:<22} "
              f"{r['ops_introduced']:>10}  {first[:56]:<56} {cause}")
    full = [r for r in rows if r.get("full_cause")]
    if full:
        print("causes (A = the baseline, B = the flipped run):")
    for r in full:
        print(f"  {r['setting']}: {r['full_cause']}")
