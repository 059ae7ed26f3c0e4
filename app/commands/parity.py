"""``tapescope parity``: train a workload on the CPU tape and on a device side by side, diffing
every node's value and gradient every step (exit 0 only when all of it is bit-identical).

The loop is ``app.runs.PairRunner``, the same one ``tapescope report`` and the live session step:
the reference is the CPU tape with refmath, the candidate the device replay with ``--math``.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``parity`` subcommand."""
    from tapescope.app.commands.argtypes import positive_int

    p = sub.add_parser("parity", help="CPU tape vs device replay, bit for bit, every step",
                       description="CPU tape (refmath) vs device replay, every node every step. "
                                   "Exit 0 bit-identical, 1 differs, 2 bad input or setup.")
    p.add_argument("--workload", default=None, help="mlp (default) | transformer | PATH.py")
    from tapescope.app.commands.model_args import add_model_args

    add_model_args(p)  # --model M.onnx [--reinit]
    from tapescope.app.commands.argtypes import add_candidate_args

    add_candidate_args(p)  # --device, the torch settings, --kernel, --explain
    from tapescope.app.commands.argtypes import add_against_arg

    add_against_arg(p)  # --against B
    p.add_argument("--steps", type=positive_int, default=5)
    p.add_argument("--dtype", default=None, choices=["float64", "float32", "float16", "bfloat16"],
                   help="default: a model's own precision, else float64")
    from tapescope.app.commands.model_args import add_amp_args

    add_amp_args(p)
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"],
                   help="the candidate's math (the reference is always refmath)")
    p.add_argument("--fuse", action="store_true", help="replay the fused plan (gpu.fusion)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--fail-on", choices=["diff", "bug"], default="diff",
                   help="exit 1 on any difference (diff, the default), or only when an "
                        "introduced array is outside every reordering bound (bug; implies "
                        "--explain): core/bounds.py, docs/candidates.md")
    p.add_argument("--capture", metavar="FILE", default=None,
                   help="judge a capture (`tapescope capture`) instead: every recorded aten op "
                        "against the exact reference, introduced vs inherited (docs/capture.md)")
    p.add_argument("--ranks", nargs="*", metavar="FILE", default=None,
                   help="with --capture RANK0: judge every rank of a torchrun capture together "
                        "(its OUT.rankN.capture siblings, or the FILEs given): the collectives "
                        "against the fixed order, the ranks against each other; --capture OUT "
                        "(the --out given to capture) does the same")
    p.add_argument("--worker", metavar="CMD", default=None,
                   help="run the device side through this command (split like a shell line, "
                        "never run by a shell), e.g. \"ssh gpu-box tapescope worker\"; the CPU "
                        "reference stays here; with --capture FILE the capture is judged by "
                        "the worker, FILE a path on its machine")
    p.add_argument("--inject", metavar="NODE[:grad]@STEP",
                   help="flip the lowest mantissa bit of element 0 of NODE's (id or name) "
                        "device value (gradient) at STEP, right after the device computes it "
                        "(unfused only): that node is then reported as introduced")
    from tapescope.app.commands.worker import add_timeout_flags

    add_timeout_flags(p)  # --worker-timeout S, --worker-open-timeout S
    p.set_defaults(func=run)


def divergence_text(first: dict | None) -> str:
    """``step 2 node #5 matmul (value)``, or ``none``: the first divergence as a user reads it
    (the summary line, the live session's label)."""
    if not first:
        return "none"
    return f"step {first['step']} node #{first['node']} {first['op']} ({first['which']})"


def introduced_entries(step: int, introduced: list[dict]) -> list[dict]:
    """A step's introduced arrays (``StepResult.introduced``) as the JSON lists them."""
    keep = ("node", "op", "which", "n_diff", "max_ulp", "first_index", "by", "part", "cause",
            "explain", "class", "bound_ratio", "n_outside")
    return [{"step": step, **{k: e[k] for k in keep if k in e}} for e in introduced]


def introduced_text(entries: list[dict], nodes: tuple) -> str:
    """``#45 mul ffn/act value (250 elements, max 3 ulp); ...`` for the summary line."""
    parts = []
    for e in entries:
        name = nodes[e["node"]].name if 0 <= e["node"] < len(nodes) else None
        by = f" by #{', #'.join(map(str, e['by']))}" if e.get("by") else ""
        why = ""
        if e.get("explain"):
            why = f": {cause_text(e)}" if e["cause"] == "unknown" else \
                f": {e['cause']}, {cause_text(e)}"
        parts.append(f"#{e['node']} {e['op']}{' ' + name if name else ''} {e['which']}{by} "
                     f"({e['n_diff']} elements, max {e['max_ulp']} ulp){why}")
    return "; ".join(parts)


