"""The layered layout engine: ranks follow edges, no overlaps, fewer crossings, caching."""

from __future__ import annotations

import numpy as np
import pytest

import tapescope.views.models.layout as layout_mod
from tapescope.views.models.graph_model import GraphModel, GraphNode
from tapescope.views.models.layout import (
    GAP_X,
    NODE_W,
    LayoutCache,
    count_crossings,
    layered_layout,
    structure_key,
)
from tapescope.views.models.synthetic import transformer_like


def random_dag(n: int, seed: int) -> list[tuple[int, ...]]:
    """Each node takes 0-3 inputs among earlier nodes (biased to recent ones, like a tape)."""
    rng = np.random.default_rng(seed)
    ins = []
    for i in range(n):
        k = 0 if i < 3 else int(rng.integers(0, 4))
        lo = max(0, i - 12)
        ins.append(tuple(sorted({int(rng.integers(lo, i)) for _ in range(k)})) if i else ())
    return ins


@pytest.mark.parametrize("seed", range(5))
def test_ranks_follow_every_edge_and_boxes_never_overlap(seed):
    ins = random_dag(300, seed)
    lay = layered_layout(ins)
    for v, srcs in enumerate(ins):
        for u in srcs:
            assert lay.rank[u] < lay.rank[v], (u, v)
            assert lay.y[u] < lay.y[v]  # edges run top-down
    for r in np.unique(lay.rank):
        xs = np.sort(lay.x[lay.rank == r])
        assert np.all(np.diff(xs) >= NODE_W + GAP_X - 1e-6)
    # in-rank order is a permutation and agrees with x
    for r in np.unique(lay.rank):
        m = lay.rank == r
        assert sorted(lay.order[m].tolist()) == list(range(int(m.sum())))
        assert np.array_equal(np.argsort(lay.order[m]), np.argsort(lay.x[m], kind="stable"))


def test_sources_sit_just_above_their_first_user():
    # param 2 is only used by node 5 (rank 3): it must not hang at rank 0
    ins = [(), (0,), (), (1,), (3,), (4, 2)]
    lay = layered_layout(ins)
    assert lay.rank[2] == lay.rank[5] - 1


def test_barycenter_sweeps_reduce_crossings():
    for ins in (transformer_like(400)[1], random_dag(400, 7)):
        before = count_crossings(ins, layered_layout(ins, sweeps=0))
        after = count_crossings(ins, layered_layout(ins))
        assert after < before


def test_count_crossings_on_a_hand_example():
    # 0,1 on top; 2,3 below; 0→3 and 1→2 cross once when kept in id order
    ins = [(), (), (1,), (0,)]
    assert count_crossings(ins, layered_layout(ins, sweeps=0)) == 1
    assert count_crossings(ins, layered_layout(ins)) == 0


def test_cache_returns_the_same_layout_for_the_same_structure():
    ops, ins, _ = transformer_like(200)
    cache = LayoutCache(capacity=2)
    k = structure_key(ops, ins)
    a = cache.get_or_compute(k, ins)
    b = cache.get_or_compute(structure_key(list(ops), [tuple(i) for i in ins]), ins)
    assert a is b and cache.hits == 1 and cache.misses == 1
    ops2 = list(ops)
    ops2[5] = "exp"
    assert structure_key(ops2, ins) != k


def test_bad_input_names_the_node():
    with pytest.raises(ValueError, match="node 1 has input 7"):
        layered_layout([(), (7,)])


def test_empty_and_cyclic_quotients_are_defined():
    assert len(layered_layout([])) == 0
    # a quotient graph can have a back edge: ranking ignores it, layout still completes
    lay = layered_layout([(1,), (0,), (1,)], key=[0, 1, 2])
    assert lay.rank[2] > lay.rank[1]


