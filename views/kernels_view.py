"""The Kernels dock: the fusion plan (segments, kernels, launches), each kernel's CUDA C source.

Fed ``FusionPlan.to_json()`` (plain data). Selecting a kernel emits ``nodes_highlighted`` with
the node ids of its segment, so the window can outline them in the graph. ``set_parity`` puts
each kernel's parity at the shown step beside it; ``show_node`` selects the kernel computing a
node and highlights that node's lines in its source (the generated code marks each node with a
``/* node N op */`` comment).
"""

from __future__ import annotations

import re

from PySide6.QtCore import QEvent, Qt, Signal, Slot
from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.numbers import ulp_text
from tapescope.views.models.plain import html, tip
from tapescope.views.models.ulp_scale import EXACT_COLOR, NAN_COLOR

KEYWORDS = ("extern", "__global__", "__device__", "__syncthreads", "const", "long", "int",
            "unsigned", "double", "float", "void", "for", "if", "else", "return", "real_t",
            "static", "inline", "struct")


def _fmt(color: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    f.setForeground(QColor(color))
    if bold:
        f.setFontWeight(QFont.Bold)
    f.setFontItalic(italic)
    return f


class CudaHighlighter(QSyntaxHighlighter):
    """C/CUDA colouring: keywords, numbers, strings, rounding intrinsics, comments."""

    RULES = [
        (re.compile(r"\b(" + "|".join(re.escape(k) for k in KEYWORDS) + r")\b"),
         _fmt("#7c3aed", bold=True)),
        (re.compile(r"\b(ADD|SUB|MUL|DIV|SQRT|EXP|LOG|TANH|SIGMOID|__[df](add|sub|mul|div|sqrt)"
                    r"_rn|ts_\w+)\b"), _fmt("#b45309", bold=True)),
        (re.compile(r"\b(blockIdx|threadIdx|blockDim|gridDim)\b"), _fmt("#0e7490")),
        (re.compile(r"\b\d+(\.\d*)?([eE][-+]?\d+)?[fFlL]*\b"), _fmt("#15803d")),
        (re.compile(r'"[^"\n]*"'), _fmt("#be123c")),
        (re.compile(r"//[^\n]*"), _fmt("#6b7280", italic=True)),
    ]
    COMMENT = _fmt("#6b7280", italic=True)

    def highlightBlock(self, text: str) -> None:  # noqa: N802 (Qt override)
        for rx, fmt in self.RULES:
            for m in rx.finditer(text):
                self.setFormat(m.start(), m.end() - m.start(), fmt)
        # /* ... */ comments may span lines: block state 1 = this line starts inside one
        inside = self.previousBlockState() == 1
        self.setCurrentBlockState(0)
        pos = start = 0
        while True:
            if not inside:
                start = text.find("/*", pos)
                if start < 0:
                    return
                pos = start + 2
            end = text.find("*/", pos)
            if end < 0:
                self.setFormat(start, len(text) - start, self.COMMENT)
                self.setCurrentBlockState(1)
                return
            self.setFormat(start, end + 2 - start, self.COMMENT)
            pos, inside = end + 2, False


NO_PLAN = ("<b>Kernels</b> — a fused live session's plan: each generated CUDA kernel, its "
           "source with the selected node's lines marked, its launches and its parity at the "
           "shown step. This session has no plan: it runs unfused.")


class KernelsPanel(QWidget):
    """List of generated kernels + source view + launch counts."""

    nodes_highlighted = Signal(list)
    start_fused_requested = Signal()  # the empty panel's "Start a fused session"

    def __init__(self, parent=None):
        super().__init__(parent)
        self.summary = QLabel(NO_PLAN, self)
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.list = QListWidget(self)
        self.source = QPlainTextEdit(self)
        self.source.setReadOnly(True)
        self.source.setLineWrapMode(QPlainTextEdit.NoWrap)
        mono = QFont("Monospace", 9)
        mono.setStyleHint(QFont.TypeWriter)
        self.source.setFont(mono)
        self.highlighter = CudaHighlighter(self.source.document())
        self.start_button = QPushButton("Start a fused live session", self)
        self.start_button.setToolTip("Tick Fuse on the Live toolbar and start a session: its "
                                     "plan's kernels appear here")
        self.start_button.clicked.connect(self.start_fused_requested)
        split = self.split = QSplitter(Qt.Vertical, self)
        split.addWidget(self.list)
        split.addWidget(self.source)
        split.setSizes([160, 320])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(self.summary)
        lay.addWidget(self.start_button, 0, Qt.AlignLeft)
        lay.addWidget(split, 1)
        self.empty = QWidget(self)  # (fills the dock while there is no plan)
        lay.addWidget(self.empty, 1)
        self.plan: dict | None = None
        self.parity: dict[str, dict] = {}
        self.node_lines: tuple[int, int] | None = None  # (first, last) line of the shown node
        self._quiet = False  # a selection from show_node: no nodes_highlighted back
        self.list.currentRowChanged.connect(self._picked)
        # the dock shows a few source lines: a double-click opens the kernel large
        self.list.itemDoubleClicked.connect(lambda _it: self.open_source())
        self.source.viewport().installEventFilter(self)
        self.source.setToolTip("Double-click: this kernel's source in a window of its own")
        self.large = None  # the SourceWindow opened last
        self.set_plan(None)

    def set_plan(self, plan: dict | None) -> None:
        """Show a plan (``FusionPlan.to_json()``) or nothing."""
        self.plan = plan
        self.list.clear()
        self.source.clear()
        has = bool(plan)
        self.split.setVisible(has)  # no empty list and source box: what will be here, and how
        self.empty.setVisible(not has)
        self.start_button.setVisible(not has)
        if not plan:
            self.summary.setText(NO_PLAN)
            return
        b, a = plan["launches_before"], plan["launches_after"]
        self.summary.setText(
            f"<b>plan {html(plan['plan_id'])}</b> · {html(plan['dtype'])} · "
            f"math={html(plan['math'])} · "
            f"{len(plan['segments'])} segments · launches per episode "
            f"<b>{b['episode']} → {a['episode']}</b> (forward {b['forward']}→{a['forward']}, "
            f"backward {b['backward']}→{a['backward']}, optimizer "
            f"{b['optimizer']}→{a['optimizer']})")
        for k in plan["kernels"]:
            it = QListWidgetItem(self._item_text(k))
            it.setData(Qt.UserRole, k["name"])
            self.list.addItem(it)
        self.set_parity(self.parity)

    def _item_text(self, k: dict) -> str:
        seg = k.get("segment")
        ids = self.kernel_nodes(k["name"])
        span = f"nodes {min(ids)}..{max(ids)}" if ids else "all parameters"
        p = self.parity.get(k["name"])
        badge = ""
        if p is not None:
            if p.get("worst", 0) == 0:
                badge = "✓ exact  ·  "
            else:
                worst = "NaN" if p["worst"] < 0 else f"{ulp_text(p['worst'])} ulp"  # 2,432 ulp
                who = f" at #{p['node']}" if p.get("node") is not None else ""
                intro = {True: " introduced", False: " inherited"}.get(p.get("introduced"), "")
                badge = f"≠ {worst}{who}{intro}  ·  "
        # NOTE: the name without its plan's id (the summary line holds it): the whole line
        # was clipped in a 460 px dock; the tooltip has the full name
        name = k["name"]
        pid = str((self.plan or {}).get("plan_id") or "")
        m = re.match(r"[a-z]{0,3}" + re.escape(pid) + "_(.+)", name) if pid else None
        short = m.group(1) if m else name  # fzd739bbbcb564_s1_fwd_f64 → s1_fwd_f64
        return (f"{badge}{short}  ·  {k['role']}  ·  "
                f"{'seg ' + str(seg) if seg is not None else 'optimizer'}  ·  "
                f"{span}  ·  grid {k['grid']} × block {k['block']}")

    def set_parity(self, parity: dict[str, dict]) -> None:
        """Per kernel name: ``{"worst": ulp (-1 NaN, 0 exact), "node": id or None,
        "introduced": bool or None}`` at the shown step; shown before each kernel's name."""
        self.parity = dict(parity)
        if not self.plan:
            return
        by_name = {k["name"]: k for k in self.plan["kernels"]}
        for r in range(self.list.count()):
            it = self.list.item(r)
            k = by_name.get(it.data(Qt.UserRole))
            if k is None:
                continue
            it.setText(self._item_text(k))
            # (a worker's words: escaped, as every tooltip that quotes what came from outside)
            it.setToolTip(tip(f"{k['name']}\n{self._item_text(k)}\n(double-click: the source "
                              "in a window of its own)"))
            p = self.parity.get(k["name"])
            color = None
            if p is not None:
                # exact and NaN in the ulp scale's colours; any ulp one legible red (text)
                color = EXACT_COLOR if p.get("worst", 0) == 0 else (
                    NAN_COLOR if p["worst"] < 0 else "#b91c1c")
            if color:
                it.setForeground(QColor(color))
            else:  # the theme's text colour
                it.setData(Qt.ForegroundRole, None)

    def kernel_of(self, node_id: int, role: str = "forward") -> str | None:
        """The kernel of ``role`` whose segment computes ``node_id``, or None."""
        for k in (self.plan or {}).get("kernels", []):
            if k["role"] == role and node_id in self.kernel_nodes(k["name"]):
                return k["name"]
        return None

    def show_node(self, node_id: int) -> bool:
        """Select the kernel computing ``node_id`` (the one shown if it does) and highlight the
        node's lines in its source; False when no kernel computes it."""
        cur = self.list.currentItem()
        name = cur.data(Qt.UserRole) if cur is not None else None
        if name is None or node_id not in self.kernel_nodes(name):
            name = self.kernel_of(node_id) or self.kernel_of(node_id, "backward")
        if name is None:
            self.node_lines = None
            self.source.setExtraSelections([])
            return False
        if cur is None or cur.data(Qt.UserRole) != name:
            self._quiet = True
            try:
                self.select_kernel(name)
            finally:
                self._quiet = False
        self._highlight_node(node_id)
        return True

    def _highlight_node(self, node_id: int) -> None:
        lines = self.source.toPlainText().split("\n")
        mark = re.compile(rf"/\* node {node_id}\b")
        start = next((i for i, t in enumerate(lines) if mark.search(t)), None)
        if start is None:
            self.node_lines = None
            self.source.setExtraSelections([])
            return
        end = start
        while end + 1 < len(lines) and "/* node " not in lines[end + 1] \
                and "__syncthreads" not in lines[end + 1]:
            end += 1
        self.node_lines = (start + 1, end + 1)  # 1-based, as an editor numbers lines
        sel = QTextEdit.ExtraSelection()
        sel.format.setBackground(QColor("#fef3c7"))
        doc = self.source.document()
        cur = QTextCursor(doc.findBlockByNumber(start))
        cur.setPosition(doc.findBlockByNumber(end).position()
                        + len(lines[end]), QTextCursor.KeepAnchor)
        sel.cursor = cur
        self.source.setExtraSelections([sel])
        self.source.setTextCursor(QTextCursor(doc.findBlockByNumber(start)))
        self.source.centerCursor()

    def kernel_nodes(self, name: str) -> list[int]:
        """Node ids a kernel computes (its segment's), [] for the optimizer."""
        if not self.plan:
            return []
        k = next((k for k in self.plan["kernels"] if k["name"] == name), None)
        if k is None or k.get("segment") is None:
            return []
        seg = self.plan["segments"][k["segment"]]
        return list(seg["node_ids"])

    def eventFilter(self, obj, ev) -> bool:  # noqa: N802 (Qt override)
        if obj is self.source.viewport() and ev.type() == QEvent.MouseButtonDblClick:
            self.open_source()
            return True
        return False

    def open_source(self):
        """The selected kernel's source, highlighted, in a window of its own (its node's
        lines marked as here, scrolled to them)."""
        it = self.list.currentItem()
        if it is None or not self.source.toPlainText():
            return None
        w = QDialog(self.window())
        w.setAttribute(Qt.WA_DeleteOnClose, True)
        w.setWindowTitle(f"tapescope — kernel {it.data(Qt.UserRole)}")
        text = QPlainTextEdit(w)
        text.setReadOnly(True)
        text.setLineWrapMode(QPlainTextEdit.NoWrap)
        text.setFont(self.source.font())
        text.setPlainText(self.source.toPlainText())
        w.highlighter = CudaHighlighter(text.document())
        if self.node_lines is not None:  # the node's lines, marked and scrolled to as here
            first, last = self.node_lines
            text.setExtraSelections([_line_selection(text, first, last)])
            c = QTextCursor(text.document().findBlockByNumber(first - 1))
            text.setTextCursor(c)
            text.centerCursor()
        QVBoxLayout(w).addWidget(text)
        w.text = text
        w.resize(900, 760)
        w.show()
        text.horizontalScrollBar().setValue(0)  # lines start at the left (centring scrolled)
        self.large = w
        return w

    def select_kernel(self, name: str) -> None:
        """Select a kernel by name (as a click would)."""
        for r in range(self.list.count()):
            if self.list.item(r).data(Qt.UserRole) == name:
                self.list.setCurrentRow(r)
                return
        raise KeyError(f"no kernel {name!r} in the plan")

    @Slot(int)
    def _picked(self, row: int) -> None:
        if row < 0 or not self.plan:
            return
        name = self.list.item(row).data(Qt.UserRole)
        k = next(k for k in self.plan["kernels"] if k["name"] == name)
        self.source.setPlainText(k["source"])
        self.node_lines = None
        if not self._quiet:
            self.nodes_highlighted.emit(self.kernel_nodes(name))



def _line_selection(edit: QPlainTextEdit, first: int, last: int):
    """An extra selection over lines ``first``..``last`` (from 1) of ``edit``, in the colour
    the dock marks a node's lines with."""
    doc = edit.document()
    c = QTextCursor(doc.findBlockByNumber(first - 1))
    end = doc.findBlockByNumber(last - 1)
    c.setPosition(end.position() + max(0, end.length() - 1), QTextCursor.KeepAnchor)
    e = QTextEdit.ExtraSelection()
    e.format.setBackground(QColor("#fef3c7"))  # as _highlight_node marks them
    e.cursor = c
    return e
