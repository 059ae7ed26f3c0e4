"""The run plan's buffers kept from run to run (core.onnx.arena): a buffer is written again only
when nothing holds it (an output the caller kept, a view of one, another thread's run), every
run's values are the plain node loop's bit for bit, and what an arena keeps is bounded."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper

from tapescope.core import native
from tapescope.core.onnx import Session, arena
from tests.helpers.onnx_plan import assert_same_bits, budgets, make_model, spread

needs_native = pytest.mark.skipif(native.library() is None, reason="no C compiler here")


def _net(rng):
    """x (1, 8, 48, 48) -> 3x3 conv + Relu (a: 288 KiB) -> MaxPool 3x3 s1 pad 1 (p) ->
    1x1 conv (y, 32 channels): every value over arena.MIN_BYTES."""
    inits = {"w1": spread(rng, (32, 8, 3, 3), np.float32),
             "b1": spread(rng, (32,), np.float32),
             "w2": spread(rng, (32, 32, 1, 1), np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w2"], ["y"], kernel_shape=[1, 1])]
    x = spread(rng, (1, 8, 48, 48), np.float32)
    return make_model(nodes, {"x": x}, inits, ["y"]), x


def _feeds(seed):
    return {"x": spread(np.random.default_rng(seed), (1, 8, 48, 48), np.float32)}


@needs_native
def test_a_kept_output_is_never_written_over_and_a_dropped_one_is_taken_again():
    m, _ = _net(np.random.default_rng(0))
    planned, plain = Session(m), Session(m, plan=False)
    f1, f2 = _feeds(1), _feeds(2)
    want1, want2 = plain.run(f1)["y"], plain.run(f2)["y"]
    assert want1.nbytes >= arena.MIN_BYTES and not np.array_equal(want1, want2)
    kept = planned.run(f1)["y"]
    view = planned.run(f1)["y"][0, 3:5]  # only a view of the second run's output is kept
    for _ in range(3):
        got = planned.run(f2)["y"]
        assert_same_bits(got, want2)
        assert native.address(got) != native.address(kept)
        assert not np.shares_memory(got, view)
    assert_same_bits(kept, want1)
    assert_same_bits(view, want1[0, 3:5])
    addr = native.address(got)
    del got
    again = planned.run(f1)["y"]  # nothing holds the last output now: its buffer is reused
    assert native.address(again) == addr
    assert_same_bits(again, want1)
    assert 0 < planned._arena.held_bytes() <= arena.MAX_BYTES


@needs_native
def test_the_intermediates_are_reused_and_each_run_is_the_plain_loops():
    m, _ = _net(np.random.default_rng(1))
    planned, plain = Session(m), Session(m, plan=False)
    seen, made = set(), []
    real = arena.Arena._take  # (where every block is handed out: empty and empty_sized)

    def spy(self, shape, dtype, nbytes):
        a = real(self, shape, dtype, nbytes)
        seen.add(native.address(a))
        made.append(a.shape)
        return a
    mp = pytest.MonkeyPatch()
    mp.setattr(arena.Arena, "_take", spy)
    try:
        for seed in range(6):
            assert_same_bits(planned.run(_feeds(seed))["y"], plain.run(_feeds(seed))["y"])
    finally:
        mp.undo()
    # the conv's output, the pool's and the last conv's: a few buffers, not one per run
    assert len(made) == 18 and 1 <= len(seen) <= 4


@needs_native
def test_two_threads_on_one_session_never_share_a_buffer():
    m, _ = _net(np.random.default_rng(2))
    planned, plain = Session(m), Session(m, plan=False)
    want = {s: plain.run(_feeds(s))["y"] for s in (3, 4)}
    bad, kept = [], {3: [], 4: []}

    def work(seed):
        try:
            for _ in range(12):
                y = planned.run(_feeds(seed))["y"]
                if y.tobytes() != want[seed].tobytes():
                    bad.append(seed)
                kept[seed].append(native.address(y))
        except Exception as exc:  # noqa: BLE001 - reported below
            bad.append(repr(exc))
    ts = [threading.Thread(target=work, args=(s,)) for s in (3, 4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad
    assert not set(kept[3]) & set(kept[4])  # each thread's buffers are its own


def test_the_arena_keeps_what_its_caps_allow_only():
    n = arena.MIN_BYTES  # float32 elements: blocks of 4 * MIN_BYTES
    ar = arena.Arena(max_bytes=3 * 4 * n)
    small = ar.empty((16,), np.float32)
    assert ar.held_bytes() == 0 and small.shape == (16,)
    a = ar.empty((n,), np.float32)
    b = ar.empty((n,), np.float32)  # a is held: a second block
    assert native.address(a) != native.address(b) and ar.held_bytes() == 2 * a.nbytes
    c = ar.empty((2 * n,), np.float32)  # over the cap (2 + 2 blocks > 3): made, not kept
    assert ar.held_bytes() == 2 * a.nbytes and c.nbytes == 2 * a.nbytes
    addr = native.address(b)
    del b
    e = ar.empty((n // 4, 4), np.int32)  # another shape and dtype of b's size takes b's block
    assert native.address(e) == addr and e.shape == (n // 4, 4) and e.dtype == np.int32
    assert native.address(ar.empty((n,), np.float32)) != addr  # e holds it: a third block
    assert ar.held_bytes() == 3 * 4 * n
    del e
    f = ar.empty((n // 2 + 1,), np.float32)  # at most twice the size asked for: b's block
    assert native.address(f) == addr and f.nbytes < n * 4
    del f
    g = ar.empty((n // 2 - 64,), np.float32)  # more than twice the size: not b's block
    assert native.address(g) != addr and g.nbytes >= arena.MIN_BYTES
    ar.clear()
    assert ar.held_bytes() == 0


def test_outside_a_run_empty_is_plain_numpy():
    a = arena.empty((arena.MIN_BYTES,), np.uint8)
    assert a.flags.owndata and a.shape == (arena.MIN_BYTES,)
    ar = arena.Arena()
    with arena.use(ar):
        b = arena.empty((arena.MIN_BYTES,), np.uint8)
    assert ar.held_bytes() == b.nbytes
    c = arena.empty((arena.MIN_BYTES,), np.uint8)
    assert ar.held_bytes() == b.nbytes and not np.shares_memory(b, c)


@needs_native
def test_a_value_no_later_step_reads_gives_its_buffer_to_a_later_one(monkeypatch):
    m, _ = _net(np.random.default_rng(5))
    planned, plain = Session(m), Session(m, plan=False)
    feeds = _feeds(7)
    planned.run(feeds)
    dead = planned.plan().dead
    assert len(dead) == len(planned.plan().steps)
    assert any("a" in d for d in dead) and not any("y" in d for d in dead)
    made = []
    real = arena.Arena._take  # (where every block is handed out: empty and empty_sized)

    def spy(self, shape, dtype, nbytes):
        a = real(self, shape, dtype, nbytes)
        made.append(native.address(a))
        return a
    monkeypatch.setattr(arena.Arena, "_take", spy)
    got = planned.run(feeds)["y"]
    monkeypatch.undo()
    assert_same_bits(got, plain.run(feeds)["y"])
    a_buf, p_buf, y_buf = made  # the conv's output, the pool's, the last conv's
    assert y_buf == a_buf != p_buf  # a is dead once the pool has read it
    # asked for, a stays: its buffer is not handed to y
    both = planned.run(feeds, outputs=["a", "y"])
    want = plain.run(feeds, outputs=["a", "y"])
    for k in want:
        assert_same_bits(both[k], want[k])
    assert not np.shares_memory(both["a"], both["y"])


def test_a_new_shape_past_the_cap_drops_free_blocks_never_busy_ones():
    n = arena.MIN_BYTES  # float32 elements: blocks of 4 * MIN_BYTES bytes
    ar = arena.Arena(max_bytes=10 * n)  # room for a and b, or for a and c
    a = ar.empty((n,), np.float32)
    b = ar.empty((n,), np.float32)
    assert ar.held_bytes() == 2 * a.nbytes
    del b  # free now; a stays busy
    c = ar.empty((3 * n // 2,), np.float32)  # no free block of 1-2x its size: b's block goes
    assert ar.held_bytes() == a.nbytes + c.nbytes
    a[:] = 1.0
    d = ar.empty((5 * n // 2,), np.float32)  # a and c busy: too big to keep, a plain array
    assert ar.held_bytes() == a.nbytes + c.nbytes and not np.shares_memory(d, a)
    assert (a == 1.0).all()


@needs_native
def test_a_tight_byte_limit_refuses_the_planned_run_where_it_refuses_the_plain_one(monkeypatch):
    # dropping dead values frees memory mid-run; the budget must still count them (Budget.pin),
    # or a model the plain loop refuses would pass planned
    from tapescope.core.onnx import Limits, OnnxError

    rng = np.random.default_rng(9)
    inits = {"w0": spread(rng, (32, 8, 3, 3), np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a0"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1])]
    for i in range(4):  # pool, 1x1 conv, pool, ...: each value read once, by the next node
        inits[f"w{i + 1}"] = spread(rng, (32, 32, 1, 1), np.float32)
        nodes += [helper.make_node("MaxPool", [f"a{i}"], [f"p{i}"], kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Conv", [f"p{i}", f"w{i + 1}"],
                                   ["y" if i == 3 else f"a{i + 1}"], kernel_shape=[1, 1])]
    feeds = _feeds(9)
    m = make_model(nodes, feeds, inits, ["y"])
    peak = budgets(monkeypatch, Session(m, plan=False), feeds).peak_bytes
    assert peak > 3 * arena.MIN_BYTES

    def verdict(plan, limit):
        try:
            Session(m, plan=plan, limits=Limits(max_bytes=limit)).run(feeds)
        except OnnxError as exc:
            assert "\n" not in str(exc)  # one line, naming the node
            return str(exc)
        return "ran"
    seen = set()
    for limit in [peak * k // 10 for k in range(3, 13)] + [peak - 1, peak, 2 * peak]:
        got = verdict(True, limit)
        assert got == verdict(False, limit), limit
        seen.add(got == "ran")
    assert seen == {True, False}  # some limits refuse the run, some let it through
