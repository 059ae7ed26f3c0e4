"""The model zoo: small PyTorch modules of the families people export (nanoGPT-style attention
with masked_fill / GELU / F.cross_entropy, LayerNorm + GELU(tanh) + Dropout, Conv + BatchNorm,
GRU / LSTM / RNN, HardSwish / HardSigmoid / Pow, log_softmax + nll_loss), each exported by
``torch.onnx.export`` at test time with small seeded random weights, as a user would (no edits
to the file)."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn


class TinyGPT(nn.Module):
    """One causal attention block: embedding, LayerNorm, masked_fill, GELU, a tied head and
    F.cross_entropy in the graph (the loss is the graph's scalar output)."""

    def __init__(self, vocab=16, dim=8, ctx=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.fc, self.proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)).view(1, ctx, ctx))
        self.dim = dim

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.emb(idx)
        q, k, v = self.qkv(self.ln1(x)).split(self.dim, dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / self.dim ** 0.5)
        att = att.masked_fill(self.mask[:, :t, :t] == 0, float("-inf"))
        x = x + F.softmax(att, dim=-1) @ v
        x = x + self.proj(F.gelu(self.fc(self.ln2(x))))
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class TinyLM(nn.Module):
    """Token ids in, [B, T, V] logits out (the loss is the workload's cross-entropy)."""

    def __init__(self, vocab=12, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(F.gelu(self.ln(self.emb(idx.view(idx.shape[0], -1)))))


class Block(nn.Module):
    """LayerNorm + GELU(tanh) + Dropout (eval: the identity; train: a mask per step)."""

    def __init__(self, dim=8):
        super().__init__()
        self.ln, self.lin, self.drop = nn.LayerNorm(dim), nn.Linear(dim, dim), nn.Dropout(0.25)

    def forward(self, x):
        return self.drop(F.gelu(self.lin(self.ln(x)), approximate="tanh"))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x)).relu().mean((2, 3))


class Recurrent(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.rnn = getattr(nn, kind)(6, 5, batch_first=True)
        self.out = nn.Linear(5, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.out(y[:, -1])


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        return F.hardswish(y) + F.hardsigmoid(y) + y ** 2 + torch.pow(y.abs() + 1, y) + y.pow(3)


class Classifier(nn.Module):
    """An MLP classifier with its loss in the graph: F.nll_loss of F.log_softmax, minus a
    confidence penalty on the same log-probabilities (LogSoftmax in both exports; the dynamo
    one keeps NegativeLogLikelihoodLoss, TorchScript fuses that use into
    SoftmaxCrossEntropyLoss)."""

    def __init__(self, n_in=6, classes=5):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(n_in, 16), nn.Linear(16, classes)

    def forward(self, x, targets):
        lp = F.log_softmax(self.fc2(torch.tanh(self.fc1(x))), dim=-1)
        return F.nll_loss(lp, targets) - 0.1 * lp.mean()


def _ints(shape, high):
    return torch.randint(0, high, shape)


# name -> (module factory, example inputs factory, training-mode export)
FAMILIES = {
    "gpt": (TinyGPT, lambda: (_ints((2, 4), 16), _ints((2, 4), 16)), False),
    "lm": (TinyLM, lambda: (_ints((2, 3), 12),), False),
    "block": (Block, lambda: (torch.randn(2, 3, 8),), False),
    "block_train": (Block, lambda: (torch.randn(2, 3, 8),), True),
    "convbn_train": (ConvBN, lambda: (torch.randn(2, 3, 6, 6),), True),
    "gru": (lambda: Recurrent("GRU"), lambda: (torch.randn(2, 4, 6),), False),
    "lstm": (lambda: Recurrent("LSTM"), lambda: (torch.randn(2, 4, 6),), False),
    "rnn": (lambda: Recurrent("RNN"), lambda: (torch.randn(2, 4, 6),), False),
    "activations": (Activations, lambda: (torch.randn(3, 8),), False),
    "classifier": (Classifier, lambda: (torch.randn(4, 6), _ints((4,), 5)), False),
}


def export(name: str, path, dynamo: bool) -> str:
    """Export family ``name`` to ``path`` with seeded random weights; returns the path."""
    make, example, train = FAMILIES[name]
    torch.manual_seed(0)
    model = make()
    model.train(train)
    kwargs = {}
    if train:
        kwargs = {"training": torch.onnx.TrainingMode.TRAINING, "do_constant_folding": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example(), str(path), dynamo=dynamo, **kwargs)
    return str(path)
