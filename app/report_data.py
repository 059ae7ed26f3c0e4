"""What a parity report holds, accumulated step by step (no Qt): shared by the GUI and the CLI.

Per node the worst step is kept (max ``n_diff``, ``max_ulp``, ``max_abs``, NaN count), merged
and written by ``core.summary`` (``merge_side``, ``node_summary``) as ``tapescope parity
--json`` writes it; per step the losses, the time and the worst ulp; the last ``HEAT_STEPS``
per-node ulp columns for the heatmap (bounded: memory stays flat).
"""

from __future__ import annotations

import platform
import sys
import threading
from array import array
from typing import Any

from tapescope.app.runs import SessionConfig, StepResult
from tapescope.core.step_record import differs, entries
from tapescope.core.summary import entry_differs, merge_side, node_summary, worst_of

HEAT_STEPS = 300
INTRODUCED_MAX = 5000  # introduced entries kept (the count goes on): memory stays flat


class ReportAccumulator:
    """Collects StepResults of one session; ``to_json()`` is the report's data (thread-safe)."""

    def __init__(self, config: SessionConfig, nodes: tuple, ref_label: str, cand_label: str,
                 device: str, plan: dict | None) -> None:
        self.config = config
        self.node_info = [{"id": n.id, "op": n.op, "name": n.name, "shape": list(n.shape),
                           "inputs": list(n.inputs)} for n in nodes]
        self.ref_label, self.cand_label = ref_label, cand_label
        self.device, self.plan = device, plan
        self._lock = threading.Lock()
        # per step: step, loss_ref, loss_cand, seconds, exact (0/1), worst ulp, as 6 doubles
        # (48 bytes a step: a list of 6 objects cost ~300, 3 MB of worker growth per 10k steps)
        self._steps = array("d")
        self.heat: list[list[float]] = []
        self.heat_steps: list[int] = []
        self.worst: dict[int, dict] = {}
        self.first: dict | None = None
        self.first_roots: list[int] = []
        # provenance (core.provenance): every introduced array, per node its first differing
        # step, and the introduced arrays of the first step that differs or introduces
        self.introduced: list[dict] = []
        self.introduced_total = 0
        self.provenance_steps = 0
        self.first_step_differing: dict[int, int] = {}
        self.first_introduced: dict | None = None

    def add(self, r: StepResult) -> None:
        """Fold one step in."""
        col = r.node_max_ulp()
        worst = worst_of(col)
        with self._lock:
            self._steps.extend((r.step, r.loss_ref, r.loss_cand, r.seconds, r.exact, worst))
            self.heat.append(col.tolist())
            self.heat_steps.append(r.step)
            del self.heat[:-HEAT_STEPS], self.heat_steps[:-HEAT_STEPS]
            # an exact row changes no worst value: once every node has its entry, only the
            # rows that differ become dicts (the export form), not the whole 10k-node record
            rec = r.record
            if len(self.worst) >= len(rec):
                rec = rec[differs(rec)]
            nodes = entries(rec, r.labels or None)
            for e in nodes:
                w = self.worst.get(e["id"])
                v, g = e["value"], e["grad"]
                if w is not None and not entry_differs(e):
                    continue
                if w is None:
                    w = self.worst[e["id"]] = {"value": None, "grad": None}
                w["value"] = merge_side(w["value"], v)
                if g is not None:
                    w["grad"] = merge_side(w["grad"], g)
            if self.first is None and r.first is not None:
                self.first = {"step": r.step, **r.first}
                self.first_roots = list(r.roots)
            if not r.exact:
                for e in nodes:
                    if entry_differs(e) and e["id"] not in self.first_step_differing:
                        self.first_step_differing[e["id"]] = r.step
            self._add_provenance(r)

    def _add_provenance(self, r: StepResult) -> None:
        if not r.provenance:
            return
        self.provenance_steps += 1
        keep = ("node", "op", "which", "n_diff", "max_ulp", "first_index", "by", "part",
                "cause", "explain")
        entries = [{"step": r.step, **{k: e[k] for k in keep if k in e}} for e in r.introduced]
        self.introduced_total += len(entries)
        self.introduced.extend(entries[: max(INTRODUCED_MAX - len(self.introduced), 0)])
        if self.first_introduced is None and (entries or not r.exact):
            self.first_introduced = {"step": r.step, "entries": entries}

    @property
    def steps(self) -> list[list]:
        """Every step so far: ``[step, loss_ref, loss_cand, seconds, exact, worst ulp]``."""
        a = self._steps.tolist()
        return [[int(a[k]), a[k + 1], a[k + 2], a[k + 3], bool(a[k + 4]), a[k + 5]]
                for k in range(0, len(a), 6)]

    def to_json(self) -> dict[str, Any]:
        """Everything a report shows, as plain JSON data."""
        with self._lock:
            steps = self.steps
            heat = [list(c) for c in self.heat]
            heat_steps = list(self.heat_steps)
            worst = {i: dict(w) for i, w in self.worst.items()}
            first = dict(self.first) if self.first else None
            fsd = dict(self.first_step_differing)
            introduced = [dict(e) for e in self.introduced]
            first_intro = None if self.first_introduced is None else {
                "step": self.first_introduced["step"],
                "entries": [dict(e) for e in self.first_introduced["entries"]]}
            prov = {"steps_checked": self.provenance_steps, "total": self.introduced_total,
                    "truncated": self.introduced_total > len(self.introduced)}
        nodes = []
        for info in self.node_info:
            w = worst.get(info["id"], {"value": None, "grad": None})
            nodes.append(node_summary(info, w["value"], w["grad"], fsd.get(info["id"])))
        differ = [n for n in nodes if entry_differs(n)]
        exact = bool(steps) and not differ
        if first is not None:
            first["name"] = self.node_info[first["node"]]["name"]
            first["roots"] = [{"id": i, "op": self.node_info[i]["op"],
                               "name": self.node_info[i]["name"]} for i in self.first_roots]
        n = len(steps)
        secs = sum(s[3] for s in steps)
        return {
            "tool": "tapescope report",
            "config": dict(self.config.__dict__),
            "reference": self.ref_label, "candidate": self.cand_label,
            "environment": environment(self.device),
            "verdict": {"exact": exact, "steps": n, "nodes": len(nodes),
                        "nodes_differing": len(differ),
                        "nan_bits_differ": sum(s.get("nan_bits_differ", 0) for n in nodes
                                               for s in (n["value"], n["grad"]) if s),
                        "text": verdict_text(exact, n, len(nodes), len(differ))},
            "first_divergence": first,
            "steps": [{"step": s[0], "loss_ref": s[1], "loss_cand": s[2], "seconds": s[3],
                       "exact": s[4], "max_ulp": s[5]} for s in steps],
            "steps_per_s": n / secs if secs > 0 else 0.0,
            "heatmap": {"steps": heat_steps, "columns": heat},
            "nodes": nodes,
            "fusion": self.plan,
            # provenance: every introduced array (steps from 1), and those of the first step
            # that differs or introduces, named
            "introduced": introduced,
            "first_introduced": self._named(first_intro),
            "provenance": prov,
        }

    def _named(self, first: dict | None) -> dict | None:
        if first is None:
            return None
        for e in first["entries"]:
            e["name"] = self.node_info[e["node"]]["name"]
        return first


