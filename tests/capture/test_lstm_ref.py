"""The reference of oneDNN's LSTM layer (``mkldnn_rnn_layer`` and its backward: what a float32
``nn.LSTM`` runs on the CPU): in float64 it is the LSTM's own arithmetic (held to autograd
through the cell's formulas to 1e-13, forwards and backwards, biases or none, reverse
steps); in float32 torch's outputs are its outputs to float32's precision, of the same
shapes and number (the bias gradients without biases too); ``--explain`` names oneDNN's
layer forward and backward (core.explain_onednn: bit for bit with torch's outputs and with the
gates its workspace keeps); the workspace is the kernel's own (the judge takes it as
recorded); hostile arguments are a NoReference naming the op."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import NoReference, reference  # noqa: E402

FWD, BWD = "aten.mkldnn_rnn_layer.default", "aten.mkldnn_rnn_layer_backward.default"


def _n(t):
    return t.detach().numpy()


def _lstm(T, B, I, H, dt, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dt, requires_grad=True)
            for s in ((T, B, I), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,), (B, H), (B, H))]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_float64_is_the_lstms_own_arithmetic_forwards_and_backwards(reverse, bias):
    T, B, I, H = 5, 3, 4, 6
    x, w0, w1, b0, b1, h0, c0 = _lstm(T, B, I, H, torch.float64, 7)
    # without biases oneDNN still gives their gradients (torch drops them): zero biases' own
    bb0, bb1 = (b0, b1) if bias else (torch.zeros(4 * H, dtype=torch.float64,
                                                  requires_grad=True) for _ in range(2))
    h, c, ys = h0, c0, [None] * T
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        i, f, gg, o = (x[t] @ w0.T + h @ w1.T + (bb0 + bb1)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h = torch.sigmoid(o) * torch.tanh(c)
        ys[t] = h
    y = torch.stack(ys)
    gy, ghy, gcy = torch.randn_like(y), torch.randn_like(h), torch.randn_like(c)
    torch.autograd.backward([y, h, c], [gy, ghy, gcy])
    args = [_n(v) for v in (x, w0, w1, b0, b1, h0, c0)]
    fwd = reference(FWD, args + [reverse, [], 2, H, 1, bias, False, True, True], {})
    assert len(fwd) == 3  # (the workspace: none of the reference's)
    for got, want in zip(fwd, (y, h, c), strict=True):
        np.testing.assert_allclose(got, _n(want), rtol=0, atol=1e-13)
    bwd = reference(BWD, args + fwd + [_n(gy), _n(ghy), _n(gcy), reverse, 2, H, 1, bias, True,
                                       False, [], True, np.zeros(8, np.uint8)], {})
    want = [x.grad, w0.grad, w1.grad, bb0.grad, bb1.grad, h0.grad, c0.grad]
    for j, (got, w) in enumerate(zip(bwd, want, strict=True)):
        np.testing.assert_allclose(got, _n(w), rtol=0, atol=1e-12, err_msg=str(j))


@pytest.mark.parametrize("bias", [True, False])
def test_float32_torch_is_the_reference_to_float32_precision(bias):
    T, B, I, H = 6, 4, 5, 8
    m = torch.nn.LSTM(I, H, bias=bias)
    calls = []
    from torch.utils._python_dispatch import TorchDispatchMode

    class Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if "mkldnn_rnn_layer" in str(func):
                calls.append((str(func), args, out))
            return out

    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(1))
    with Rec():
        y, _ = m(x)
        y.square().sum().backward()
    assert [c[0] for c in calls] == [FWD, BWD]
    from tapescope.core.capture.explain import explain_op
    from tapescope.core.capture.judge import _diff

    explained = 0
    for op, args, out in calls:
        a = [_n(v) if isinstance(v, torch.Tensor) else v for v in args]
        ref = reference(op, a, {})
        outs = [o for o in out if o is not None][: (3 if op == FWD else 7)]
        assert len(ref) == len(outs)
        for j, (r, o) in enumerate(zip(ref, outs, strict=True)):
            assert r.dtype == np.float32 and r.shape == tuple(o.shape)
            np.testing.assert_allclose(r, _n(o), rtol=1e-4, atol=1e-5)
            d = _diff(r, _n(o))
            if not d["n_diff"]:
                continue
            c = explain_op(op, a, {}, _n(o), d, j)  # oneDNN's, written out (explain_onednn)
            assert c["cause"] == "libm" and "oneDNN's LSTM layer" in c["variant"], (op, j, c)
            explained += 1
    assert explained  # (oneDNN's bits differ from the reference's on this CPU)


@pytest.mark.parametrize("bad", [
    lambda a: a[:5],  # too few
    lambda a: a[:9] + [1] + a[10:],  # mode 1: a GRU's, not an LSTM's
    lambda a: a[:8] + [[3, 2]] + a[9:],  # packed sequences
    lambda a: [a[0][0]] + a[1:],  # a 2-D input
    lambda a: a[:10] + [7] + a[11:],  # a hidden size the weights do not have
])
def test_hostile_arguments_are_a_no_reference_naming_the_op(bad):
    x, w0, w1, b0, b1, h0, c0 = (_n(v) for v in _lstm(3, 2, 4, 5, torch.float32, 0))
    a = [x, w0, w1, b0, b1, h0, c0, False, [], 2, 5, 1, True, False, True, True]
    with pytest.raises(NoReference, match="mkldnn_rnn_layer"):
        reference(FWD, bad(a), {})


def _recorder(op, calls: list):
    """A dispatch mode that keeps ``op``'s calls as numpy (args, outputs) in ``calls``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is op:
                calls.append(([_n(v) if isinstance(v, torch.Tensor) else v for v in args],
                              [None if v is None else _n(v) for v in out]))
            return out
    return Rec()


