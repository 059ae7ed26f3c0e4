"""``tapescope gradcheck``: every op's backward against finite differences, as a table."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``gradcheck`` subcommand."""
    p = sub.add_parser("gradcheck", help="check every op's backward against finite differences")
    p.add_argument("--op", action="append", help="check only this op (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float64", choices=["float64", "float16", "bfloat16"],
                   help="float16/bfloat16: the half tape's gradient against float64's, within "
                        "each op's stated tolerance in epsilons (core.gradcheck.HALF_TOL)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the per-op table; exit 1 on any failure (an unknown op raises: exit 2)."""
    from tapescope.core import gradcheck
    from tapescope.core.ops import REGISTRY

    names = args.op or [n for n in sorted(REGISTRY) if REGISTRY[n].kind != "leaf"]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown op(s): {', '.join(unknown)} (known: "
                         f"{', '.join(n for n in sorted(REGISTRY) if REGISTRY[n].kind != 'leaf')})")
    half = getattr(args, "dtype", "float64") != "float64"
    if half:
        print(f"{args.dtype} gradients against float64's (error in {args.dtype} epsilons, "
              "relative to max(1, |g|))")
        print(f"{'op':<15} {'cases':>5} {'inputs checked':>15} {'max err (eps)':>14} "
              f"{'tolerance':>10}  verdict")
    else:
        print(f"{'op':<15} {'cases':>5} {'inputs checked':>15} {'max rel error':>14}  verdict")
    failed = 0
    for name in names:
        if half:
            r = gradcheck.check_op_half(name, args.dtype, args.seed)
            tol = gradcheck.HALF_TOL.get(name, gradcheck.HALF_TOL_DEFAULT)
            failed += not r.ok
            print(f"{r.op:<15} {r.cases:>5} {r.inputs_checked:>15} {r.max_err:>14.3f} "
                  f"{tol:>10.1f}  {'ok' if r.ok else 'FAIL'}")
            continue
        r = gradcheck.check_op(name, args.seed)
        failed += not r.ok
        print(f"{r.op:<15} {r.cases:>5} {r.inputs_checked:>15} {r.max_err:>14.2e}  "
              f"{'ok' if r.ok else 'FAIL'}")
    if not args.op and not half:
        for label, ok in gradcheck.identities():
            failed += not ok
            print(f"identity: {label:<52} {'ok' if ok else 'FAIL'}")
    print(f"{len(names)} ops checked, {failed} failed")
    return 1 if failed else 0
