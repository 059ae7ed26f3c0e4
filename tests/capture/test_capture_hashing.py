"""The recorder's digests (app/capture/recorder.py): XXH3-128 by default, SHA-256 by choice,
each a direct digest of the value's C-order bytes; on its background thread (``_Hasher``) the
same digests as hashing each value where it is made, even when an op writes a value while
its digest waits in the queue (hashes only: the queue holds a view of the tensor's own
memory, which such a write would change), and the script's own results unchanged."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import pytest
import xxhash

torch = pytest.importorskip("torch")

from tapescope.app.capture import recorder as R  # noqa: E402

HEX = {"xxh3_128": xxhash.xxh3_128_hexdigest,
       "sha256": lambda b: hashlib.sha256(b).hexdigest()}  # the algorithms, directly


def _step(n: int = 96, algorithm: str = "xxh3_128") -> tuple[list[float], list[str]]:
    """A step whose large outputs (>= the async threshold) are written in place at once: the
    digest of each value must be of its bytes as the op made them."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, n, generator=g, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    x = torch.randn(n, n, generator=g)
    losses, expect = [], []
    for _ in range(2):
        y = x @ w  # an op's output (64 KiB): hashed on the thread ...
        expect.append(HEX[algorithm](y.detach().numpy().tobytes()))
        y.mul_(2.0)  # ... unless this write came first
        y.add_(1.0)
        loss = (y * y).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()  # in-place writes of w and the momentum buffer
        losses.append(loss.item())
    return losses, expect


def _record(async_hash: bool, hashes_only: bool, monkeypatch, algorithm: str = "xxh3_128"
            ) -> tuple[R.Recorder, list, list]:
    monkeypatch.setattr(R.Recorder, "async_hash", async_hash)
    rec = R.Recorder(steps=2, hashes_only=hashes_only, digest=algorithm).start()
    try:
        losses, expect = _step(algorithm=algorithm)
    finally:
        rec.stop()
    return rec, losses, expect


@pytest.mark.parametrize("algorithm", ["xxh3_128", "sha256"])
@pytest.mark.parametrize("hashes_only", [True, False])
def test_background_digests_are_the_values_as_made(hashes_only, algorithm, monkeypatch):
    monkeypatch.setattr(R, "_ASYNC_MIN", 1 << 12)  # every value of the step goes to the thread
    plain_losses, _ = _step()
    got, losses, expect = _record(True, hashes_only, monkeypatch, algorithm)
    assert losses == plain_losses  # the script's own results: the same bits
    ref, ref_losses, _ = _record(False, hashes_only, monkeypatch, algorithm)
    assert ref_losses == plain_losses
    assert None not in got.v_sha
    assert got.v_sha == ref.v_sha  # the same digests as hashing each value where it is made
    assert got.n_hashed == ref.n_hashed
    names = {i: n for n, i in got.tables["names"].items()}
    mm_out = [got.o_outputs[i][0] for i, op in enumerate(got.o_op)
              if names[op] == "aten.mm.default" and got.o_phase[i] == 0]
    assert [got.v_sha[v] for v in mm_out] == expect  # before the mul_ that followed each
    if not hashes_only:
        for v in mm_out:
            assert HEX[algorithm](np.ascontiguousarray(got.v_array[v]).tobytes()) \
                == got.v_sha[v]


def test_a_write_copies_what_waits_and_waits_for_what_is_hashed():
    """``protect``: a queued live view under a write becomes a private copy (its digest is of
    the bytes before the write); other spans are left alone."""
    sha: list = [None, None]
    h = R._Hasher(sha)
    try:
        with h.cv:  # hold the thread off while both are queued
            a = np.arange(1 << 14, dtype=np.float32)
            b = np.ones(1 << 14, dtype=np.float32)
            want_a = hashlib.sha256(a.tobytes()).hexdigest()
            want_b = hashlib.sha256(b.tobytes()).hexdigest()
            lo_a, lo_b = a.ctypes.data, b.ctypes.data
            h.queue.append([0, a, (lo_a, lo_a + a.nbytes)])
            h.queue.append([1, b, (lo_b, lo_b + b.nbytes)])
            h.pending += a.nbytes + b.nbytes
            h.live += 2
        h.protect([(lo_a + 8, lo_a + 16)])  # a write inside a's storage
        assert h.live == 1
        assert h.queue[0][2] is None and h.queue[0][1] is not a  # a: copied
        assert h.queue[1][1] is b  # b: untouched, still live
        a[:] = -1.0  # the write
    finally:
        with h.cv:  # the items went in behind put's back: wake the thread
            h.cv.notify_all()
        h.close()
    assert sha == [want_a, want_b]
    assert h.error is None


