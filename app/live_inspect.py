"""One node's arrays from a live session's worker, on demand: the answers kept, and how they
are shown (plain data; no Qt).

The worker answers "node N at step S, both sides" (``app.qt.live.Inspection``); the last
``KEEP_INSPECTIONS`` answers are kept so that re-selecting a node costs no round trip, and a
request is sent once per (node, step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tapescope.views.models.numbers import count_text, ulp_text

if TYPE_CHECKING:
    from tapescope.app.qt.live import Inspection
    from tapescope.views.models.node_details import NodeDetails

KEEP_INSPECTIONS = 32  # answers kept per (node, step): re-selecting costs no round trip
#: how long a fetch may go unanswered before the Inspector says so (with Retry) instead of
#: "Fetching…" for ever (issue 46: 17 s and counting; within 2 s a panel shows the arrays or
#: why not); a late answer is still shown
FETCH_DEADLINE_S = 2.0


class InspectionCache:
    """The worker's answers by (node, step), oldest dropped first, and what is asked and not
    yet answered (by request id, so that an error, which names no step, settles its own)."""

    def __init__(self, keep: int = KEEP_INSPECTIONS) -> None:
        self.keep = keep
        self.answers: dict[tuple[int, int], Inspection] = {}
        self.asked: set[tuple[int, int]] = set()  # requested, not answered yet
        self.reqs: dict[int, tuple[int, int]] = {}  # request id -> (node, step)
        self.since: dict[tuple[int, int], float] = {}  # when each open request was sent

    def get(self, node: int, step: int) -> Inspection | None:
        """The answer for ``node`` at ``step``, if here."""
        return self.answers.get((node, step))

    def ask(self, live: Any, node: int, step: int) -> bool:
        """Ask ``live`` (a LiveSession) once for ``node`` at ``step`` (again once its answer
        came back as an error or its deadline passed); False when it cannot be asked."""
        import time

        key = (node, step)
        if self.get(node, step) is None and key not in self.asked:
            req = live.inspect(node, step)
            if req is None:
                return False
            self.asked.add(key)
            self.since[key] = time.monotonic()
            if isinstance(req, int):
                self.reqs[req] = key
        return True

    def settle(self, got: Inspection) -> tuple[int, int] | None:
        """An answer arrived: the (node, step) it answers (an error's from its request id),
        no longer open; the arrays are kept (``put``). None when it answers nothing asked."""
        key = self.reqs.pop(got.req, None) if got.req is not None else None
        if key is None and got.error is None:
            key = (got.node, got.step)
        if key is not None:
            self.asked.discard(key)
            self.since.pop(key, None)
        if got.error is None:
            self.put(got)
        return key

    def overdue(self, node: int, step: int, deadline_s: float = FETCH_DEADLINE_S) -> bool:
        """``node`` at ``step`` was asked more than ``deadline_s`` ago and is not answered."""
        import time

        t = self.since.get((node, step))
        return t is not None and time.monotonic() - t >= deadline_s

    def left(self, node: int, step: int, deadline_s: float = FETCH_DEADLINE_S) -> float | None:
        """Seconds until ``node`` at ``step`` is overdue; None when it is not asked."""
        import time

        t = self.since.get((node, step))
        return None if t is None else max(0.0, t + deadline_s - time.monotonic())

    def forget(self, node: int, step: int) -> None:
        """Stop waiting for ``node`` at ``step`` (its deadline passed): the next ask sends
        again; a late answer is still kept."""
        self.asked.discard((node, step))
        self.since.pop((node, step), None)

    def put(self, got: Inspection) -> None:
        """Keep an answer (the newest last; the oldest go past ``keep``)."""
        key = (got.node, got.step)
        self.answers.pop(key, None)
        self.answers[key] = got
        while len(self.answers) > self.keep:
            self.answers.pop(next(iter(self.answers)))

    def clear(self) -> None:
        """A session ends: its answers go with it."""
        self.answers.clear()
        self.asked.clear()
        self.reqs.clear()
        self.since.clear()


def cause_line(op: str, node: int, size: int, causes: list) -> str:
    """``div #35 introduced 1 ulp on 39 of 512 elements: matches the reference with
    x * (1/y)`` per explained array (``StepHistory.causes`` rows), joined by "; "."""
    parts = []
    for _, which, _, text, n_diff, max_ulp in causes:
        what = "" if which == "value" else f" ({which})"
        parts.append(f"{op} #{node}{what} introduced {ulp_text(max_ulp)} ulp on "
                     f"{count_text(n_diff)} of {count_text(size)} elements: {text}")
    return "; ".join(parts)


def live_details(d: NodeDetails, got: Inspection, differs_since: int | None,
                 causes: list | None = None) -> NodeDetails:
    """``d`` (the tape's own details of the node) with both sides of ``got`` in it
    (``differs_since``: the first step the node differed, if it has; ``causes``: the node's
    explained introduced arrays at that step, shown on the note's line)."""
    d.value, d.grad = got.ref_value, got.ref_grad
    d.device_value, d.device_grad = got.cand_value, got.cand_grad
    dts = {str(a.dtype) for a in (got.ref_value, got.cand_value) if a is not None}
    d.dtype = " ↔ ".join(sorted(dts)) or d.dtype
    d.sides = (f"reference: {got.reference}", f"candidate: {got.candidate}")
    d.step = got.step
    since = (f" · differs since step {count_text(differs_since)}" if differs_since is not None
             else "")
    d.note = f"live · step {count_text(got.step)}{since} · {got.reference} ↔ {got.candidate}"
    if causes:
        size = int(np.prod(d.shape, dtype=np.int64)) if d.shape is not None else 0
        d.note += " · " + cause_line(d.op, d.id, size, causes)
    return d


def _side_text(side: str, e: dict | None, size: int) -> str:
    if e is None:
        return f"{side}: not compared"
    n = int(e.get("n_diff") or 0)
    if n == 0:
        return f"{side}: all {count_text(size)} elements bit-identical"
    tail = ", NaN against a number" if e.get("n_nan") else ""
    worst = float(e.get("max_ulp") or 0)
    return (f"{side}: {count_text(n)} of {count_text(size)} elements differ, max "
            f"{ulp_text(worst)} ulp{tail}")


def summary_details(d: NodeDetails, entry: dict | None, step: int, why: str) -> NodeDetails:
    """``d`` (the tape's own details of the node) with no arrays: only what the shown
    ``step`` knows of the node, its per-node summary ``entry`` (the parity table's dict),
    and ``why`` its tensors are not on screen. NOTE: the tape's own arrays (or another step's)
    beside a step's label read as that step's: issue 25 found "39 of 512 differ" from the
    previous step under a note saying this step's tensors were not kept."""
    d.value = d.grad = d.device_value = d.device_grad = None
    d.sides, d.step = None, step
    size = 1
    for k in d.shape:
        size *= int(k)
    if entry is None:
        known = "not compared at this step"
    else:
        known = " · ".join((_side_text("value", entry.get("value"), size),
                            _side_text("gradient", entry.get("grad"), size)))
    d.note = f"live · step {step} · {known}. {why}"
    return d
