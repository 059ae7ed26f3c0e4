"""One `parity --model` step against the tape's own training step, on real exported models.

Models (exported here by ``torch.onnx.export``, TorchScript exporter, seeded random weights):
``resnet18``, a ResNet-18 written out in torch (BasicBlocks 2-2-2-2, 64..512 channels, batch
norm in eval mode, as torchvision's; no torchvision here) at 2x3x64x64 float32; ``gpt``, the
nanoGPT block of the model zoo (tests/models/zoo.py TinyGPT: embedding, LayerNorm, causal
masked_fill attention, GELU MLP, tied head, F.cross_entropy in the graph) at vocab 64, dim 32,
context 16, batch 4.

``tape``: the reference workload's own step (record + backward + optimizer step, what the tape
costs with no device); ``parity``: ``PairRunner.step()`` on the host backend (tape + device
replay + compare + provenance, what ``tapescope parity --model M.onnx`` does each step);
``ratio`` = parity / tape (issue 29's target: <= 2). Times are medians of ``--steps`` steps
after one warm-up step, in process CPU time (the machine is shared: wall time counts other
jobs' turns); the load average is printed. Every parity step must be exact (checked).

    python benchmarks/bench_model_parity.py [--models resnet18,gpt] [--steps 5] [--profile M]
                                            [--parts M]

``--parts M``: where a parity step of model M goes, each ``PairRunner`` call (both runs'
advance and update, the compare, provenance's probe before and after the update and
``core.provenance.provenance``) wrapped in ``time.process_time``, mean CPU s per step.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from machine import machine_line  # noqa: E402


def resnet18():
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(
                self.layers(self.stem(x)), 1), 1))

    return ResNet18(), (torch.randn(2, 3, 64, 64),)


def gpt():
    import torch

    from tests.models.zoo import TinyGPT

    return TinyGPT(vocab=64, dim=32, ctx=16), (torch.randint(0, 64, (4, 16)),
                                               torch.randint(0, 64, (4, 16)))


MODELS = {"resnet18": resnet18, "gpt": gpt}


def export(name: str, folder: str) -> str:
    import torch

    torch.manual_seed(0)
    model, example = MODELS[name]()
    model.eval()
    path = os.path.join(folder, f"{name}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, path, dynamo=False)
    return path


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def bench(path: str, steps: int) -> dict:
    from tapescope.app.runs import PairRunner, SessionConfig
    from tapescope.core.onnx.workload import model_spec

    spec = model_spec(path)
    runner = PairRunner(SessionConfig(workload=spec, device="host", dtype="float32"))
    wl = runner.ref.wl  # a second workload of the same model times the tape alone
    from tapescope.core.onnx.workload import OnnxWorkload

    alone = OnnxWorkload(path, dtype=wl.tape.dtype)
    opt = alone.make_optimizer()
    state = {"s": 0}

    def tape_step():
        state["s"] += 1
        loss = alone.record(state["s"])
        alone.tape.backward(loss)
        opt.step()

    exact = []

    def parity_step():
        exact.append(runner.step().exact)

    tape_step()
    parity_step()  # warm-up: device program built, caches filled
    tape_t = [_cpu(tape_step) for _ in range(steps)]
    par_t = [_cpu(parity_step) for _ in range(steps)]
    st = runner.stats() or {}
    return {"nodes": len(runner.nodes), "tape": statistics.median(tape_t),
            "parity": statistics.median(par_t), "exact": all(exact),
            "launches": st.get("launches_per_episode")}


def parts(path: str, steps: int) -> None:
    """Print the mean CPU seconds per step of each part of a parity step (``--parts``)."""
    import collections

    import tapescope.core.provenance as cp
    from tapescope.app.runs import PairRunner, SessionConfig
    from tapescope.core.onnx.workload import model_spec

    acc: dict = collections.defaultdict(float)

    def wrap(obj, name, key):
        f = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[key] += time.process_time() - t0

        setattr(obj, name, timed)

    r = PairRunner(SessionConfig(workload=model_spec(path), device="host", dtype="float32"))
    for obj, name, key in ((r.ref, "advance", "tape record + backward (ref.advance)"),
                           (r.cand, "advance", "device replay (cand.advance)"),
                           (r.cand, "compare", "compare (cand.compare)"),
                           (r.probe, "before_update", "provenance: read before the update"),
                           (r.ref, "update", "tape update (ref.update)"),
                           (r.cand, "update", "device update (cand.update)"),
                           (r.probe, "after_update", "provenance: read after the update"),
                           (cp, "provenance", "provenance: judge (core.provenance)")):
        wrap(obj, name, key)
    r.step()
    acc.clear()
    total = []
    for _ in range(steps):
        t0 = time.process_time()
        if not r.step().exact:
            raise SystemExit("a parity step was not exact")
        total.append(time.process_time() - t0)
    print(f"parity step {statistics.median(total):.3f} s (median of {steps}); parts, mean:")
    for k, v in acc.items():
        print(f"  {k:40s} {v / steps:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,gpt")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--profile", help="cProfile the parity steps of this model (top 25)")
    ap.add_argument("--parts", help="CPU seconds of each part of this model's parity step")
    args = ap.parse_args()
    print(machine_line(()))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; CPU seconds, "
          f"median of {args.steps} steps")
    with tempfile.TemporaryDirectory() as d:
        if args.parts:
            parts(export(args.parts, d), args.steps)
            return 0
        if args.profile:
            import cProfile
            import pstats

            from tapescope.app.runs import PairRunner, SessionConfig
            from tapescope.core.onnx.workload import model_spec

            runner = PairRunner(SessionConfig(workload=model_spec(export(args.profile, d)),
                                              device="host", dtype="float32"))
            runner.step()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.steps):
                runner.step()
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return 0
        print(f"{'model':10s} {'nodes':>6s} {'tape s':>8s} {'parity s':>9s} {'ratio':>6s} "
              f"{'launches':>9s} exact")
        for name in args.models.split(","):
            r = bench(export(name, d), args.steps)
            print(f"{name:10s} {r['nodes']:6d} {r['tape']:8.3f} {r['parity']:9.3f} "
                  f"{r['parity'] / r['tape']:6.2f} {r['launches'] or '-':>9} {r['exact']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
