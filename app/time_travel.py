"""Time travel in a live session: the step scrubber drives the whole window.

``TimeTravel`` keeps the session's ``StepHistory`` (every step, per node, compact) and shows
one step everywhere: the parity table and the graph colours (introduced error in full colour
and outlined, inherited error faded), the NaN/inf alarms, the heatmap's cursor, the Kernels
dock's per-kernel parity, and (through ``LiveController``) the Inspector's arrays of that step.
The heatmap and the parameter list open a node at a step; "First divergence" opens the node at
its step; next/previous introduced node walks the roots of the shown step.

Introduced vs inherited: ``core.provenance`` through the step summaries when the worker sends
it; until then ``app.step_history`` falls back to its roots (``SOURCE_ROOTS``), and the status
line says which one is shown.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot

from app.session import parity_colors
from app.step_history import SOURCE_PROVENANCE, StepHistory, summarize
from views.step_scrubber import StepScrubber
from views.training_view import HEAT_STEPS


class TimeTravel(QObject):
    """The shown step of a LiveController's session; ``step_shown(step)`` after each change."""

    step_shown = Signal(int)

    def __init__(self, ctl) -> None:
        super().__init__(ctl)
        self.ctl, self.win = ctl, ctl.win
        self.history: StepHistory | None = None
        self.view_step = -1
        self.scrubber = StepScrubber(self.win)
        self.scrubber.step_changed.connect(self.show_step)
        ctl.training.cell_clicked.connect(self.open_at)
        ctl.training.introduced_only_changed.connect(self._heat)

    def reset(self) -> None:
        """A new session: no history yet."""
        self.history = None
        self.view_step = -1
        self.scrubber.follow = True
        self.scrubber.set_steps([])

    # ---- feeding ----------------------------------------------------------------------------
    def add(self, snap) -> None:
        """Take a snapshot's step summaries (or its latest step, from an older worker)."""
        summaries = snap.summaries or [summarize(snap.latest)]
        s = self.win.session
        if self.history is None:
            n = int(summaries[0]["n"])
            nodes = s.tape.nodes[:n] if s is not None and len(s.tape) >= n else ()
            self.history = StepHistory(nodes)
        known = self.history.step_nums[-1] if len(self.history) else 0
        for summary in summaries:
            if int(summary["step"]) > known:
                self.history.add(summary)
        self._heat()
        self._params()
        before = self.view_step
        self.scrubber.set_steps(self.history.step_nums)  # emits step_changed when following
        if self.view_step == before and before in self.history.step_nums:
            self._marks(before)  # the same step: the session-wide marks may have moved

    # ---- showing ----------------------------------------------------------------------------
    @Slot(int)
    def show_step(self, step: int) -> None:
        """Show ``step`` in every panel (the nearest stored step)."""
        h = self.history
        if h is None or not len(h) or self.win.session is None:
            return
        step = h.nearest(step)
        self.view_step = step
        comp = h.comparison(step)
        self.win.set_comparison(comp)
        self._marks(step)
        self.ctl.training.set_cursor(step)
        self.ctl.kernels.set_parity(self.kernel_parity(step))
        self.step_shown.emit(step)

    def _marks(self, step: int) -> None:
        h = self.history
        comp = h.comparison(step)
        intro = set(h.introduced(step))
        differ = {e["id"] for e in comp if e["value"]["n_diff"] or (e["grad"] or {}).get(
            "n_diff")}
        v = self.win.graph.view
        v.set_overlay(parity_colors(comp), muted=differ - intro, introduced=intro & differ)
        v.set_marks("nan", h.alarms(step))
        f = h.first
        v.set_marks("first", [] if f is None else [int(f["node"])])

    def source_text(self) -> str:
        """Where the shown step's introduced/inherited split comes from, for the status line."""
        if self.history is None or self.view_step < 0:
            return ""
        if self.history.source(self.view_step) == SOURCE_PROVENANCE:
            return "introduced: provenance"
        return "introduced: roots (approximation; provenance not in this step)"

    def kernel_parity(self, step: int) -> dict[str, dict]:
        """Per kernel name, its parity at ``step``: the provenance engine's verdict when the
        step has one, else the worst node of its segment (values forward, gradients backward).
        """
        plan = self.ctl.kernels.plan
        h = self.history
        if not plan or h is None:
            return {}
        meta = h.step_meta(step)
        out: dict[str, dict] = {}
        for k in meta.get("kernels") or ():  # core.provenance: the kernel judged whole
            name = k.get("kernel")
            if name:
                out[name] = {"worst": float(k.get("max_ulp") or 0) if k.get("n_diff") else 0.0,
                             "node": k.get("first_node"), "introduced": bool(k.get("introduced"))}
        if out:
            return out
        rec = h.record(step)
        intro = set(h.introduced(step))
        for k in plan["kernels"]:
            seg = k.get("segment")
            if seg is None or k["role"] not in ("forward", "backward"):
                continue
            ids = plan["segments"][seg]["node_ids"]
            n_key, u_key = ("v_n", "v_ulp") if k["role"] == "forward" else ("g_n", "g_ulp")
            worst, node = 0.0, None
            for i in ids:
                if rec[n_key][i] > 0:
                    u = max(float(rec[u_key][i]), 1.0)
                    if u > worst:
                        worst, node = u, int(i)
            out[k["name"]] = {"worst": worst, "node": node,
                              "introduced": None if node is None else node in intro}
        return out

    def _heat(self, *_args) -> None:
        h = self.history
        if h is None or not len(h):
            return
        worst, steps = h.heat(self.ctl.training.introduced_only.isChecked(), last=HEAT_STEPS)
        self.ctl.training.set_heat(worst, steps)

    def _params(self) -> None:
        s = self.win.session
        if s is None or self.history is None:
            return
        first = self.history.first_step_differing()
        n = len(self.history.nodes)
        self.ctl.training.set_params([(p.id, p.name or "", first.get(p.id))
                                      for p in s.tape.nodes[:n] if p.op == "param"])

    # ---- going places -----------------------------------------------------------------------
    @Slot(int, int)
    def open_at(self, node: int, step: int) -> None:
        """Show ``node`` at ``step`` (a heatmap click, a parameter row, a divergence)."""
        if self.history is None or not len(self.history):
            return
        self.scrubber.follow = False
        self.scrubber.show_step(step)
        self.win.select_node(int(node))

    def walk_introduced(self, forward: bool = True) -> int | None:
        """Select the next (previous) node that introduced error at the shown step, in tape
        order from the selection, wrapping; None when the step has none."""
        if self.history is None or self.view_step < 0:
            return None
        ids = self.history.introduced(self.view_step)
        if not ids:
            self.win.statusBar().showMessage(
                f"step {self.view_step}: no node introduced error", 5000)
            return None
        sel = self.win.selected
        if forward:
            nxt = next((i for i in ids if i > sel), ids[0])
        else:
            nxt = next((i for i in reversed(ids) if i < sel), ids[-1])
        self.win.select_node(nxt)
        k = ids.index(nxt) + 1
        self.win.statusBar().showMessage(
            f"introduced node {k} of {len(ids)} at step {self.view_step}: #{nxt}", 5000)
        return nxt
