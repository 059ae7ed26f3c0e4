"""The recorder's per-op path in C (app/capture/recorder_hot.c) at the edges where a bug would
show: the size budget (a value of exactly the budget stored, one byte over hashed, a budget of
0, the total crossing it between two outputs of one op), the source line (nested functions, a
lambda, a module's forward, with-blocks, torch's own Python frames, a thread whose first frame
is the user's, one with no user frame at all), views and in-place writes, ``out=``, tuple, list
and None returns, one tensor given twice, 0-d, empty and transposed tensors, five dtypes, every
kind of kwarg, and an op that fails.

Each step runs its body twice in one recording (an op met the first time is the Python's,
which learns its facts: the second pass is the C path's) and is recorded three ways:
  - on the C path and on the Python path: the two files hold the same bytes and the same header,
    key order included (the kwargs' order);
  - the C path recorded the rows that matter itself: a row the Python never appended
    (``_Rows``), as many as ``Recorder.ops_native`` counts;
  - a witness (``_Witness``, a plain dispatch mode over an unrecorded run of the same step)
    writes down each op's name, its source line (the first frame in this file), its inputs' and
    outputs' digests (each tensor's C-order bytes) and its non-tensor arguments; the file must
    say the same, so that a bug the two paths share fails as well.
The budget's cases are also held to a model of the budget (``_budget_model``: what is stored and
what hashed), the source lines to the lines marked ``# @name`` here. Small steps, in-process:
the file's CPU is mostly torch's import and the C path's build (cached).

Mutation check (session 20): 26 bugs planted one at a time in a copy of recorder_hot.c (the
budget's ``>`` as ``>=`` in the value's and the same-bytes view's test, the walk's end index and
its oldest frame, a written tensor's next version, a view's offset and dtype, the kwargs' order
and a None kwarg, a tuple's or a list's last output, a view's key at its base's version, a
derived view's strides, the C-order gather's merge, item loops and carry, a backward's module,
the phase, recording stopped by the user's error), each built and run against this file: every
one fails it, and still does with the two paths' comparison taken out (the witness and the
fields checked here alone)."""

from __future__ import annotations

import _thread
import contextlib
import json
import re
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core.capture.file import (  # noqa: E402
    DIGESTS,
    OVERWRITE_OPS,
    UNINITIALISED_OPS,
    Capture,
    derived_digest,
    load,
    uninitialised_digest,
)

HERE = str(Path(__file__).resolve())
_HEX = DIGESTS["xxh3_128"][1]
# the lines marked ``# @name`` in this file
LINE = {m.group(1): i for i, text in enumerate(Path(HERE).read_text().splitlines(), 1)
        for m in [re.search(r"# @(\w+)$", text)] if m}


# ---- the three recordings ------------------------------------------------------------------
class _Rows(list):
    """The recorder's rows, noting those the Python appended: the C path appends with the
    list's own C call, past this method, so the rest are the C path's own."""

    def __init__(self) -> None:
        super().__init__()
        self.py: set[int] = set()

    def append(self, row: Any) -> None:
        self.py.add(len(self))
        super().append(row)


def _digest(t: torch.Tensor) -> str:
    """The digest of ``t``'s bytes in C order (what the file says of a value)."""
    with torch._C._DisableTorchDispatch():  # the witness's own ops: no mode sees them
        return _HEX(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


_tensors = R._tensors  # (a tensor, or lists/tuples of them, flattened in order)


def _plain(x: Any) -> Any:
    """A non-tensor argument as the file writes it (a tensor: ``"T"``), by this test's rule."""
    if isinstance(x, torch.Tensor):
        return "T"
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float) and x - x != 0:
        return {"f": str(x)}
    if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(x)
    return x


def _line(f: Any) -> str | None:
    """The first frame from ``f`` up that is this file's, as ``file:line``; None: none is."""
    while f is not None:
        if f.f_code.co_filename == HERE:
            return f"{HERE}:{f.f_lineno}"
        f = f.f_back
    return None