def cause_text(e: dict) -> str:
    """An explained entry's cause as one phrase (``core.explain.Cause.text``)."""
    from tapescope.core.explain import cause_text as text

    return text(e["explain"])


def run(args: argparse.Namespace) -> int:
    """Run the side-by-side training; print a summary table; 0 when exact, 1 when not (a bad
    input raises: ``tapescope`` turns it into one line and exit 2)."""
    import json
    import os

    from tapescope.app.commands.parity_table import loss_text, other_loss_text, print_nodes
    from tapescope.app.commands.worker import timeouts as worker_timeouts
    from tapescope.app.pairs import open_pair
    from tapescope.app.runs import SessionConfig
    from tapescope.core.atomic import check_writable, write_atomic
    from tapescope.core.parity import entry_differs, strict_json
    from tapescope.core.summary import fold, node_summary

    if getattr(args, "capture", None):  # the user's own recorded run (docs/capture.md)
        if args.workload or getattr(args, "model", None):
            raise ValueError("--capture judges a recorded run: drop --workload / --model")
        if getattr(args, "against", None) and getattr(args, "ranks", None) is not None:
            raise ValueError("--ranks and --against: judge the ranks of one run, or two runs, "
                             "not both at once")
        if getattr(args, "worker", None) and (getattr(args, "against", None)
                                              or getattr(args, "ranks", None) is not None):
            raise ValueError("--worker judges one capture where it is: not with --against or "
                             "--ranks")
        if getattr(args, "worker", None):  # FILE is on the worker's machine: judged there
            from tapescope.app.commands.capture import judge_capture

            return judge_capture(args)
        if getattr(args, "against", None):  # two captures, one arbiter (issue 43)
            from tapescope.app.commands.capture_pair import pair_captures

            return pair_captures(args)
        from tapescope.app.commands.capture_ranks import judge_rank_files, ranks_asked

        if ranks_asked(args):  # the ranks of one torchrun, together (issue 43 item 4)
            return judge_rank_files(args)
        from tapescope.app.commands.capture import judge_capture

        return judge_capture(args)
    from tapescope.app.commands.argtypes import check_against

    if getattr(args, "ranks", None) is not None:
        raise ValueError("--ranks needs --capture RANK0 (a rank file of `tapescope capture -- "
                         "torchrun ...`)")
    check_against(args)  # --against FILE needs --capture A
    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, not {args.steps}")
    if args.json:
        check_writable(args.json, "--json")  # before the run, not after it
    from tapescope.app.commands.model_args import amp_kwargs, resolve_dtype, resolve_workload

    wl_spec = resolve_workload(args)
    from tapescope.app.commands.argtypes import candidate_config

    if getattr(args, "fail_on", "diff") == "bug":
        args.explain = True  # the class is computed where the causes are
    cfg = SessionConfig(workload=wl_spec, fuse=args.fuse,
                        dtype=resolve_dtype(args.dtype, wl_spec), math=args.math,
                        compare="cpu-device", seed=args.seed,
                        worker=getattr(args, "worker", None), **worker_timeouts(args),
                        **candidate_config(args), **amp_kwargs(args))
    if args.inject and args.fuse:
        raise ValueError("--inject works on the unfused replay: drop --fuse (a fused kernel "
                         "computes many nodes in one launch)")
    explain = cfg.explain
    from tapescope.core.progress import progress

    model = getattr(args, "model", None)
    label = (args.workload or "mlp") if model is None else os.path.basename(model)
    with progress(f"opening {label} on {args.device}"):  # a model's import, the first compile
        runner = open_pair(cfg, inject=args.inject)
    inj = runner.inject
    if inj is not None and inj.step > args.steps:
        raise ValueError(f"--inject {args.inject!r}: step {inj.step} is not run "
                         f"(--steps {args.steps})")
    print(runner.describe_device())
    ref_opt = getattr(getattr(runner, "ref", None), "opt", None)
    if cfg.optimizer and ref_opt is not None:  # (a worker's pair: its flags are in the JSON)
        from tapescope.core.optim_config import OptimConfig

        print(f"optimizer: {OptimConfig.parse(cfg.optimizer).describe(ref_opt)}")
    against = None
    if getattr(args, "against", None):
        from tapescope.app.commands.against import Against

        against = Against(cfg, args.against, runner)
        print(against.describe())
    # dynamic axes: what was chosen (a local pair's reference workload; a worker's pair keeps
    # its workload on the worker's side)
    ref_wl = getattr(getattr(runner, "ref", None), "wl", None)
    for note in getattr(ref_wl, "input_notes", []):
        print(note)
    per_node: dict[int, dict] = {}
    first = None
    introduced: list[dict] = []
    kernels: list[dict] = []
    first_introduced: list[dict] | None = None
    losses: list[dict] = []  # each step's loss on both sides (the JSON's "losses")
    # a terminal gets one updating stderr line: steps done, elapsed (nothing in a pipe or log)
    with progress(f"parity {label}", total=args.steps) as bar:
        for _ in range(args.steps):
            if against is not None:
                against.before()
            r = runner.step()
            bar.advance()
            losses.append({"step": r.step, "reference": r.loss_ref, "candidate": r.loss_cand})
            fold(per_node, r.nodes, r.step)
            if first is None and r.first is not None:
                first = {"step": r.step, **r.first}
            intro = introduced_entries(r.step, r.introduced)
            introduced += intro
            kernels += [{"step": r.step, **{k: e[k] for k in ("kernel", "role", "segment",
                                                              "first_node", "n_diff", "max_ulp")}}
                        for e in r.kernels if e["introduced"]]
            if first_introduced is None and (not r.exact or intro):
                first_introduced = intro
            rb = None if against is None else against.step(r, fold, introduced_entries)
            print(f"step {r.step:4d}  {loss_text(r.loss_ref, r.loss_cand, cfg.dtype)}  "
                  f"{'exact' if r.exact else 'DIFFERS'}"
                  + ("" if rb is None else
                     f"  against {other_loss_text(r.loss_ref, rb.loss_cand, cfg.dtype)}  "
                     f"{'exact' if rb.exact else 'DIFFERS'}"), flush=True)
    # the trained parameters after the last update (each step compares them before its own)
    params = runner.compare_params().to_json()
    fold(per_node, params["nodes"], args.steps)
    if first is None and params["first_divergence"] is not None:
        first = {"step": args.steps, "node": params["first_divergence"]["node"], "op": "param",
                 "which": "value"}
    if against is not None:
        against.finish(args.steps, fold)
    # the one JSON form of a node over a run (core.summary.NODE_KEYS), as the report writes it
    nodes = [node_summary(runner.nodes[i], e["value"], e["grad"], e["first_step_differing"])
             for i, e in sorted(per_node.items())]
    bad = [n for n in nodes if entry_differs(n)]
    exact = not bad
    stats = runner.stats()
    report = {"device": runner.device_kind, "steps": args.steps, "exact": exact,
              "first_divergence": first, "nodes": nodes, "stats": stats,
              "introduced": introduced, "kernels_introduced": kernels,
              "inject": None if inj is None else inj.label(), "dtype": cfg.dtype,
              "losses": losses,
              "optimizer": json.loads(cfg.optimizer) if cfg.optimizer else None}
    print_nodes(bad, introduced, explain)  # introduced first, then the worst inherited
    nan_bits = sum(s["nan_bits_differ"] for n in nodes for s in (n["value"], n["grad"]) if s)
    print(f"{len(nodes)} nodes x {args.steps} steps on {runner.device_kind}: "
          f"{'bit-identical' if exact else f'{len(bad)} nodes differ'}; first divergence: "
          f"{divergence_text(first)}; "
          + (f"launches per episode: {stats['launches_per_episode']}; " if stats else "") +
          f"NaNs differing only in sign/payload (equal): {nan_bits}")
    if first_introduced:
        print(f"introduced at step {first_introduced[0]['step']}: "
              f"{introduced_text(first_introduced, runner.nodes)}")
    elif not exact:
        print("introduced: none (every difference is inherited from a leaf or an update)")
    if introduced:
        n_steps = len({e["step"] for e in introduced})
        print(f"{len(introduced)} introduced arrays over {n_steps} steps (--json lists them)")
    if against is not None:
        against.print_table(per_node, introduced, runner.cand_spec.label())
        report["against"] = against.to_json()
        exact = exact and against.exact
    if args.json:  # whole or not at all (core.atomic): a full disk keeps the old file
        write_atomic(args.json, json.dumps(strict_json(report), indent=1, allow_nan=False))
    if getattr(args, "fail_on", "diff") == "bug":  # only what no reordering explains
        from tapescope.core.bounds import fail_on_bug

        return fail_on_bug(introduced)
    return 0 if exact else 1