def test_the_hashing_thread_only_where_the_step_leaves_a_core(monkeypatch):
    """By default (``async_hash`` None) the thread starts only when torch's intra-op threads
    leave a CPU free (or a GPU step's CPU waits): with none free it would only add GIL
    hand-offs to the step's wall clock."""
    monkeypatch.setattr(R.Recorder, "async_hash", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 10**6)
    assert R._core_free() is False
    rec = R.Recorder(steps=1, digest="sha256").start()
    rec.stop()
    assert rec.hasher is None and not any(
        t.name == "tapescope-hash" and t.is_alive() for t in threading.enumerate())
    if len(os.sched_getaffinity(0)) > 1:
        monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
        assert R._core_free() is True
        rec = R.Recorder(steps=1, digest="sha256").start()
        try:
            assert rec.hasher is not None and rec.hasher.thread.is_alive()
        finally:
            rec.stop()
        assert rec.hasher is None  # joined and dropped at stop
        rec = R.Recorder(steps=1).start()  # XXH3 (the default): inline, a core free or not
        rec.stop()
        assert rec.hasher is None


def test_a_queued_value_outlives_its_tensor_swapping_storage(monkeypatch):
    """Hashes only: a queued view of an op's output keeps that output's storage alive (an
    alias of its own) when ``t.data = ...`` (no aten op, nothing protected) swaps the tensor's
    storage away and the last other reference goes: the digest is of the value as made."""
    monkeypatch.setattr(R.Recorder, "async_hash", True)
    monkeypatch.setattr(R, "_ASYNC_MIN", 1 << 12)
    rec = R.Recorder(steps=1, hashes_only=True).start()
    try:
        with rec.hasher.cv:  # hold the thread off while the swap happens
            y = torch.arange(1 << 14, dtype=torch.float32) * 2.0  # queued, not hashed yet
            want = xxhash.xxh3_128_hexdigest(y.numpy().tobytes())
            y.data = torch.zeros(3)  # the old storage's last tensor reference is gone
            del y
            for _ in range(4):  # reuse the freed memory, if it was freed
                torch.full((1 << 14,), -1.0).add_(1.0)
    finally:
        rec.stop()
    assert want in rec.v_sha


def _transposing_step() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(48, 80, generator=g, requires_grad=True)
    x = torch.randn(6, 48, 5, generator=g)
    wt = w.t()  # a transpose: not C-contiguous
    xp = x.permute(2, 0, 1)  # a permute
    y = (xp @ w).relu()
    y.sum().backward()
    return wt.detach().clone(), xp.clone(), y.detach()


@pytest.mark.parametrize("hashes_only", [True, False])
def test_a_transposed_value_is_hashed_and_stored_in_c_order(hashes_only, monkeypatch):
    """A value that is not C-contiguous (``t``, ``permute``) is copied to C order by torch
    (``_c_order``) for its digest and its stored bytes: the same as numpy's C-order copy; and a
    dispatch mode of the script's own, entered before the recorder, sees the same ops as with
    numpy's copy (torch's copy is no one's op)."""
    from tests.helpers.op_log_mode import recorded_under_log

    def record() -> tuple[R.Recorder, tuple, list[str]]:
        return recorded_under_log(_transposing_step, steps=1, hashes_only=hashes_only)

    monkeypatch.setattr(R.Recorder, "async_hash", False)
    # (hashes only, these views are derived values: test_capture_derived.py; here, the copy)
    monkeypatch.setattr(R.Recorder, "derive_views", False)
    want = _transposing_step()
    rec, got, seen = record()
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    numpy_copy = lambda t, a: np.array(a, order="C")  # noqa: E731 — the plain form
    with monkeypatch.context() as m:
        m.setattr(R, "_c_order", numpy_copy)
        ref, _, ref_seen = record()
    assert seen == ref_seen
    assert rec.v_sha == ref.v_sha
    names = {i: n for n, i in rec.tables["names"].items()}
    outs: dict[str, int] = {}  # each op's first (forward) call; backward transposes again
    for i, op in enumerate(rec.o_op):
        if names[op] in ("aten.t.default", "aten.permute.default"):
            outs.setdefault(names[op], rec.o_outputs[i][0])
    assert set(outs) == {"aten.t.default", "aten.permute.default"}
    for name, value in zip(("aten.t.default", "aten.permute.default"), want[:2], strict=True):
        v = outs[name]
        c_bytes = np.ascontiguousarray(value.numpy()).tobytes()
        assert rec.v_sha[v] == xxhash.xxh3_128_hexdigest(c_bytes), name
        if not hashes_only:
            assert rec.v_array[v].flags.c_contiguous and rec.v_array[v].tobytes() == c_bytes
            assert not rec.v_array[v].flags.writeable


def test_c_order_is_a_private_copy_by_torch():
    w = torch.arange(12.0).reshape(3, 4)
    t = w.t()
    c = R._c_order(t, t.numpy())
    assert c.flags.c_contiguous and c.tobytes() == np.ascontiguousarray(t.numpy()).tobytes()
    assert not np.shares_memory(c, w.numpy())
    w.add_(1.0)  # the script writes on: the copy keeps the value as it was
    assert c[0, 1] == 4.0
