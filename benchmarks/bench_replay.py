"""Replay benchmark: one training episode (forward, backward, Adam step) of the mlp workload.

Rows, measured in the same run, median of --repeat episodes:
  CPU tape          record + backward + core.optim.Adam step (the reference)
  host eager        prog.forward(); prog.backward(); prog.step(opt)  (one replay call per phase)
  host episode      prog.run_episode(opt)                          (one replay call)
  PyTorch CPU       the same network in float64, Adam, 1 thread    (when torch is installed)
  cuda eager / cuda graph / PyTorch CUDA eager / PyTorch CUDA graph (when a device answers)
Every device row first checks that the run is bit-identical to the tape (or says it is not).
The host episode row also gives the median ratio of episode/tape pairs timed back to back.
--threads N: the tape's matmul and the host's block pool use N threads (CPU rows in wall time).

Run: python benchmarks/bench_replay.py [--repeat N] [--size small|large|both] [--device ...]
     [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import gpu
from core import workloads
from core.parity import compare_arrays

SIZES = {"small": {}, "large": {"dims": (784, 128, 32, 128, 784), "batch_size": 64}}


def _clock(sync=None):
    """Process CPU time for single-threaded runs with nothing to synchronise (on a shared
    machine wall time also counts the turns other jobs get); wall time for device runs and
    for runs on more than one thread (CPU time would add the threads up)."""
    from core import native

    return time.perf_counter if sync is not None or native.threads() > 1 else time.process_time


def median_time(fn, repeat: int, sync=None) -> float:
    """Median seconds of fn over `repeat` runs after one warm-up (clock: `_clock`)."""
    clock = _clock(sync)
    sync = sync or (lambda: None)
    fn()
    sync()
    out = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        sync()
        out.append(clock() - t0)
    return statistics.median(out)


def paired_ratio(fn, peer, repeat: int) -> float:
    """Median over `repeat` pairs (fn, then peer, timed back to back) of time(fn) / time(peer):
    load that comes and goes hits both halves of a pair alike."""
    clock = _clock()
    fn()
    peer()
    ratios = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        t1 = clock()
        peer()
        t2 = clock()
        ratios.append((t1 - t0) / max(t2 - t1, 1e-9))
    return statistics.median(ratios)


def tape_episode(size: str):
    """One tape episode per call: record + backward + Adam step."""
    wl = workloads.get("mlp", **SIZES[size])
    opt = wl.make_optimizer()
    step = [0]

    def run():
        loss = wl.record(step[0])
        wl.tape.backward(loss)
        opt.step()
        step[0] += 1

    return run


def tape_row(size: str, repeat: int):
    return median_time(tape_episode(size), repeat)


def device_rows(dev, size: str, repeat: int) -> list[tuple[str, float, str]]:
    wl = workloads.get("mlp", **SIZES[size])
    opt = wl.make_optimizer()
    loss = wl.record(0)
    prog = gpu.capture(dev, wl.tape, loss)
    dopt = gpu.from_core(opt)
    # parity first: three steps side by side must be bit-identical
    exact = True
    for s in range(3):
        loss = wl.record(s)
        wl.tape.backward(loss)
        opt.step()
        prog.set_input(wl.inputs["x"].id, wl.tape.value(wl.inputs["x"]))
        prog.run_episode(dopt)
    for i in prog.param_ids():
        exact &= compare_arrays(wl.tape.value(i), prog.read(i)).exact
    note = "bit-identical" if exact else "NOT bit-identical"
    x = np.array(wl.tape.value(wl.inputs["x"]))

    def eager():
        prog.set_input(wl.inputs["x"].id, x)
        prog.forward()
        prog.backward()
        prog.step(dopt)

    def episode():
        prog.set_input(wl.inputs["x"].id, x)
        prog.run_episode(dopt)

    sync = dev.synchronize if dev.kind == "cuda" else None
    rows = [(f"{dev.kind} eager", median_time(eager, repeat, sync), note),
            (f"{dev.kind} {'graph' if dev.kind == 'cuda' else 'episode'}",
             median_time(episode, repeat, sync),
             f"{note}; {prog.stats['launches_per_episode']} launches")]
    if dev.kind == "host":
        r = paired_ratio(episode, tape_episode(size), repeat)
        rows[-1] = (*rows[-1][:2], f"{rows[-1][2]}; paired with the tape: {r:.2f}x")
    return rows


def torch_rows(size: str, repeat: int, device: str) -> list[tuple[str, float, str]]:
    try:
        import torch
    except ImportError:
        return [(f"PyTorch {device.upper()}", float("nan"), "torch not installed")]
    if device == "cuda" and not torch.cuda.is_available():
        return []
    # one thread, like the tape and the host backend (and steadier on a shared machine)
    torch.set_num_threads(1)
    cfg = SIZES[size]
    dims = cfg.get("dims", (32, 16, 8, 16, 32))
    bs = cfg.get("batch_size", 16)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(a, b, dtype=torch.float64, device=device)
              for a, b in zip(dims[:-1], dims[1:], strict=True)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = torch.optim.Adam(params, lr=1e-2)
    x = torch.randn(bs, dims[0], dtype=torch.float64, device=device)

    def step():
        h = x
        for i, layer in enumerate(layers):
            h = layer(h)
            if i < len(layers) - 1:
                h = torch.relu(h)
        loss = ((h - x) ** 2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if device == "cuda" else None
    rows = [(f"PyTorch {device.upper()} eager", median_time(step, repeat, sync),
             "1 thread" if device == "cpu" else "")]
    if device == "cuda":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        rows.append(("PyTorch CUDA graph", median_time(g.replay, repeat, sync), ""))
    return rows


def main() -> None:
    """Print one table per size: ms per episode and the ratio to the CPU tape."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--size", default="both", choices=["small", "large", "both"])
    ap.add_argument("--device", default="all", choices=["host", "cuda", "all"])
    ap.add_argument("--threads", type=int, default=1,
                    help="threads the CPU tape's reference matmul and the host backend's block "
                         "pool may use (default 1; PyTorch stays on 1). Above 1 the CPU rows "
                         "are timed in wall time")
    args = ap.parse_args()
    from core import native

    native.set_threads(args.threads)
    sizes = ["small", "large"] if args.size == "both" else [args.size]
    devices = []
    if args.device in ("host", "all"):
        devices.append(gpu.open_device("host"))
    if args.device in ("cuda", "all"):
        from gpu.cuda import cuda_unavailable_reason

        why = cuda_unavailable_reason()
        if why is None:
            devices.append(gpu.open_device("cuda"))
        else:
            print(f"cuda rows skipped: {why}")
    for size in sizes:
        dims = SIZES[size].get("dims", (32, 16, 8, 16, 32))
        bs = SIZES[size].get("batch_size", 16)
        base = tape_row(size, args.repeat)
        rows = [("CPU tape (reference)", base, "")]
        for dev in devices:
            try:
                rows += device_rows(dev, size, args.repeat)
            except gpu.DeviceError as e:  # e.g. no g++ for the host rows on a GPU machine
                rows.append((f"{dev.kind}", float("nan"), f"not measured: {e}"))
        rows += torch_rows(size, args.repeat, "cpu")
        if any(d.kind == "cuda" for d in devices):
            rows += torch_rows(size, args.repeat, "cuda")
        clock = "wall" if args.threads > 1 else "CPU"
        print(f"\nmlp {'-'.join(map(str, dims))}, batch {bs}, float64, Adam; "
              f"median of {args.repeat} episodes; {args.threads} thread(s), {clock} time")
        print(f"{'run':<24} {'ms/episode':>11} {'vs tape':>8}  note")
        for name, t, note in rows:
            ms = f"{t * 1e3:11.3f}" if t == t else f"{'n/a':>11}"
            ratio = f"{t / base:8.2f}" if t == t else f"{'':>8}"
            print(f"{name:<24} {ms} {ratio}  {note}")


if __name__ == "__main__":
    main()