def _onednn_calls(I, H, T, B, bias, bidirectional, threads, seed=0):
    """torch's mkldnn_rnn_layer calls (args, outputs) of an ``nn.LSTM`` forward."""
    calls = []
    torch.manual_seed(seed)
    m = torch.nn.LSTM(I, H, bias=bias, bidirectional=bidirectional, batch_first=True)
    x = torch.randn(B, T, I, generator=torch.Generator().manual_seed(seed))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with _recorder(torch.ops.aten.mkldnn_rnn_layer.default, calls):
            m(x)
    finally:
        torch.set_num_threads(before)
    return calls


@pytest.mark.parametrize("I, H, T, B, bias, bidirectional, threads", [
    (12, 12, 8, 4, True, False, 1), (32, 64, 5, 8, True, True, 2), (20, 40, 6, 3, False, True, 2),
    (70, 130, 3, 2, True, False, 1)])
def test_onednns_lstm_forward_is_written_out_bit_for_bit(I, H, T, B, bias, bidirectional,
                                                          threads):
    """oneDNN's float32 LSTM layer (core.explain_onednn.lstm_layer_forward): every step's h,
    the last h and c bit for bit with torch's, forwards and reversed, biases or none, hidden
    sizes off the vector width, 1 and 2 threads; and --explain names it, one ulp off unknown.
    Planted: a tanh coefficient one ulp off, exp's polynomial without fma, or c's fma split
    into a product and a sum, fails it."""
    from tapescope.core.capture.explain import explain_op
    from tapescope.core.capture.judge import _diff
    from tapescope.core.explain_onednn import lstm_layer_forward

    calls = _onednn_calls(I, H, T, B, bias, bidirectional, threads)
    assert len(calls) == (2 if bidirectional else 1)
    for a, out in calls:
        steps = range(T - 1, -1, -1) if a[7] else range(T)
        got = lstm_layer_forward(a[0], a[1], a[2], (a[3], a[4]) if a[12] else None, a[5], a[6],
                                 steps, H)
        for g, o in zip(got, out[:3], strict=True):
            assert g.dtype == o.dtype and g.tobytes() == o.tobytes()
        ref = reference(FWD, a, {})
        for j in range(3):
            d = _diff(ref[j], out[j])
            if d["n_diff"]:
                c = explain_op(FWD, a, {}, out[j], d, j)
                assert c["cause"] == "libm" and "oneDNN's LSTM layer" in c["variant"], c
                nudged = out[j].copy()
                nudged.view(np.uint32).reshape(-1)[0] += 1
                assert explain_op(FWD, a, {}, nudged, d, j)["cause"] == "unknown"


def test_the_workspace_keeps_the_gates_written_out():
    """oneDNN keeps each step's activated gates (i, f, g, o) in the workspace: with a hidden
    size of whole vectors' rows they lie there as the written-out logistic and tanh make them,
    every step (so the activations are held apart from the cell's state)."""
    from tapescope.core.explain_onednn import onednn_logistic, onednn_tanh

    (a, out), = _onednn_calls(16, 16, 6, 4, True, False, 1, seed=3)
    x, w_ih, w_hh, b = a[0], a[1], a[2], (a[3] + a[4]).astype(np.float32)
    from tapescope.core.explain_aten import _fma_chain

    ws = out[3].view(np.float32)[:6 * 4 * 64].reshape(6, 4, 64)
    h = a[5]
    ys = out[0]
    for t in range(6):
        g = ((_fma_chain(x[t], w_ih.T) + _fma_chain(h, w_hh.T)).astype(np.float32)
             + b).astype(np.float32)
        acts = np.concatenate([onednn_logistic(g[:, :16]), onednn_logistic(g[:, 16:32]),
                               onednn_tanh(g[:, 32:48]), onednn_logistic(g[:, 48:])], axis=1)
        assert acts.tobytes() == ws[t].tobytes(), t
        h = ys[t]


