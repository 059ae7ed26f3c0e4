"""What the Inspector shows of a step whose tensors are not here, and the re-run that fetches
them (time travel in a live session).

The worker keeps the full tensors of only some steps (app.tensor_window); the step history
keeps every step's per-node summary. Scrubbed to a step the worker no longer holds, the
Inspector shows that summary and no arrays (another step's arrays under this step's label read
as this step's), with a button: "Re-run to step N". The workload is deterministic, so a fresh
session, paused, single-stepped to N (a paused step's tensors are always kept) holds step N's
bits; then the node opens at that step.
"""

from __future__ import annotations

from tapescope.app.live_inspect import summary_details


class StepRerun:
    """Summary-only details and the re-run for one LiveController."""

    def __init__(self, ctl) -> None:
        self.ctl, self.win = ctl, ctl.win
        self.target: tuple[int, int] | None = None  # (step, node) a re-run is heading to

    def show_summary(self, node: int, step: int, why: str, offer: bool = True) -> None:
        """The node at ``step`` as the step history knows it (no arrays), ``why`` in the note,
        and (``offer``) the re-run button, or why there is none."""
        s, h = self.win.session, self.ctl.travel.history
        if s is None or not 0 <= node < len(s.tape):
            return
        entry = None
        if h is not None and step in h.step_nums and node < len(h.nodes):
            entry = h.comparison(step)[node]
        self.ctl.shown = None
        self.win.show_details(summary_details(s.details(node), entry, step, why))
        if offer:
            fn, tip = self._offer(node, step)
            self.win.set_inspector_action(f"Re-run to step {step} to fetch its tensors", tip, fn)

    def _offer(self, node: int, step: int):
        """(the button's action or None, its tooltip: what it does, or why it cannot)."""
        ctl = self.ctl
        if ctl.live is None or not ctl.config.workload:
            return None, "No live session to re-run: start one from the Live toolbar"
        if self.target is not None:
            return None, f"A re-run to step {self.target[0]} is under way"
        rate = ctl.last.steps_per_s if ctl.last is not None else 0.0
        eta = f" (about {step / rate:,.0f} s at this session's {rate:,.1f} steps/s)" \
            if rate > 0 else ""
        return (lambda: self.start(step, node),
                f"Starts this session again from step 1, paused, and trains {step:,} steps "
                f"one at a time{eta}: each paused step's tensors are kept, so step {step:,} "
                "holds them. The workload is deterministic, so the bits are the same as in "
                "the first run; the steps after it run again on Resume.")

    def start(self, step: int, node: int) -> bool:
        """Re-run the session to ``step`` and open ``node`` there; False when it cannot start."""
        self.target = (step, node)
        if not self.ctl.start(self.ctl.config, paused=True):
            self.target = None
            return False
        self.target = (step, node)  # (start() resets the controller's state, not this)
        self.win.set_inspector_note(f"re-running to step {step:,}…")
        self.ctl.live.single_step()
        return True

    def on_snapshot(self) -> None:
        """A paused snapshot arrived: one more step, or open the node at its step."""
        if self.target is None or self.ctl.live is None:
            return
        step, node = self.target
        if self.ctl.live.steps_done < step:
            self.ctl.live.single_step()
            self.win.set_status(f"re-running: step {self.ctl.live.steps_done:,} of {step:,}",
                                2000)
            return
        self.target = None
        self.ctl.travel.open_at(node, step)
