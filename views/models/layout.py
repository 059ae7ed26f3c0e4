"""Layered (Sugiyama-style) layout of a DAG: ranks, barycenter crossing reduction, coordinates.

Pure Python + numpy, no Qt: the GUI runs it in a worker thread and caches the result per graph
structure (a tape's structure is identical across minibatch episodes, so only overlays change).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NODE_W = 170.0  # scene units; the view draws every node as a NODE_W x NODE_H box
NODE_H = 46.0
GAP_X = 30.0
GAP_Y = 54.0


@dataclass(frozen=True)
class Layout:
    """Node centres (x, y), rank and in-rank order of every node, plus the bounding size."""

    x: np.ndarray
    y: np.ndarray
    rank: np.ndarray
    order: np.ndarray
    width: float
    height: float

    def __len__(self) -> int:
        return int(self.x.shape[0])


class EdgeLists(Sequence):
    """Each node's inputs, ``flat[bounds[i]:bounds[i + 1]]``, held as two arrays; reads as a
    list of tuples (``lists[i]``, ``len``, iteration, ``==`` a list). The layout and the
    canvas take the arrays as they are: a 100k-node graph's tuples are made only if asked."""

    def __init__(self, flat: np.ndarray, bounds: np.ndarray):
        self.flat = np.asarray(flat, dtype=np.int64)
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self._lists: list[tuple[int, ...]] | None = None

    def _tuples(self) -> list[tuple[int, ...]]:
        if self._lists is None:
            fl = self.flat.tolist()
            self._lists = [tuple(fl[a:b]) for a, b in itertools.pairwise(self.bounds.tolist())]
        return self._lists

    def __len__(self) -> int:
        return int(self.bounds.size) - 1

    def __getitem__(self, i):
        return self._tuples()[i]

    def __iter__(self):
        return iter(self._tuples())

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    __hash__ = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst): every edge, in node order."""
        counts = np.diff(self.bounds)
        return self.flat, np.repeat(np.arange(counts.size, dtype=np.int64), counts)


def flat_inputs(inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every input of every node, in node order (``EdgeLists``: its arrays)."""
    if isinstance(inputs, EdgeLists):
        return inputs.arrays()
    n = len(inputs)
    counts = np.fromiter(map(len, inputs), dtype=np.int64, count=n)
    dst = np.repeat(np.arange(n, dtype=np.int64), counts)
    src = np.fromiter(itertools.chain.from_iterable(inputs), dtype=np.int64,
                      count=int(counts.sum()))
    return src, dst


