"""``parity --device A --against B``: two candidates, one arbiter (a helper module: no
``register``).

Both candidates run against the same reference, each its own pair (``app.runs.PairRunner``:
its own reference run too, so each pair's updates stay its own; the reference is deterministic,
so both references hold the same bits, which a test checks). Per node and step: A against the
reference, B against the reference (with provenance and ``--explain`` causes for each), and A
against B directly (``app.runs.host_compare`` over the two candidates' arrays from the pairs'
step stores): where the two part from each other.
"""

from __future__ import annotations

from typing import Any

from tapescope.views.models.numbers import ulp_text

__all__ = ["Against"]


def _other_config(cfg: Any, device: str) -> Any:
    """``cfg`` with B as the candidate: the device replay's flags (--fuse, --math, --kernel)
    apply to a replay side, the torch settings to a torch side."""
    if device == "torch" or device.startswith("torch:"):
        return cfg.with_(device=device, fuse=False, math="refmath", kernels=())
    return cfg.with_(device=device, torch_threads=None, tf32=None, deterministic=False,
                     torch_optimizer="tape")


class Against:
    """The second candidate's pair and the A-vs-B comparison, folded over the steps."""

    def __init__(self, cfg: Any, device: str, a: Any) -> None:
        if cfg.worker is not None:
            raise ValueError("--against compares two candidates in this process: it cannot go "
                             "with --worker")
        from tapescope.app.pairs import open_pair

        self.a = a
        self.cfg = _other_config(cfg, device)
        self.b = open_pair(self.cfg)
        self.per_node: dict[int, dict] = {}
        self.between: dict[int, dict] = {}
        self.introduced: list[dict] = []
        self.first: dict | None = None
        self.first_apart: dict | None = None
        self.ref_equal = True  # both pairs' references held the same bits every step
        self._pre: dict = {}

    def describe(self) -> str:
        """B's device line."""
        return f"against: {self.b.describe_device()}"

    def before(self) -> None:
        """Before A's step: each parameter's value on all four runs as this step will compute
        with it (what the last update left; a device pair compares on the device and leaves
        its step store empty, so read now, before the step's own update moves them)."""
        sa, sb = self.a.store, self.b.store
        self._pre = {(side, k, n.id): st.get(k, n.id, "value", after=True)
                     for n in self.a.nodes if n.op == "param"
                     for side, st in (("a", sa), ("b", sb)) for k in ("ref", "cand")}

    def _getter(self, side: str, store: Any, k: str) -> Any:
        def get(i: int, w: str) -> Any:
            if w == "value" and (side, k, i) in self._pre:
                return self._pre[(side, k, i)]
            return store.get(k, i, w)
        return get

    def step(self, ra: Any, fold: Any, intro_of: Any) -> Any:
        """B's step (after A's ``ra``), and A against B on this step's arrays."""
        from tapescope.app.runs import host_compare

        rb = self.b.step()
        fold(self.per_node, rb.nodes, rb.step)
        if self.first is None and rb.first is not None:
            self.first = {"step": rb.step, **rb.first}
        self.introduced += intro_of(rb.step, rb.introduced)
        sa, sb = self.a.store, self.b.store
        nodes = self.a.nodes
        ab = host_compare(nodes, self._getter("a", sa, "cand"),
                          self._getter("b", sb, "cand")).to_json()
        fold(self.between, ab["nodes"], rb.step)
        fd = ab["first_divergence"]
        if self.first_apart is None and fd is not None:
            self.first_apart = {"step": rb.step, "node": fd["node"],
                                "op": nodes[fd["node"]].op, "which": fd["which"]}
        refs = host_compare(nodes, self._getter("a", sa, "ref"), self._getter("b", sb, "ref"))
        self.ref_equal = self.ref_equal and refs.exact
        return rb

    def finish(self, steps: int, fold: Any) -> None:
        """After the last step: the trained parameters (after the last update), B against the
        reference and A against B, as parity folds A's."""
        from tapescope.app.runs import host_compare

        fold(self.per_node, self.b.compare_params().to_json()["nodes"], steps)
        sa, sb = self.a.store, self.b.store
        params = tuple(n for n in self.a.nodes if n.op == "param")
        ab = host_compare(params, lambda i, w: sa.get("cand", i, w, after=True),
                          lambda i, w: sb.get("cand", i, w, after=True), which=("value",))
        fold(self.between, ab.to_json()["nodes"], steps)
        fd = ab.to_json()["first_divergence"]
        if self.first_apart is None and fd is not None:
            self.first_apart = {"step": steps, "node": fd["node"], "op": "param",
                                "which": "value"}

    @property
    def exact(self) -> bool:
        """B bit-identical to the reference at every node and step."""
        from tapescope.core.parity import entry_differs  # here: building the CLI parser is light

        return not any(entry_differs(n) for n in self.per_node.values())

    def print_table(self, a_nodes: dict[int, dict], a_introduced: list[dict],
                    label_a: str) -> None:
        """Per node where anything differs: A and B against the reference (each its worst ulp
        of value and gradient, and introduced (its cause with --explain) or inherited), and A
        against B."""
        def causes(entries: list[dict]) -> dict[int, str]:
            # per node: which arrays it introduced (v value, g gradient, u update) and the
            # first one's cause (--explain), e.g. "g fma", "v+g unknown", "v introduced"
            which: dict[int, list[str]] = {}
            cause: dict[int, str] = {}
            for e in entries:
                w = which.setdefault(e["node"], [])
                if e["which"][0] not in w:
                    w.append(e["which"][0])
                cause.setdefault(e["node"], e.get("cause", "introduced"))
            return {i: f"{'+'.join(w)} {cause[i]}" for i, w in which.items()}

        a_causes, causes_b = causes(a_introduced), causes(self.introduced)
        a_intro = set(a_causes)
        import numpy as np

        from tapescope.app.commands.parity_table import AGAINST_ROWS, cut_notice, table_order
        from tapescope.core.summary import entries_worst, entry_differs, severity, worst_of

        differ = [i for i in self.per_node if entry_differs(self.per_node[i])
                  or entry_differs(a_nodes.get(i, self.per_node[i]))
                  or entry_differs(self.between.get(i, self.per_node[i]))]

        # the worst of A, B and A-B, a NaN mismatch first (a missing entry: exact), each side's
        # worsts in one call
        worst = worst_of(np.stack([entries_worst([(nodes.get(i) or {}) for i in differ])
                                   for nodes in (a_nodes, self.per_node, self.between)]),
                         axis=0)

        # the nodes A or B introduced error at first, then the worst inherited
        ids = table_order(differ, sorted(a_introduced + self.introduced,
                                         key=lambda e: e["step"]),
                          {i: severity(x) for i, x in zip(differ, worst.tolist(), strict=True)})

        def ulp(d: dict | None) -> str:
            # (as the window writes a distance: 63,054, 5.87e+06; views.models.numbers)
            return "-" if d is None else ulp_text(d["max_ulp"]) if d["n_diff"] else "0"

        def side(i: int, nodes: dict, causes: dict, intro: set) -> str:
            n = nodes.get(i)
            if n is None:
                return f"{'-':>8} {'-':>8} {'':<15}"
            tag = causes.get(i) or ("inherited" if entry_differs(n) else "exact")
            return f"{ulp(n['value']):>8} {ulp(n['grad']):>8} {tag[:15]:<15}"

        b_intro = {e["node"] for e in self.introduced}
        print(f"A = {label_a}; B = {self.b.cand_spec.label()}; ulp against the reference "
              "(value, grad), and A against B")
        print(f"{'node':>5} {'op':<14} {'A val':>8} {'A grad':>8} {'A':<15} {'B val':>8} "
              f"{'B grad':>8} {'B':<15} {'A-B val':>8} {'A-B grad':>8}")
        for i in ids[:AGAINST_ROWS]:
            n = self.per_node[i]
            ab = self.between.get(i)
            print(f"{i:>5} {n['op']:<14} {side(i, a_nodes, a_causes, a_intro)} "
                  f"{side(i, self.per_node, causes_b, b_intro)} "
                  f"{ulp(ab['value'] if ab else None):>8} {ulp(ab['grad'] if ab else None):>8}")
        if len(ids) > AGAINST_ROWS:
            print(cut_notice(len(ids) - AGAINST_ROWS))
        apart = [i for i, e in self.between.items() if entry_differs(e)]
        where = "never" if self.first_apart is None else (
            f"first at step {self.first_apart['step']} node #{self.first_apart['node']} "
            f"{self.first_apart['op']} ({self.first_apart['which']})")
        print(f"A and B part {where}; {len(apart)} nodes differ between them; B against the "
              f"reference: {sum(entry_differs(n) for n in self.per_node.values())} nodes differ, "
              f"{len(b_intro)} introduced")

    def to_json(self) -> dict:
        """The JSON's ``"against"``: B's per-node diffs, introduced entries, and A vs B (each
        node in core.summary's one form, as the top-level ``nodes``)."""
        from tapescope.core.summary import node_summary

        def summaries(per_node: dict[int, dict]) -> list[dict]:
            return [node_summary(self.b.nodes[i], e["value"], e["grad"],
                                 e["first_step_differing"]) for i, e in sorted(per_node.items())]

        return {"device": self.b.device_kind, "label": self.b.cand_spec.label(),
                "exact": self.exact, "first_divergence": self.first,
                "nodes": summaries(self.per_node),
                "introduced": self.introduced,
                "between": {"first_apart": self.first_apart,
                            "nodes": summaries(self.between)},
                "references_equal": self.ref_equal}
