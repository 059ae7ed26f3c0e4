"""``tapescope gui FILE.capture``: a judged capture in a window of its own (issue 42, item 4; a
first slice: the tape's MainWindow and its graph are not used).

- top: the step scrubber (a step, or all) and the phase bands (forward / backward / optimizer as
  coloured spans over the step's op sequence, introduced ops marked red, inherited amber);
- left: the module tree (nested, folded below the model's top-level children), each module with
  its ops' verdict counts and worst ulp, coloured by the window's one ulp scale; its leaves are
  the ops;
- right: the Inspector for the selected op: op, module, phase, step, your source line, each
  output's verdict (an introduced one with its cause, when judged with ``--explain``), and the
  recorded tensor against the reference's (re-run on the op's own recorded inputs) with its
  ulp map;
- the status line: the first divergence, counts and the no-reference ops.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QImage, QPainter, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.app.qt import gui_gc
from tapescope.core.capture.file import Capture
from tapescope.views.models.heat_tiles import tile
from tapescope.views.models.numbers import count_text, ulp_exact, ulp_text
from tapescope.views.models.ulp_scale import (
    faded_color,
    heat_levels,
    heat_lut,
    level_color,
    ulp_color,
)

_PHASE_COLOR = {"forward": "#3b82f6", "backward": "#a855f7", "optimizer": "#14b8a6"}
_ORDER = ("exact", "introduced", "inherited", "no-reference", "recorded", "unjudged")
_OP = Qt.ItemDataRole.UserRole


def _worst(e: dict) -> tuple[str, int]:
    """An op's worst verdict and its worst ulp (introduced over inherited over the rest)."""
    vs = [o["verdict"] for o in e["outputs"]]
    for v in ("introduced", "inherited", "no-reference", "unjudged", "exact", "recorded"):
        if v in vs:
            ulp = max((o.get("max_ulp", 0) if v == "introduced" else o.get("total_max_ulp", 0))
                      for o in e["outputs"] if o["verdict"] == v)
            return v, int(ulp)
    return "", 0


def _color(verdict: str, ulp: int) -> QColor:
    if verdict == "introduced":
        return QColor(ulp_color(max(ulp, 1)))  # the window's one scale, as the graph's
    if verdict == "inherited":
        return QColor(faded_color(float(heat_levels(np.array([max(ulp, 1)]))[0])))
    if verdict == "exact":
        return QColor(level_color(0.0))
    if verdict == "no-reference":
        return QColor("#8e24aa")
    return QColor("#9e9e9e")


class PhaseBands(QWidget):
    """The step's ops as one row: each op a sliver coloured by its phase, with introduced
    (red) and inherited (amber) ticks above; the selected op a black line."""

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(34)
        self.ops: list[dict] = []
        self.selected: int | None = None

    def set_ops(self, ops: list[dict]) -> None:
        self.ops = ops
        self.update()

    def paintEvent(self, _ev) -> None:  # noqa: N802 — Qt's name
        p = QPainter(self)
        w, h = self.width(), self.height()
        n = max(1, len(self.ops))
        for k, e in enumerate(self.ops):
            x0, x1 = w * k / n, w * (k + 1) / n
            p.fillRect(QRectF(x0, h * 0.45, max(1.0, x1 - x0), h * 0.55),
                       QColor(_PHASE_COLOR[e["phase"]]))
            v, _ = _worst(e)
            if v in ("introduced", "inherited"):
                p.fillRect(QRectF(x0, 0, max(1.5, x1 - x0), h * 0.4),
                           QColor("#e53935" if v == "introduced" else "#ffb300"))
            if e["index"] == self.selected:
                p.fillRect(QRectF(x0, 0, max(2.0, x1 - x0), h), QColor("black"))
        p.end()