def _edge_arrays(inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Flatten per-node input lists into (src, dst) edge arrays, duplicates removed, sorted by
    (src, dst)."""
    n = len(inputs)
    src, dst = flat_inputs(inputs)
    if src.size and (src.min() < 0 or src.max() >= n):
        bad = int(np.flatnonzero((src < 0) | (src >= n))[0])
        raise ValueError(f"layout: node {int(dst[bad])} has input {int(src[bad])} "
                         f"outside 0..{n - 1}")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if src.size:
        uniq = np.sort(src * n + dst)
        uniq = uniq[np.r_[True, uniq[1:] != uniq[:-1]]]
        src, dst = uniq // n, uniq % n
    return src, dst


def _grouped(by: np.ndarray, vals: np.ndarray, n: int) -> tuple[list[int], list[int]]:
    """``vals`` grouped by ``by`` (0..n-1), each group in array order: (ptr, flat) lists, group
    ``i`` is ``flat[ptr[i]:ptr[i + 1]]``."""
    o = np.argsort(by, kind="stable")
    ptr = np.concatenate(([0], np.cumsum(np.bincount(by, minlength=n))))
    return ptr.tolist(), vals[o].tolist()


def assign_ranks(inputs: Sequence[Sequence[int]], key: Sequence[int] | None = None,
                 edges: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Longest-path ranks in ``key`` order (tape order by default); sources sink to their users.

    Edges that point backwards in ``key`` order (possible in a collapsed quotient graph) are
    ignored for ranking, so the result is defined for any input. ``edges``: ``_edge_arrays``
    of ``inputs`` when the caller has them.
    """
    n = len(inputs)
    src, dst = _edge_arrays(inputs) if edges is None else edges  # validates ids first
    key_arr = np.arange(n) if key is None else np.asarray(key)
    visit = np.argsort(key_arr, kind="stable")
    # NOTE: over the forward edges as arrays grouped per node, each node's step one C-level
    # max/all over its group (a loop over every input in Python cost ~0.5 s at 100k nodes)
    ks, kd = key_arr[src], key_arr[dst]
    fwd = (ks < kd) | ((ks == kd) & (src < dst))
    fs, fd = src[fwd], dst[fwd]
    ptr, ins = _grouped(fd, fs, n)
    rank = [0] * n
    get = rank.__getitem__
    has_in = np.diff(ptr) > 0
    for v in visit[has_in[visit]].tolist():
        rank[v] = max(map(get, ins[ptr[v]:ptr[v + 1]])) + 1
    # NOTE: leaves (params, consts) would all sit on rank 0 with edges spanning the whole graph
    # (resnet50: 270 weights in one 48,000-unit row). Every constant subtree -- a source, or a
    # node all of whose inputs are constant (an ONNX ConstantOfShape weight, a reshaped scale)
    # -- is pulled down to just above its first consumer instead, users first, so it sits
    # beside the layer that reads it.
    if src.size:
        const = (~has_in).tolist()
        is_const = const.__getitem__
        for v in visit[has_in[visit]].tolist():
            const[v] = all(map(is_const, ins[ptr[v]:ptr[v + 1]]))
        uptr, users = _grouped(fs, fd, n)
        pull = np.asarray(const, dtype=bool) & (np.diff(uptr) > 0)
        for v in visit[pull[visit]][::-1].tolist():
            r = min(map(get, users[uptr[v]:uptr[v + 1]])) - 1
            if r > rank[v]:
                rank[v] = r
    return np.asarray(rank, dtype=np.int64)


class _Neighbours:
    """Each node's neighbours on one side (inputs or users) with their weights (1 / rank span),
    grouped per node in edge order, and each node's total weight."""

    def __init__(self, node: np.ndarray, other: np.ndarray, w: np.ndarray, n: int):
        o = np.argsort(node, kind="stable")
        self.ptr = np.concatenate(([0], np.cumsum(np.bincount(node, minlength=n)))).tolist()
        self.node_a, self.other_a, self.w_a = node[o], other[o], w[o]
        self.other, self.w = self.other_a.tolist(), self.w_a.tolist()
        # bincount adds in array order from 0.0: the per-node loop's running sum, bit for bit
        self.total_a = np.bincount(self.node_a, weights=self.w_a, minlength=n)
        self.total = self.total_a.tolist()
        self.n = n

    def reordered_ranks(self, pos: list[float], rank: np.ndarray, n_ranks: int) -> list[bool]:
        """Per rank: would sorting it by barycenters (from ``pos`` as it is) change its order?
        The sweep's keys and sums, for every node at once (bincount adds in the loop's
        order, so the same bits)."""
        p = np.asarray(pos, dtype=np.float64)
        ts = np.bincount(self.node_a, weights=self.w_a * p[self.other_a], minlength=self.n)
        has = self.total_a != 0
        bary = np.where(has, ts / np.where(has, self.total_a, 1.0), p)
        ids = np.arange(self.n)
        new = np.lexsort((ids, p, bary, rank))
        cur = np.lexsort((p, rank))
        out = np.zeros(n_ranks, dtype=bool)
        out[rank[cur[new != cur]]] = True
        return out.tolist()


def _sweep(pos: list[float], members: list[list[int]], nbrs: _Neighbours, ranks_iter,
           clock: list[int], changed: list[int], seen: list[int],
           near: tuple[list[int], list[int]], rank: np.ndarray | None = None) -> None:
    """One barycenter sweep: reorder each rank by the weighted mean position of neighbours.

    Pure Python on purpose: tapes have thousands of narrow ranks, where per-rank numpy calls
    cost more than the arithmetic. A rank is sorted again only when it or a rank holding its
    neighbours (``near``) changed since this sweep direction last sorted it (``seen``): the
    same order the sort would give, without the sort (a 100k-node tape's later sweeps change
    a few hundred of its 50k ranks). With ``rank`` (each node's), every rank's sort from the
    positions at the start is first done at once in arrays: a rank that it leaves as it is,
    and that nothing it reads moved since the start, is not sorted again (the first sweeps of
    a 100k-node tape move a tenth of its ranks).
    """
    ptr, other, wt, total = nbrs.ptr, nbrs.other, nbrs.w, nbrs.total
    nptr, nflat = near
    start = clock[0]
    moves = nbrs.reordered_ranks(pos, rank, len(members)) if rank is not None else None
    if moves is not None and not any(moves):
        # the first rank to change would read only what the start's sort read (the ranks
        # before it are unchanged), and that sort keeps every rank: none changes
        return
    for r in ranks_iter:
        mem = members[r]
        k = len(mem)
        if k < 2:
            continue
        last = seen[r]
        near_r = nflat[nptr[r]:nptr[r + 1]]
        if changed[r] < last and all(changed[q] < last for q in near_r):
            continue  # nothing it reads moved: the sort would keep it as it is
        clock[0] += 1
        seen[r] = clock[0]
        if moves is not None and not moves[r] and changed[r] <= start and all(
                changed[q] <= start for q in near_r):
            continue  # read what the start's sort read, and that sort kept it
        keyed = []
        for v in mem:
            a, b = ptr[v], ptr[v + 1]
            if a == b:
                keyed.append((pos[v], pos[v], v))  # ties keep the current order
                continue
            ts = 0.0
            for i in range(a, b):
                ts += wt[i] * pos[other[i]]
            keyed.append((ts / total[v], pos[v], v))
        keyed.sort()
        order = [item[2] for item in keyed]
        if order == mem:
            continue
        clock[0] += 1
        changed[r] = clock[0]
        c = (k - 1) / 2.0
        for i, v in enumerate(order):
            pos[v] = i - c
        members[r] = order


class _Crossings:
    """Counts crossings among edges joining adjacent ranks (edges grouped by their upper rank)
    for any node positions: the pairs to test are listed once, each count is a few array ops."""

    def __init__(self, adjacent: list[list[tuple[int, int]]]):
        u = np.array([u for e in adjacent for u, _ in e], dtype=np.int64)
        v = np.array([v for e in adjacent for _, v in e], dtype=np.int64)
        self._pairs(np.repeat(np.arange(len(adjacent)), [len(e) for e in adjacent]), u, v)

    @classmethod
    def of_arrays(cls, upper: np.ndarray, u: np.ndarray, v: np.ndarray) -> _Crossings:
        """The edges ``u[k] -> v[k]``, grouped by their upper rank ``upper[k]`` (in edge order
        within a rank): the same counter as from the lists, without them."""
        self = cls.__new__(cls)
        self._pairs(upper, u, v)
        return self

    def _pairs(self, upper: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
        o = np.argsort(upper, kind="stable")
        upper, u, v = upper[o], u[o], v[o]
        size = np.bincount(upper)[upper] if upper.size else upper
        small = (size >= 2) & (size <= 48)
        wide = size > 48
        cuts = np.flatnonzero(np.diff(upper[wide])) + 1
        self.wide = list(zip(np.split(u[wide], cuts), np.split(v[wide], cuts),
                             strict=True)) if wide.any() else []
        self.eu, self.ev = u[small], v[small]
        g = upper[small]
        sizes = np.diff(np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])) if g.size else g
        # every pair i < j inside each group: edge i is paired with the rest of its group
        end = np.repeat(np.cumsum(sizes), sizes)
        cnt = end - np.arange(self.eu.size) - 1
        self.i = np.repeat(np.arange(self.eu.size), cnt)
        first = np.repeat(np.cumsum(cnt) - cnt, cnt)
        self.j = self.i + 1 + (np.arange(self.i.size) - first)

    def count(self, pos) -> int:
        """Crossings with node ``v`` at position ``pos[v]``."""
        p = np.asarray(pos, dtype=np.float64)
        pa, pb = p[self.eu], p[self.ev]
        # two edges cross when their ends are ordered oppositely on the two ranks
        total = int(np.count_nonzero((pa[self.i] - pa[self.j]) * (pb[self.i] - pb[self.j]) < 0))
        for u, v in self.wide:  # a wide rank: the sign form, as one matrix
            a, b = p[u], p[v]
            total += int(((np.sign(a[:, None] - a[None, :])
                           * np.sign(b[:, None] - b[None, :])) < 0).sum()) // 2
        return total


