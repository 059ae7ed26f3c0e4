"""What the graph view draws, as plain data: nodes, kinds, labels, scope groups, collapse state.

No Qt here: the model is built from tape nodes (or any records with the same fields) and turned
into a ``DisplayGraph`` (tape nodes plus collapsed group boxes) that the layout engine and the
view consume. Groups are name scopes (``block0/attn``) and, later, any id set (fused segments).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from views.layout import structure_key
from views.search import NodeSearch

KIND_OP, KIND_PARAM, KIND_CONST, KIND_LOSS, KIND_GROUP = 0, 1, 2, 3, 4
KIND_NAMES = ("op", "param", "const", "loss", "group")


@dataclass(frozen=True)
class GraphNode:
    """One tape node as the graph needs it (mirrors ``core`` Node's public fields)."""

    id: int
    op: str
    inputs: tuple[int, ...]
    name: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str = "float64"

    @classmethod
    def from_node(cls, node) -> GraphNode:
        """Copy the fields the graph shows from a ``core`` Node (or look-alike)."""
        return cls(
            id=int(node.id), op=str(node.op), inputs=tuple(map(int, node.inputs)),
            name=node.name, shape=tuple(map(int, node.shape)),
            dtype=_dtype_text(node.dtype),
        )


@functools.lru_cache(maxsize=64)
def _dtype_text(dtype) -> str:
    """``str(np.dtype(dtype))``, once per dtype: numpy's ``__str__`` costs ~20 us, 2 s of
    opening a 100k-node tape."""
    return str(np.dtype(dtype))


def scopes_of(name: str | None) -> list[str]:
    """Every enclosing scope of a node name: ``a/b/c`` → ``["a", "a/b"]``."""
    if not name or "/" not in name:
        return []
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def shape_text(shape: Sequence[int]) -> str:
    """``(2, 3)`` → ``2×3``; a scalar is ``scalar``."""
    return "×".join(str(s) for s in shape) if len(shape) else "scalar"


@dataclass
class DisplayGraph:
    """Items to draw: each is one tape node or one collapsed group, with edges between items."""

    item_node: list[int]  # tape node id for a node item, -1 for a group item
    item_group: list[str | None]
    inputs: list[tuple[int, ...]]  # item indices
    kinds: np.ndarray
    labels: list[tuple[str, str, str]]  # op, name, shape (group: "group", scope, "n nodes")
    order_key: list[int]  # smallest member id: the ranking order for collapsed graphs
    node_item: np.ndarray  # tape node id → item index
    key: str = ""

    def __len__(self) -> int:
        return len(self.item_node)


@dataclass
class GraphModel:
    """Tape structure plus what the user folded; ``display()`` gives the graph to draw."""

    nodes: list[GraphNode]
    loss_id: int | None = None
    extra_groups: dict[str, list[int]] = field(default_factory=dict)
    collapsed: set[str] = field(default_factory=set)
    # a group that stands for a node of an imported model (group_onnx): the op its box is
    # labelled with, and the node a click on the folded box selects (its output)
    group_ops: dict[str, str] = field(default_factory=dict)
    group_head: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        for i, n in enumerate(self.nodes):
            if n.id != i:
                raise ValueError(f"graph model: node at position {i} has id {n.id}")
        kinds = np.full(len(self.nodes), KIND_OP, dtype=np.int8)
        for n in self.nodes:
            if n.op == "param":
                kinds[n.id] = KIND_PARAM
            elif n.op == "const":
                kinds[n.id] = KIND_CONST
        if self.loss_id is not None and 0 <= self.loss_id < len(self.nodes):
            kinds[self.loss_id] = KIND_LOSS
        self.kinds = kinds
        groups: dict[str, list[int]] = {}
        for n in self.nodes:
            for s in scopes_of(n.name):
                groups.setdefault(s, []).append(n.id)
        groups.update({k: sorted(v) for k, v in self.extra_groups.items()})
        self.groups = groups

    @classmethod
    def from_tape(cls, tape, loss_id: int | None = None) -> GraphModel:
        """Build from a ``core`` Tape's node tuple; the loss defaults to the last node."""
        nodes = [GraphNode.from_node(n) for n in tape.nodes]
        if loss_id is None and nodes:
            loss_id = nodes[-1].id
        return cls(nodes, loss_id)

    def set_extra_groups(self, groups: dict[str, list[int]]) -> None:
        """Replace the non-scope groups (e.g. fused segments: ``{"fused/k3": [ids]}``)."""
        for g in self.extra_groups:
            if g in self.groups:
                del self.groups[g]
                self.collapsed.discard(g)
        n = len(self.nodes)
        for g, ids in groups.items():
            bad = [i for i in ids if not 0 <= i < n]
            if bad:
                raise ValueError(f"group {g!r}: node ids {bad[:5]} are not on the tape")
        self.extra_groups = {k: sorted(v) for k, v in groups.items()}
        self.groups.update(self.extra_groups)

    def group_onnx(self, infos, fold: bool = True) -> list[str]:
        """Make each ONNX node (``core.onnx.importer.onnx_node_info``: op_type, first, stop)
        that became more than one tape node a group: the name scope its tape nodes share,
        labelled with its op type and, with ``fold``, collapsed, so the graph reads as the
        model's ops (BatchNormalization, not sqrt/sub/div/mul); double-click unfolds one.
        Returns the groups made."""
        made = []
        n = len(self.nodes)
        for info in infos or ():
            first, stop = int(info.get("first", 0)), int(info.get("stop", 0))
            if not 0 <= first < stop <= n or stop - first < 2:
                continue  # one tape node: it is its own box already
            scope = self.innermost_scope(stop - 1)
            if scope is None or self.groups.get(scope) != list(range(first, stop)):
                continue  # not exactly this node's tape nodes: no box that would lie
            self.group_ops[scope] = str(info.get("op_type", "onnx"))
            self.group_head[scope] = stop - 1
            made.append(scope)
        if fold:
            self.collapsed.update(made)
        return made

    def pick(self, group: str) -> int:
        """The node a click on the folded box of ``group`` selects: an ONNX op's output, else
        the group's first node."""
        return self.group_head.get(group, min(self.groups[group]))

    def innermost_scope(self, node_id: int) -> str | None:
        """The deepest name scope of a node (what "collapse" folds), or None."""
        s = scopes_of(self.nodes[node_id].name)
        return s[-1] if s else None

    def set_collapsed(self, group: str, collapsed: bool) -> None:
        """Fold or unfold one group by name."""
        if group not in self.groups:
            raise KeyError(f"no group named {group!r}")
        (self.collapsed.add if collapsed else self.collapsed.discard)(group)

    def hidden_in(self, node_id: int) -> list[str]:
        """The collapsed groups that hide ``node_id`` (its folded scopes, fused segments)."""
        if not self.collapsed:
            return []
        scopes = set(scopes_of(self.nodes[node_id].name))
        return sorted(g for g in self.collapsed if g in scopes or (
            g in self.extra_groups and node_id in self.extra_groups[g]))

    def reveal(self, node_id: int) -> bool:
        """Unfold every group that hides ``node_id``; True when one was folded."""
        hidden = self.hidden_in(node_id)
        self.collapsed.difference_update(hidden)
        return bool(hidden)

    def display(self) -> DisplayGraph:
        """The graph to draw: nodes of collapsed groups merged into one box per group."""
        n = len(self.nodes)
        node_item = np.full(n, -1, dtype=np.int64)
        owner: dict[int, str] = {}
        # outermost collapsed group wins: assign shorter (enclosing) names last
        for g in sorted(self.collapsed, key=len, reverse=True):
            for m in self.groups.get(g, ()):
                owner[m] = g
        item_node: list[int] = []
        item_group: list[str | None] = []
        group_item: dict[str, int] = {}
        for nd in self.nodes:
            g = owner.get(nd.id)
            if g is None:
                node_item[nd.id] = len(item_node)
                item_node.append(nd.id)
                item_group.append(None)
            else:
                if g not in group_item:
                    group_item[g] = len(item_node)
                    item_node.append(-1)
                    item_group.append(g)
                node_item[nd.id] = group_item[g]
        m = len(item_node)
        ins: list[set[int]] = [set() for _ in range(m)]
        for nd in self.nodes:
            t = int(node_item[nd.id])
            for i in nd.inputs:
                s = int(node_item[i])
                if s != t:
                    ins[t].add(s)
        kinds = np.empty(m, dtype=np.int8)
        labels: list[tuple[str, str, str]] = []
        shapes: dict[tuple, str] = {}  # a tape has few distinct shapes: each spelled once
        order_key: list[int] = []
        for it in range(m):
            nid = item_node[it]
            if nid >= 0:
                nd = self.nodes[nid]
                kinds[it] = self.kinds[nid]
                name = nd.name or f"#{nid}"
                if name.endswith("/"):  # an unnamed node inside a scope
                    name += f"#{nid}"
                st = shapes.get(nd.shape)
                if st is None:
                    st = shapes[nd.shape] = shape_text(nd.shape)
                labels.append((nd.op, name, st))
                order_key.append(nid)
            else:
                g = item_group[it]
                members = self.groups[g]
                kinds[it] = KIND_GROUP
                op = self.group_ops.get(g)
                labels.append((f"▸ {op}" if op else "▸ group", g,
                               f"{len(members)} tape nodes" if op else f"{len(members)} nodes"))
                order_key.append(min(members))
        inputs = [tuple(sorted(s)) for s in ins]
        ops = [("g:" + item_group[i]) if item_node[i] < 0 else self.nodes[item_node[i]].op
               for i in range(m)]
        return DisplayGraph(
            item_node, item_group, inputs, kinds, labels, order_key, node_item,
            key=structure_key(ops, inputs),
        )

    @property
    def searcher(self) -> NodeSearch:
        """The tape's one search index (built on first use), shared by graph and table."""
        if getattr(self, "_searcher", None) is None:
            self._searcher = NodeSearch(self.nodes)
        return self._searcher

    def search(self, text: str) -> list[int]:
        """Node ids matching ``text``: an id (``12`` or ``#12``), or a substring of an op or a
        name (case-insensitive; ``sigm`` finds ``sigmoid``)."""
        return self.searcher.search(text)
