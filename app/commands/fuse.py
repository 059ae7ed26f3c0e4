"""``tapescope fuse``: capture a workload on a device and print its fusion plan (segments, kernel
names, launches per episode unfused vs fused; ``--source`` adds every generated kernel)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fuse`` subcommand."""
    p = sub.add_parser("fuse", help="print the fusion plan of a workload (generated kernels)")
    p.add_argument("--workload", default="mlp", help="mlp | transformer")
    p.add_argument("--device", default="host", choices=["auto", "host", "cuda"])
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"])
    p.add_argument("--source", action="store_true", help="print the generated CUDA C too")
    p.add_argument("--json", metavar="FILE", help="write the plan (sources included) as JSON")
    p.add_argument("--check", action="store_true",
                   help="also run one episode fused and unfused and compare every bit")
    p.set_defaults(func=run)


def _check(dev, args) -> bool:
    import numpy as np

    import gpu
    from core import workloads
    from gpu import fusion

    progs = []
    for fuse in (False, True):
        wl = workloads.get(args.workload, dtype=args.dtype, math=args.math)
        prog = gpu.capture(dev, wl.tape, wl.record(0))
        if fuse:
            fusion.apply(prog)
        prog.run_episode(gpu.from_core(wl.make_optimizer()))
        progs.append(prog)
    a, b = progs
    for n in a.nodes:
        for which in ("value", "grad"):
            x, y = a.read(n.id, which), b.read(n.id, which)
            if (x is None) != (y is None) or (x is not None and np.asarray(x).tobytes()
                                              != np.asarray(y).tobytes()):
                print(f"fused and unfused differ at node {n.id} {n.op} ({which})")
                return False
    print(f"one episode fused == unfused, bit for bit ({len(a.nodes)} nodes, values, "
          "gradients and updated parameters)")
    return True


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 on success, 1 when --check finds a difference, 2 on bad input."""
    import json
    import sys

    import gpu
    from core import workloads
    from gpu import fusion

    try:
        wl = workloads.get(args.workload, dtype=args.dtype, math=args.math)
        dev = gpu.open_device(args.device)
        prog = gpu.capture(dev, wl.tape, wl.record(0))
    except (ValueError, gpu.DeviceError, gpu.CaptureError) as e:
        print(f"tapescope fuse: {e}", file=sys.stderr)
        return 2
    print(dev.describe())
    plan = fusion.plan(prog)
    print(f"workload {args.workload}: {plan.describe(sources=args.source)}")
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(plan.to_json(), f, indent=1)
        except OSError as e:
            print(f"tapescope fuse: cannot write {args.json}: {e}", file=sys.stderr)
            return 2
    if args.check:
        return 0 if _check(dev, args) else 1
    return 0