def _crossing_counter(upper: np.ndarray, u: np.ndarray, v: np.ndarray, n_ranks: int):
    """The crossing counter of the edges ``u[k] -> v[k]`` from rank ``upper[k]`` to the next."""
    return _Crossings.of_arrays(upper, u, v)


def _crossings(pos: list[float], adjacent: list[list[tuple[int, int]]]) -> int:
    """Crossings among edges joining adjacent ranks (edges grouped by their upper rank)."""
    return _Crossings(adjacent).count(pos)


def _place_x(members: list[list[int]], src: np.ndarray, dst: np.ndarray, w: np.ndarray, n: int,
             iterations: int = 4) -> list[float]:
    """Coordinates: keep the in-rank order, pull each node toward its neighbours' mean
    (edge ``src[k] -> dst[k]`` weighing ``w[k]``)."""
    step = NODE_W + GAP_X
    x = [0.0] * n
    for mem in members:
        c = (len(mem) - 1) / 2.0
        for i, v in enumerate(mem):
            x[v] = (i - c) * step
    # NOTE: each node's weighted mean of its neighbours is two bincounts over the edges listed
    # in the order a per-node loop added them (its inputs in edge order, then its users):
    # bincount adds in array order from 0.0, so the sums are that loop's, bit for bit
    tgt = np.concatenate([dst, src])
    other = np.concatenate([src, dst])
    side = np.repeat(np.array([0, 1], dtype=np.int64), src.size)
    o = np.argsort(tgt * 2 + side, kind="stable")
    tgt, other, wo = tgt[o], other[o], np.concatenate([w, w])[o]
    tw = np.bincount(tgt, weights=wo, minlength=n)
    has = tw != 0
    safe_tw = np.where(has, tw, 1.0)
    sizes = np.array([len(m) for m in members], dtype=np.int64)
    wide = int(sizes.max(initial=0))
    cols = _columns(members, sizes) if wide * 20 <= n else None
    for _ in range(iterations):
        xa = np.asarray(x)
        ts = np.bincount(tgt, weights=wo * xa[other], minlength=n)
        want = np.where(has, ts / safe_tw, xa)
        if cols is not None:
            x = _spread(want, cols, sizes, step, n)
            continue
        want = want.tolist()
        for mem in members:
            k = len(mem)
            if k == 0:
                continue
            # NOTE: x_i = max(want_i, x_{i-1} + step): a running maximum, then shifted so the
            # push is spread evenly left and right
            placed = []
            prev = -float("inf")
            for v in mem:
                xv = max(want[v], prev + step)
                placed.append(xv)
                prev = xv
            shift = sum(p - want[v] for p, v in zip(placed, mem, strict=True)) / k
            for p, v in zip(placed, mem, strict=True):
                x[v] = p - shift
    return x.tolist() if isinstance(x, np.ndarray) else x


