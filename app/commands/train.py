"""``tapescope train``: run a workload headlessly on the CPU tape, one loss line per step."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train`` subcommand."""
    from tapescope.app.commands.argtypes import positive_int

    p = sub.add_parser("train", help="train a workload on the CPU tape (headless)",
                       description="Train a workload on the CPU tape, one loss line per step. "
                                   "Exit 0 when it ran, 2 on a bad input (one line on stderr).")
    p.add_argument("--workload", default="mlp", help="mlp | transformer | PATH.py")
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--dtype", default=None, choices=["float64", "float32", "float16", "bfloat16"],
                   help="default: a model's own precision, else float64")
    from tapescope.app.commands.model_args import add_amp_args

    add_amp_args(p)
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"])
    p.add_argument("--seed", type=int, default=0)
    from tapescope.app.commands.argtypes import add_optimizer_args

    add_optimizer_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Train and print ``step N loss X`` per step (N from 1); a bad workload or a failing step
    raises (``tapescope`` turns it into one line and exit 2)."""
    import time

    from tapescope.app.runs import StepError
    from tapescope.core import workloads

    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1, not {args.steps}")
    from tapescope.app.commands.argtypes import optimizer_text
    from tapescope.app.commands.model_args import amp_kwargs, resolve_dtype
    from tapescope.core.optim_config import OptimConfig

    amp = amp_kwargs(args)
    ocfg = OptimConfig.parse(optimizer_text(args))  # a bad combination: one line, exit 2
    args.dtype = amp["amp"] if amp else resolve_dtype(args.dtype, args.workload)
    wl = workloads.get(args.workload, dtype=args.dtype, math=args.math, seed=args.seed)
    print(f"workload {wl.name}: {len(wl.params)} parameter tensors, "
          f"{sum(p.node.size for p in wl.params)} weights, {args.dtype}, math={args.math}")
    t0 = time.perf_counter()
    opt = wl.make_optimizer()
    if ocfg is not None:
        opt = ocfg.build(opt)
        print(f"optimizer: {ocfg.describe(opt)}")
    if amp:  # float32 masters and moments, the loss scale (core.amp)
        workloads.enable_amp(wl, opt, args.workload, args.seed, amp["loss_scale"])
    losses = []
    for step in range(1, args.steps + 1):
        try:
            loss = wl.record(step)  # from 1, as the line below prints it
            wl.tape.backward(loss, seed=1.0 if opt.amp is None else opt.amp.scale)
            opt.step()
            losses.append(float(wl.tape.value(loss)))
        except Exception as e:
            raise StepError(step, e) from e
        print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)
    dt = time.perf_counter() - t0
    print(f"{args.steps} steps in {dt:.2f} s; loss {losses[0]:.6f} -> {losses[-1]:.6f}")
    return 0
