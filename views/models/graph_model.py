"""What the graph view draws, as plain data: nodes, kinds, labels, scope groups, collapse state.

No Qt here: the model is built from tape nodes (or any records with the same fields) and turned
into a ``DisplayGraph`` (tape nodes plus collapsed group boxes) that the layout engine and the
view consume. Groups are name scopes (``block0/attn``) and, later, any id set (fused segments).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tapescope.views.models.layout import EdgeLists, structure_key_arrays
from tapescope.views.models.numbers import count_text
from tapescope.views.models.search import NodeSearch

KIND_OP, KIND_PARAM, KIND_CONST, KIND_LOSS, KIND_GROUP = 0, 1, 2, 3, 4
KIND_NAMES = ("op", "param", "const", "loss", "group")
# fill, border per kind, as the graph draws them (views.graph_canvas, the report's SVG):
# params amber, consts grey/dashed, loss indigo, groups green
KIND_STYLE = {
    KIND_OP: ("#e8eef7", "#5b7db1"),
    KIND_PARAM: ("#fde3b5", "#c77d12"),
    KIND_CONST: ("#ececec", "#8a8a8a"),
    KIND_LOSS: ("#e0e7ff", "#3730a3"),
    KIND_GROUP: ("#dcefdc", "#3f7f3f"),
}
_KIND_OF = {"param": KIND_PARAM, "const": KIND_CONST}
_ID, _OP, _NAME, _INPUTS, _SHAPE = (operator.attrgetter(f) for f in
                                    ("id", "op", "name", "inputs", "shape"))
# NOTE: a scope with more numbered children of one family than this (the 10k tape's 238
# ``blockN`` at its top) gets a level of RUNS runs above them (``block0–29``), and a run of
# more than this a level of runs inside it (the 100k tape: ``block0–297`` → ``block0–37``):
# folded to the top level, a tape is a few labelled boxes, not 238 boxes that fit only as a
# one-pixel line, and unfolding a box shows at most a few more
MAX_SIBLINGS = 32
RUNS = 8  # the runs a family (or a run) too long is cut into
_FAMILY = re.compile(r"^(.*?)(\d+)$")


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


def _scope_groups(names: list[str | None]) -> dict[str, list[int]]:
    """Each scope of ``names`` (``scopes_of``) with the indices of the names inside it, in
    order; each distinct parent scope spelled out once (a tape has few: 100k nodes, ~5k)."""
    parents = [nm.rpartition("/")[0] if nm else "" for nm in names]
    code: dict[str, int] = {}
    codes = np.fromiter(map(functools.partial(_code, code), parents), dtype=np.int64,
                        count=len(parents))
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    by_parent = dict(zip(code, np.split(order, cuts), strict=True)) if codes.size else {}
    members: dict[str, list[np.ndarray]] = {}
    for parent, ids in by_parent.items():
        if parent:
            for s in scopes_of(parent + "/"):
                members.setdefault(s, []).append(ids)
    # in the order a scan of the nodes meets each scope first (as the per-node loop made it)
    parts = {s: (v[0] if len(v) == 1 else np.sort(np.concatenate(v))) for s, v in
             members.items()}
    return {s: parts[s].tolist() for s in sorted(parts, key=lambda s: (int(parts[s][0]),
                                                                         s.count("/")))}


def _first_of_each(owner: np.ndarray) -> np.ndarray:
    """True at the first node of each group (``owner`` >= 0) in tape order."""
    out = np.zeros(owner.shape, dtype=bool)
    hidden = np.flatnonzero(owner >= 0)
    if hidden.size:
        _, first = np.unique(owner[hidden], return_index=True)
        out[hidden[first]] = True
    return out


class _Spelled(dict):
    """shape → ``shape_text(shape)``, each spelled on first look-up."""

    def __missing__(self, shape):
        t = self[shape] = shape_text(shape)
        return t


def _code(table: dict[str, int], key: str) -> int:
    c = table.get(key)
    if c is None:
        c = table[key] = len(table)
    return c


def shape_text(shape: Sequence[int]) -> str:
    """``(2, 3)`` → ``2×3``; a scalar is ``scalar``."""
    return "×".join(str(s) for s in shape) if len(shape) else "scalar"


@dataclass
class DisplayGraph:
    """Items to draw: each is one tape node or one collapsed group, with edges between items."""

    item_node: list[int]  # tape node id for a node item, -1 for a group item
    item_group: list[str | None]
    inputs: Sequence[tuple[int, ...]]  # item indices (an EdgeLists: arrays, read as tuples)
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
        # NOTE: column-wise, not a loop per node: at 100k nodes the per-node loops of the
        # open (id check, kinds, scopes) cost ~1.3 s of the ~3 s target (issue 29)
        n = len(self.nodes)
        ids = np.fromiter(map(_ID, self.nodes), dtype=np.int64, count=n)
        wrong = np.flatnonzero(ids != np.arange(n))
        if wrong.size:
            i = int(wrong[0])
            raise ValueError(f"graph model: node at position {i} has id {int(ids[i])}")
        kinds = np.fromiter(map(_KIND_OF.get, map(_OP, self.nodes), itertools.repeat(KIND_OP)),
                            dtype=np.int8, count=n)
        if self.loss_id is not None and 0 <= self.loss_id < n:
            kinds[self.loss_id] = KIND_LOSS
        self.kinds = kinds
        self._groups: dict[str, list[int]] | None = None  # the name scopes, made on first use
        self._runs: dict[str, list[str]] = {}  # a run group → the sibling scopes it holds
        self.group_parent: dict[str, str | None] = {}  # scope or run → the group it nests in
        self.group_depth: dict[str, int] = {}  # 0: a top-level box; children one deeper

    @property
    def groups(self) -> dict[str, list[int]]:
        """Every name scope (``block0``, ``block0/attn``) and extra group: its member ids in
        tape order. Made on first use: opening a tape with nothing folded needs none."""
        if self._groups is None:
            groups = _scope_groups(list(map(_NAME, self.nodes)))
            self._nest(groups)
            groups.update({k: sorted(v) for k, v in self.extra_groups.items()})
            self._groups = groups
        return self._groups

    def _nest(self, groups: dict[str, list[int]]) -> None:
        """The tree of the scopes (``block3`` → ``block3/attn``), with ``RUNS`` run groups
        above each family of more than ``MAX_SIBLINGS`` numbered siblings (``block0``..
        ``block237`` → ``block0–29``, ...), added to ``groups``; each group's parent and
        depth."""
        parent: dict[str, str | None] = {g: (g.rpartition("/")[0] or None) for g in groups}
        kids: dict[str | None, list[str]] = {}
        for g in groups:  # (in the order of their first node)
            kids.setdefault(parent[g], []).append(g)
        runs: dict[str, list[str]] = {}
        for p, ks in kids.items():
            fams: dict[str, list[tuple[int, str]]] = {}
            for g in ks:
                mt = _FAMILY.match(g.rpartition("/")[2])
                if mt:
                    fams.setdefault(mt.group(1), []).append((int(mt.group(2)), g))
            for fam, members in fams.items():
                todo = [(members, p)]
                while todo:  # (a run of more than MAX_SIBLINGS is cut into runs again)
                    members, up = todo.pop()
                    if len(members) <= MAX_SIBLINGS:
                        continue
                    size = math.ceil(len(members) / RUNS)
                    for i in range(0, len(members), size):
                        chunk = members[i:i + size]
                        name = f"{fam}{chunk[0][0]}–{chunk[-1][0]}"  # (an en dash: no scope's)
                        name = f"{p}/{name}" if p else name
                        if len(chunk) < 2 or name in groups or name in runs:
                            continue  # (one scope: no run of one; a name taken: none)
                        runs[name] = [g for _, g in chunk]
                        parent[name] = up
                        for _, g in chunk:
                            parent[g] = name
                        todo.append((chunk, name))
        for r, scopes in runs.items():
            groups[r] = sorted(itertools.chain.from_iterable(groups[g] for g in scopes))
        depth: dict[str, int] = {}

        def depth_of(g: str) -> int:
            d = depth.get(g)
            if d is None:
                p = parent[g]
                d = depth[g] = 0 if p is None else depth_of(p) + 1
            return d

        for g in parent:
            depth_of(g)
        self._runs, self.group_parent, self.group_depth = runs, parent, depth

    @property
    def runs(self) -> dict[str, list[str]]:
        """Each run group (``block0–29``) and the sibling scopes it holds, in tape order."""
        self.groups  # noqa: B018 (made on first use)
        return self._runs

    def fold_levels(self) -> list[set[str]]:
        """The collapsed sets of each level of the group tree, the coarsest first: level
        ``k`` folds every group ``k`` deep (and deeper, so that unfolding one shows its
        children folded); an imported model's op boxes stay folded at every level. The last
        folds only those. Empty when the tape has no scopes."""
        groups = self.groups
        depth = self.group_depth
        if not depth:
            return []
        ops = {g for g in self.group_ops if g in groups}
        top = max(depth.values())
        return [{g for g, d in depth.items() if d >= k} | ops for k in range(top + 1)] + [ops]

    @classmethod
    def from_tape(cls, tape, loss_id: int | None = None) -> GraphModel:
        """Build from a ``core`` Tape's node tuple; the loss defaults to the last node."""
        # NOTE: a core Node has every field the graph reads (id, op, inputs, name, shape,
        # dtype): used as it is, not copied into 100k GraphNodes (1.1 s at 100k nodes)
        nodes = list(tape.nodes)
        if nodes and getattr(type(nodes[0]), "_fields", ())[:3] != ("id", "op", "inputs"):
            nodes = [GraphNode.from_node(n) for n in nodes]
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

    def parent_group(self, group: str) -> str | None:
        """The group ``group`` nests in (a scope, a run of scopes), or None at the top."""
        self.runs  # noqa: B018 (made on first use)
        return self.group_parent.get(group)

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
            g in self.extra_groups and node_id in self.extra_groups[g]) or (
            g in self.runs and not scopes.isdisjoint(self.runs[g])))

    def reveal(self, node_id: int) -> bool:
        """Unfold every group that hides ``node_id``; True when one was folded."""
        hidden = self.hidden_in(node_id)
        self.collapsed.difference_update(hidden)
        return bool(hidden)

    def display(self, collapsed: set[str] | None = None) -> DisplayGraph:
        """The graph to draw: nodes of collapsed groups merged into one box per group
        (``collapsed``: these groups instead of the model's own)."""
        # NOTE: column-wise (numpy over the edges, one pass over the nodes for the labels):
        # the per-node loops with a set of inputs each cost ~1 s at 100k nodes (issue 29)
        n = len(self.nodes)
        owner = np.full(n, -1, dtype=np.int64)  # the collapsed group (its index) hiding a node
        collapsed = self.collapsed if collapsed is None else collapsed
        folded = [g for g in collapsed if g in self.groups] if collapsed else []
        # outermost collapsed group wins: assign shallower (enclosing) groups last
        depth = self.group_depth
        # (an extra group: as deep as its name reads, as when the longer name went first)
        folded.sort(key=lambda g: (depth.get(g, g.count("/")), len(g), g), reverse=True)
        for k, g in enumerate(folded):
            owner[np.asarray(self.groups[g], dtype=np.int64)] = k
        free = owner < 0
        # an item per free node and per group, in the order of its first node
        first = free | _first_of_each(owner)
        item_of_first = np.cumsum(first) - 1
        m = int(first.sum())
        node_item = np.empty(n, dtype=np.int64)
        node_item[free] = item_of_first[free]
        firsts = np.flatnonzero(first)
        item_node = np.where(free[firsts], firsts, -1)
        group_items = np.flatnonzero(item_node < 0)
        item_group: list[str | None] = [None] * m
        gk = owner[firsts[group_items]]
        group_at = np.empty(len(folded), dtype=np.int64)
        group_at[gk] = group_items
        node_item[~free] = group_at[owner[~free]]
        for it, k in zip(group_items.tolist(), gk.tolist(), strict=True):
            item_group[it] = folded[k]
        # edges between items, each once, none from an item to itself; sorted by (target,
        # source): each item's inputs in increasing item order
        ins_of = list(map(_INPUTS, self.nodes))
        counts = np.fromiter(map(len, ins_of), dtype=np.int64, count=n)
        src = np.fromiter(itertools.chain.from_iterable(ins_of), dtype=np.int64,
                          count=int(counts.sum()))
        if src.size and (src.min() < 0 or src.max() >= n):
            bad = int(np.flatnonzero((src < 0) | (src >= n))[0])
            raise IndexError(f"graph model: node {int(np.repeat(np.arange(n), counts)[bad])} "
                             f"has input {int(src[bad])} outside 0..{n - 1}")
        t = node_item[np.repeat(np.arange(n, dtype=np.int64), counts)]
        s = node_item[src]
        keep = s != t
        pair = np.sort(t[keep] * max(m, 1) + s[keep])
        pair = pair[np.r_[True, pair[1:] != pair[:-1]]] if pair.size else pair
        et, es = pair // max(m, 1), pair % max(m, 1)
        inputs = EdgeLists(es, np.searchsorted(et, np.arange(m + 1)))
        kinds = np.full(m, KIND_GROUP, dtype=np.int8)
        node_items = ~(item_node < 0)
        kinds[node_items] = self.kinds[item_node[node_items]]
        order_key = item_node.copy()
        item_node_l = item_node.tolist()
        ids = [i for i in item_node_l if i >= 0] if group_items.size else range(n)
        shown = list(map(self.nodes.__getitem__, ids)) if group_items.size else self.nodes
        names = [nm if nm and nm[-1] != "/" else f"{nm or ''}#{i}"  # unnamed, or in a scope
                 for i, nm in zip(ids, map(_NAME, shown), strict=True)]
        spelled = _Spelled()  # a tape has few distinct shapes: each spelled once
        node_ops = list(map(_OP, shown))
        node_labels = list(zip(node_ops, names, map(spelled.__getitem__, map(_SHAPE, shown)),
                               strict=True))
        if group_items.size:
            labels: list[tuple[str, str, str]] = [None] * m  # type: ignore[list-item]
            for it, lab in zip(np.flatnonzero(node_items).tolist(), node_labels, strict=True):
                labels[it] = lab
        else:
            labels = node_labels
        for it in group_items.tolist():
            g = item_group[it]
            members = self.groups[g]
            op = self.group_ops.get(g)
            labels[it] = (f"▸ {op}" if op else "▸ group", g,
                          f"{count_text(len(members))} tape nodes" if op
                          else f"{count_text(len(members))} nodes")  # 1,190 nodes
            order_key[it] = min(members)
        ops = [lab[0] if nid >= 0 else "g:" + item_group[it]
               for it, (nid, lab) in enumerate(zip(item_node_l, labels, strict=True))
               ] if group_items.size else node_ops
        return DisplayGraph(
            item_node_l, item_group, inputs, kinds, labels, order_key.tolist(), node_item,
            key=structure_key_arrays(ops, inputs.flat, inputs.bounds),
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
