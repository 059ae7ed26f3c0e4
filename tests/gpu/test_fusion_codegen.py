"""The generated CUDA C read as text (golden snippets): ABI, names, order of operations."""

from __future__ import annotations

import re

import numpy as np

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.gpu import fusion
from tapescope.gpu.fusion.codegen import whole_index


def _graph(dtype=np.float64, rows: int = 3):
    t = Tape(dtype=dtype)
    x = t.const(np.ones((rows, 4)), name="x")
    w = t.param(np.ones((4, 5)), name="W")
    b = t.param(np.zeros(5), name="b")
    h = ops.relu(ops.add(x @ w, b))
    return t, ops.mean(ops.mul(h, h))


def _plan(host, dtype=np.float64, rows: int = 3):
    t, loss = _graph(dtype, rows)
    return fusion.plan(gpu.capture(host, t, loss))


def test_segments_and_kernel_names(host):
    p = _plan(host)
    row, tail = p.segments
    assert (row.kind, row.lo, row.hi, row.rows, row.ops) == ("row", 3, 6, 3,
                                                            ("matmul", "add", "relu", "mul"))
    assert (tail.kind, tail.node_ids) == ("serial", (7,))
    assert row.backward_ids == (6, 5, 4, 3)  # decreasing id, as backward walks them
    assert re.fullmatch(r"[0-9a-f]{10}64", p.plan_id)
    for k in p.kernels:
        assert k.name.startswith(f"fz{p.plan_id}_") and k.name.endswith("_f64")
    assert row.forward == f"fz{p.plan_id}_s0_fwd_f64"
    assert {k.role for k in p.kernels} == {"forward", "backward", "params", "optimizer"}


def test_every_segment_kernel_has_the_one_table_signature(host):
    p = _plan(host)
    for k in p.kernels:
        if k.role != "optimizer":
            assert f'void {k.name}(const long long* tab, long long R) {{' in k.source
    # node i's value address is table slot i, its gradient slot N + i (N = 8 nodes)
    fwd = p.kernel(p.segments[0].forward).source
    assert "double* v1 = (double*)(unsigned long long)tab[1];" in fwd
    bwd = p.kernel(p.segments[0].backward).source
    assert "double* g5 = (double*)(unsigned long long)tab[13];" in bwd


def test_forward_text_block_is_a_row_barriers_between_nodes(host):
    fwd = _plan(host).kernel("fz" + _plan(host).plan_id + "_s0_fwd_f64").source
    assert "for (long long s = blockIdx.x; s < R; s += gridDim.x) {" in fwd
    assert fwd.count("__syncthreads();") == 3  # four nodes, a barrier between each pair
    # matmul: acc from +0.0, product rounded then added, k in order
    assert "for (long long k = 0; k < 4; ++k) acc = __dadd_rn(acc, __dmul_rn(v0[s * 4 + k], " \
           "v1[k * 5 + c]));" in fwd
    assert "v4[s * 5 + c] = __dadd_rn(v3[s * 5 + c], v2[c]);" in fwd  # bias read whole
    assert "(x > (double)0 || x != x) ? x : (double)0" in fwd  # relu lets NaN through
    assert "fma" not in fwd


def test_backward_and_parameter_reduction_text(host):
    p = _plan(host)
    bwd = p.kernel(p.segments[0].backward).source
    # mul(h, h): g*b then g*a into the same gradient, in input order
    # (each contribution in RND(...): a half type rounds it before the add; float64's RND is
    # the bare parentheses)
    assert bwd.count("g5[s * 5 + c] = __dadd_rn(g5[s * 5 + c], (__dmul_rn(g6[s * 5 + c], "
                     "v5[s * 5 + c])));") == 2
    assert bwd.index("/* node 6 mul */") < bwd.index("/* node 5 relu */") < bwd.index(
        "/* node 4 add */")
    par = p.kernel(p.segments[0].params).source
    # bias: serial over rows from +0.0, then added once; W: dot over all rows
    assert "for (long long r = 0; r < 3; ++r) acc = __dadd_rn(acc, g4[r * 5 + c]);" in par
    assert "acc = __dadd_rn(acc, __dmul_rn(v0[r * 4 + kk], g3[r * 5 + n]));" in par
    assert "g1[j] = __dadd_rn(g1[j], (acc));" in par
    tail = p.kernel(p.segments[1].backward).source
    assert tail.index("pg7[0] = (double)1;") < tail.index("__ddiv_rn(pg7[0], ((double)(15.0)))")


def test_float32_plans_use_the_stock_substitution_and_a_different_id(host):
    p64, p32 = _plan(host), _plan(host, np.float32)
    assert p32.plan_id != p64.plan_id and p32.plan_id.endswith("32")
    src = p32.source
    assert "__fadd_rn" in src and "__dadd_rn" not in src and "double" not in src
    assert all(k.name.endswith("_f32") for k in p32.kernels)


def test_plan_ids_follow_the_structure(host):
    a, b, c = _plan(host), _plan(host), _plan(host, rows=4)
    assert a.plan_id == b.plan_id  # same program, same kernels: the cache entry is shared
    assert a.plan_id != c.plan_id  # another program never collides


def test_describe_lists_segments_kernels_and_launches(host):
    p = _plan(host)
    text = p.describe(sources=True)
    assert "segment 0: nodes 3..6 (4 ops, 3 rows): matmul add relu mul" in text
    assert f"{'episode':<22}{16:>9}{7:>8}" in text
    assert p.segments[0].forward in text and "__syncthreads" in text
    assert p.to_json()["launches_after"]["episode"] == 7


def test_whole_operand_index():
    assert whole_index((5,), (3, 5), "s", "c") == "c"
    assert whole_index((1,), (3, 5), "s", "c") == "0"
    # a [S, S] mask against [B, S, S] scores: row s reads mask row s % S
    assert whole_index((4, 4), (2, 4, 4), "s", "c") == "c + (((s) / 1) % 4) * 4"