def _columns(members: list[list[int]], sizes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(nodes, their ranks) at each in-rank position: column ``k`` holds every rank's k-th."""
    flat = np.fromiter((v for m in members for v in m), dtype=np.int64, count=int(sizes.sum()))
    rank = np.repeat(np.arange(sizes.size), sizes)
    k = np.arange(flat.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    o = np.argsort(k, kind="stable")
    cuts = np.flatnonzero(np.diff(k[o])) + 1
    return [(flat[c], rank[c]) for c in np.split(o, cuts)]


def _spread(want: np.ndarray, cols, sizes: np.ndarray, step: float, n: int) -> np.ndarray:
    """The per-rank running maximum of ``_place_x``, one in-rank position at a time across
    every rank: the same operations in the same order per rank, so the same bits."""
    prev = np.full(sizes.size, -np.inf)
    acc = np.zeros(sizes.size)
    placed = np.empty(n)
    for v, r in cols:
        a, b = want[v], prev[r] + step
        xv = np.where(b > a, b, a)  # Python's max(a, b): a unless b is greater (-0.0 stays)
        placed[v] = xv
        prev[r] = xv
        acc[r] += xv - a
    shift = acc / np.maximum(sizes, 1)
    rank = np.empty(n, dtype=np.int64)
    for v, r in cols:
        rank[v] = r
    return placed - shift[rank]


def layered_layout(
    inputs: Sequence[Sequence[int]], key: Sequence[int] | None = None, sweeps: int = 6
) -> Layout:
    """Lay out a DAG given each node's input ids: top-down ranks, few crossings."""
    n = len(inputs)
    if n == 0:
        e = np.empty(0)
        return Layout(e, e, e.astype(np.int64), e.astype(np.int64), 0.0, 0.0)
    src, dst = _edge_arrays(inputs)
    rank_arr = assign_ranks(inputs, key, edges=(src, dst))
    n_ranks = int(rank_arr.max()) + 1
    # start from tape order inside each rank
    by_rank = np.argsort(rank_arr, kind="stable")
    width = np.bincount(rank_arr, minlength=n_ranks)
    bounds = np.concatenate(([0], np.cumsum(width))).tolist()
    flat = by_rank.tolist()
    members: list[list[int]] = [flat[a:b] for a, b in itertools.pairwise(bounds)]
    in_rank = np.arange(n) - np.repeat(np.asarray(bounds[:-1]), width)
    pos = (in_rank - (width[rank_arr[by_rank]] - 1) / 2.0)[np.argsort(by_rank)].tolist()
    span = np.maximum(1, np.abs(rank_arr[dst] - rank_arr[src]))
    w = 1.0 / span  # a neighbour weighs 1/span: a far-away residual input pulls less
    # NOTE: no dummy nodes for long edges; the weight above stands in for them
    ins, outs = _Neighbours(dst, src, w, n), _Neighbours(src, dst, w, n)
    near_in = _near(rank_arr[dst], rank_arr[src], width, n_ranks)
    near_out = _near(rank_arr[src], rank_arr[dst], width, n_ranks)
    one = rank_arr[dst] - rank_arr[src] == 1
    crossings = _crossing_counter(rank_arr[src[one]], src[one], dst[one], n_ranks)
    # the best ordering seen, as its positions (a rank's order is its nodes sorted by them)
    best, best_pos = crossings.count(pos), pos[:]
    clock, changed = [0], [0] * n_ranks
    seen = {0: [-1] * n_ranks, 1: [-1] * n_ranks}
    for s in range(sweeps):
        before = clock[0]
        if s % 2 == 0:
            _sweep(pos, members, ins, range(1, n_ranks), clock, changed, seen[0], near_in,
                   rank_arr)
        else:
            _sweep(pos, members, outs, range(n_ranks - 2, -1, -1), clock, changed, seen[1],
                   near_out, rank_arr)
        if max(changed) <= before:
            continue  # no rank moved: the crossings are those counted already
        c = crossings.count(pos)
        if c < best:  # barycenter is a heuristic: keep the best ordering seen, never a worse one
            best, best_pos = c, pos[:]
    flat = np.lexsort((best_pos, rank_arr)).tolist()
    members = [flat[a:b] for a, b in itertools.pairwise(bounds)]
    x = np.asarray(_place_x(members, src, dst, w, n))
    x -= x.min() - NODE_W / 2
    y = rank_arr * (NODE_H + GAP_Y) + NODE_H / 2
    order = np.empty(n, dtype=np.int64)
    order[np.fromiter(itertools.chain.from_iterable(members), dtype=np.int64, count=n)] = in_rank
    return Layout(
        x=x, y=y.astype(np.float64), rank=rank_arr, order=order,
        width=float(x.max() + NODE_W / 2), height=float(y.max() + NODE_H / 2),
    )


def _near(at: np.ndarray, nbr: np.ndarray, width: np.ndarray,
          n_ranks: int) -> tuple[list[int], list[int]]:
    """Per rank (of two nodes or more), the other ranks holding its nodes' neighbours (the
    edges from rank ``at[k]`` to rank ``nbr[k]``): rank ``r``'s are ``flat[ptr[r]:ptr[r+1]]``,
    (ptr, flat)."""
    keep = (width[at] >= 2) & (at != nbr)
    pair = np.sort(at[keep] * n_ranks + nbr[keep])
    pair = pair[np.r_[True, pair[1:] != pair[:-1]]] if pair.size else pair
    return _grouped(pair // n_ranks, pair % n_ranks, n_ranks)


def count_crossings(inputs: Sequence[Sequence[int]], layout: Layout) -> int:
    """Edge crossings between adjacent ranks (edges spanning more ranks are skipped)."""
    src, dst = _edge_arrays(inputs)
    rank = layout.rank.tolist()
    adjacent: list[list[tuple[int, int]]] = [[] for _ in range(max(rank, default=0) + 1)]
    for u, v in zip(src.tolist(), dst.tolist(), strict=True):
        if rank[v] - rank[u] == 1:
            adjacent[rank[u]].append((u, v))
    return _crossings(layout.order.astype(np.float64).tolist(), adjacent)


def structure_key(ops: Sequence[str], inputs: Sequence[Sequence[int]]) -> str:
    """A digest of a graph's structure (ops and edges): equal across episodes of one tape."""
    if isinstance(inputs, EdgeLists):
        return structure_key_arrays(ops, inputs.flat, inputs.bounds)
    counts = np.fromiter(map(len, inputs), dtype=np.int64, count=len(inputs))
    src = np.fromiter(itertools.chain.from_iterable(inputs), dtype=np.int64,
                      count=int(counts.sum()))
    return structure_key_arrays(ops, src, np.concatenate(([0], np.cumsum(counts))))


def structure_key_arrays(ops: Sequence[str], src, bounds) -> str:
    """``structure_key`` of the graph whose node ``i`` is ``ops[i]`` with inputs
    ``src[bounds[i]:bounds[i + 1]]``: the op names once each, then three arrays hashed whole
    (a loop per node cost ~0.5 s at 100k nodes)."""
    table = _Interned()
    codes = np.fromiter(map(table.__getitem__, ops), dtype=np.int64, count=len(ops))
    h = hashlib.blake2b(digest_size=16)
    h.update("\0".join(table).encode())
    for a in (codes, np.asarray(bounds, dtype=np.int64), np.asarray(src, dtype=np.int64)):
        h.update(b"|")
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class _Interned(dict):
    """key → a number, the next one for each new key."""

    def __missing__(self, key):
        c = self[key] = len(self)
        return c


class LayoutCache:
    """A small thread-safe LRU of layouts keyed by structure digest."""

    def __init__(self, capacity: int = 16):
        self._items: OrderedDict[str, Layout] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity
        self.hits = 0
        self.misses = 0

    def get_or_compute(
        self, key: str, inputs: Sequence[Sequence[int]], order_key: Sequence[int] | None = None
    ) -> Layout:
        """The cached layout for ``key``, computing it once on a miss."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        lay = layered_layout(inputs, order_key)
        with self._lock:
            self.misses += 1
            self._items[key] = lay
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return lay


CACHE = LayoutCache()