class _Witness(TorchDispatchMode):
    """Each op of an unrecorded run: its name, source line, the digests of the tensors it reads
    (arguments, then kwargs) before it runs and of those it writes (its schema's written
    arguments) then returns (of an op that writes, its fresh returns) after, and its arguments'
    and kwargs' plain form. An op that raises is no op (the recorder keeps no row of it)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = str(func)
        base = name.split(".")[1]
        ins = [_digest(t) for t in _tensors(list(args)) + _tensors(list(kwargs.values()))]
        source = _line(sys._getframe(1))
        out = func(*args, **kwargs)
        schema = func._schema
        writes = [a for i, s in enumerate(schema.arguments)
                  if s.alias_info is not None and s.alias_info.is_write
                  for a in _tensors(args[i] if i < len(args) and not s.kwarg_only
                                    else kwargs.get(s.name))]
        if writes:
            fresh = [r.alias_info is None for r in schema.returns]
            rets = out if isinstance(out, (tuple, list)) and len(fresh) > 1 else (out,)
            made = writes + [t for f, v in zip(fresh, rets, strict=False) if f
                             for t in _tensors(v)]
        else:
            made = _tensors(out)
        outs = [uninitialised_digest("xxh3_128", str(t.dtype).removeprefix("torch."),
                                     tuple(t.shape)) if base in UNINITIALISED_OPS
                else _digest(t) for t in made]
        self.ops.append({"name": name, "source": source, "ins": ins, "outs": outs,
                         "args": _plain(list(args)),
                         "kwargs": [[k, _plain(v)] for k, v in kwargs.items()]})
        return out


class _Session:
    """One recording (``native``: the C path on, or off) or the witness (``native`` None) of
    ``make()``'s step; ``begin`` and ``end`` around it (``end``: an optimizer step, which ends
    the recorder's step and writes its file)."""

    def __init__(self, make: Callable, native: bool | None, path: Path, **recorder: Any) -> None:
        self.step = make()
        self.native, self.path, self.recorder = native, path, recorder
        self.opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # (no grad)
        self.result: Any = None
        self.error: BaseException | None = None  # (a thread's step: its failure)
        self.done: Any = None
        self.rec: R.Recorder | None = None
        self.witness: _Witness | None = None

    def begin(self) -> None:
        if self.native is None:
            self.witness = _Witness()
            self.witness.__enter__()
            return
        spool = self.recorder.pop("spool", True)
        R.Recorder.native = self.native
        try:
            self.rec = R.Recorder(steps=1, spool=self.path if spool else None,
                                  on_done=lambda r: r.save(str(self.path)), **self.recorder)
            self.rec.rows = _Rows()
            self.rec.start()
        finally:
            R.Recorder.native = True

    def end(self) -> None:
        if self.witness is not None:
            self.witness.__exit__(None, None, None)
            return
        self.opt.step()  # (the recorder's step ends: it stops and writes the file)
        self.rec.stop()
        assert self.rec.done and self.rec.error is None and self.rec.failed is None


def _file(path: Path) -> tuple[bytes, str]:
    """A capture file's bytes before its header, and its header as text in its own key order,
    without the recording's seconds (the one field that differs between two runs)."""
    b = path.read_bytes()
    _, off, n, _ = struct.unpack("<8sQQ32s", b[-56:])
    header = json.loads(b[off:off + n])
    header["meta"].pop("record_seconds")
    return b[:off], json.dumps(header)


def _rows(cap: Capture) -> list[dict]:
    o = cap.ops
    return [{"name": o["op"][i], "source": o["source"][i] or None, "module": o["module"][i],
             "phase": o["phase"][i], "args": o["args"][i], "kwargs": o["kwargs"][i],
             "outs": o["outputs"][i]} for i in range(cap.n_ops)]


