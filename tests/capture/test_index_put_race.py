"""index_put with accumulate=True as PyTorch's CPU runs it on several threads (session 35: a
graph network's ``h[src]`` backward, 1,500 edges x 32 features): float32, 32,768 values or
more, deterministic algorithms off, the values are cut into parallel_for's chunks and each
thread adds its own by atomic adds, so two threads' adds onto one place interleave as they
race. ``--explain`` names it where every output that is not the serial loop's is what some
interleaving of its threads' terms gives; an output no interleaving gives is ``unknown``."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.capture.aten_ref import reference
from tapescope.core.capture.explain import explain_op

OP = "aten.index_put.default"
E, N, H = 1500, 300, 32  # (48,000 values: two chunks of 24,000, rows 0-749 and 750-1499)


def _case(seed):
    rng = np.random.default_rng(seed)
    base = np.zeros((N, H), np.float32)
    idx = rng.integers(0, N, E)
    vals = rng.standard_normal((E, H)).astype(np.float32)
    return [base, [idx], vals, True]


def _raced(args, pattern, tasks=2):
    """The bits of one race: per place the threads' terms (the values' flat (row, feature)
    order cut in ``tasks`` equal chunks) interleaved as ``pattern`` says (the last thread
    first, or two threads alternating)."""
    base, (idx,), vals, _ = args
    out = base.copy()
    chunk = -(-E * H // tasks)
    for n in range(N):
        rows = np.flatnonzero(idx == n)
        for h in range(H):
            runs = [[r for r in rows if (r * H + h) // chunk == t] for t in range(tasks)]
            if pattern == "last thread first":
                seq = [r for run in reversed(runs) for r in run]
            else:  # alternate (two threads)
                a, b = runs
                seq = [r for pair in zip(a, b, strict=False) for r in pair] + a[len(b):] + \
                    b[len(a):]
            acc = out[n, h]
            for r in seq:
                acc = acc + vals[r, h]
            out[n, h] = acc
    return out


def _explain(args, rec, threads=None):
    """(the outputs off the reference, explain_op's answer for a run of ``threads``)."""
    plain = reference(OP, args, {})[0]
    n = int(np.sum(plain.view(np.uint32) != rec.view(np.uint32)))
    d = {"n_diff": max(n, 1), "max_ulp": 1, "n_signed_zero": 0, "n_nan": 0}
    return n, explain_op(OP, args, {}, rec, d, 0, None, threads)


@pytest.mark.parametrize("pattern, tasks", [("last thread first", 2), ("alternate", 2),
                                           ("last thread first", 8)])
def test_an_interleaving_of_the_threads_adds_is_named(pattern, tasks):
    """Two threads, and eight (ATen's chunks are one per thread here, not bounded by its
    grain: measured with a capture at 8 threads)."""
    args = _case(35)
    rec = _raced(args, pattern, tasks)
    n, got = _explain(args, rec, tasks)
    assert n > 0
    assert got["cause"] == "reassociation" and "atomic adds" in got["variant"], got
    assert got["variant"].endswith(f"{tasks} threads, {n} places added in an order of the race")
    # a place that no interleaving gives: one ulp off a raced one at two threads; at eight
    # the orders are many and their sums spread over neighbouring values, so 64 ulps off
    off = rec.copy()
    i = np.flatnonzero(off.view(np.uint32) != reference(OP, args, {})[0].view(np.uint32))[0]
    off.reshape(-1).view(np.uint32)[i] += 1 if tasks == 2 else 64
    assert _explain(args, off, tasks)[1]["cause"] == "unknown"
    # the same bits judged as a run of another thread count: not named (the chunks differ)
    assert _explain(args, rec, 3)[1]["cause"] == "unknown"
    # the run's thread count unknown (a capture without it): fitted, the same answer
    if tasks == 2:
        assert _explain(args, rec)[1]["variant"] == got["variant"]


def test_a_product_of_fewer_values_is_one_serial_loop():
    """Under 32,768 values ATen adds in one serial loop: another order is not named."""
    rng = np.random.default_rng(36)
    args = [np.zeros((40, 8), np.float32), [rng.integers(0, 40, 400)],
            rng.standard_normal((400, 8)).astype(np.float32), True]
    rec = reference(OP, args, {})[0][::-1].copy()  # (any other bits)
    assert _explain(args, rec)[1]["cause"] == "unknown"


def test_torchs_own_runs_are_serial_or_a_named_race():
    """Ten runs of torch's index_put at 2 threads: each is the serial loop's bits or named
    (the race decides which, run by run); under deterministic algorithms, the serial loop."""
    torch = pytest.importorskip("torch")
    args = _case(37)
    base, (idx,), vals, _ = args
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for _ in range(10):
            rec = torch.ops.aten.index_put.default(
                torch.from_numpy(base), [torch.from_numpy(idx)], torch.from_numpy(vals),
                True).numpy()
            n, got = _explain(args, rec, 2)
            assert n == 0 or "atomic adds" in got["variant"], got
        torch.use_deterministic_algorithms(True)
        rec = torch.ops.aten.index_put.default(
            torch.from_numpy(base), [torch.from_numpy(idx)], torch.from_numpy(vals),
            True).numpy()
        assert np.array_equal(rec.view(np.uint32), reference(OP, args, {})[0].view(np.uint32))
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