# ---- the array spellings hold to the per-node loops they replaced, bit for bit -----------------
def loop_place_x(members, src, dst, w, n, iterations=4):
    """The former ``_place_x``: a Python loop per node and per rank (the oracle)."""
    ins = [[] for _ in range(n)]
    outs = [[] for _ in range(n)]
    for u, v, wk in zip(src.tolist(), dst.tolist(), w.tolist(), strict=True):
        ins[v].append((u, wk))
        outs[u].append((v, wk))
    step = NODE_W + GAP_X
    x = [0.0] * n
    for mem in members:
        c = (len(mem) - 1) / 2.0
        for i, v in enumerate(mem):
            x[v] = (i - c) * step
    for _ in range(iterations):
        want = x[:]
        for v in range(n):
            tw = ts = 0.0
            for u, wk in ins[v]:
                tw += wk
                ts += wk * x[u]
            for u, wk in outs[v]:
                tw += wk
                ts += wk * x[u]
            if tw:
                want[v] = ts / tw
        for mem in members:
            if not mem:
                continue
            placed, prev = [], -float("inf")
            for v in mem:
                prev = max(want[v], prev + step)
                placed.append(prev)
            shift = sum(p - want[v] for p, v in zip(placed, mem, strict=True)) / len(mem)
            for p, v in zip(placed, mem, strict=True):
                x[v] = p - shift
    return x


class LoopCrossings:
    """The former ``_crossings``: every pair of edges tested in Python (the oracle)."""

    def __init__(self, adjacent):
        self.adjacent = adjacent

    def count(self, pos):
        total = 0
        for edges in self.adjacent:
            for i in range(len(edges)):
                for j in range(i + 1, len(edges)):
                    (a, b), (c, d) = edges[i], edges[j]
                    total += (pos[a] - pos[c]) * (pos[b] - pos[d]) < 0
        return total


def loop_crossing_counter(upper, u, v, n_ranks):
    adjacent = [[] for _ in range(n_ranks)]
    for r, a, b in zip(upper.tolist(), u.tolist(), v.tolist(), strict=True):
        adjacent[r].append((a, b))
    return LoopCrossings(adjacent)


def wide_dag() -> list[tuple[int, ...]]:
    """300 parameters read by one node: a rank 300 wide (the per-rank loop's path)."""
    return [()] * 300 + [tuple(range(300)), (300,)]


def quotient() -> tuple[list, list]:
    m = GraphModel([GraphNode(i, o, tuple(x), nm) for i, (o, x, nm) in
                    enumerate(zip(*transformer_like(1500), strict=True))])
    m.collapsed = {g for g in m.groups if g.endswith("/attn")}
    d = m.display()
    return d.inputs, d.order_key


@pytest.mark.parametrize("case", ["random0", "random1", "random2", "transformer", "wide",
                                  "quotient"])
def test_the_layout_is_the_per_node_loops_layout_bit_for_bit(case, monkeypatch):
    ins, key = {"random0": (random_dag(500, 0), None), "random1": (random_dag(800, 1), None),
                "random2": (random_dag(300, 2), None),
                "transformer": (transformer_like(3000)[1], None), "wide": (wide_dag(), None),
                "quotient": quotient()}[case]
    fast = layered_layout(ins, key)
    with monkeypatch.context() as mp:
        mp.setattr(layout_mod, "_place_x", loop_place_x)
        mp.setattr(layout_mod, "_crossing_counter", loop_crossing_counter)
        slow = layered_layout(ins, key)
    assert np.array_equal(fast.x.view(np.int64), slow.x.view(np.int64))  # every bit
    assert np.array_equal(fast.order, slow.order) and np.array_equal(fast.rank, slow.rank)


def test_crossing_counts_equal_the_pairwise_loop():
    rng = np.random.default_rng(3)
    for ins in (random_dag(400, 4), transformer_like(600)[1], wide_dag()):
        lay = layered_layout(ins, sweeps=0)
        src, dst = layout_mod._edge_arrays(ins)
        adjacent = [[] for _ in range(int(lay.rank.max()) + 1)]
        for u, v in zip(src.tolist(), dst.tolist(), strict=True):
            if lay.rank[v] - lay.rank[u] == 1:
                adjacent[lay.rank[u]].append((u, v))
        one = lay.rank[dst] - lay.rank[src] == 1
        arrays = layout_mod._crossing_counter(lay.rank[src[one]], src[one], dst[one],
                                              len(adjacent))
        for _ in range(5):  # positions with ties, as barycenters give
            pos = rng.integers(0, 6, len(ins)).astype(float).tolist()
            assert layout_mod._Crossings(adjacent).count(pos) == \
                LoopCrossings(adjacent).count(pos) == arrays.count(pos)


