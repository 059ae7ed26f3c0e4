"""Live sessions in the main window: the Live toolbar, the Training and Kernels docks, overlays.

One ``LiveController`` per window. ``start()`` opens the workload in the window (the structure
the graph shows), starts a ``LiveSession`` and routes its snapshots: the parity table and the
graph colours (``MainWindow.set_comparison``), the first-divergence flag, the Training dock,
and on start the fusion plan (Kernels dock, fused segments as graph groups). Selecting a node
while a session exists asks its worker for that one node's arrays on both sides (never a
stream of tensors); the answer fills the Inspector's reference-vs-candidate tab.

Time travel (``app.qt.time_travel``): the step scrubber shows any past step in every panel; the
Inspector asks the worker for that step's arrays (kept for the last few steps, keyed by node
and step here), and "Copy repro" writes that node's reference op on the candidate's inputs.

The window is reached only through ``app.qt.main_window.LIVE_WINDOW_API`` (its ``session`` and
``selected``, its signals and a few named methods: ``open_workload``, ``show_error``,
``set_status``, ``select_node``, ``set_comparison``, ``set_graph_*``, ``show_details``, ...);
the toolbar's widgets are ``app.qt.live_toolbar.LiveToolbar``'s.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtWidgets import QFileDialog, QMessageBox

from tapescope.app.live_inspect import FETCH_DEADLINE_S, InspectionCache, live_details
from tapescope.app.qt.live import (
    FAILED,
    PAUSED,
    RUNNING,
    STOPPED,
    Inspection,
    LiveSession,
    Snapshot,
)
from tapescope.app.qt.live_panels import LogWindow, WatchdogBar
from tapescope.app.qt.live_stepper import LiveStepper
from tapescope.app.qt.live_toolbar import LiveToolbar
from tapescope.app.qt.progress_dialog import StartupProgress
from tapescope.app.qt.time_travel import TimeTravel
from tapescope.app.runs import SessionConfig
from tapescope.app.session import unconfirmed_script
from tapescope.app.step_rerun import StepRerun
from tapescope.views.kernels_view import KernelsPanel
from tapescope.views.models.numbers import count_text
from tapescope.views.models.plain import cut
from tapescope.views.training_view import TrainingPanel

INSPECT_STATES = (RUNNING, PAUSED, STOPPED)  # a worker that can still answer


class LiveController(QObject):
    """Owns the current LiveSession of a MainWindow and everything that shows it."""

    def __init__(self, win, config: SessionConfig | None = None, interval_s: float = 0.2):
        super().__init__(win)
        self.win = win
        self.config = config or SessionConfig()
        self.interval_s = interval_s
        self.watchdog_s = 30.0  # "no answer from the worker for N s" after this long
        self.live: LiveSession | None = None
        self.info: dict = {}
        self.startup: StartupProgress | None = None
        self.last: Snapshot | None = None
        self.snapshots = 0
        self.cache = InspectionCache()  # the worker's answers by (node, step)
        self.shown: Inspection | None = None  # what the Inspector shows now
        # a fetch of the selected node has a deadline: then the Inspector says so, with Retry
        self.fetch_deadline_s = FETCH_DEADLINE_S
        self._deadline = QTimer(self)
        self._deadline.setSingleShot(True)
        # NOTE: precise: a coarse timer may fire 5 % early, the fetch not yet overdue, and
        # nothing re-armed it: "Fetching…" for good (seen once in ~10 runs of the deadline test)
        self._deadline.setTimerType(Qt.PreciseTimer)
        self._deadline.timeout.connect(self._fetch_overdue)
        self._await_pause = False  # the Inspector shows a running step's summary: on a pause,
        # the arrays
        self._confirmed: set[str] = set()  # workload scripts the user agreed to run
        self.training = TrainingPanel()
        self.kernels = KernelsPanel()
        self.travel = TimeTravel(self)  # the step scrubber: any past step, in every panel
        self.travel.step_shown.connect(self._step_shown)
        self.rerun = StepRerun(self)  # a step whose tensors are gone: its summary, re-run
        self.stepper = LiveStepper(self)  # the Backward stepper on the scrubber's step
        win.place_live_docks(self.training, self.kernels)
        self.kernels.nodes_highlighted.connect(self._kernel_nodes)
        self.training.start_requested.connect(self.restart)  # the empty panels' one action
        self.kernels.start_fused_requested.connect(self._start_fused)
        win.node_selected.connect(self._on_selected)
        self._build_toolbar()
        self._sync_toolbar()
        menu = win.add_menu("&Live")
        for a in (self.act_start, self.act_pause, self.act_step, self.act_resume, self.act_stop,
                  self.act_first, self.act_export):
            menu.addAction(a)
        self.travel.install(menu)  # keys, tooltips, next/previous introduced, Steps toolbar
        menu.addSeparator()
        for title in ("Training", "Kernels"):
            menu.addAction(win.dock_toggle(title))
        self.log_window = LogWindow(win)
        self.act_log = menu.addAction("Worker log", self.log_window.show)
        self.act_log.setToolTip("What the workload printed (fd 1 and fd 2 of the live worker)")
        self.watchdog = WatchdogBar(win)
        win.add_status_widget(self.watchdog)
        self.watchdog.stop_button.clicked.connect(self.stop)
        self.watchdog.kill_button.clicked.connect(self.kill)

    # ---- toolbar ----------------------------------------------------------------------------
    def _build_toolbar(self) -> None:
        tb = self.toolbar = LiveToolbar({
            "start": self.restart, "pause": self.pause, "step": self.single_step,
            "resume": self.resume, "stop": self.stop, "first": self.jump_to_first,
            "export": self.export_dialog})
        self.win.add_toolbar(tb, new_row=True)
        # the tests and TimeTravel know the boxes and actions by these names
        for name in ("device_box", "dtype_box", "math_box", "compare_box", "fuse_box",
                     "act_start", "act_pause", "act_step", "act_resume", "act_stop",
                     "act_first", "act_export", "state_label"):
            setattr(self, name, getattr(tb, name))
        self.win.add_status_widget(self.state_label)
        self._update_actions("idle")

    def _sync_toolbar(self) -> None:
        self.toolbar.show_config(self.config)

    def toolbar_config(self) -> SessionConfig:
        """The config the toolbar shows, for the workload the window shows (if it is one)."""
        s = self.win.session
        wl = s.meta.get("workload") if s is not None else None
        if wl is None and s is not None and s.meta.get("onnx") and not s.meta.get("import_error"):
            # a trainable model the user opened (File > Open): Live trains that model, not the
            # toolbar's last workload (an ONNX workload runs no code from the file)
            wl = "onnx:" + str(s.meta["onnx"])
        return self.config.with_(workload=wl or self.config.workload, **self.toolbar.choices())

    def _update_actions(self, state: str) -> None:
        self.toolbar.update_actions(self.live is not None, state,
                                    self.live is not None and self.live.info is not None)
        if hasattr(self, "travel"):
            self.travel.update_actions()

    # ---- control ----------------------------------------------------------------------------
    def start(self, config: SessionConfig | None = None, paused: bool = False,
              max_steps: int | None = None) -> bool:
        """End any session, open ``config.workload`` in the window, start stepping."""
        # SECURITY: a script named only by an opened file's meta runs after the user says so
        script = unconfirmed_script(self.win.session, (config or self.config).workload)
        if script is not None and script not in self._confirmed and not self.confirm_script(
                script):
            return False  # nothing changed: the current session and config stay
        if script is not None:
            self._confirmed.add(script)
        self.close()
        if config is not None:
            self.config = config
            self._sync_toolbar()
        c = self.config
        s = self.win.session
        if s is None or s.meta.get("workload") != c.workload:
            if not self.win.open_workload(c.workload):
                return False  # the window shows why (traceback included); nothing changed
        ref, cand = c.pair()
        self.training.reset(ref.label(), cand.label())
        self.training.set_node_names([n.name for n in self.win.session.tape.nodes])
        self.travel.reset()
        self.stepper.reset()
        self.kernels.set_plan(None)
        self.last, self.snapshots, self.info = None, 0, {}
        self.live = LiveSession(c, self.interval_s, max_steps, self, watchdog_s=self.watchdog_s)
        self.log_window.clear()
        self.live.log.connect(self.log_window.append)
        self.live.unresponsive.connect(self.watchdog.silent_for)
        self.live.answered.connect(self.watchdog.hide)
        self.live.inspected.connect(self._on_inspected)
        self.live.snapshot.connect(self._on_snapshot)
        self.live.state_changed.connect(self._on_state)
        self.live.failed.connect(self._on_failed)
        self.live.ready.connect(self._on_ready)
        self.startup = StartupProgress(self.win, self.live, self.kill)  # with Cancel
        self.startup.changed.connect(self._label)
        self.live.start(paused=paused)
        return True

    def confirm_script(self, path: str) -> bool:
        """Ask (default No) before running a workload script a file named; True to run it."""
        # NOTE: the path is the file's text: cut and escaped (views.models.plain), so a newline in
        # it cannot forge lines of this question, nor 100 KB of it fill the screen (issue 49)
        answer = QMessageBox.question(
            self.win, "Run a workload script?",
            f"The open file says it was recorded from the workload script\n\n{cut(path, 400)}\n\n"
            "Starting a live session runs that Python file with your permissions. "
            "Run it only if you trust it.",
            QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
        return answer == QMessageBox.Yes

    @Slot()
    def restart(self) -> None:
        """Start again with the toolbar's settings (settings that do not go together, as
        torch with unfused-fused, are said in the status bar; nothing starts)."""
        try:
            cfg = self.toolbar_config()
        except ValueError as e:
            self.state_label.setText(f"not started: {e}")
            return
        self.start(cfg)

    @Slot()
    def _start_fused(self) -> None:
        self.toolbar.fuse_box.setChecked(True)
        self.restart()

    @Slot()
    def pause(self) -> None:
        """Pause after the current step."""
        if self.live:
            self.live.pause()

    @Slot()
    def resume(self) -> None:
        """Resume stepping."""
        if self.live:
            self.live.resume()

    @Slot()
    def single_step(self) -> None:
        """One step while paused."""
        if self.live:
            self.live.single_step()

    @Slot()
    def stop(self) -> None:
        """End the stepping (the results stay on screen and can still be exported)."""
        if self.live is not None:
            self.live.stop()

    @Slot()
    def kill(self) -> None:
        """End the worker and everything it started, now (the watchdog's Kill)."""
        if self.live is not None:
            self.live.kill()
            self.watchdog.hide()
            self._label()

    def close(self) -> None:
        """Stop and let the worker process go (a new session, or the window closes)."""
        self.watchdog.hide()
        if self.live is not None:
            old = self.live
            if not getattr(old, "detached", False):
                # what the old worker still has in flight must not reach the next session's views
                old.log.disconnect(self.log_window.append)
                old.unresponsive.disconnect(self.watchdog.silent_for)
                old.answered.disconnect(self.watchdog.hide)
                old.snapshot.disconnect(self._on_snapshot)
                old.state_changed.disconnect(self._on_state)
                old.failed.disconnect(self._on_failed)
                old.ready.disconnect(self._on_ready)
                old.inspected.disconnect(self._on_inspected)
                old.detached = True
            old.close()
            self._update_actions("stopped")
        self.cache.clear()
        if self.shown is not None:  # the worker's arrays go with it: back to the window's own
            self.shown = None
            self.win.show_own_details()

    # ---- results ----------------------------------------------------------------------------
    @Slot(object)
    def _on_ready(self, info: dict) -> None:
        self.info = info
        plan = info.get("plan")
        self.kernels.set_plan(plan)
        s = self.win.session
        if s is None:
            return
        groups = {}
        for seg in (plan or {}).get("segments", []):
            kind = "loss tail" if seg["kind"] == "serial" else f"{seg['rows']} rows"
            groups[f"fused s{seg['index']} · {kind} · {len(seg['node_ids'])} ops"] = \
                list(seg["node_ids"])
        self.win.set_graph_groups(groups)
        self.win.set_status(f"live: {info['reference']} ↔ {info['candidate']} · {info['device']}",
                            8000)

    @Slot(object)
    def _on_snapshot(self, snap: Snapshot) -> None:
        self.last = snap
        self.snapshots += 1
        self.training.add_steps(snap.steps, snap.ulp_columns, snap.steps_per_s)
        self.travel.add(snap)  # the parity table, graph colours and marks of the shown step
        first = self.travel.history.first if self.travel.history is not None else None
        self._update_actions(self.live.state if self.live else "idle")
        self._label()
        if snap.state != RUNNING:
            self.training.flush()  # the plots show the last steps now, not at the next tick
            # paused, stepped or stopped: what the Inspector shows followed the step
            # (_step_shown), and the first divergence (where the user looks next) is fetched
            # ahead, at its step
            if first is not None and self.can_inspect():
                self._request(int(first["node"]), int(first["step"]))
            self.stepper.follow(self.travel.view_step)  # (paused: the step it shows now)
            if self._await_pause and self.win.selected >= 0:
                self._await_pause = False  # shown as "running": now its arrays
                self._on_selected(self.win.selected)
            self.rerun.on_snapshot()

    @Slot(int)
    def _step_shown(self, step: int) -> None:
        """The shown step changed: the Inspector follows it (while running and following the
        latest step it waits for a pause, as before: no stream of tensors)."""
        self._label()
        self.stepper.follow(step)  # the Backward stepper walks this step's backward
        lv, sel = self.live, self.win.selected
        if lv is None or sel < 0:
            return
        if lv.state == RUNNING and self.travel.scrubber.follow:
            # no stream of tensors while running; but never another step's arrays under the
            # scrubber's step: what the Inspector shows of a live step moves to this one
            shown = self.win.inspector_shows()
            if shown is not None and shown[0] == sel and shown[1] is not None \
                    and shown[1] != step:
                self._running_summary(sel, step)
            return
        # paused, stopped, or a step picked: the Inspector (Compare, Elements) follows it,
        # whatever it showed before (issue 46: it stayed on step 1 while the scrubber said 366)
        self._on_selected(sel)

    # ---- one node's arrays, on demand ------------------------------------------------------
    def can_inspect(self) -> bool:
        """True while a session's worker can answer for a node (running, paused, stopped)."""
        lv = self.live
        return (lv is not None and not getattr(lv, "detached", False)
                and lv.state in INSPECT_STATES and lv.is_alive())

    def shown_step(self) -> int:
        """The step the window shows (the scrubber's; the latest before any summary)."""
        v = self.travel.view_step
        return v if v > 0 else self.live.steps_done

    @property
    def inspections(self) -> dict[tuple[int, int], Inspection]:
        """The worker's answers kept, by (node, step)."""
        return self.cache.answers

    def _current(self, node: int, step: int | None = None) -> Inspection | None:
        return self.cache.get(node, self.shown_step() if step is None else step)

    def _request(self, node: int, step: int | None = None) -> bool:
        """Ask once per node and step (default: the shown one); False when the worker cannot
        be asked."""
        return self.cache.ask(self.live, node, self.shown_step() if step is None else step)

    @Slot(int)
    def _on_selected(self, node: int) -> None:
        """The window selected ``node``: show both sides of it (cached, or ask the worker)."""
        if self.kernels.plan:
            self.kernels.show_node(node)  # its lines in the kernel that computes it
        step = self.travel.view_step
        if not self.can_inspect():
            if self.live is not None and step > 0:  # the step's summary, not the tape's arrays
                self.rerun.show_summary(node, step, "The session's worker has ended: its "
                                        "tensors went with it.")
            return
        if self.live.steps_done == 0:
            self.win.set_inspector_note("live: no step has run yet; both sides show after one")
            return
        if self.live.state == RUNNING and self.travel.scrubber.follow and step > 0:
            # the latest step moves on 5 times a second: arrays fetched now would be another
            # step's at the next snapshot; its summary follows it, the arrays come on a pause
            self._running_summary(node, step)
            return
        got = self._current(node)
        if got is not None:
            self._show(got)
            return
        step = self.shown_step()
        if self.cache.overdue(node, step, self.fetch_deadline_s):
            self.cache.forget(node, step)  # asked long ago (e.g. fetched ahead): ask again
        if self._request(node):
            # until the answer: this step's summary, not the arrays of the step shown before
            self.rerun.show_summary(node, step, f"Fetching node #{node} from both sides "
                                    f"(step {step})…", offer=False)
            self._deadline.start(int(self.fetch_deadline_s * 1000))
        else:
            self.win.set_inspector_note("live: the session's worker has ended; start a new one")

    def _running_summary(self, node: int, step: int) -> None:
        self.rerun.show_summary(node, step, "Running: its tensors are fetched when you pause, "
                                "or pick a step on the scrubber.", offer=False)
        self._await_pause = True

    @Slot(object)
    def _on_inspected(self, got: Inspection) -> None:
        key = self.cache.settle(got)  # (node, step) it answers; the arrays kept
        if got.error is not None:
            # an error names no step: its request does (an answer to a fetch made ahead, for
            # another step, must neither be lost nor shown under this step)
            node, step = key if key is not None else (got.node, self.shown_step())
            if node == self.win.selected and self.live is not None \
                    and step == self.shown_step():
                self._deadline.stop()
                if self.travel.view_step > 0:
                    self.rerun.show_summary(node, step, f"Its tensors: {got.error}.")
                else:
                    self.win.set_inspector_note(f"live: {got.error}")
            self.travel.try_repro(got.error)
            return
        if got.node == self.win.selected and got.step == self.shown_step():
            self._deadline.stop()
            self._show(got)
        self.travel.try_repro()

    @Slot()
    def _fetch_overdue(self) -> None:
        """The selected node's fetch passed its deadline: say so, with Retry (no "Fetching…"
        for ever); an answer that comes later is still shown."""
        node = self.win.selected
        if self.live is None or node < 0 or self.travel.view_step <= 0:
            return
        step = self.shown_step()
        if not self.cache.overdue(node, step, self.fetch_deadline_s):
            left = self.cache.left(node, step, self.fetch_deadline_s)
            if left is not None:  # still asked, the timer was early: wait for the rest
                self._deadline.start(max(1, int(left * 1000) + 1))
            return
        self.cache.forget(node, step)
        alive = self.can_inspect()
        self.rerun.show_summary(
            node, step, f"Its tensors: no answer from the worker in "
            f"{self.fetch_deadline_s:g} s" + (" (it may be in a long step)." if alive else
                                             ": it has ended."), offer=False)
        if alive:
            self.win.set_inspector_action(
                f"Retry: fetch node #{node} at step {step}",
                "Ask the worker again for this node's arrays at this step",
                lambda: self._on_selected(node))

    def _show(self, got: Inspection) -> None:
        s = self.win.session
        if s is None or not 0 <= got.node < len(s.tape):
            return
        h = self.travel.history
        since = h.first_step_differing().get(got.node) if h is not None else None
        causes = h.causes(got.step, got.node) if h is not None else []
        self.shown = got
        self.win.show_details(live_details(s.details(got.node), got, since, causes))

    @Slot(str)
    def _on_state(self, state: str) -> None:
        self._update_actions(state)
        self._label()

    @Slot(str, str)
    def _on_failed(self, message: str, details: str) -> None:
        self._update_actions(FAILED)
        self.win.show_error("Live session failed", message, details)

    def _label(self) -> None:
        if self.live is None:
            return
        from tapescope.app.commands.parity import divergence_text

        st = self.startup
        if not self.info and st is not None and st.live is self.live and not st.finished:
            # opening (a compile, the worker's first answer): what it is doing, not "paused"
            self.state_label.setText("live starting · " + " · ".join(st.label().splitlines()))
            return
        f = self.live.first
        first = f"first divergence: {divergence_text(f)}" if f else "no divergence"
        state = f"{self.live.state} (killed)" if self.live.killed else self.live.state
        self.state_label.setText(f"live {state} · step {count_text(self.live.steps_done)} · "
                                 f"{first}")
        shown, src = self.travel.view_step, self.travel.source_text()
        if shown > 0 and shown != self.live.steps_done:
            self.state_label.setText(self.state_label.text() + f" · showing step "
                                     f"{count_text(shown)}")
        if src:
            self.state_label.setText(self.state_label.text() + f" · {src}")

    @Slot(list)
    def _kernel_nodes(self, ids: list) -> None:
        self.win.set_graph_marks("kernel", ids)
        if ids:
            self.win.select_node(min(ids))

    @Slot()
    def jump_to_first(self) -> None:
        """Open the session's first divergence at the step it happened."""
        self.travel.jump_to_first()  # at its step; says so when there is no session

    # ---- export -----------------------------------------------------------------------------
    def export(self, path: str) -> bool:
        """Write the HTML report (and its .json) of what this session ran so far."""
        from tapescope.app.report_html import write_report

        data = self.live.report() if self.live is not None else None
        if data is None:
            self.win.show_error("Cannot export", "no live session has run yet (or its worker "
                                "has ended)")
            return False
        try:
            write_report(data, path)
        except OSError as e:
            self.win.show_error("Cannot export", str(e))  # it names the file
            return False
        self.win.set_status(f"wrote {path}", 5000)
        return True

    @Slot()
    def export_dialog(self) -> None:
        """File dialog, then ``export``."""
        path, _ = QFileDialog.getSaveFileName(self.win, "Export parity report", "report.html",
                                              "HTML report (*.html)")
        if path:
            self.export(path if path.endswith(".html") else path + ".html")
