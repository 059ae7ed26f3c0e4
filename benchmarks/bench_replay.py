"""Replay benchmark: one training episode (forward, backward, Adam step) of the mlp workload.

Rows, measured in the same run, median of --repeat episodes, per size and dtype:
  CPU tape          record + backward + core.optim.Adam step (the reference)
  host eager        prog.forward(); prog.backward(); prog.step(opt)  (one replay call per phase)
  host episode      prog.run_episode(opt)                          (one replay call)
  host fused        the same after gpu.fusion.apply (generated kernels, fewer launches)
  PyTorch CPU       the same network, Adam, 1 thread                (when torch is installed)
  cuda eager / cuda graph / cuda fused graph / PyTorch CUDA eager / PyTorch CUDA graph (when a
  device answers; PyTorch's graph captures forward, backward and a capturable Adam's step)
Every device row first checks that the run is bit-identical to the tape (or says it is not).
The host episode row also gives the median ratio of episode/tape pairs timed back to back.
--threads N: the tape's matmul and the host's block pool use N threads (CPU rows in wall time).
Each row is printed (and flushed) as soon as it is measured; a row block that raises prints a
FAILED row with the error and the run goes on (exit 1 at the end), so one crash loses nothing.

Run: python benchmarks/bench_replay.py [--repeat N] [--size small|large|both] [--device ...]
     [--dtype float64|float32|both] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

from tapescope import gpu
from tapescope.core import workloads
from tapescope.core.parity import compare_arrays

SIZES = {"small": {}, "large": {"dims": (784, 128, 32, 128, 784), "batch_size": 64}}


def _clock(sync=None):
    """Process CPU time for single-threaded runs with nothing to synchronise (on a shared
    machine wall time also counts the turns other jobs get); wall time for device runs and
    for runs on more than one thread (CPU time would add the threads up)."""
    from tapescope.core import native

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


def tape_episode(size: str, dtype: str = "float64"):
    """One tape episode per call: record + backward + Adam step."""
    wl = workloads.get("mlp", dtype=dtype, **SIZES[size])
    opt = wl.make_optimizer()
    step = [0]

    def run():
        loss = wl.record(step[0])
        wl.tape.backward(loss)
        opt.step()
        step[0] += 1

    return run


def tape_row(size: str, repeat: int, dtype: str = "float64"):
    return median_time(tape_episode(size, dtype), repeat)


Row = tuple[str, float, str]


def device_rows(dev, size: str, repeat: int, dtype: str = "float64") -> Iterator[Row]:
    """eager, episode (cuda: graph) and fused episode rows, each yielded once measured."""
    from tapescope.gpu import fusion

    sync = dev.synchronize if dev.kind == "cuda" else None
    episode_name = "graph" if dev.kind == "cuda" else "episode"
    for fused in (False, True):
        wl = workloads.get("mlp", dtype=dtype, **SIZES[size])
        opt = wl.make_optimizer()
        loss = wl.record(0)
        prog = gpu.capture(dev, wl.tape, loss)
        if fused:
            fusion.apply(prog)
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

        def eager(prog=prog, dopt=dopt, x=x, wl=wl):
            prog.set_input(wl.inputs["x"].id, x)
            prog.forward()
            prog.backward()
            prog.step(dopt)

        def episode(prog=prog, dopt=dopt, x=x, wl=wl):
            prog.set_input(wl.inputs["x"].id, x)
            prog.run_episode(dopt)

        launches = f"{prog.stats['launches_per_episode']} launches"
        if not fused:
            yield f"{dev.kind} eager", median_time(eager, repeat, sync), note
        name = f"{dev.kind} {'fused ' if fused else ''}{episode_name}"
        t = median_time(episode, repeat, sync)
        if dev.kind == "host" and not fused:
            r = paired_ratio(episode, tape_episode(size, dtype), repeat)
            launches += f"; paired with the tape: {r:.2f}x"
        yield name, t, f"{note}; {launches}"


def torch_mlp_step(size: str, dtype: str, device: str, capturable: bool = False) -> Callable:
    """One PyTorch training step of the mlp (forward, MSE, backward, Adam) as a function.
    capturable=True is the Adam a CUDA graph may capture: its step count lives in a device
    tensor (PyTorch refuses to capture step() of a non-capturable Adam)."""
    import torch

    cfg = SIZES[size]
    dims = cfg.get("dims", (32, 16, 8, 16, 32))
    bs = cfg.get("batch_size", 16)
    tdt = getattr(torch, dtype)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(a, b, dtype=tdt, device=device)
              for a, b in zip(dims[:-1], dims[1:], strict=True)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = torch.optim.Adam(params, lr=1e-2, capturable=capturable)
    x = torch.randn(bs, dims[0], dtype=tdt, device=device)

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

    return step


def capture_torch_graph(step: Callable) -> Callable:
    """Capture one call of `step` in a CUDA graph (warmed up on a side stream first, as PyTorch
    asks: the optimizer state and the gradients exist before capture); returns the replay."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


