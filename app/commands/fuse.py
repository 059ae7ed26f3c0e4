"""``tapescope fuse``: capture a workload (or a recorded ``.tape``) on a device and print its fusion
plan (segments, kernel names, launches per episode unfused vs fused; ``--source`` adds every
generated kernel)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fuse`` subcommand."""
    p = sub.add_parser("fuse", help="print the fusion plan of a workload (generated kernels)")
    p.add_argument("--workload", default="mlp", help="mlp | transformer | PATH.py")
    p.add_argument("--tape", metavar="FILE",
                   help="a recorded .tape instead of a workload (loss: meta 'loss', else last)")
    p.add_argument("--device", default="host", choices=["auto", "host", "cuda"])
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"])
    p.add_argument("--source", action="store_true", help="print the generated CUDA C too")
    p.add_argument("--json", metavar="FILE", help="write the plan (sources included) as JSON")
    p.add_argument("--check", action="store_true",
                   help="also run one episode fused and unfused and compare every bit")
    p.set_defaults(func=run)


def _episode(args):
    """(tape, loss, core optimizer or None) of the workload or the tape file."""
    from tapescope.core import tapefile, workloads

    if args.tape:
        from tapescope.core.progress import file_label, progress

        with progress(file_label("loading", args.tape)):  # a terminal sees a big tape load
            tape, meta = tapefile.load(args.tape)
        return tape, int(meta.get("loss", len(tape) - 1)), None
    wl = workloads.get(args.workload, dtype=args.dtype, math=args.math)
    return wl.tape, wl.record(0), wl.make_optimizer()


def _check(dev, args) -> bool:
    import numpy as np

    from tapescope import gpu
    from tapescope.gpu import fusion

    progs, opt = [], None
    for fuse in (False, True):
        tape, loss, opt = _episode(args)
        prog = gpu.capture(dev, tape, loss)
        if fuse:
            fusion.apply(prog)
        prog.run_episode(gpu.from_core(opt) if opt is not None else None)
        progs.append(prog)
    a, b = progs
    for n in a.nodes:
        for which in ("value", "grad"):
            x, y = a.read(n.id, which), b.read(n.id, which)
            if (x is None) != (y is None) or (x is not None and np.asarray(x).tobytes()
                                              != np.asarray(y).tobytes()):
                print(f"fused and unfused differ at node {n.id} {n.op} ({which})")
                return False
    what = "values, gradients and updated parameters" if opt else "values and gradients"
    print(f"one episode fused == unfused, bit for bit ({len(a.nodes)} nodes, {what})")
    return True


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 on success, 1 when --check finds a difference (a bad input raises:
    ``tapescope`` turns it into one line and exit 2)."""
    import json

    from tapescope import gpu
    from tapescope.core.atomic import check_writable, write_atomic
    from tapescope.gpu import fusion

    if args.json:
        check_writable(args.json, "--json")
    tape, loss, _ = _episode(args)
    dev = gpu.open_device(args.device)
    prog = gpu.capture(dev, tape, loss)
    print(dev.describe())
    plan = fusion.plan(prog)
    what = f"tape {args.tape}" if args.tape else f"workload {args.workload}"
    print(f"{what}: {plan.describe(sources=args.source)}")
    if args.json:  # whole or not at all (core.atomic); the error names the file
        write_atomic(args.json, json.dumps(plan.to_json(), indent=1))
    if args.check:
        return 0 if _check(dev, args) else 1
    return 0