def verdict_text(exact: bool, steps: int, nodes: int, differ: int) -> str:
    """One sentence for the top of the report."""
    if steps == 0:
        return "no step was run"
    if exact:
        return f"bit-identical: {nodes} nodes × {steps} steps, every value and gradient"
    return f"differs: {differ} of {nodes} nodes differ in at least one step of {steps}"


def environment(device: str) -> dict[str, Any]:
    """Versions, machine, device line and the compiler flags the kernels were built with."""
    import numpy

    env: dict[str, Any] = {"python": sys.version.split()[0], "numpy": numpy.__version__,
                           "platform": platform.platform(), "machine": platform.machine(),
                           "device": device}
    try:
        from tapescope.gpu.host_compiler import find_compiler, host_flags

        env["host_compiler"] = str(find_compiler())
        env["host_flags"] = " ".join(host_flags(env["host_compiler"]))  # as this CPU takes them
    except Exception as e:  # noqa: BLE001 — a report is still useful without the compiler line
        env["host_compiler"] = f"unavailable ({type(e).__name__}: {e})"
    try:
        from tapescope.gpu import cuda

        env["nvrtc_flags"] = " ".join(cuda.NVRTC_FLAGS)
    except Exception:  # noqa: BLE001 — CuPy-less machines import gpu.cuda lazily
        pass
    # the installed versions, read from the package metadata: importing PySide6 to ask would
    # load Qt into the headless worker, which builds this report too
    from importlib import metadata

    for key, dists in (("PySide6", ("PySide6", "PySide6-Essentials")),
                       ("pyqtgraph", ("pyqtgraph",))):
        for dist in dists:
            try:
                env[key] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return env
