"""``tapescope parity``: train a workload on the CPU tape and on a device side by side, diffing
every node's value and gradient every step (exit 0 only when all of it is bit-identical)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``parity`` subcommand."""
    p = sub.add_parser("parity", help="CPU tape vs device replay, bit for bit, every step")
    p.add_argument("--workload", default="mlp", help="mlp | transformer")
    p.add_argument("--device", default="auto", choices=["auto", "host", "cuda"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--math", default="refmath", choices=["refmath", "platform"])
    p.add_argument("--fuse", action="store_true", help="replay the fused plan (gpu.fusion)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.set_defaults(func=run)


def _brief(d) -> dict:
    return {"n": d.n, "n_diff": d.n_diff, "max_ulp": d.max_ulp, "max_abs": d.max_abs}


def _merge(acc: dict | None, d) -> dict:
    b = _brief(d)
    if acc is None:
        return b
    return {"n": b["n"], "n_diff": max(acc["n_diff"], b["n_diff"]),
            "max_ulp": max(acc["max_ulp"], b["max_ulp"]),
            "max_abs": max(acc["max_abs"], b["max_abs"])}


def run(args: argparse.Namespace) -> int:
    """Run the side-by-side training; print a summary table; 0 when exact, 1 when not, 2 on
    bad input."""
    import json
    import sys

    import gpu
    from core import workloads
    from core.parity import strict_json

    if args.steps < 1:
        print("tapescope parity: --steps must be at least 1", file=sys.stderr)
        return 2
    try:
        wl = workloads.get(args.workload, dtype=args.dtype, math=args.math, seed=args.seed)
        dev = gpu.open_device(args.device)
    except (ValueError, gpu.DeviceError) as e:
        print(f"tapescope parity: {e}", file=sys.stderr)
        return 2
    print(dev.describe())
    opt = wl.make_optimizer()
    loss = wl.record(0)
    try:
        prog = gpu.capture(dev, wl.tape, loss)
    except (gpu.CaptureError, gpu.DeviceError) as e:
        print(f"tapescope parity: {e}", file=sys.stderr)
        return 2
    if args.fuse:
        try:
            from gpu.fusion import apply as fuse_apply  # the fusion engineer's entry point
        except ImportError:
            print("tapescope parity: --fuse needs gpu.fusion, which is not available",
                  file=sys.stderr)
            return 2
        fuse_apply(prog)
    dopt = gpu.from_core(opt)
    per_node: dict[int, dict] = {}
    first = None
    for step in range(args.steps):
        loss = wl.record(step)
        wl.tape.backward(loss)
        for v in wl.inputs.values():
            prog.set_input(v.id, wl.tape.value(v))
        prog.forward()
        prog.backward()
        rep = gpu.parity.compare(wl.tape, prog)
        for n in rep.nodes:
            e = per_node.setdefault(n.id, {"id": n.id, "op": n.op, "name": n.name,
                                           "value": None, "grad": None})
            e["value"] = _merge(e["value"], n.value)
            if n.grad is not None:
                e["grad"] = _merge(e["grad"], n.grad)
        if first is None and rep.first_divergence is not None:
            nid, which = rep.first_divergence
            first = {"step": step, "node": nid, "op": prog.nodes[nid].op, "which": which}
        opt.step()
        prog.step(dopt)
        print(f"step {step + 1:4d}  loss {float(wl.tape.value(loss)):.9g}  device "
              f"{prog.loss():.9g}  {'exact' if rep.exact else 'DIFFERS'}", flush=True)
    # the trained parameters after the last update
    for i in prog.param_ids():
        from core.parity import compare_arrays

        d = compare_arrays(wl.tape.value(i), prog.read(i))
        per_node[i]["value"] = _merge(per_node[i]["value"], d)
        if first is None and not d.exact:
            first = {"step": args.steps, "node": i, "op": "param", "which": "value"}
    nodes = [per_node[i] for i in sorted(per_node)]
    exact = all(n["value"]["n_diff"] == 0 and (n["grad"] is None or n["grad"]["n_diff"] == 0)
                for n in nodes)
    report = {"device": dev.kind, "steps": args.steps, "exact": exact,
              "first_divergence": first, "nodes": nodes, "stats": prog.stats}
    bad = [n for n in nodes if n["value"]["n_diff"] or (n["grad"] and n["grad"]["n_diff"])]
    print(f"{'node':>5} {'op':<14} {'name':<28} {'value diff':>11} {'ulp':>6} "
          f"{'grad diff':>10} {'ulp':>6}")
    for n in bad[:15]:
        g = n["grad"] or {"n_diff": 0, "max_ulp": 0}
        print(f"{n['id']:>5} {n['op']:<14} {(n['name'] or '')[:28]:<28} "
              f"{n['value']['n_diff']:>11} {n['value']['max_ulp']:>6} {g['n_diff']:>10} "
              f"{g['max_ulp']:>6}")
    print(f"{len(nodes)} nodes x {args.steps} steps on {dev.kind}: "
          f"{'bit-identical' if exact else f'{len(bad)} nodes differ'}; first divergence: "
          f"{first}; launches per episode: {prog.stats['launches_per_episode']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(strict_json(report), f, indent=1, allow_nan=False)
    return 0 if exact else 1
