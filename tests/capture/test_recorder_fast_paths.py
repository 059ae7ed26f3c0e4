"""The recorder's per-op shortcuts (app/capture/recorder.py: the value bookkeeping keyed by
identity and version, the same-bytes views, the C-order copies by numpy, by torch and by the
native transpose, the digests of a tensor's own memory) record what a plain reference records:
a dispatch mode of a few lines here, entered inside the recorder, which digests every tensor an
op reads (before it runs it through the recorder) and writes or returns (after), each as
``tensor.contiguous()``'s bytes. Run on the zoo GPT
(tests/capture/zoo/gpt.py, two AdamW steps with clip_grad_norm_) at its own size (small values:
numpy's copies) and wider (the native transpose), values and hashes only, each op's inputs and
outputs are the reference's, digest for digest; the script's losses are the same bits."""

from __future__ import annotations

import importlib.util
import weakref
from pathlib import Path

import pytest
import xxhash

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core.capture.file import (  # noqa: E402
    OVERWRITE_OPS,
    UNINITIALISED_OPS,
    uninitialised_digest,
)
from tests.helpers.op_log_mode import OpLog, recorded_under_log  # noqa: E402

ZOO = Path(__file__).resolve().parent / "zoo"


def _gpt_steps(d: int, steps: int = 2) -> callable:
    spec = importlib.util.spec_from_file_location("zoo_gpt_fast_paths", ZOO / "gpt.py")
    z = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(z)

    def run() -> list[float]:
        torch.manual_seed(0)
        model = z.GPT(vocab=32, d=d, heads=2, layers=2, ctx=8)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
        g = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(steps):
            idx = torch.randint(0, 32, (4, 8), generator=g)
            loss = model(idx, torch.roll(idx, -1, dims=1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
        return losses
    return run


def _flat(x: object) -> list:
    """The leaves of ``x`` (lists, tuples and dicts' values, in order); a recorded tensor
    argument (``{"T": value}``) is a leaf."""
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    if isinstance(x, dict) and "T" not in x:
        return [t for v in x.values() for t in _flat(v)]
    return [x]


def _digest(t: torch.Tensor) -> tuple[str, tuple, str]:
    with torch._C._DisableTorchDispatch():  # the reference's own ops: no mode sees them
        c = t.detach().contiguous()
        raw = c.numpy().tobytes()  # (``numpy()`` runs ops too: ``detach``, ``to`` ...)
    return str(c.dtype).removeprefix("torch."), tuple(c.shape), xxhash.xxh3_128_hexdigest(raw)


class _Reference(TorchDispatchMode):
    """Per op: the digests of its tensor arguments before it runs, and of the tensors it
    writes (its schema's written arguments) or returns, after."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, list, set]] = []
        self.known: dict[int, weakref.ref] = {}  # every tensor an op read or made, by id

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if str(func).startswith("profiler."):  # the optimizer's record_function: not an op
            return func(*args, **kwargs)
        tensors = [a for a in _flat([list(args), kwargs]) if isinstance(a, torch.Tensor)]
        ins = [_digest(t) for t in tensors]
        if str(func).split(".")[1] in OVERWRITE_OPS and tensors and tensors[0] is args[0] \
                and not self._known(args[0]):  # overwritten unread, first met: not recorded
            d, sh, _ = ins[0]
            ins[0] = (d, sh, uninitialised_digest("xxh3_128", d, sh))
        out = func(*args, **kwargs)
        for t in tensors + [t for t in _flat([out]) if isinstance(t, torch.Tensor)]:
            self.known[id(t)] = weakref.ref(t)
        written = [a for i, s in enumerate(func._schema.arguments)
                   if s.alias_info is not None and s.alias_info.is_write
                   for a in _flat([args[i] if i < len(args) else kwargs.get(s.name)])]
        outs = {_digest(t) for t in written + _flat([out]) if isinstance(t, torch.Tensor)}
        if str(func).split(".")[1] in UNINITIALISED_OPS:  # its bytes are never recorded
            outs = {(d, s, uninitialised_digest("xxh3_128", d, s)) for d, s, _ in outs}
        self.rows.append((str(func), ins, outs))
        return out

    def _known(self, t: torch.Tensor) -> bool:
        r = self.known.get(id(t))
        return r is not None and r() is t


@pytest.mark.parametrize("d", [16, 64])  # 64: the weights' transposes take the native copy
@pytest.mark.parametrize("hashes_only", [True, False])
def test_every_value_is_the_references(d, hashes_only, monkeypatch):
    monkeypatch.setattr(R.Recorder, "async_hash", False)
    # (hashes only, a rearranging view's output is derived, not hashed: its digest is a
    # sentinel, checked against the stored values by test_capture_derived.py; here, the copy)
    monkeypatch.setattr(R.Recorder, "derive_views", False)
    run = _gpt_steps(d)
    plain = run()
    # the reference sees each op first and runs it through the recorder: both see the same
    # memory (``empty``'s bytes too)
    rec = R.Recorder(steps=2, hashes_only=hashes_only).start()
    try:
        with _Reference() as ref:
            losses = run()
    finally:
        rec.stop()
    assert losses == plain  # the script's own results: the same bits
    names = {i: n for n, i in rec.tables["names"].items()}
    # the recorder ends at the last step's optimizer step: the loss's ``item()`` is after it
    assert [r[0] for r in ref.rows[len(rec.rows):]] == ["aten._local_scalar_dense.default"]
    assert [names[r[0]] for r in rec.rows] == [r[0] for r in ref.rows[:len(rec.rows)]]

    def value(v: int) -> tuple[str, tuple, str]:
        return rec.v_dtype[v], tuple(rec.v_shape[v]), rec.v_sha[v]

    for i, (row, (name, ins, outs)) in enumerate(zip(rec.rows, ref.rows, strict=False)):
        got_ins = [value(a["T"]) for a in _flat([list(row[5]), row[6]])
                   if isinstance(a, dict) and "T" in a]
        assert got_ins == ins, (i, name)
        assert {value(v) for v in row[7]} == outs, (i, name)
    if not hashes_only:  # each stored array: its value's bytes in C order
        stored = [v for v, a in enumerate(rec.v_array) if a is not None]
        uninit = {v for r in rec.rows if names[r[0]].split(".")[1] in UNINITIALISED_OPS
                  for v in r[7]}  # (``empty``'s outputs: never recorded)
        unread = {r[5][0]["T"] for r in rec.rows if names[r[0]].split(".")[1] in OVERWRITE_OPS
                  and rec.v_sha[r[5][0]["T"]] == uninitialised_digest(
                      "xxh3_128", rec.v_dtype[r[5][0]["T"]], tuple(rec.v_shape[r[5][0]["T"]]))}
        uninit |= unread  # (first met overwritten unread: never recorded either)
        assert uninit and set(stored) == set(range(len(rec.v_array))) - uninit
        for v in stored:
            a = rec.v_array[v]
            assert a.flags.c_contiguous and not a.flags.writeable
            assert xxhash.xxh3_128_hexdigest(a.tobytes()) == rec.v_sha[v]


@pytest.mark.parametrize("hashes_only", [True, False])
def test_a_mode_of_the_scripts_own_sees_its_ops_only(hashes_only, monkeypatch):
    """A dispatch mode the script entered before the capture sees the ops it sees without
    one: none of the recorder's reads (``numpy()`` runs ``detach``, ``to``, ``resolve_conj``
    and ``resolve_neg`` through the dispatcher; a C-order copy by torch)."""
    monkeypatch.setattr(R.Recorder, "async_hash", False)
    monkeypatch.setattr(R, "_NUMPY_COPY_MAX", 0)  # every C-order copy by torch's or native
    run = _gpt_steps(64)
    with OpLog() as plain:
        plain_losses = run()
    rec, losses, seen = recorded_under_log(run, steps=2, hashes_only=hashes_only)
    assert losses == plain_losses
    assert rec.failed is None and rec.steps_done() == 2
    assert seen == plain.ops


def test_dynamo_never_sees_the_recorders_frames():
    """``Recorder.__torch_dispatch__`` is not torch's ``_disable_dynamo`` wrapper (two frames
    and four callback swaps an op) but turns dynamo's frame callback off itself, its own code
    marked for dynamo to skip: a compiled function whose eager part (after a graph break, a
    data-dependent branch) runs ops under dynamo's callback converts the same frames with the
    recorder on as without it, and gives the same bits."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    assert not hasattr(R.Recorder.__dict__["__torch_dispatch__"], "__wrapped__")

    def f(x, w):
        y = x @ w
        torch._dynamo.graph_break()
        z = y.relu() * 2
        if z.sum().item() > 0:  # the resumed frame runs this op eagerly, under the callback
            z = z + 1
        return z.sum()

    def run(recorded: bool) -> tuple[dict, list, R.Recorder | None]:
        torch._dynamo.reset()
        counters.clear()
        g = torch.Generator().manual_seed(0)
        w = torch.randn(8, 8, generator=g, requires_grad=True)
        x = torch.randn(4, 8, generator=g)
        cf = torch.compile(f, backend="aot_eager")
        rec = R.Recorder(steps=10).start() if recorded else None
        try:
            got = []
            for _ in range(2):
                loss = cf(x, w)
                loss.backward()
                got.append((loss.item(), w.grad.clone()))
        finally:
            if rec is not None:
                rec.stop()
        return dict(counters["frames"]), got, rec

    run(False)  # a process's first compile converts frames of its own (lazy set-ups)
    plain_frames, plain, _ = run(False)
    frames, got, rec = run(True)
    assert frames == plain_frames and plain_frames["total"] >= 3
    assert [v for v, _ in got] == [v for v, _ in plain]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, plain, strict=True))
    assert rec.failed is None and len(rec.rows) > 10
    assert torch._C._dynamo.eval_frame.get_eval_frame_callback() is None
