"""core.onnx executor vs onnxruntime on conv nets available offline.

Models: ``resnet_like<S>``, a ResNet-18-shaped net with random He-initialised weights generated
by resources/models/make_models.py at SxS input; the light models shipped inside the onnx
package (full architectures at 224x224, but constant weights: their activations overflow to
inf/NaN, so they time the engines on degenerate values); resources/models/tiny_convnet.onnx.
Each engine runs the same input; times are the median of ``--repeat`` runs after one warm-up.
Ratios are ours / onnxruntime, so lower is better and 1.0 is parity. ``ref/ort1`` is the target
row of issue 15: reference mode (one thread: ``core.native.set_threads(1)``) against onnxruntime
with one intra-op thread, the two interleaved run by run and timed in process CPU time (on a
shared machine wall time counts other jobs' turns), reported as the median of per-run ratios;
``ref cpu``/``ort1 cpu`` are the medians of those runs' CPU milliseconds. Reference mode runs
its plan (core.onnx.plan: weights folded once, fused Conv chains), bit-identical to the plain
node loop; ``--no-plan`` times the plain loop instead.

    python benchmarks/bench_onnx.py [--models squeezenet,resnet50] [--repeat 3] [--no-reference]
                                    [--no-plan]
"""

from __future__ import annotations

import os

# One BLAS thread for our fast mode unless told otherwise: on 2 cores a threaded OpenBLAS fights
# onnxruntime's pool and the timings swing 10x from run to run (measured); set
# OPENBLAS_NUM_THREADS yourself to override. Must happen before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from machine import machine_line  # noqa: E402

from tapescope.core.onnx import Session  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
DEFAULT = "tiny_convnet,resnet_like112,resnet_like224,squeezenet,shufflenet,resnet50"


def _path(name: str, tmp: str) -> str:
    """A model file for ``name``: generated ones are written to ``tmp``."""
    if name == "tiny_convnet":
        return os.path.join(ROOT, "resources", "models", "tiny_convnet.onnx")
    if name.startswith("resnet_like"):
        sys.path.insert(0, os.path.join(ROOT, "resources", "models"))
        from make_models import resnet_like

        model, _ = resnet_like(np.random.default_rng(0), size=int(name[len("resnet_like"):]))
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(model, path)
        return path
    return os.path.join(LIGHT, f"light_{name}.onnx")


def _time(fn, repeat: int) -> float:
    fn()  # warm-up (and, for ours, any lazy work)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _paired_ratio(ours, peer, repeat: int) -> tuple[float, float, float, float]:
    """(median of per-run CPU-time ratios ours / peer, median CPU s of ours, of peer, least
    CPU s of ours / least of peer): one thread each, runs interleaved. On a loaded machine the
    least of N is the steadiest number of each side (a neighbour only ever adds time)."""
    from tapescope.core import native

    before = native.threads()
    native.set_threads(1)
    try:
        ratios, ta, tb = [], [], []
        for _ in range(repeat):
            t = time.process_time()
            ours()
            a = time.process_time() - t
            t = time.process_time()
            peer()
            b = time.process_time() - t
            ratios.append(a / b)
            ta.append(a)
            tb.append(b)
        return (statistics.median(ratios), statistics.median(ta), statistics.median(tb),
                min(ta) / min(tb))
    finally:
        native.set_threads(before)


def _ort(path: str, threads: int | None):
    so = ort.SessionOptions()
    # no spin-waiting between runs: idle ort threads would otherwise steal the cores we time on
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    """Print one row per model: times in ms and ratios against onnxruntime."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-reference", action="store_true", help="skip the (slow) reference mode")
    ap.add_argument("--no-plan", action="store_true",
                    help="reference mode without its run plan (the plain node loop)")
    args = ap.parse_args(argv)
    hdr = (f"{'model':14s} {'ort 1t ms':>10s} {'ort dflt ms':>11s} {'fast ms':>9s} "
           f"{'ref ms':>9s} {'fast/ort':>9s} {'fast/ort1':>9s} {'ref/ort':>9s} {'ref/ort1':>9s} "
           f"{'max|ref-ort|':>12s} {'ref cpu':>8s} {'ort1 cpu':>8s} {'best ref/ort1':>13s}")
    print(machine_line(("onnxruntime",)))
    print(f"cores: {os.cpu_count()}  onnxruntime {ort.__version__}  numpy {np.__version__}  "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    print(hdr)
    print("-" * len(hdr))
    tmp = tempfile.mkdtemp()
    for name in args.models.split(","):
        path = _path(name, tmp)
        s1, sd = _ort(path, 1), _ort(path, None)
        inp = s1.get_inputs()[0]
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        feeds = {inp.name: x}
        t1 = _time(lambda s=s1, f=feeds: s.run(None, f), args.repeat)
        td = _time(lambda s=sd, f=feeds: s.run(None, f), args.repeat)
        fast = Session(path, mode="fast")
        tf = _time(lambda s=fast, f=feeds: s.run(f), args.repeat)
        tr, err, r1, c1, c2, best = (float("nan"),) * 6
        if not args.no_reference:
            ref = Session(path, mode="reference", plan=not args.no_plan)
            tr = _time(lambda s=ref, f=feeds: s.run(f), max(1, args.repeat // 3))
            y_ref = next(iter(ref.run(feeds).values()))
            err = float(np.max(np.abs(y_ref - sd.run(None, feeds)[0])))
            r1, c1, c2, best = _paired_ratio(lambda s=ref, f=feeds: s.run(f),
                                       lambda s=s1, f=feeds: s.run(None, f), args.repeat)
        print(f"{name:14s} {t1 * 1e3:10.1f} {td * 1e3:11.1f} {tf * 1e3:9.1f} {tr * 1e3:9.1f} "
              f"{tf / td:9.2f} {tf / t1:9.2f} {tr / td:9.1f} {r1:9.1f} {err:12.2e} "
              f"{c1 * 1e3:8.1f} {c2 * 1e3:8.1f} {best:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
