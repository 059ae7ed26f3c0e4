"""Recurrent layers: RNN, GRU, LSTM (a loop over time steps, vectorised over the batch)."""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import op


def _act(name, alpha, beta):
    n = name.lower()
    table = {
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, 0),
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: np.where(x < 0, alpha * x, x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0),
        "scaledtanh": lambda x: alpha * np.tanh(beta * x),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: np.where(x < 0, alpha * (np.exp(x) - 1), x),
        "softsign": lambda x: x / (1 + np.abs(x)), "softplus": lambda x: np.log1p(np.exp(x)),
    }
    if n not in table:
        raise ValueError(f"unknown activation {name!r}")
    return table[n]


def _acts(names, alphas, betas, defaults, ndir):
    names = list(names or defaults * ndir)
    alphas = list(alphas or [0.01] * len(names))
    betas = list(betas or [0.0] * len(names))
    k = len(defaults)
    return [[_act(names[d * k + i], alphas[d * k + i] if alphas else 0, betas[d * k + i])
             for i in range(k)] for d in range(ndir)]


def _run(kind, x, w, r, b, seq_lens, h0, c0, p, activations, activation_alpha,
         activation_beta, clip, direction, hidden_size, layout, extra):
    if layout:
        x = np.swapaxes(x, 0, 1)
    seq, batch = x.shape[:2]
    ndir = w.shape[0]
    h_size = hidden_size or r.shape[-1]
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
    fs = _acts(activations, activation_alpha, activation_beta, defaults[kind], ndir)
    if b is None:
        b = np.zeros((ndir, 2 * gates * h_size), x.dtype)
    lens = np.full(batch, seq) if seq_lens is None else np.asarray(seq_lens).astype(np.int64)
    if h0 is not None and layout:
        h0 = np.swapaxes(h0, 0, 1)
    if c0 is not None and layout:
        c0 = np.swapaxes(c0, 0, 1)
    ys = np.zeros((seq, ndir, batch, h_size), x.dtype)
    hs, cs = [], []

    def cl(v):
        return np.clip(v, -clip, clip) if clip is not None else v

    for d in range(ndir):
        rev = direction == "reverse" or d == 1
        wb, rb = b[d, :gates * h_size], b[d, gates * h_size:]
        h = np.zeros((batch, h_size), x.dtype) if h0 is None else h0[d].copy()
        c = np.zeros((batch, h_size), x.dtype) if c0 is None else c0[d].copy()
        for step in range(seq):
            live = np.array([step < n for n in lens])[:, None]
            t = np.where(live[:, 0], np.array([n - 1 - step for n in lens]), 0) if rev \
                else np.full(batch, step)
            xt = x[t, np.arange(batch)]
            xw = xt @ w[d].T + wb
            hr = h @ r[d].T
            f = fs[d]
            if kind == "RNN":
                hn = f[0](cl(xw + hr + rb))
                cn = c
            elif kind == "GRU":
                z = f[0](cl(xw[:, :h_size] + hr[:, :h_size] + rb[:h_size]))
                rr = f[0](cl(xw[:, h_size:2 * h_size] + hr[:, h_size:2 * h_size]
                             + rb[h_size:2 * h_size]))
                rh = r[d][2 * h_size:]
                if extra.get("linear_before_reset"):
                    hh = f[1](cl(xw[:, 2 * h_size:] + rr * (h @ rh.T + rb[2 * h_size:])))
                else:
                    hh = f[1](cl(xw[:, 2 * h_size:] + (rr * h) @ rh.T + rb[2 * h_size:]))
                hn = (1 - z) * hh + z * h
                cn = c
            else:
                g = xw + hr + rb
                pi, po, pf = (np.zeros(h_size) if p is None else p[d][k * h_size:(k + 1) * h_size]
                              for k in range(3))
                i = f[0](cl(g[:, :h_size] + pi * c))
                if extra.get("input_forget"):
                    ff = 1 - i
                else:
                    ff = f[0](cl(g[:, 2 * h_size:3 * h_size] + pf * c))
                cc = f[1](cl(g[:, 3 * h_size:]))
                cn = ff * c + i * cc
                o = f[0](cl(g[:, h_size:2 * h_size] + po * cn))
                hn = o * f[2](cn)
            h = np.where(live, hn, h).astype(x.dtype)
            c = np.where(live, cn, c).astype(x.dtype)
            ys[t, d] = np.where(live, h, ys[t, d])
        hs.append(h)
        cs.append(c)
    y, yh, yc = ys, np.stack(hs), np.stack(cs)
    if layout:
        y = np.transpose(y, (2, 0, 1, 3))
        yh, yc = np.swapaxes(yh, 0, 1), np.swapaxes(yc, 0, 1)
    return (y, yh, yc) if kind == "LSTM" else (y, yh)


def _kernel(kind):
    def kernel(ctx, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None, activations=None,
               activation_alpha=None, activation_beta=None, clip=None, direction="forward",
               hidden_size=None, layout=0, linear_before_reset=0, input_forget=0):
        if kind == "GRU":
            c0, p = None, None
        if kind == "RNN":
            c0 = p = None
        return _run(kind, x, w, r, b, seq_lens, h0, c0, p, activations, activation_alpha,
                    activation_beta, clip, direction, hidden_size, layout,
                    {"linear_before_reset": linear_before_reset, "input_forget": input_forget})
    return kernel


for _k in ("RNN", "GRU", "LSTM"):
    op(_k)(_kernel(_k))