def _onednn_backward_calls(I, H, T, B, bias, bidirectional, threads, h0):
    """torch's mkldnn_rnn_layer_backward calls (args, outputs) of an ``nn.LSTM`` step whose
    loss reads every output, the last h and the last c (``h0``: a random initial state)."""
    calls = []
    g = torch.Generator().manual_seed(I + H + T)
    torch.manual_seed(T)
    m = torch.nn.LSTM(I, H, bias=bias, bidirectional=bidirectional, batch_first=True)
    x = torch.randn(B, T, I, generator=g, requires_grad=True)
    d = 2 if bidirectional else 1
    state = (torch.randn(d, B, H, generator=g), torch.randn(d, B, H, generator=g)) if h0 \
        else None
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        y, (hn, cn) = m(x, state)
        with _recorder(torch.ops.aten.mkldnn_rnn_layer_backward.default, calls):
            (y.square().sum() + hn.sum() * 0.5 + cn.sum() * 0.25).backward()
    finally:
        torch.set_num_threads(before)
    return calls


@pytest.mark.parametrize("I, H, T, B, bias, bidirectional, threads, h0", [
    (12, 12, 8, 4, True, False, 1, False), (32, 64, 5, 8, True, True, 2, True),
    (20, 40, 6, 3, False, True, 2, True), (70, 130, 3, 2, True, False, 1, True),
    (16, 12, 64, 8, True, True, 1, True)],
    ids=["zoo-like", "bidirectional", "no-bias", "k-blocks-of-gates", "k-blocks-of-rows"])
def test_onednns_lstm_backward_is_written_out_bit_for_bit(I, H, T, B, bias, bidirectional,
                                                           threads, h0):
    """oneDNN's float32 LSTM layer backward (core.explain_onednn.lstm_layer_backward): dx,
    both weight gradients, the bias gradients, dhx and dcx bit for bit with torch's, forwards
    and reversed, biases or none, a random or zero initial state, 1 and 2 threads, and sgemm
    sums past 384 terms (4 x 130 gates; 64 steps x 8 rows); --explain names each, one ulp off
    unknown. Planted: a forward layer's h0 rows in the weight chain, the k blocks of 256, or
    the gate gradients' fnma split into a product and a difference, fails it."""
    from tapescope.core.capture.explain import explain_op
    from tapescope.core.capture.judge import _diff
    from tapescope.core.explain_onednn import lstm_layer_backward

    calls = _onednn_backward_calls(I, H, T, B, bias, bidirectional, threads, h0)
    assert len(calls) == (2 if bidirectional else 1)
    for a, out in calls:
        steps = range(T - 1, -1, -1) if a[13] else range(T)
        got = lstm_layer_backward(a[0], a[1], a[2], (a[3], a[4]) if a[17] else None, a[5],
                                  a[6], a[10], a[11], a[12], steps, H, bool(a[13]))
        for j, (g, o) in enumerate(zip(got, out, strict=True)):
            if o is None:  # (torch drops the bias gradients of a layer without biases)
                continue
            assert g.dtype == o.dtype and g.tobytes() == o.tobytes(), j
        ref = reference(BWD, a, {})
        named = [j for j, o in enumerate(out[:7]) if o is not None
                 and _diff(ref[j], o)["n_diff"]]
        assert named
        for j in named:
            d = _diff(ref[j], out[j])
            c = explain_op(BWD, a, {}, out[j], d, j)
            assert c["cause"] == "libm" and "LSTM layer backward" in c["variant"], (j, c)
            nudged = out[j].copy()
            nudged.view(np.uint32).reshape(-1)[0] += 1
            assert explain_op(BWD, a, {}, nudged, d, j)["cause"] == "unknown", j


def test_an_unwritten_kernels_unknown_says_so():
    """A strided dilated convolution (stride 2, dilation 2): its input gradient is oneDNN's gemm
    convolution's (named since session 48); one ulp off it is unknown, and the cause says which
    of oneDNN's kernels are not written out."""
    from tapescope.core.capture.explain import explain_op
    from tapescope.core.capture.judge import _diff
    from tapescope.core.explain import cause_text

    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 16, 13, 13, generator=g), torch.randn(32, 16, 3, 3, generator=g)
    dy = torch.randn(2, 32, 7, 7, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gx = torch.ops.aten.convolution_backward(dy, x, w, [0], [2, 2], [2, 2], [2, 2], False,
                                                 [0, 0], 1, [True, False, False])[0]
    finally:
        torch.set_num_threads(before)
    op = "aten.convolution_backward.default"
    a = [_n(dy), _n(x), _n(w), [0], [2, 2], [2, 2], [2, 2], False, [0, 0], 1,
         [True, False, False]]
    d = _diff(reference(op, a, {})[0], _n(gx))
    assert d["n_diff"]
    c = explain_op(op, a, {}, _n(gx), d, 0)
    assert c["cause"] == "fma" and "x64:gemm:jit" in c["variant"], c
    off = _n(gx).copy()
    off.view(np.int32)[1, 3, 4, 5] += 1
    c = explain_op(op, a, {}, off, _diff(reference(op, a, {})[0], off), 0)
    assert c["cause"] == "unknown" and "grouped transposed ones" in c["note"], c
    text = cause_text(c)  # (one ulp from the gemm order: that order named as the closest)
    assert text.startswith("unknown (closest: fma, oneDNN's gemm convolution") and \
        "oneDNN's convolutions: grouped transposed" in text, text
