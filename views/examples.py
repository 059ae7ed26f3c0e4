"""Runnable examples: each view alone on demo data.

``python -m tapescope.views.examples [graph|inspector|parity|stepper|training|kernels|elements|all]
[--save DIR]``
opens the view (or, with ``--save``, renders each to ``DIR/<name>.png`` and exits; works
offscreen).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tapescope.core.atomic import write_atomic


def demo_tape():
    """A small recorded workload episode with gradients: (tape, loss id)."""
    from tapescope.core import workloads

    wl = workloads.get("mlp")
    loss = wl.record(0)
    wl.tape.backward(loss)
    return wl.tape, loss.id


def make(name: str):
    """Build one example widget by name."""
    from tapescope.views.models.graph_model import GraphModel

    tape, loss = demo_tape()
    if name == "graph":
        from tapescope.views.graph_panel import GraphPanel

        w = GraphPanel()
        w.set_model(GraphModel.from_tape(tape, loss), wait=True)
        return w
    if name == "inspector":
        from tapescope.views.inspector import InspectorPanel, NodeDetails

        n = next(n for n in tape.nodes if n.op == "matmul")
        w = InspectorPanel()
        w.show_details(NodeDetails(n.id, n.op, n.name, n.shape, str(n.dtype), tape.value(n.id),
                                   tape.grad(n.id), [(i, tape.node(i).op) for i in n.inputs]))
        return w
    if name == "parity":
        from tapescope.views.models.parity_rows import build_rows
        from tapescope.views.parity_table import ParityPanel

        rng = np.random.default_rng(0)
        comp = [{"id": n.id, "value": {"n_diff": int(k), "max_ulp": int(k)}}
                for n, k in zip(tape.nodes, rng.integers(0, 3, len(tape)), strict=True)]
        w = ParityPanel()
        w.set_rows(build_rows(tape.nodes, comp))
        return w
    if name == "stepper":
        from tapescope.views.models.stepper_model import BackwardStepper
        from tapescope.views.stepper_view import StepperPanel

        w = StepperPanel()
        s = BackwardStepper(tape, loss)
        w.set_stepper(s, {n.id: f"{n.op} {n.name or ''}" for n in tape.nodes})
        for _ in range(3):
            s.step()
        return w
    if name == "training":
        from tapescope.views.training_view import TrainingPanel

        w = TrainingPanel()
        w.reset("CPU float64 refmath", "device float64 platform")
        rng = np.random.default_rng(0)
        loss = 2.5 * np.exp(-np.arange(60) / 25.0) + 0.05 * rng.random(60)
        steps = [(k, float(v), float(v), 0.01, k % 7 == 0) for k, v in enumerate(loss)]
        cols = [np.where(rng.random(len(tape)) < 0.4, 2.0 ** rng.integers(0, 24, len(tape)),
                         0.0) for _ in steps]
        w.add_steps(steps, cols, 42.0)
        w.flush()
        return w
    if name == "kernels":
        from tapescope.views.kernels_view import KernelsPanel

        w = KernelsPanel()
        src = ('extern "C" __global__ void fz_demo_s0_fwd_f64(const long long* tab, long long '
               'rows) {\n    /* one block per row */\n    for (long long r = blockIdx.x; r < '
               'rows; r += gridDim.x) {\n        double x = ADD(a[r], 1.0);  // no FMA\n    }\n}\n')
        w.set_plan({"plan_id": "demo", "dtype": "float64", "math": "refmath",
                    "segments": [{"index": 0, "node_ids": [3, 4, 5], "kind": "row", "rows": 16}],
                    "kernels": [{"name": "fz_demo_s0_fwd_f64", "role": "forward", "segment": 0,
                                 "source": src, "grid": 16, "block": 32}],
                    "launches_before": {"forward": 9, "backward": 20, "optimizer": 6,
                                        "episode": 35},
                    "launches_after": {"forward": 7, "backward": 18, "optimizer": 1,
                                       "episode": 26}})
        w.select_kernel("fz_demo_s0_fwd_f64")
        return w
    if name == "elements":
        from tapescope.views.element_view import ElementView

        n = next(n for n in tape.nodes if n.op == "matmul")
        ref = np.asarray(tape.value(n.id))
        rng = np.random.default_rng(0)
        ulps = np.where(rng.random(ref.shape) < 0.3, rng.integers(1, 300, ref.shape), 0)
        cand = ref.copy()
        flat = cand.reshape(-1)
        for k, u in enumerate(ulps.reshape(-1).tolist()):  # u ulp away, element by element
            for _ in range(u):
                flat[k] = np.nextafter(flat[k], np.inf)
        w = ElementView()
        w.set_pair(ref, cand, f"#{n.id} {n.op} value (demo: random ulp offsets)")
        return w
    raise SystemExit(f"views.examples: unknown example {name!r} "
                     "(graph, inspector, parity, stepper, training, kernels, elements, all)")


def _png(img) -> bytes:
    """A QImage as PNG bytes (encoded in memory, so the file is written by core.atomic)."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    ba = QByteArray()
    buf = QBuffer(ba)
    buf.open(QIODevice.WriteOnly)
    if not img.save(buf, "PNG"):
        raise OSError("PNG encoding failed")
    buf.close()
    return bytes(ba.data())


def main(argv: list[str] | None = None) -> int:
    """Show (or save) the chosen examples."""
    ap = argparse.ArgumentParser(prog="python -m tapescope.views.examples")
    ap.add_argument("name", nargs="?", default="all")
    ap.add_argument("--save", metavar="DIR", default=None)
    args = ap.parse_args(argv)
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    names = (["graph", "inspector", "parity", "stepper", "training", "kernels", "elements"]
             if args.name == "all" else [args.name])
    widgets = []
    for name in names:
        w = make(name)
        w.setWindowTitle(f"tapescope example: {name}")
        w.resize(900, 600)
        w.show()
        widgets.append((name, w))
    if args.save:
        out = Path(args.save)
        out.mkdir(parents=True, exist_ok=True)
        app.processEvents()
        for name, w in widgets:
            path = out / f"{name}.png"
            try:  # whole or not at all, as every writer (core.atomic)
                write_atomic(path, _png(w.grab().toImage()))
            except OSError as e:
                print(f"views.examples: could not write {path}: {e}", file=sys.stderr)
                return 1
            print(f"wrote {path}")
        return 0
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
