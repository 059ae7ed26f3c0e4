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

import numpy as np
from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog

from tapescope.app.session import worst_codes
from tapescope.app.step_history import F_G_NAN, F_V_NAN, SOURCE_PROVENANCE, StepHistory
from tapescope.core.summary import entry_worst, severity, worst
from tapescope.views.models.numbers import count_text
from tapescope.views.overlay import NodeColors
from tapescope.views.step_scrubber import StepScrubber
from tapescope.views.training_view import HEAT_STEPS, heat_levels

# the live actions' keys (shown in the Live menu and in each tooltip)
SHORTCUTS = {"start": "Ctrl+R", "pause": "Ctrl+P", "step": "Ctrl+T", "resume": "Ctrl+Shift+P",
             "stop": "Ctrl+E", "first": "Ctrl+D", "next_intro": "Ctrl+]",
             "prev_intro": "Ctrl+[", "export": "Ctrl+Shift+E"}
# (attribute, text, tooltip) of the controller's actions; "Train one step", not "Step": the
# Backward stepper's actions walk one backward pass node by node
LIVE_ACTIONS = (
    ("start", "Start", "Start (or restart) a live session with these settings"),
    ("pause", "Pause", "Pause the training after the current step"),
    ("step", "Train one step", "While paused: run one more training step on both sides"),
    ("resume", "Resume", "Resume training"),
    ("stop", "Stop", "End the training (the results stay, and can be exported)"),
    ("first", "First divergence", "Open the first node whose bits differ, at the step it "
     "first differed"),
    ("export", "Export report…", "Write the HTML parity report of this session"),
)


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
        self.repro: dict | None = None  # a "Copy repro" waiting for its inputs' arrays
        self.last_repro = None
        # heatmap columns of the last HEAT_STEPS steps (all, introduced only), made once per step
        self._cols: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._thinned = 0
        self._param_rows: list | None = None
        self._param_steps: np.ndarray | None = None  # the first steps the rows were made of
        self._param_ids: list[tuple[int, str]] | None = None  # (id, name) of every parameter
        self._param_pids = np.zeros(0, dtype=np.int64)  # their ids, as an array
        self._sent: tuple = (None, {})  # (session, kind → node ids) of the marks set last

    def install(self, menu) -> None:
        """Name the controller's actions apart, give them keys and tooltips that say them; add
        next/previous introduced, the Steps toolbar (the scrubber) and their menu entries."""
        ctl = self.ctl
        # the main toolbar's row (no row of its own: the window must fit 900 px with a session)
        steps = self.toolbar = self.win.tool_row()
        steps.addSeparator()
        # where to look next lives beside the scrubber (the Live toolbar overflowed at 1280 px)
        ctl.toolbar.removeAction(ctl.act_first)
        steps.addAction(ctl.act_first)
        ctl.act_prev_intro = steps.addAction("Previous introduced",
                                             lambda: self.walk_introduced(False))
        ctl.act_next_intro = steps.addAction("Next introduced",
                                             lambda: self.walk_introduced(True))
        steps.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        acts = [*LIVE_ACTIONS,
                ("next_intro", "Next introduced", "Select the next node (tape order) that "
                 "introduced error at the shown step"),
                ("prev_intro", "Previous introduced", "Select the previous node that "
                 "introduced error at the shown step")]
        for key, text, tip in acts:
            a = getattr(ctl, f"act_{key}")
            a.setText(text)
            a.setShortcut(QKeySequence(SHORTCUTS[key]))
            a.setShortcutContext(Qt.WindowShortcut)
            a.setToolTip(f"{tip} ({SHORTCUTS[key]})")
        menu.insertActions(ctl.act_export, [ctl.act_next_intro, ctl.act_prev_intro])
        menu.addSeparator()
        for a in self.scrubber.actions.values():
            menu.addAction(a)
        steps.addSeparator()
        steps.addWidget(self.scrubber)
        self.win.repro_requested.connect(self.copy_repro_dialog)
        self.update_actions()

    def update_actions(self) -> None:
        """Without a session there is nothing to jump to (and nothing to claim agrees)."""
        has = self.ctl.live is not None and self.history is not None
        for name in ("act_first", "act_next_intro", "act_prev_intro"):
            a = getattr(self.ctl, name, None)
            if a is not None:
                a.setEnabled(has)

    def reset(self) -> None:
        """A new session: no history yet."""
        self.history = None
        self.view_step = -1
        self.repro = None
        self._cols, self._thinned, self._param_rows, self._param_ids = [], 0, None, None
        self._sent = (None, {})
        self.scrubber.follow = True
        self.scrubber.set_steps([])
        self.update_actions()

    # ---- feeding ----------------------------------------------------------------------------
    def add(self, snap) -> None:
        """Take a snapshot's steps (each with its step record)."""
        results = snap.results
        s = self.win.session
        if self.history is None:
            n = len(results[0].record)
            nodes = s.tape.nodes[:n] if s is not None and len(s.tape) >= n else ()
            self.history = StepHistory(nodes)
        known = self.history.step_nums[-1] if len(self.history) else 0
        h = self.history
        for res in results:
            if res.step > known:
                h.add(res)
                if h.thinned == self._thinned:
                    self._add_column(len(h) - 1)
        if h.thinned != self._thinned:  # old steps dropped: rebuild the (recent) columns
            self._thinned = h.thinned
            self._cols = []
            for k in range(max(0, len(h) - HEAT_STEPS), len(h)):
                self._add_column(k)
        self._heat()
        self._params()
        self.update_actions()
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
        self.win.set_comparison(h.comparison(step), overlay=False)  # the colours: _marks, once
        self._marks(step)
        self.ctl.training.set_cursor(step)
        self.ctl.kernels.set_parity(self.kernel_parity(step))
        self.step_shown.emit(step)

    def _marks(self, step: int) -> None:
        h = self.history
        # NOTE: straight from the step's records (StepHistory.overlay), not its 10k dicts:
        # the same colours parity_colors(comparison) gives, held to it in the tests
        worst, differ, intro = h.overlay(step)
        ids = h.node_id_array()
        code, palette = worst_codes(worst)
        # arrays end to end (views.overlay): a 100k-entry dict per snapshot cost ~70 ms
        self.win.set_graph_overlay(NodeColors(ids, code, palette), muted=ids[differ & ~intro],
                                   introduced=ids[differ & intro])
        self._mark("nan", h.alarms(step))
        f = h.first
        self._mark("first", [] if f is None else [int(f["node"])])

    def _mark(self, kind: str, ids: list[int]) -> None:
        """Set the graph's ``kind`` marks unless they already are these (each set redraws the
        minimap: ~7 ms on a 10k-node tape, twice per snapshot for marks that rarely move)."""
        session, sent = self._sent
        if session is not self.win.session:  # another tape: its marks were set by the window
            session, sent = self.win.session, {}
            self._sent = (session, sent)
        ids = [int(i) for i in ids]
        if sent.get(kind) != ids:
            sent[kind] = ids
            self.win.set_graph_marks(kind, ids)

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
                # core.summary's rule: a kernel that differs is >= 1 ulp (a signed zero too)
                out[name] = {"worst": entry_worst({"value": k}), "node": k.get("first_node"),
                             "introduced": bool(k.get("introduced"))}
        if out:
            return out
        rec = h.record(step)
        intro = set(h.introduced(step))
        # each node's worst on one side by core.summary's rule (a NaN mismatch -1)
        f = rec["flags"]
        side = {"forward": worst(rec["v_n"], rec["v_ulp"], f & F_V_NAN, 0, 0.0, 0).tolist(),
                "backward": worst(0, 0.0, 0, rec["g_n"], rec["g_ulp"], f & F_G_NAN).tolist()}
        for k in plan["kernels"]:
            seg = k.get("segment")
            if seg is None or k["role"] not in ("forward", "backward"):
                continue
            w = side[k["role"]]
            worst_k, node = 0.0, None
            for i in plan["segments"][seg]["node_ids"]:  # the first of the worst (severity)
                if w[i] != 0 and (node is None or severity(w[i]) < severity(worst_k)):
                    worst_k, node = w[i], int(i)
            out[k["name"]] = {"worst": worst_k, "node": node,
                              "introduced": None if node is None else node in intro}
        return out

    def _add_column(self, k: int) -> None:
        all_, intro = self.history.columns(k)
        self._cols.append((self.history.step_nums[k], heat_levels(all_).astype(np.uint8),
                           heat_levels(intro).astype(np.uint8)))
        del self._cols[:-HEAT_STEPS]

    def _heat(self, *args) -> None:
        if not self._cols:
            return
        only = self.ctl.training.introduced_only.isChecked()
        img = np.stack([c[2] if only else c[1] for c in self._cols], axis=1)
        # all error: where a node did not introduce its own, drawn faded (an inherited cell)
        inherited = None if only else np.stack([c[2] == 0 for c in self._cols], axis=1)
        # a toggle (args: the checkbox's bool) redraws at once; a snapshot with the plots
        self.ctl.training.set_heat(img, [c[0] for c in self._cols], now=bool(args),
                                   inherited=inherited)

    def _params(self) -> None:
        s = self.win.session
        if s is None or self.history is None:
            return
        if self._param_ids is None:  # once per session: the tape's nodes do not change
            n = len(self.history.nodes)
            self._param_ids = [(p.id, p.name or "") for p in s.tape.nodes[:n] if p.op == "param"]
            self._param_pids = np.fromiter((i for i, _ in self._param_ids), dtype=np.int64,
                                           count=len(self._param_ids))
        steps = self.history.first_steps()[self._param_pids]
        old = self._param_rows
        if old is not None and np.array_equal(steps, self._param_steps):
            return  # no parameter first differed since: the rows are the same
        ids = self._param_ids
        if old is None or self._param_steps is None or len(old) != steps.size:
            rows = [_param_row(p, f) for p, f in zip(ids, steps.tolist(), strict=True)]
            changed = None
        else:
            # NOTE: only the rows whose first step moved are made again (21k parameters of a
            # 100k-node tape: all their tuples cost ~50 ms of the GUI thread a time)
            changed = np.flatnonzero(steps != self._param_steps).tolist()
            rows = list(old)
            for k, f in zip(changed, steps[changed].tolist(), strict=True):
                rows[k] = _param_row(ids[k], f)
        self._param_steps = steps
        self._param_rows = rows
        self.ctl.training.set_params(rows, changed)

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
            self.win.set_status(
                f"step {count_text(self.view_step)}: no node introduced error", 5000)
            return None
        sel = self.win.selected
        if forward:
            nxt = next((i for i in ids if i > sel), ids[0])
        else:
            nxt = next((i for i in reversed(ids) if i < sel), ids[-1])
        self.win.select_node(nxt)
        k = ids.index(nxt) + 1
        self.win.set_status(
            f"introduced node {k:,} of {len(ids):,} at step {count_text(self.view_step)}: "
            f"#{nxt}", 5000)
        return nxt

    @Slot()
    def jump_to_first(self) -> None:
        """Open the session's first divergence at the step it happened."""
        live, h = self.ctl.live, self.history
        if live is None or h is None:
            self.win.set_status(
                "No live session: nothing has been compared" if live is None else
                "No step has run yet: nothing has been compared", 5000)
            return
        f = h.first or live.first
        if f is None:
            self.win.set_status(
                f"No divergence in {count_text(live.steps_done)} steps: every compared bit "
                "agrees", 5000)
            return
        self.open_at(int(f["node"]), int(f["step"]))

    # ---- copy repro -------------------------------------------------------------------------
    @Slot()
    def copy_repro_dialog(self) -> None:
        """Ask for a folder, then ``copy_repro``."""
        folder = QFileDialog.getExistingDirectory(self.win, "Write the repro into a folder")
        if folder:
            self.copy_repro(folder)

    def copy_repro(self, folder: str) -> bool:
        """Write the selected node's repro at the shown step into ``folder`` (its inputs'
        candidate arrays are fetched first when not cached); False when it cannot start."""
        ctl, s, node = self.ctl, self.win.session, self.win.selected
        if s is None or node < 0 or not ctl.can_inspect():
            self.win.show_error("Cannot copy the repro", "select a node of a live session "
                                "whose worker still runs")
            return False
        step = ctl.shown_step()
        need = self._repro_needs(node, step)
        if need is None:
            self.win.show_error("Cannot copy the repro", f"step {step}: the parameters' values "
                                "before its update are not kept (they are from step 2 on)")
            return False
        self.repro = {"folder": folder, "node": node, "step": step}
        for j, at in need:
            ctl._request(j, at)
        self.try_repro()
        return True

    def _repro_needs(self, node: int, step: int) -> list[tuple[int, int]] | None:
        """(node, step) of every array the repro needs: the node at ``step``, its inputs as
        the node read them. NOTE: a parameter's value at a step is past that step's update;
        the node read the value before it, which is the previous step's (None at step 1)."""
        t = self.win.session.tape
        out = [(node, step)]
        for j in t.node(node).inputs:
            if t.node(j).op == "param":
                if step <= 1:
                    return None
                out.append((j, step - 1))
            else:
                out.append((j, step))
        return out

    def try_repro(self, error: str | None = None) -> None:
        """Write the pending repro once every array it needs is here (``error``: a fetch
        failed, the repro is dropped and the user told why)."""
        r = self.repro
        if r is None:
            return
        if error is not None:
            self.repro = None
            self.win.show_error("Cannot copy the repro", error)
            return
        n = self.win.session.tape.node(r["node"])
        got = [self.ctl._current(j, at) for j, at in self._repro_needs(n.id, r["step"])]
        if any(g is None for g in got):
            return  # the rest arrives through the controller's _on_inspected
        self.repro = None
        from tapescope.views.models.repro import write_repro

        me = got[0]
        meta = {"id": n.id, "op": n.op, "attrs": dict(n.attrs), "shape": tuple(n.shape),
                "dtype": str(me.cand_value.dtype), "step": r["step"],
                "reference": me.reference, "candidate": me.candidate}
        try:
            path = write_repro(r["folder"], meta, [g.cand_value for g in got[1:]],
                               me.cand_value, me.ref_value)
        except OSError as e:
            self.win.show_error("Cannot copy the repro", f"{r['folder']}: {e}")
            return
        self.last_repro = path
        self.win.set_status(f"wrote {path} (run it: exit 1 while the candidate "
                                         "differs)", 8000)


def _param_row(param: tuple[int, str], first: int) -> tuple:
    """A parameter list row: (id, name, the step it first differed at, or None)."""
    i, name = param
    return (i, name, None if first < 0 else first)