def torch_rows(size: str, repeat: int, device: str, dtype: str = "float64") -> Iterator[Row]:
    """PyTorch eager (and on cuda, CUDA-graphed) rows, each yielded once measured."""
    try:
        import torch
    except ImportError:
        yield f"PyTorch {device.upper()}", float("nan"), "torch not installed"
        return
    if device == "cuda" and not torch.cuda.is_available():
        return
    # one thread, like the tape and the host backend (and steadier on a shared machine)
    torch.set_num_threads(1)
    sync = torch.cuda.synchronize if device == "cuda" else None
    yield (f"PyTorch {device.upper()} eager",
           median_time(torch_mlp_step(size, dtype, device), repeat, sync),
           "1 thread" if device == "cpu" else "")
    if device == "cuda":
        replay = capture_torch_graph(torch_mlp_step(size, dtype, device, capturable=True))
        yield "PyTorch CUDA graph", median_time(replay, repeat, sync), "capturable Adam"


def _print_row(name: str, t: float, base: float, note: str) -> None:
    ms = f"{t * 1e3:11.3f}" if t == t else f"{'n/a':>11}"
    ratio = f"{t / base:8.2f}" if t == t else f"{'':>8}"
    print(f"{name:<24} {ms} {ratio}  {note}", flush=True)


def _rows_or_failure(label: str, rows: Iterator[Row], base: float) -> bool:
    """Print each row as it comes; an exception becomes a FAILED row. False when one did."""
    try:
        for name, t, note in rows:
            _print_row(name, t, base, note)
    except gpu.DeviceError as e:  # e.g. no g++ for the host rows on a GPU machine
        _print_row(label, float("nan"), base, f"not measured: {e}")
    except Exception as e:  # noqa: BLE001  (a benchmark row that crashes must not end the run)
        msg = " ".join(f"{type(e).__name__}: {e}".split())
        _print_row(label, float("nan"), base, f"FAILED: {msg[:300]}")
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Print one table per size and dtype: ms per episode and the ratio to the CPU tape; 1 when
    a row block failed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--size", default="both", choices=["small", "large", "both"])
    ap.add_argument("--device", default="all", choices=["host", "cuda", "all"])
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32", "both"])
    ap.add_argument("--threads", type=int, default=1,
                    help="threads the CPU tape's reference matmul and the host backend's block "
                         "pool may use (default 1; PyTorch stays on 1). Above 1 the CPU rows "
                         "are timed in wall time")
    args = ap.parse_args(argv)
    from tapescope.core import native

    native.set_threads(args.threads)
    sizes = ["small", "large"] if args.size == "both" else [args.size]
    dtypes = ["float64", "float32"] if args.dtype == "both" else [args.dtype]
    devices = []
    if args.device in ("host", "all"):
        devices.append(gpu.open_device("host"))
    if args.device in ("cuda", "all"):
        from tapescope.gpu.cuda import cuda_unavailable_reason

        why = cuda_unavailable_reason()
        if why is None:
            devices.append(gpu.open_device("cuda"))
        else:
            print(f"cuda rows skipped: {why}", flush=True)
    ok = True
    for size in sizes:
        for dtype in dtypes:
            dims = SIZES[size].get("dims", (32, 16, 8, 16, 32))
            bs = SIZES[size].get("batch_size", 16)
            clock = "wall" if args.threads > 1 else "CPU"
            print(f"\nmlp {'-'.join(map(str, dims))}, batch {bs}, {dtype}, Adam; median of "
                  f"{args.repeat} episodes; {args.threads} thread(s), {clock} time")
            print(f"{'run':<24} {'ms/episode':>11} {'vs tape':>8}  note", flush=True)
            base = tape_row(size, args.repeat, dtype)
            _print_row("CPU tape (reference)", base, base, "")
            for dev in devices:
                ok &= _rows_or_failure(dev.kind, device_rows(dev, size, args.repeat, dtype),
                                       base)
            ok &= _rows_or_failure("PyTorch CPU", torch_rows(size, args.repeat, "cpu", dtype),
                                   base)
            if any(d.kind == "cuda" for d in devices):
                ok &= _rows_or_failure("PyTorch CUDA",
                                       torch_rows(size, args.repeat, "cuda", dtype), base)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
