"""The Backward stepper of a live session walks the step the scrubber shows (issue 46).

The worker keeps one node's arrays per request, not a tape to walk: the stepper needs every
node's forward value of that step and the backward rules to push gradients through them. The
reference is the numpy tape (deterministic, refmath), so the window replays it: the same
workload, seed and dtype as the session's reference (``CpuRun``, what the worker's reference
or a device's feed is), trained to step N-1 and step N's forward recorded; the stepper then walks
that tape's backward node by node. The bits are the worker's (tests/app/test_live_stepper.py
compares every node's value and gradient with a ``PairRunner``'s reference at that step).

The replay runs in slices on the GUI thread (``SLICE_S`` each, so the window keeps answering):
the transformer's reference takes ~2 ms a step, step 366 ~0.7 s; moving on from step N to a
later step replays only the steps between, an earlier one starts over. While the session runs
and the scrubber follows the latest step nothing is replayed (the step moves on 5 times a
second): the stepper keeps the step it walks and says which one that is.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot

from tapescope.app.qt.live import RUNNING
from tapescope.app.run_sides import CpuRun, RunSpec

SLICE_S = 0.03  # one slice of the replay on the GUI thread: the window stays responsive


def reference_spec(config: Any) -> RunSpec:
    """The CPU refmath run whose tape the session's candidate is judged against: the pair's
    reference when it is the CPU tape, else the CPU tape a device replays (its feed)."""
    ref, cand = config.pair()
    if ref.side == "cpu" and ref.math == "refmath":
        return ref
    return RunSpec("cpu", "refmath", cand.dtype, amp=cand.amp, loss_scale=cand.loss_scale)


class ReferenceReplay:
    """A session's reference replayed to one step, its forward recorded (no Qt)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.spec = reference_spec(config)
        self.run: CpuRun | None = None
        self.at = 0  # the step whose forward the tape holds (0: the workload's probe)

    def label(self) -> str:
        """What is replayed: ``CPU refmath float64`` (the reference's own label)."""
        return self.spec.label()

    def advance(self, step: int, budget_s: float = float("inf")) -> bool:
        """Move the tape to ``step``'s forward (from 1); True when there, False when the budget
        ran out first (call again to go on). An earlier step starts over from the workload."""
        if step < 1:
            raise ValueError(f"live steps count from 1, not {step}")
        if self.run is None or step < self.at:
            self.run = CpuRun(self.spec, self.config.workload, self.config.seed)
            self.at = 0
        t0 = time.perf_counter()
        while self.at < step:
            if self.at >= 1:  # finish the step on the tape: its backward, the optimizer
                self.run.advance(self.at)  # (a stepper's partial walk is swept again here)
                self.run.update()
            self.at += 1
            self.run.advance(self.at, backward=False)
            if self.at < step and time.perf_counter() - t0 >= budget_s:
                return False
        return True

    @property
    def tape(self) -> Any:
        """The tape at ``at``'s forward."""
        return self.run.tape if self.run is not None else None

    @property
    def loss_id(self) -> int | None:
        """The loss node on ``tape``."""
        return self.run.loss_id if self.run is not None else None


class LiveStepper(QObject):
    """Keeps a LiveController's Backward stepper on the scrubber's step."""

    def __init__(self, ctl) -> None:
        super().__init__(ctl)
        self.ctl, self.win = ctl, ctl.win
        self.replay: ReferenceReplay | None = None
        self.target = 0  # the step being replayed to (0: none)
        self.walked = 0  # the step the stepper walks now (0: the window's own recording)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._slice)

    def reset(self) -> None:
        """A new session (or none): nothing replayed; the stepper walks the window's own."""
        self._timer.stop()
        if self.walked:
            self.win.walk_backward(None, None)
        self.replay, self.target, self.walked = None, 0, 0

    def follow(self, step: int) -> None:
        """The scrubber shows ``step``: walk its backward (replayed in slices), or, while the
        session runs and follows the latest step, say which step the stepper still walks."""
        lv = self.ctl.live
        if lv is None or step < 1 or self.win.session is None:
            return
        if lv.state == RUNNING and self.ctl.travel.scrubber.follow:
            self._timer.stop()
            self.target = 0
            self.win.set_stepper_walks(self._running_text(step))
            return
        if step == self.target:
            return  # under way
        if step == self.walked and self.target == 0:
            self.win.set_stepper_walks(self._walks_text(step))
            return
        config = getattr(lv, "config", None) or self.ctl.config
        if self.replay is None or self.replay.config != config:
            self.replay = ReferenceReplay(config)
        if self.walked:  # the replay re-records the tape the stepper walks: let it go first
            self.win.walk_backward(None, None)
            self.walked = 0
        self.target = step
        self._slice()

    def _running_text(self, step: int) -> str:
        now = (f"it walks live step {self.walked:,}" if self.walked else
               "it walks the window's own recording (batch 0, the initial parameters)")
        return (f"Running (step {step:,}): the stepper walks a step's backward when you pause "
                f"or pick a step on the scrubber; {now}.")

    def _walks_text(self, step: int) -> str:
        params = (f"the parameters after step {step - 1:,}" if step > 1 else
                  "the initial parameters")
        # NOTE: the stepper seeds the loss with 1: under --amp the session's backward is
        # seeded with the loss scale, so its gradients are these times the scale
        amp = (" Seeded with 1, not the mixed-precision loss scale: the session's gradients "
               "are these times its scale." if self.replay.spec.amp else "")
        return (f"Backward of live step {step:,}: the reference ({self.replay.label()}) "
                f"replayed in this window, batch {step:,} with {params}; the Inspector shows "
                f"the same step.{amp}")

    @Slot()
    def _slice(self) -> None:
        step, rp = self.target, self.replay
        if step <= 0 or rp is None:
            return
        try:
            done = rp.advance(step, SLICE_S)
        except Exception as e:  # noqa: BLE001 — the user's workload may fail at any step
            self.target, self.replay = 0, None
            self.win.set_stepper_walks(f"Could not replay the reference to step {step:,}: "
                                       f"{type(e).__name__}: {e}")
            return
        if not done:
            self.win.set_stepper_walks(f"Replaying the reference ({rp.label()}) to live step "
                                       f"{step:,}: step {rp.at:,} of {step:,}… (until then "
                                       "the stepper walks the window's own recording)")
            self._timer.start(0)
            return
        self.target = 0
        if not self.win.walk_backward(rp.tape, rp.loss_id):
            self.walked = 0
            self.win.set_stepper_walks(f"Step {step:,}'s replayed tape has another structure "
                                       "than the graph shows: the stepper walks the window's "
                                       "own recording.")
            return
        self.walked = step
        self.win.set_stepper_walks(self._walks_text(step))
