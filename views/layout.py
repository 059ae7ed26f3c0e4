"""Layered (Sugiyama-style) layout of a DAG: ranks, barycenter crossing reduction, coordinates.

Pure Python + numpy, no Qt: the GUI runs it in a worker thread and caches the result per graph
structure (a tape's structure is identical across minibatch episodes, so only overlays change).
"""

from __future__ import annotations

import hashlib
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


def _edge_arrays(inputs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Flatten per-node input lists into (src, dst) edge arrays, duplicates removed."""
    n = len(inputs)
    counts = np.fromiter((len(ins) for ins in inputs), dtype=np.int64, count=n)
    dst = np.repeat(np.arange(n, dtype=np.int64), counts)
    src = np.fromiter((i for ins in inputs for i in ins), dtype=np.int64, count=int(counts.sum()))
    if src.size and (src.min() < 0 or src.max() >= n):
        bad = int(np.flatnonzero((src < 0) | (src >= n))[0])
        raise ValueError(f"layout: node {int(dst[bad])} has input {int(src[bad])} "
                         f"outside 0..{n - 1}")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if src.size:
        uniq = np.unique(src * n + dst)
        src, dst = uniq // n, uniq % n
    return src, dst


def assign_ranks(inputs: Sequence[Sequence[int]], key: Sequence[int] | None = None) -> np.ndarray:
    """Longest-path ranks in ``key`` order (tape order by default); sources sink to their users.

    Edges that point backwards in ``key`` order (possible in a collapsed quotient graph) are
    ignored for ranking, so the result is defined for any input.
    """
    n = len(inputs)
    src, dst = _edge_arrays(inputs)  # validates ids first
    key_arr = np.arange(n) if key is None else np.asarray(key)
    visit = np.argsort(key_arr, kind="stable")
    rank = [0] * n
    kl = key_arr.tolist()
    for v in visit.tolist():
        r = 0
        kv = kl[v]
        for u in inputs[v]:
            if kl[u] < kv or (kl[u] == kv and u < v):
                ru = rank[u] + 1
                if ru > r:
                    r = ru
        rank[v] = r
    rank_arr = np.asarray(rank, dtype=np.int64)
    # NOTE: leaves (params, consts) would all sit on rank 0 with edges spanning the whole graph;
    # pull every source down to just above its first consumer instead.
    if src.size:
        is_source = np.ones(n, dtype=bool)
        is_source[dst] = False
        m = is_source[src]
        if m.any():
            lowest = np.full(n, np.iinfo(np.int64).max)
            np.minimum.at(lowest, src[m], rank_arr[dst[m]] - 1)
            pull = is_source & (lowest != np.iinfo(np.int64).max)
            rank_arr[pull] = np.maximum(lowest[pull], 0)
    return rank_arr


class _RankEdges:
    """Per-rank edge lists for fast barycenter sweeps (edges grouped by the endpoint's rank)."""

    def __init__(self, rank: np.ndarray, src: np.ndarray, dst: np.ndarray, n_ranks: int):
        self.members: list[np.ndarray] = []
        order = np.argsort(rank, kind="stable")
        bounds = np.searchsorted(rank[order], np.arange(n_ranks + 1))
        for r in range(n_ranks):
            self.members.append(order[bounds[r]:bounds[r + 1]])
        self.local = np.empty(rank.shape[0], dtype=np.int64)
        for mem in self.members:
            self.local[mem] = np.arange(mem.shape[0])
        self.down = self._group(rank, dst, src, n_ranks)  # neighbours above (inputs) per rank
        self.up = self._group(rank, src, dst, n_ranks)  # neighbours below (users) per rank

    def _group(self, rank, at, other, n_ranks):
        """For each rank: (local index of the endpoint in that rank, the other endpoint)."""
        out = []
        if at.size == 0:
            return [(np.empty(0, np.int64), np.empty(0, np.int64))] * n_ranks
        o = np.argsort(rank[at], kind="stable")
        at_s, other_s = at[o], other[o]
        bounds = np.searchsorted(rank[at_s], np.arange(n_ranks + 1))
        for r in range(n_ranks):
            sl = slice(bounds[r], bounds[r + 1])
            out.append((self.local[at_s[sl]], other_s[sl]))
        return out


def _sweep(pos: np.ndarray, re: _RankEdges, groups, ranks_iter, rank: np.ndarray) -> None:
    """One barycenter sweep: reorder each rank by the mean position of its neighbours."""
    for r in ranks_iter:
        mem = re.members[r]
        k = mem.shape[0]
        if k < 2:
            continue
        loc, other = groups[r]
        cur = pos[mem]
        if loc.size:
            # NOTE: no dummy nodes for long edges; weight a neighbour by 1/span instead, so a
            # far-away residual input pulls less than the adjacent rank
            w = 1.0 / np.abs(rank[other] - r)
            cnt = np.bincount(loc, weights=w, minlength=k)
            tot = np.bincount(loc, weights=w * pos[other], minlength=k)
            bary = np.where(cnt > 0, tot / np.maximum(cnt, 1), cur)
        else:
            bary = cur
        # ties keep the current order, so sweeps never shuffle without a reason
        new_order = np.lexsort((cur, bary))
        pos[mem[new_order]] = np.arange(k) - (k - 1) / 2.0


def _place_x(pos, re: _RankEdges, rank, src, dst, iterations: int = 4) -> np.ndarray:
    """Coordinates: keep the in-rank order, pull each node toward its neighbours' mean."""
    step = NODE_W + GAP_X
    x = pos * step
    n = x.shape[0]
    if src.size == 0:
        return x
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    for _ in range(iterations):
        tot = np.bincount(src, weights=x[dst], minlength=n) + np.bincount(
            dst, weights=x[src], minlength=n
        )
        want = np.where(deg > 0, tot / np.maximum(deg, 1), x)
        for mem in re.members:
            k = mem.shape[0]
            if k == 0:
                continue
            order = mem[np.argsort(pos[mem], kind="stable")]
            d = want[order]
            i = np.arange(k) * step
            # NOTE: x_i = max(d_i, x_{i-1} + step) is a running maximum of d - i*step
            placed = np.maximum.accumulate(d - i) + i
            placed -= (placed - d).mean()  # spread the push evenly left and right
            x[order] = placed
    return x


def layered_layout(
    inputs: Sequence[Sequence[int]], key: Sequence[int] | None = None, sweeps: int = 6
) -> Layout:
    """Lay out a DAG given each node's input ids: top-down ranks, few crossings."""
    n = len(inputs)
    if n == 0:
        e = np.empty(0)
        return Layout(e, e, e.astype(np.int64), e.astype(np.int64), 0.0, 0.0)
    rank = assign_ranks(inputs, key)
    src, dst = _edge_arrays(inputs)
    n_ranks = int(rank.max()) + 1
    re = _RankEdges(rank, src, dst, n_ranks)
    pos = np.empty(n, dtype=np.float64)
    for mem in re.members:  # start from tape order inside each rank
        pos[mem] = np.arange(mem.shape[0]) - (mem.shape[0] - 1) / 2.0
    best, best_pos = _crossings(rank, pos, src, dst), pos.copy()
    for s in range(sweeps):
        if s % 2 == 0:
            _sweep(pos, re, re.down, range(1, n_ranks), rank)
        else:
            _sweep(pos, re, re.up, range(n_ranks - 2, -1, -1), rank)
        c = _crossings(rank, pos, src, dst)
        if c < best:  # barycenter is a heuristic: keep the best ordering seen, never a worse one
            best, best_pos = c, pos.copy()
    pos = best_pos
    x = _place_x(pos, re, rank, src, dst)
    x -= x.min() - NODE_W / 2
    y = rank * (NODE_H + GAP_Y) + NODE_H / 2
    order = np.empty(n, dtype=np.int64)
    for mem in re.members:
        order[mem[np.argsort(pos[mem], kind="stable")]] = np.arange(mem.shape[0])
    return Layout(
        x=x, y=y.astype(np.float64), rank=rank, order=order,
        width=float(x.max() + NODE_W / 2), height=float(y.max() + NODE_H / 2),
    )


def _crossings(rank: np.ndarray, pos: np.ndarray, src: np.ndarray, dst: np.ndarray) -> int:
    """Crossings among edges joining adjacent ranks, from in-rank positions ``pos``."""
    keep = rank[dst] - rank[src] == 1
    src, dst = src[keep], dst[keep]
    if src.size < 2:
        return 0
    o = np.argsort(rank[src], kind="stable")
    src, dst = src[o], dst[o]
    rs = rank[src]
    bounds = np.flatnonzero(np.diff(rs)) + 1
    total = 0
    for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, rs.size].tolist(), strict=True):
        if hi - lo < 2:
            continue
        a, b = pos[src[lo:hi]], pos[dst[lo:hi]]
        # two edges cross when their endpoints are ordered oppositely on the two ranks
        total += int(((np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])) < 0)
                     .sum()) // 2
    return total


def count_crossings(inputs: Sequence[Sequence[int]], layout: Layout) -> int:
    """Edge crossings between adjacent ranks (edges spanning more ranks are skipped)."""
    src, dst = _edge_arrays(inputs)
    return _crossings(layout.rank, layout.order.astype(np.float64), src, dst)


def structure_key(ops: Sequence[str], inputs: Sequence[Sequence[int]]) -> str:
    """A digest of a graph's structure (ops and edges): equal across episodes of one tape."""
    h = hashlib.blake2b(digest_size=16)
    for op, ins in zip(ops, inputs, strict=True):
        h.update(op.encode())
        h.update(b"(")
        h.update(",".join(map(str, ins)).encode())
        h.update(b")")
    return h.hexdigest()


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