# ---- the grouped-array ranks and the sweeps that skip unmoved ranks hold to the loops -----------
def loop_ranks(inputs, key=None):
    """The former ``assign_ranks``: a loop over every input of every node (the oracle)."""
    n = len(inputs)
    src, dst = layout_mod._edge_arrays(inputs)
    kl = list(range(n)) if key is None else list(key)
    fwd = [(u, v) for u, v in zip(src.tolist(), dst.tolist(), strict=True)
           if kl[u] < kl[v] or (kl[u] == kl[v] and u < v)]
    visit = sorted(range(n), key=lambda v: kl[v])
    rank = [0] * n
    ins = [[] for _ in range(n)]
    users = [[] for _ in range(n)]
    for u, v in fwd:
        ins[v].append(u)
        users[u].append(v)
    for v in visit:
        rank[v] = max((rank[u] + 1 for u in ins[v]), default=0)
    if src.size:
        const = [False] * n
        for v in visit:
            const[v] = all(const[u] for u in ins[v])
        for v in reversed(visit):
            if const[v] and users[v]:
                rank[v] = max(rank[v], min(rank[w] for w in users[v]) - 1)
    return rank


def loop_order(inputs, key=None, sweeps=6):
    """The former sweeps: every rank sorted by its barycenters each sweep, no rank skipped."""
    n = len(inputs)
    rank = loop_ranks(inputs, key)
    src, dst = layout_mod._edge_arrays(inputs)
    members = [[] for _ in range(max(rank) + 1)]
    for v, r in enumerate(rank):
        members[r].append(v)
    pos = [0.0] * n
    for mem in members:
        for i, v in enumerate(mem):
            pos[v] = i - (len(mem) - 1) / 2.0
    ins, outs = [[] for _ in range(n)], [[] for _ in range(n)]
    adjacent = [[] for _ in members]
    for u, v in zip(src.tolist(), dst.tolist(), strict=True):
        w = 1.0 / max(1, abs(rank[v] - rank[u]))
        ins[v].append((u, w))
        outs[u].append((v, w))
        if rank[v] - rank[u] == 1:
            adjacent[rank[u]].append((u, v))
    count = LoopCrossings(adjacent).count
    best, best_members = count(pos), [m[:] for m in members]
    for s in range(sweeps):
        nbrs, ranks = (ins, range(1, len(members))) if s % 2 == 0 else (
            outs, range(len(members) - 2, -1, -1))
        for r in ranks:
            keyed = []
            for v in members[r]:
                tw = ts = 0.0
                for u, w in nbrs[v]:
                    tw += w
                    ts += w * pos[u]
                keyed.append((ts / tw if tw else pos[v], pos[v], v))
            keyed.sort()
            for i, item in enumerate(keyed):
                pos[item[2]] = i - (len(keyed) - 1) / 2.0
            members[r] = [item[2] for item in keyed]
        c = count(pos)
        if c < best:
            best, best_members = c, [m[:] for m in members]
    order = [0] * n
    for mem in best_members:
        for i, v in enumerate(mem):
            order[v] = i
    return rank, order


@pytest.mark.parametrize("case", ["random0", "random1", "transformer", "wide", "quotient"])
def test_ranks_and_order_are_the_loops(case):
    ins, key = {"random0": (random_dag(400, 0), None), "random1": (random_dag(600, 5), None),
                "transformer": (transformer_like(1500)[1], None), "wide": (wide_dag(), None),
                "quotient": quotient()}[case]
    rank, order = loop_order(ins, key)
    lay = layered_layout(ins, key)
    assert lay.rank.tolist() == rank and lay.order.tolist() == order
    assert layout_mod.assign_ranks(ins, key).tolist() == rank
