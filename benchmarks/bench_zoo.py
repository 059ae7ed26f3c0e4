"""The model zoo's table in docs/models.md ("Your PyTorch model, as exported"), measured.

Each family of tests/models/zoo.py is exported by both exporters (seeded random weights, as the
tests export them) and imported; per family: the tape ops one step records (leaves not
counted), TorchScript / dynamo; and, for the TorchScript export at float32, the *tape step*
(the workload's own record + backward + optimizer step) and the *pair step* (one
``PairRunner.step()`` on the host backend: tape, host replay, every node compared,
provenance), each the median CPU seconds of the process over ``--steps`` steps after one
warm-up (the machine is shared: wall time counts other jobs' turns). Every pair step must be
exact (checked).

    python benchmarks/bench_zoo.py [--families gpt,mbconv] [--steps 3] [--no-dynamo]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def tape_ops(path: str) -> int:
    """Ops one step records on the tape (leaves: constants, parameters, not counted)."""
    from tapescope.core.onnx.workload import OnnxWorkload

    wl = OnnxWorkload(path, dtype=np.float32)
    wl.record(1)
    return sum(1 for n in wl.tape.nodes[wl.mark.n_nodes:] if n.inputs)


def times(path: str, steps: int) -> tuple[float, float, bool]:
    from tapescope.app.runs import PairRunner, SessionConfig
    from tapescope.core.onnx.workload import OnnxWorkload, model_spec

    runner = PairRunner(SessionConfig(workload=model_spec(path), device="host",
                                      dtype="float32"))
    alone = OnnxWorkload(path, dtype=np.float32)
    opt = alone.make_optimizer()
    state = {"s": 0}

    def tape_step():
        state["s"] += 1
        alone.tape.backward(alone.record(state["s"]))
        opt.step()

    exact = []

    def pair_step():
        exact.append(runner.step().exact)

    tape_step()
    pair_step()
    tape_t = statistics.median(_cpu(tape_step) for _ in range(steps))
    pair_t = statistics.median(_cpu(pair_step) for _ in range(steps))
    return tape_t, pair_t, all(exact)


def main(argv=None) -> int:
    from tests.models import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(zoo.FAMILIES))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-dynamo", action="store_true")
    args = ap.parse_args(argv)
    from machine import machine_line

    print(machine_line())
    print("| family | tape ops (ts / dynamo) | tape step | pair step | exact |")
    print("|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as d:
        for name in args.families.split(","):
            ts = zoo.export(name, os.path.join(d, f"{name}-ts.onnx"), False)
            n_ts = tape_ops(ts)
            n_dy = "—"
            if not args.no_dynamo:
                try:
                    n_dy = str(tape_ops(zoo.export(name, os.path.join(d, f"{name}-dy.onnx"),
                                                   True)))
                except Exception as exc:  # an exporter failure is a row, not the end
                    n_dy = f"failed ({type(exc).__name__})"
            tape_t, pair_t, exact = times(ts, args.steps)
            print(f"| `{name}` | {n_ts} / {n_dy} | {tape_t * 1e3:.1f} ms | "
                  f"{pair_t * 1e3:.1f} ms | {'yes' if exact else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    raise SystemExit(main())
