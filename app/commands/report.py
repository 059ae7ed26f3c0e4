"""``tapescope report``: train a workload on two runs side by side and write one self-contained
HTML parity report (inline CSS, embedded PNGs) plus its JSON sidecar."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand."""
    from tapescope.app.commands.argtypes import positive_int
    from tapescope.app.compares import COMPARES

    p = sub.add_parser("report", help="HTML parity report (+ .json) of a side-by-side run")
    p.add_argument("--workload", default=None, help="mlp (default) | transformer | PATH.py")
    from tapescope.app.commands.model_args import add_model_args

    add_model_args(p)
    from tapescope.app.commands.argtypes import add_candidate_args

    add_candidate_args(p)  # --device, the torch settings, --kernel, --explain
    from tapescope.app.commands.argtypes import add_against_arg

    add_against_arg(p)  # --against B
    p.add_argument("--fuse", action="store_true", help="replay the fused plan (gpu.fusion)")
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"],
                   help="the candidate's math (the reference is always refmath)")
    p.add_argument("--dtype", default=None, choices=["float64", "float32", "float16", "bfloat16"],
                   help="default: a model's own precision, else float64")
    from tapescope.app.commands.model_args import add_amp_args

    add_amp_args(p)
    p.add_argument("--compare", default="cpu-device", choices=list(COMPARES),
                   help="which two runs: " + "; ".join(f"{k}: {v}" for k, v in COMPARES.items()))
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="report.html", help="the HTML file (the .json goes beside)")
    p.add_argument("--capture", metavar="FILE", default=None,
                   help="report on a capture (`tapescope capture`) instead: every recorded aten "
                        "op judged against the exact reference (docs/capture.md)")
    p.add_argument("--worker", metavar="CMD", default=None,
                   help="run the device side through this command (split like a shell line, "
                        "never run by a shell), e.g. \"ssh gpu-box tapescope worker\"")
    from tapescope.app.commands.worker import add_timeout_flags

    add_timeout_flags(p)  # --worker-timeout S, --worker-open-timeout S
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run, write the report; 0 when bit-identical, 1 when not (a bad input raises:
    ``tapescope`` turns it into one line and exit 2)."""
    import os
    import sys

    if getattr(args, "capture", None):  # the user's own recorded run (docs/capture.md)
        if args.workload or getattr(args, "model", None):
            raise ValueError("--capture reports on a recorded run: drop --workload / --model")
        if getattr(args, "against", None):  # two captures, one arbiter (issue 43)
            from tapescope.app.commands.capture_pair import report_pair

            return report_pair(args)
        from tapescope.app.commands.capture_ranks import ranks_asked, report_rank_files

        if ranks_asked(args):  # the ranks of one torchrun, together (issue 43 item 4)
            return report_rank_files(args)
        from tapescope.app.commands.capture import report_capture

        return report_capture(args)
    from tapescope.app.commands.argtypes import check_against

    check_against(args)  # --against FILE needs --capture A
    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, not {args.steps}")
    if not args.out.lower().endswith((".html", ".htm")):
        raise ValueError(f"--out {args.out!r} must end in .html")
    from pathlib import Path

    from tapescope.core.atomic import check_writable

    # before the run: a bad place to write must not cost the user the whole run (the folder is
    # the user's to make: none is created for them)
    check_writable(args.out, "--out")
    check_writable(Path(args.out).with_suffix(".json"), "--out's JSON")
    from tapescope.app.commands.model_args import amp_kwargs, resolve_dtype, resolve_workload
    from tapescope.app.commands.worker import timeouts as worker_timeouts
    from tapescope.app.pairs import open_pair
    from tapescope.app.report_data import ReportAccumulator
    from tapescope.app.runs import SessionConfig

    wl_spec = resolve_workload(args)
    from tapescope.app.commands.argtypes import candidate_config

    cfg = SessionConfig(workload=wl_spec, fuse=args.fuse,
                        dtype=resolve_dtype(args.dtype, wl_spec), math=args.math,
                        compare=args.compare, seed=args.seed,
                        worker=getattr(args, "worker", None), **worker_timeouts(args),
                        **candidate_config(args), **amp_kwargs(args))
    from tapescope.core.progress import progress

    model = getattr(args, "model", None)
    label = (args.workload or "mlp") if model is None else os.path.basename(model)
    with progress(f"opening {label} on {args.device}"):  # a model's import, the first compile
        runner = open_pair(cfg)
    print(runner.describe_device())
    against = None
    if getattr(args, "against", None):
        from tapescope.app.commands.against import Against

        against = Against(cfg, args.against, runner)
        print(against.describe())
    plan = runner.plan.to_json() if runner.plan is not None else None
    acc = ReportAccumulator(cfg, runner.nodes, runner.ref_spec.label(),
                            runner.cand_spec.label(), runner.describe_device(), plan)
    from tapescope.app.commands.parity import introduced_entries
    from tapescope.core.summary import fold

    # a terminal gets one updating stderr line: steps done, elapsed (nothing in a pipe or log)
    with progress(f"report {label}", total=args.steps) as bar:
        for _ in range(args.steps):
            if against is not None:
                against.before()
            r = runner.step()
            if against is not None:
                against.step(r, fold, introduced_entries)
            acc.add(r)
            bar.advance()
            print(f"step {r.step:4d}  loss {r.loss_ref:.9g}  {r.loss_cand:.9g}  "
                  f"{'exact' if r.exact else 'DIFFERS'}", flush=True)
    data = acc.to_json()
    if against is not None:
        against.finish(args.steps, fold)
        data["against"] = against.to_json()
    from tapescope.app.report_html import qt_missing, write_report

    why = qt_missing()
    if why:  # the page still has its graph: an SVG drawn from the layout, without Qt
        print(f"tapescope report: no Qt ({why}): the DAG is drawn as SVG without it; the "
              "training plots need PySide6 and are left out", file=sys.stderr)
    with progress(f"writing {os.path.basename(args.out)} (pictures, tables)"):
        # both or neither; an OSError names the file
        html, side = write_report(data, args.out, debug=bool(getattr(args, "debug", False)))
    fi = data.get("first_introduced")
    if fi and fi["entries"]:
        from tapescope.app.commands.parity import introduced_text

        print(f"introduced at step {fi['step']}: {introduced_text(fi['entries'], runner.nodes)}")
    print(f"{data['verdict']['text']}\nwrote {html} and {side}")
    both = against is None or against.exact
    return 0 if data["verdict"]["exact"] and both else 1
