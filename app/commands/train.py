"""``tapescope train``: run a workload headlessly on the CPU tape, one loss line per step."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` subcommand."""
    p = sub.add_parser("train", help="train a workload on the CPU tape (headless)")
    p.add_argument("--workload", default="mlp", help="mlp | transformer")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Train and print ``step N loss X`` per step; exit 2 on a bad workload."""
    import time

    from core import workloads

    try:
        wl = workloads.get(args.workload, dtype=args.dtype, math=args.math, seed=args.seed)
    except workloads.WorkloadError as e:
        print(f"tapescope train: {e}\n{e.details}".rstrip())
        return 2
    except ValueError as e:
        print(f"tapescope train: {e}")
        return 2
    print(f"workload {wl.name}: {len(wl.params)} parameter tensors, "
          f"{sum(p.node.size for p in wl.params)} weights, {args.dtype}, math={args.math}")
    t0 = time.perf_counter()

    def show(step: int, loss: float) -> None:
        print(f"step {step + 1:4d}  loss {loss:.6f}", flush=True)

    losses = wl.train(args.steps, show)
    dt = time.perf_counter() - t0
    if losses:
        print(f"{args.steps} steps in {dt:.2f} s; loss {losses[0]:.6f} -> {losses[-1]:.6f}")
    return 0