def _vids(x: Any) -> list[int]:
    if isinstance(x, dict):
        return [x["T"]] if "T" in x else [v for y in x.values() for v in _vids(y)]
    if isinstance(x, list):
        return [v for y in x for v in _vids(y)]
    return []


def _shape(x: Any) -> Any:
    """A recorded argument with each tensor as ``"T"`` (the witness's plain form)."""
    if isinstance(x, dict):
        return "T" if "T" in x else {k: _shape(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_shape(v) for v in x]
    return x


class _Recorded:
    """The C path's and the Python path's recordings of one step, checked against each other
    and against the witness: ``cap`` the C path's capture, ``rows`` its ops, ``result`` what
    the step returned on the C path (and on the others: the same)."""

    def __init__(self, make: Callable, tmp: Path, thread: bool = False, **recorder: Any
                 ) -> None:
        runs = {}
        for native in (True, False, None):
            s = _Session(make, native, tmp / f"{native}.capture", **dict(recorder))
            if thread:
                _in_thread(s)
            else:
                s.begin()
                try:
                    s.result = s.step()
                finally:
                    s.end()
            runs[native] = s
        on, off, wit = runs[True], runs[False], runs[None]
        self.result = on.result
        assert on.result == off.result == wit.result  # (the step's own results, the same)
        assert _file(on.path) == _file(off.path)  # every value, digest, row, source, module
        assert off.rec.ops_native == 0 and off.rec.rows.py == set(range(len(off.rec.rows)))
        # the rows the C path recorded itself
        self.native = set(range(len(on.rec.rows))) - on.rec.rows.py
        assert len(self.native) == on.rec.ops_native > 0
        self.cap = load(on.path)
        self.rows = _rows(self.cap)
        self._witnessed(wit.witness.ops)

    def _witnessed(self, ops: list[dict]) -> None:
        cap, rows = self.cap, self.rows
        assert [r["name"] for r in rows] == [w["name"] for w in ops]
        for i, (r, w) in enumerate(zip(rows, ops, strict=True)):
            where = (i, r["name"])
            assert r["source"] == w["source"], where
            assert _shape(r["args"]) == w["args"], where
            assert [[k, _shape(v)] for k, v in r["kwargs"].items()] == w["kwargs"], where
            vids = _vids(r["args"]) + _vids(r["kwargs"])
            ins = [cap.digests[v] for v in vids]
            if r["name"].split(".")[1] in OVERWRITE_OPS and ins and ins[0] == \
                    uninitialised_digest("xxh3_128", cap.dtypes[vids[0]], cap.shapes[vids[0]]):
                ins[0] = w["ins"][0]  # (its first argument first met there, overwritten)
            assert ins == w["ins"], where
            assert len(r["outs"]) == len(w["outs"]), where
            assert [self._bytes_digest(v, d) for v, d in zip(r["outs"], w["outs"], strict=True)
                    ] == w["outs"], where

    def _bytes_digest(self, v: int, want: str) -> str:
        """Value ``v``'s digest, or of a derived value (whose digest is a sentinel of its
        source's and its geometry, checked), the digest of its bytes where its source is
        stored (``want`` where it is hashed only: its bytes are nowhere)."""
        cap = self.cap
        if v not in cap.derived:
            return cap.digests[v]
        src, strides = cap.derived[v], cap.derived_strides[v]
        assert cap.digests[v] == derived_digest("xxh3_128", cap.digests[src], cap.dtypes[v],
                                                cap.shapes[v], strides)
        a = cap.arrays[src]
        if a is None:
            return want
        a = a.reshape(-1)
        return _HEX(np.ascontiguousarray(np.lib.stride_tricks.as_strided(
            a, cap.shapes[v], [st * a.itemsize for st in strides])).tobytes())

    def c_rows(self, start: int = 0) -> list[str]:
        """The names of the ops from row ``start`` on that the C path recorded itself."""
        return [r["name"] for i, r in enumerate(self.rows) if i >= start and i in self.native]

    def half(self) -> int:
        """The first row of the step's second pass (its body runs twice: the same ops)."""
        n = len(self.rows)
        assert n % 2 == 0 and [r["name"] for r in self.rows[:n // 2]] == \
            [r["name"] for r in self.rows[n // 2:]]
        return n // 2


def _in_thread(s: _Session) -> None:
    """``s.step(s)`` as the first frame of a new thread (``_thread``: nothing of Python's below
    it); it begins and ends its recorder or witness there (a dispatch mode is a thread's own),
    and releases ``s.done``."""
    s.done = _thread.allocate_lock()
    s.done.acquire()
    _thread.start_new_thread(s.step, (s,))
    assert s.done.acquire(timeout=120), "the step's thread did not end"
    if s.error is not None:
        raise s.error


# ---- the budget ----------------------------------------------------------------------------
# the values of ``_budget_step``'s second pass, in the order they are made: (name, bytes, the
# value whose bytes it names (a view of the same bytes: stored only where that one is))
_BUDGET_VALUES = [("x", 16, None), ("y", 16, None), ("v", 16, "y"), ("s", 16, None),
                  ("i", 32, None), ("a", 16384, None), ("big", 16384, "a"), ("bt", 16384, "a")]


def _budget_model(budget: int, hashes_only: bool) -> tuple[dict[str, bool], int]:
    """Which of ``_BUDGET_VALUES`` are stored (else hashed), and the stored bytes: a value is
    stored while the running total with it is at most the budget (its first pass's values are
    empty: 0 bytes, stored); a value of another's bytes is stored where that one is, and costs
    nothing (the file holds them once)."""
    total, stored = 0, {}
    for name, n, like in _BUDGET_VALUES:
        if like is not None:
            stored[name] = stored[like]
            continue
        stored[name] = not hashes_only and total + n <= budget
        total += n * stored[name]
    return stored, total


def _budget_step() -> Callable:
    def body() -> None:
        for n in (0, 4):  # (the first pass's values empty: the ops met, no byte spent)
            x = torch.arange(float(n))
            y = x.add(1.)
            y.view(n // 2, 2)  # the same bytes as y
            y.sort(descending=True)  # two outputs: the total may pass the budget between them
            big = torch.arange(float(n * n * 256)).view(n * 16, n * 16)  # 16 KiB, its view
            big.t()  # a view rearranging big: derived where it would be hashed
    return body


@pytest.mark.parametrize(("budget", "hashes_only", "spool"), [
    (0, False, True), (31, False, True), (32, False, True), (33, False, True),
    (48, False, True), (64, False, True), (96, False, True), (16463, False, True),
    (16464, False, True), (1 << 30, True, True),
    (32, False, False), (48, False, False), (64, False, False)])
def test_the_budget_stores_a_value_up_to_it_exactly(hot, tmp_path, budget, hashes_only, spool):
    """32: y ends exactly at the budget (stored), 31 one byte short (hashed), 33 one over
    (stored), y's view of the same bytes stored with it at no charge; 48: sort's values
    exactly at it; 64: sort's values in, its indices out (the total passes the budget between
    one op's outputs); 16464: ``a`` exactly at it, one less and it is hashed; its view and
    the transpose (derived: ``a``'s bytes laid out by strides, whether stored or not) stored
    with it at no charge; 0: nothing of a byte or more stored. With the spool (the file
    written as values are) and without (arrays held in memory)."""
    got = _Recorded(_budget_step, tmp_path, max_bytes=budget, hashes_only=hashes_only,
                    spool=spool)
    h = got.half()
    rows = got.rows[h:]
    assert [r["name"] for r in rows] == [
        "aten.arange.default", "aten.add.Tensor", "aten.view.default", "aten.sort.default",
        "aten.arange.default", "aten.view.default", "aten.t.default"]
    assert got.c_rows(h) == [r["name"] for r in rows]  # every op of the pass the C path's
    vid = dict(zip([n for n, _, _ in _BUDGET_VALUES], [v for r in rows for v in r["outs"]],
                   strict=True))
    want, total = _budget_model(budget, hashes_only)
    assert {n: got.cap.arrays[v] is not None for n, v in vid.items()} == want
    assert got.cap.meta["stored_bytes"] == total
    assert got.cap.derived.get(vid["bt"]) == vid["big"]


# ---- the source line -----------------------------------------------------------------------
class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)  # @block_lin
        return torch.nn.functional.softmax(h, dim=-1)  # @block_softmax


class _Penalty(torch.nn.Module):
    """A forward that runs a backward inside itself (a gradient penalty's): its ops after it
    are still the forward's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (g,) = torch.autograd.grad(x.pow(2).sum(), x)  # @penalty_grad
        return g.mul(2.)  # @penalty_after


def _inner(x: torch.Tensor) -> torch.Tensor:
    return x.mul(3.)  # @inner


def _outer(x: torch.Tensor) -> torch.Tensor:
    return _inner(x).add(1.)  # @outer


def _call(fn: Callable, x: torch.Tensor) -> torch.Tensor:
    return fn(x)


@contextlib.contextmanager
def _scope() -> Any:
    yield


def _source_step() -> Callable:
    torch.manual_seed(0)
    block, penalty = _Block(), _Penalty()

    def body() -> None:
        for _ in range(2):
            block.zero_grad(set_to_none=True)  # (no op: both passes the same ops)
            x = torch.arange(6.).reshape(2, 3)  # @top
            y = _outer(x)
            z = _call(lambda t: t.neg(), y)  # @lambda
            with torch.no_grad():
                w = z.sub(1.)  # @with_no_grad
            with _scope():
                u = w.div(2.)  # @with_user
            loss = block(u).sum()  # @loss
            loss.backward()  # @backward
            penalty(x.requires_grad_())
    return body


def test_the_source_is_the_line_that_issued_the_op(hot, tmp_path):
    """A nested function's line (not its caller's), a lambda's, a with-block's, a module's
    forward's (nn.Linear's and F.softmax's own frames skipped: the line that called them), the
    backward's ops at ``loss.backward()``; each op's module and phase (a backward inside a
    module's forward, then the forward again)."""
    got = _Recorded(_source_step, tmp_path)
    h = got.half()
    lin, soft = "_Block.lin", "_Block"
    want = [("aten.arange.default", "top", ""), ("aten.view.default", "top", ""),
            ("aten.mul.Tensor", "inner", ""), ("aten.add.Tensor", "outer", ""),
            ("aten.neg.default", "lambda", ""), ("aten.sub.Tensor", "with_no_grad", ""),
            ("aten.div.Tensor", "with_user", ""), ("aten.t.default", "block_lin", lin),
            ("aten.addmm.default", "block_lin", lin),
            ("aten._softmax.default", "block_softmax", soft),
            ("aten.detach.default", "block_softmax", soft), ("aten.sum.default", "loss", ""),
            ("aten.ones_like.default", "backward", ""), ("aten.expand.default", "backward", ""),
            ("aten.detach.default", "backward", soft),
            ("aten._softmax_backward_data.default", "backward", soft),
            ("aten.t.default", "backward", lin), ("aten.mm.default", "backward", lin),
            ("aten.t.default", "backward", lin), ("aten.sum.dim_IntList", "backward", lin),
            ("aten.view.default", "backward", lin), ("aten.detach.default", "backward", lin),
            ("aten.t.default", "backward", lin), ("aten.detach.default", "backward", lin),
            ("aten.pow.Tensor_Scalar", "penalty_grad", "_Penalty"),
            ("aten.sum.default", "penalty_grad", "_Penalty"),
            ("aten.ones_like.default", "penalty_grad", "_Penalty"),
            # (the penalty's own backward: its nodes were made in _Penalty's forward, so its
            # ops are _Penalty's, though they run before that forward has ended)
            ("aten.expand.default", "penalty_grad", "_Penalty"),
            ("aten.pow.Tensor_Scalar", "penalty_grad", "_Penalty"),
            ("aten.mul.Scalar", "penalty_grad", "_Penalty"),
            ("aten.mul.Tensor", "penalty_grad", "_Penalty"),
            ("aten.mul.Tensor", "penalty_after", "_Penalty")]
    assert [(r["name"], r["source"], r["module"]) for r in got.rows[h:]] == [
        (n, f"{HERE}:{LINE[m]}", mod) for n, m, mod in want]
    # the phases: the backward's, and the forward's after a backward inside a module's forward
    assert [r["phase"] for r in got.rows[h:]][-9:] == [
        "backward", "forward", "forward", "forward", "backward", "backward", "backward",
        "backward", "forward"]
    assert got.c_rows(h)[:12] == [n for n, _, _ in want[:12]]  # the forward's on the C path
    assert "aten._softmax_backward_data.default" in got.c_rows(h)  # and a backward's


def _thread_body(s: _Session) -> None:
    """A step that is a thread's first frame (``_in_thread``): the walk from its ops ends at
    this frame."""
    try:
        s.begin()
        try:
            for _ in range(2):
                x = torch.arange(4.)  # @first_frame
                s.result = float(x.mul(2.).sum())  # @first_frame_mul
        finally:
            s.end()
    except BaseException as e:  # noqa: BLE001 — the test's thread raises it
        s.error = e
    finally:
        s.done.release()


# the same step compiled as no one's file (a name in angle brackets: ``<string>``'s kind, which
# the recorder skips): its thread has no user frame at all
_nobodys_body = type(_thread_body)(_thread_body.__code__.replace(co_filename="<no one's>"),
                                   globals())


@pytest.mark.parametrize("body", [_thread_body, _nobodys_body], ids=["user", "none"])
def test_the_walk_ends_at_the_oldest_frame(hot, tmp_path, body):
    """The user's frame is the oldest (the walk's last): its line; no user frame: -1."""
    got = _Recorded(lambda: body, tmp_path, thread=True)
    h = got.half()
    assert got.c_rows(h) == [r["name"] for r in got.rows[h:]]
    at = (lambda m: f"{HERE}:{LINE[m]}") if body is _thread_body else (lambda m: None)
    assert [(r["name"], r["source"]) for r in got.rows] == 2 * [
        ("aten.arange.default", at("first_frame")), ("aten.mul.Tensor", at("first_frame_mul")),
        ("aten.sum.default", at("first_frame_mul")),
        ("aten._local_scalar_dense.default", at("first_frame_mul"))]


# ---- views, in-place writes, returns, shapes and dtypes -------------------------------------
def _views_step() -> Callable:
    w = torch.ones(1, 1, 2, 2, requires_grad=True)
    img = torch.arange(18.).reshape(1, 1, 3, 6)

    def body() -> list[float]:
        got = []
        for _ in range(2):
            w.grad = None
            x = torch.arange(8.)
            v = x.view(2, 4)  # a view: the same bytes
            vv = v[1]  # a view of the view, at an offset
            vv.mul_(2.)  # in place on the view of a view ...
            b = x.add(0.)  # ... then its base read: the new value
            t = v.t()  # a transpose: a view, not contiguous
            tc = t.clone()  # not contiguous, no base (clone keeps the strides)
            r = tc.add(tc)  # one tensor given twice
            # not contiguous either (the C-order gather): items of 8, 2 and 1 bytes, 3-d with
            # no two dimensions to merge, overlapping windows (two strides alike), a stride of 0
            odd = [v.to(dt).t().clone() for dt in (torch.float64, torch.float16, torch.int8)]
            odd += [torch.arange(24.).view(2, 3, 4).permute(2, 1, 0).clone(), x.unfold(0, 2, 1),
                    x[:4].expand(3, 4)]
            mm = t.matmul(v)  # a transposed input
            buf = torch.zeros(2, 4)
            torch.add(v, 1., out=buf)  # written through a kwarg
            srt, idx = x.sort(descending=True)  # a tuple of two
            parts = x.split(3)  # a list of three views
            last = parts[2].add(1.)  # the list's last, read later
            torch._foreach_add_([buf, b], 1.)  # None returned, a list written
            half = x[:4]
            off = half.as_strided((4,), (1,), 4)  # half's size and dtype at another address
            iv = x.view(torch.int32)  # the same bytes as another dtype
            z = torch.tensor(2.5)
            zz = z.mul(z)  # 0-d
            e = torch.zeros(0).add(1.)  # empty
            i64 = torch.arange(5).add(2)
            bo = x.gt(3.).logical_not()
            bf = x.to(torch.bfloat16).mul(2.)
            f16 = x.to(torch.float16).mul(2.)
            stats = torch.zeros(2), torch.ones(2)  # written, and three tensors returned:
            bn = torch.ops.aten._native_batch_norm_legit(x.view(4, 2), None, None, *stats, True,
                                                         0.1, 1e-5)
            torch.nn.functional.conv2d(img, w).sum().backward()  # (None, grad, None) returned
            got.append([float(a.double().sum()) for a in (
                b, tc, r, mm, buf, srt, idx, last, off, iv, zz, e, i64, bo, bf, f16, w.grad, *bn,
                *stats, *odd)])
        return got
    return body


def test_views_in_place_writes_returns_and_dtypes_record_the_same(hot, tmp_path):
    """(the witness holds every op's inputs and outputs to their bytes: a view at an offset, an
    in-place write through a view seen from its base, a stale key or a missed output of a
    tuple or a list all fail it)"""
    got = _Recorded(_views_step, tmp_path)
    h = got.half()
    names = [r["name"] for r in got.rows[h:]]
    for op in ("aten.select.int", "aten.mul_.Tensor", "aten.add.out", "aten.sort.default",
               "aten.split.Tensor", "aten._foreach_add_.Scalar", "aten.view.dtype",
               "aten.convolution_backward.default", "aten._to_copy.default",
               "aten.logical_not.default", "aten.mm.default",
               "aten._native_batch_norm_legit.default"):
        assert op in names and op in got.c_rows(h), op
    # ``as_strided`` reads its input's memory layout, which the Python path records
    # (tests/capture/test_capture_layouts.py): recorded, by the Python
    assert "aten.as_strided.default" in names
    assert "aten.as_strided.default" not in got.c_rows(h)
    rows = {r["name"]: r for r in got.rows[h:]}
    cap = got.cap
    assert [cap.layouts[i] for i, op in enumerate(cap.ops["op"])
            if op == "aten.as_strided.default"] == [((1,), 0), ((1,), 0)]
    # the recorded fields themselves: the outputs of ops that return tuples, lists, None
    assert len(rows["aten.sort.default"]["outs"]) == 2
    assert len(rows["aten.split.Tensor"]["outs"]) == 3
    assert len(rows["aten._foreach_add_.Scalar"]["outs"]) == 2
    assert len(rows["aten.convolution_backward.default"]["outs"]) == 1
    assert len(rows["aten._native_batch_norm_legit.default"]["outs"]) == 5
    # a tensor written (at version 0) and read next is read as the value written, not again
    assert rows["aten._foreach_add_.Scalar"]["args"][0][0] == {
        "T": rows["aten.add.out"]["outs"][0]}
    assert [cap.dtypes[rows[n]["outs"][0]] for n in ("aten.view.dtype", "aten.logical_not.default")
            ] == ["int32", "bool"]
    assert {cap.dtypes[r["outs"][0]] for r in got.rows[h:] if r["name"] == "aten.mul.Tensor"} \
        >= {"bfloat16", "float16", "float32"}


# ---- kwargs ----------------------------------------------------------------------------------
def _kwargs_step() -> Callable:
    def body() -> list[float]:
        got = []
        for _ in range(2):
            a = torch.zeros(2, 3, dtype=torch.float16, device="cpu", layout=torch.strided)
            b = torch.full((2, 3), 1.5, dtype=torch.float64, device=torch.device("cpu"))
            c = a.reshape(1, 2, 3, 1).contiguous(memory_format=torch.channels_last)
            d = b.sum(dim=[0, 1], keepdim=True, dtype=torch.float32)
            q = torch.div(b, 2., rounding_mode=None)
            f = torch.div(b, 3., rounding_mode="floor")
            g = b.to(dtype=torch.float32, copy=True)
            o = torch.ones_like(b, memory_format=torch.preserve_format)
            k = torch.clamp(b, min=None, max=float("inf"))
            p = torch.nn.functional.pad(b, [1, 2], value=-float("inf"))
            m = torch.add(b, o, alpha=2)
            n = torch.nn.functional.gelu(b, approximate="tanh")
            z = b.new_zeros((2,), dtype=torch.int64)
            got.append([float(t.double().sum()) for t in (c, d, q, f, g, k, p, m, n, z)])
        return got
    return body


def test_every_kind_of_kwarg_records_the_same(hot, tmp_path):
    """dtype, device (a string and a torch.device), layout, memory_format, None, a string, an
    int, infinities, lists of ints: each kwarg as the witness writes it, in its order."""
    got = _Recorded(_kwargs_step, tmp_path)
    h = got.half()
    rows = got.rows[h:]
    assert all(r["name"] in got.c_rows(h) for r in rows)
    kw = {r["name"]: r["kwargs"] for r in rows}
    assert list(kw["aten.zeros.default"].items()) == [
        ("dtype", "torch.float16"), ("layout", "torch.strided"), ("device", "cpu"),
        ("pin_memory", False)]
    assert kw["aten.clone.default"] == {"memory_format": "torch.channels_last"}
    assert kw["aten.sum.dim_IntList"] == {"dtype": "torch.float32"}
    assert [r["kwargs"] for r in rows if r["name"] == "aten.div.Tensor_mode"] == [
        {"rounding_mode": None}, {"rounding_mode": "floor"}]
    assert kw["aten.add.Tensor"] == {"alpha": 2}
    assert [r["args"][1:] for r in rows if r["name"] == "aten.clamp.default"] == [
        [None, {"f": "inf"}]]


# ---- a failure inside the op -----------------------------------------------------------------
def _failing_step() -> Callable:
    def body() -> list[tuple[str, str]]:
        errors = []
        for _ in range(2):
            x = torch.arange(6.).reshape(2, 3)
            try:
                x.matmul(torch.ones(4, 2))  # @fails
            except RuntimeError as e:
                errors.append((type(e).__name__, str(e)))
            x.mul(2.)  # (recorded on after it)
        return errors
    return body


def test_an_op_that_fails_raises_the_users_error_and_recording_goes_on(hot, tmp_path):
    """The op's own exception, unchanged (the witness's run is unrecorded: the same type and
    message), no row for it, the ops after it recorded (on the C path), nothing failed."""
    got = _Recorded(_failing_step, tmp_path)
    assert len(got.result) == 2 and "cannot be multiplied" in got.result[0][1]
    h = got.half()
    assert [r["name"] for r in got.rows[h:]] == [
        "aten.arange.default", "aten.view.default", "aten.ones.default", "aten.mul.Tensor"]
    assert got.c_rows(h) == ["aten.arange.default", "aten.view.default", "aten.ones.default",
                             "aten.mul.Tensor"]