def ulp_image(ref: np.ndarray, rec: np.ndarray, width: int = 640, height: int = 300
              ) -> tuple[QPixmap, str] | None:
    """The per-element ulp distance of ``rec`` from ``ref`` as a heat map in the window's ulp
    scale, laid out to fit ``width`` x ``height`` (views.models.heat_tiles: planes in a grid,
    a tall plane in bands, a long row wrapped; the worst of a block where it must shrink), and
    the line that says how to read it; None for non-float outputs. A complex output's map is
    of its real and imaginary parts, side by side along the last axis."""
    from tapescope.core.parity import complex_parts, ulp_distance

    note = ""
    if rec.dtype.kind == "c" and ref.dtype == rec.dtype:
        ref, rec = complex_parts(ref), complex_parts(rec)
        note = "; complex: each element's real and imaginary parts side by side"
    if rec.dtype.name not in ("float64", "float32", "float16", "bfloat16") or rec.size == 0:
        return None
    d = ulp_distance(ref, rec).astype(np.float64)
    nan = np.isnan(np.asarray(ref, dtype=np.float64)).reshape(-1) ^ np.isnan(
        np.asarray(rec, dtype=np.float64)).reshape(-1)
    lv = heat_levels(d).reshape(-1)
    lv[nan] = 255
    t = tile(lv.astype(np.int16).reshape(rec.shape), width, height)
    lut = np.concatenate([heat_lut(), np.zeros((1, 4), np.ubyte)])  # last: the background
    rgba = np.ascontiguousarray(lut[np.where(t.image < 0, 256, t.image).astype(np.int64)])
    rows, cols = t.image.shape
    img = QImage(rgba.data, cols, rows, cols * 4, QImage.Format.Format_RGBA8888).copy()
    scale = max(1, min(width // max(cols, 1), height // max(rows, 1), 24))
    pix = QPixmap.fromImage(img).scaled(cols * scale, rows * scale,
                                        Qt.AspectRatioMode.IgnoreAspectRatio,
                                        Qt.TransformationMode.FastTransformation)
    return pix, t.caption() + note


def first_differing(a: np.ndarray, b: np.ndarray) -> int:
    """The flat index of the first element that differs between ``a`` and ``b`` (one dtype
    and shape): floats by ``core.parity.compare_arrays`` (the judge's rule, NaN policy
    included), other types by value; 0 where none does."""
    from tapescope.core.parity import compare_arrays

    if a.dtype != b.dtype or a.shape != b.shape:
        return 0
    try:
        return compare_arrays(a, b).first_index or 0
    except TypeError:  # (not a float type it compares)
        pass
    k = np.flatnonzero(a != b)
    return int(k[0]) if k.size else 0


class CaptureWindow(QMainWindow):
    """The window over one judged capture."""

    def __init__(self, cap: Capture, rep: dict) -> None:
        super().__init__()
        gui_gc.hold(self)  # cyclic garbage collected on this thread only while it is open
        self.cap, self.rep = cap, rep
        # (op index, output) -> why it introduced its difference, when judged with --explain
        self.causes = {(e["index"], e["output"]): e["explain"] for e in rep["introduced"]
                       if e.get("explain")}
        # (op index, output) -> its largest absolute difference (the judge's max_abs): beside
        # the ulp, which near zero is huge for a tiny difference (1e-11 against an exact 0)
        self.max_abs = {(e["index"], e["output"]): e.get("max_abs") for e in rep["introduced"]}
        self.explained = any("cause" in e for e in rep["introduced"])
        self.setWindowTitle(f"tapescope — capture {os.path.basename(cap.path)}")
        top = QWidget()
        bar = QHBoxLayout(top)
        bar.setContentsMargins(6, 4, 6, 0)
        bar.addWidget(QLabel("Step"))
        self.step = QComboBox()
        self.step.addItems([f"step {s}" for s in range(1, cap.steps + 1)] + ["all steps"])
        self.step.currentIndexChanged.connect(self._fill)
        bar.addWidget(self.step)
        legend = "  ".join(f"<span style='background:{c};color:white'>&nbsp;{p}&nbsp;</span>"
                           for p, c in _PHASE_COLOR.items())
        bar.addWidget(QLabel(legend + "  <span style='color:#e53935'>■ introduced</span> "
                                      "<span style='color:#ffb300'>■ inherited</span>"))
        bar.addStretch(1)
        # the backward stepper: the step's backward ops in the order autograd ran them
        self.back_prev = QPushButton("◀ backward")
        self.back_next = QPushButton("backward ▶")
        self.back_label = QLabel("")
        self.back_prev.clicked.connect(lambda: self.step_backward(-1))
        self.back_next.clicked.connect(lambda: self.step_backward(+1))
        for w in (self.back_prev, self.back_label, self.back_next):
            bar.addWidget(w)
        self.back_pos = -1
        self.bands = PhaseBands()
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["module / op", "ops", "introduced", "inherited",
                                   "no ref", "worst ulp", "source"])
        self.tree.setColumnWidth(0, 330)
        self.tree.currentItemChanged.connect(self._select)
        self.inspector = QPlainTextEdit()
        self.inspector.setReadOnly(True)
        self.ulp_map = QLabel()
        self.ulp_map.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.addWidget(QLabel("<b>Inspector</b>"))
        rl.addWidget(self.inspector, 3)
        rl.addWidget(QLabel("ulp map of the selected op's first float output (recorded vs the "
                            "reference on the op's own recorded inputs)"))
        self.ulp_layout = QLabel()  # how the map is laid out (planes, bands, blocks)
        self.ulp_layout.setTextFormat(Qt.TextFormat.PlainText)
        self.ulp_layout.setWordWrap(True)
        rl.addWidget(self.ulp_layout)
        rl.addWidget(self.ulp_map, 2)
        split = QSplitter()
        split.addWidget(self.tree)
        split.addWidget(right)
        split.setSizes([760, 480])
        central = QWidget()
        v = QVBoxLayout(central)
        v.setContentsMargins(0, 0, 0, 0)
        v.addWidget(top)
        v.addWidget(self.bands)
        v.addWidget(split, 1)
        self.setCentralWidget(central)
        f = rep["first_divergence"]
        c = rep["counts"]
        nr = sum(d["count"] for d in rep["no_reference"])
        self.statusBar().showMessage(
            ("first divergence: none" if f is None else
             f"first divergence: step {f['step']} op #{f['index']} {f['op']} "
             f"({f['module'] or 'no module'}, {f['phase']}) {f['verdict']}")
            + f"  |  {c['exact']} exact, {c['introduced']} introduced, {c['inherited']} "
              f"inherited outputs; {nr} ops without a reference")
        self._fill()

    def closeEvent(self, ev) -> None:  # noqa: N802 — Qt's name
        super().closeEvent(ev)
        gui_gc.release(self)

    def backward_ops(self) -> list[dict]:
        """The shown step's backward ops, in the order autograd's engine ran them."""
        return [e for e in self._ops() if e["phase"] == "backward"]

    def step_backward(self, delta: int) -> None:
        """Select the next (+1) or previous (-1) backward op of the shown step."""
        ops = self.backward_ops()
        if not ops:
            self.back_label.setText("no backward ops")
            return
        cur = self.bands.selected
        idx = [e["index"] for e in ops]
        if cur in idx:
            k = idx.index(cur) + delta
        else:  # from the selection's place in the step (or its start)
            k = next((j for j, i in enumerate(idx) if cur is not None and i > cur), 0) \
                if delta > 0 else len(idx) - 1
        k = max(0, min(len(idx) - 1, k))
        self.back_label.setText(f"{k + 1}/{len(idx)}")
        it = self._find(self.tree.invisibleRootItem(), idx[k])
        if it is not None:
            self.tree.setCurrentItem(it)
            self.tree.scrollToItem(it)
        else:
            self.show_op(idx[k])

    def _ops(self) -> list[dict]:
        k = self.step.currentIndex()
        ops = self.rep["ops"]
        return ops if k >= self.cap.steps or k < 0 else [e for e in ops if e["step"] == k + 1]

    def _fill(self) -> None:
        ops = self._ops()
        self.bands.set_ops(ops)
        self.tree.clear()
        nodes: dict[str, QTreeWidgetItem] = {}
        stats: dict[str, list] = {}

        def node(path: str) -> QTreeWidgetItem:
            if path in nodes:
                return nodes[path]
            parent_path, _, name = path.rpartition(".")
            parent = node(parent_path) if parent_path else None
            item = QTreeWidgetItem([name or "(no module)"])
            (parent.addChild(item) if parent is not None else self.tree.addTopLevelItem(item))
            nodes[path] = item
            stats[path] = [0, 0, 0, 0, 0]
            return item

        for e in ops:
            path = e["module"] or "(no module)"
            owner = node(path)
            verdict, ulp = _worst(e)
            leaf = QTreeWidgetItem([f"#{e['index']} {e['op']}  [{e['phase']}, step {e['step']}]",
                                    "", "", "", "", ulp_text(ulp) if ulp else "",
                                    os.path.basename(e["source"])])
            if ulp:
                leaf.setToolTip(5, f"{ulp_exact(ulp)} ulp")
            leaf.setData(0, _OP, e["index"])
            leaf.setForeground(0, QBrush(_color(verdict, ulp)))
            leaf.setToolTip(0, ", ".join(o["verdict"] for o in e["outputs"]) or "no outputs")
            owner.addChild(leaf)
            p = path
            while True:  # the counts roll up the tree
                s = stats[p]
                s[0] += 1
                s[1] += verdict == "introduced"
                s[2] += verdict == "inherited"
                s[3] += verdict == "no-reference"
                s[4] = max(s[4], ulp if verdict in ("introduced", "inherited") else 0)
                if "." not in p:
                    break
                p = p.rpartition(".")[0]
        for path, item in nodes.items():
            s = stats[path]
            for col, val in enumerate(s, start=1):  # counts, then the worst ulp (one format)
                item.setText(col, "" if not val else count_text(val) if col < 5 else ulp_text(val))
            if s[4]:
                item.setToolTip(5, f"{ulp_exact(s[4])} ulp")
            worst = "introduced" if s[1] else "inherited" if s[2] else "exact"
            item.setForeground(0, QBrush(_color(worst, s[4])))
            # folded below the model's top-level children: the model and its children open
            item.setExpanded(path.count(".") < 1 and path != "(no module)")
        for col in range(1, 6):  # numbers are never elided: their columns fit them
            self.tree.resizeColumnToContents(col)

    def _select(self, cur: QTreeWidgetItem | None, _prev) -> None:
        if cur is None or cur.data(0, _OP) is None:
            return
        self.show_op(int(cur.data(0, _OP)))

    def show_op(self, i: int) -> None:
        """The Inspector on op ``i``."""
        from tapescope.core.capture.file import UNINITIALISED_OPS
        from tapescope.core.capture.judge import base_name, rerun_op

        e = self.rep["ops"][i]
        self.bands.selected = i
        self.bands.update()
        lines = [f"#{i} {e['op']}", f"module  {e['module'] or '(no module)'}",
                 f"phase   {e['phase']}, step {e['step']}", f"source  {e['source']}"]
        if e.get("reason"):
            lines.append(f"note    {e['reason']}")
        if e.get("graph"):  # a compiled graph's call: where inside it the run departs
            from tapescope.core.capture.regions import node_line

            g = e["graph"]
            lines.append(f"graph   {g['kind']}, {g['backend']}, {g['nodes']} nodes; "
                         f"{len(e.get('departures') or [])} departing output nodes")
            if e.get("departures"):
                lines.append(f"inside  {node_line(e['departures'][0])}")
        refs, why = rerun_op(self.cap, i)
        uninit = base_name(e["op"]) in UNINITIALISED_OPS  # (its output's bytes: never recorded)
        shown = False
        for j, o in enumerate(e["outputs"]):
            rec = self.cap.arrays[o["value"]]
            src = self.cap.derived.get(o["value"])
            kind = self.cap.opaque.get(o["value"])
            desc = f"{rec.dtype}{list(rec.shape)}" if rec is not None else \
                "uninitialised memory (its bytes are not recorded)" if uninit else \
                f"a {kind} tensor, digest only" if kind else \
                "digest only" if src is None else f"derived: value {src}'s elements, " \
                "rearranged (no digest of its own)"
            if rec is not None and src is not None:  # (stored: laid over its source's bytes)
                desc += f", value {src}'s elements rearranged"
            mab = self.max_abs.get((i, j)) if o["verdict"] == "introduced" else None
            lines.append(f"output {j}: value {o['value']} {desc}: {o['verdict']}"
                         + (f" (introduced {o['n_diff']} elements, max {o['max_ulp']} ulp"
                            + (f", max |difference| {mab:.3g}" if mab is not None else "")
                            + f"; total {o['total_n_diff']}, max {o['total_max_ulp']} ulp)"
                            if "n_diff" in o else ""))
            if o["verdict"] == "introduced":
                lines.append(f"  cause      {self._cause(i, j)}")
            if rec is not None and rec.size:
                flat = np.asarray(rec).reshape(-1)
                ref = refs[j] if refs is not None and j < len(refs) and \
                    refs[j].shape == rec.shape else None
                # six elements from the first that differs (the start may well agree: a
                # padding row, a masked block), its index said
                k = first_differing(flat, ref.reshape(-1)) if ref is not None and \
                    ref.dtype == rec.dtype else 0
                at = "" if k == 0 else \
                    f"  from element {tuple(int(v) for v in np.unravel_index(k, rec.shape))}"
                lines.append(f"  recorded   {np.array2string(flat[k:k + 6], precision=9)}{at}")
                if ref is not None:
                    lines.append("  reference  "
                                 f"{np.array2string(ref.reshape(-1)[k:k + 6], precision=9)}")
                    if not shown and refs[j].dtype == rec.dtype:
                        got = ulp_image(refs[j], rec)
                        if got is not None:
                            self.ulp_map.setPixmap(got[0])
                            self.ulp_layout.setText(f"output {j}: {got[1]}")
                            shown = True
        if refs is None:
            lines.append(f"reference: {why}")
        if not shown:
            self.ulp_map.setText("(no float output with a reference)")
            self.ulp_layout.setText("")
        self.inspector.setPlainText("\n".join(lines))

    def _cause(self, i: int, j: int) -> str:
        """Why output ``j`` of op ``i`` introduced its difference (``--explain``'s words)."""
        from tapescope.core.explain import cause_text

        c = self.causes.get((i, j))
        if c is not None:
            return f"{c['cause']} ({c['variant']})" if c["cause"] != "unknown" else \
                cause_text(c)
        return "not searched (tapescope gui FILE --explain names why)" if not \
            self.explained else "not searched"

    def select_first_divergence(self) -> None:
        """Select the first op that differs (or the first op) in the tree."""
        f = self.rep["first_divergence"]
        want = f["index"] if f else (self.rep["ops"][0]["index"] if self.rep["ops"] else None)
        if want is None:
            return
        if f:
            self.step.setCurrentIndex(f["step"] - 1)
        it = self._find(self.tree.invisibleRootItem(), want)
        if it is not None:
            self.tree.setCurrentItem(it)
            self.tree.scrollToItem(it)

    def _find(self, item: QTreeWidgetItem, want: int) -> QTreeWidgetItem | None:
        for k in range(item.childCount()):
            c = item.child(k)
            if c.data(0, _OP) == want:
                return c
            got = self._find(c, want)
            if got is not None:
                return got
        return None


def run_window(args: argparse.Namespace, size: tuple[int, int] | None, gui: Any) -> int:
    """Open ``args.file`` (a capture), judge it, show it (``--screenshot``: render and exit).
    ``gui``: ``app.qt.gui`` (its picture saver and Ctrl-C loop), handed in so this module does
    not import the module that imports it."""
    import sys

    from PySide6.QtWidgets import QApplication

    from tapescope.app.qt.messages import quiet_qt
    from tapescope.app.qt.style import apply_style
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge
    from tapescope.core.progress import file_label, progress

    with progress(file_label("loading", args.file)):
        cap = load(args.file)  # a bad file raises: one line, exit 2
    with progress(f"judging {os.path.basename(args.file)}", total=cap.n_ops) as bar:
        rep = judge(cap, explain=bool(getattr(args, "explain", False)), advance=bar.advance)
    quiet_qt(bool(getattr(args, "debug", False)))
    app = QApplication.instance() or QApplication(sys.argv[:1] or ["tapescope"])
    apply_style(app)
    win = CaptureWindow(cap, rep)
    if args.screenshot:
        from PySide6.QtCore import QCoreApplication

        win.resize(*size)
        win.show()
        win.select_first_divergence()
        for _ in range(5):
            QCoreApplication.processEvents()
        img = win.grab()
        win.close()  # (its hold on app.qt.gui_gc ends: main() may be called again in-process)
        err = gui._save_picture(img, args.screenshot)
        if err is not None:
            raise OSError(err)
        print(f"wrote {args.screenshot} ({img.width()}x{img.height()})")
        return 0
    irq = gui.Interrupts()  # Ctrl-C closes the window, exit 130 (the CLI contract)
    win.resize(1280, 800)
    win.show()
    win.select_first_divergence()
    return gui.exec_until_interrupted(app, win, irq)
