"""The model zoo: small PyTorch modules of the families people export (nanoGPT-style attention
with masked_fill / GELU / F.cross_entropy, LayerNorm + GELU(tanh) + Dropout, Conv + BatchNorm,
GRU / LSTM / RNN, HardSwish / HardSigmoid / Pow, log_softmax + nll_loss, a ViT block with a
broadcast class token and MultiheadAttention or SDPA, nn.Transformer with a causal mask, a
causal mask from torch.triu, a BERT-style encoder with a 2-row token-type table, a Llama-style
block: RMSNorm by rsqrt, rotary, GQA, a UNet with ConvTranspose2d, F.interpolate, GroupNorm and
SiLU, a conv1d + GroupNorm audio classifier, EfficientNet's MBConv: depthwise conv,
squeeze-and-excitation with a sigmoid gate, SiLU, BatchNorm in training mode), each exported by
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


class _SelfAttention(nn.Module):
    """Multi-head self-attention by ``F.scaled_dot_product_attention`` on a fused qkv Linear."""

    def __init__(self, dim, heads):
        super().__init__()
        self.qkv, self.heads = nn.Linear(dim, 3 * dim), heads

    def forward(self, h):
        b = h.shape[0]
        q, k, v = self.qkv(h).chunk(3, -1)

        def split(z):
            return z.view(b, z.shape[1], self.heads, -1).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(q), split(k), split(v))
        return a.transpose(1, 2).reshape(b, -1, q.shape[-1])


class _ViTBlock(nn.Module):
    def __init__(self, sdpa, dim, heads):
        super().__init__()
        self.ln, self.sdpa = nn.LayerNorm(dim), sdpa
        self.attn = (_SelfAttention(dim, heads) if sdpa
                     else nn.MultiheadAttention(dim, heads, batch_first=True))

    def forward(self, t):
        h = self.ln(t)
        a = self.attn(h) if self.sdpa else self.attn(h, h, h, need_weights=False)[0]
        return t + a


class ViT(nn.Module):
    """A ViT: patches, a class token broadcast into the batch (``cls.expand(B, -1, -1)``),
    learned positions, and ``blocks.0``: LayerNorm and attention by ``nn.MultiheadAttention``
    or ``F.scaled_dot_product_attention`` (the exporters compute its scale from a Shape: a
    constant, never a weight; its qkv weight is renamed by both exporters, and shown as
    ``blocks.0.attn.qkv.weight.T``), a linear head on the class token."""

    def __init__(self, sdpa=False, dim=16, heads=2, patch=4):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 5, dim))
        self.blocks = nn.ModuleList([_ViTBlock(sdpa, dim, heads)])
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        b = x.shape[0]
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(b, -1, -1), t], 1) + self.pos
        for blk in self.blocks:
            t = blk(t)
        return self.head(t[:, 0])


class Seq2Seq(nn.Module):
    """``nn.Transformer`` encoder-decoder with the causal mask of
    ``generate_square_subsequent_mask`` built from the target's length (a constant, never a
    weight: the decoder stays causal through training and ``--reinit``)."""

    def __init__(self, dim=8):
        super().__init__()
        self.tr = nn.Transformer(dim, 2, 1, 1, 16, dropout=0.0, batch_first=True)
        self.out = nn.Linear(dim, 4)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.out(self.tr(src, tgt, tgt_mask=mask, tgt_is_causal=True))


class CausalAttention(nn.Module):
    """Attention with its causal mask built from the sequence length
    (``torch.triu(torch.ones(T, T))``) and its scale from the head dim (``k.shape[-1]``)."""

    def __init__(self, dim=8):
        super().__init__()
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, 4)

    def forward(self, x):
        t = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        att = q @ k.transpose(-2, -1) / (k.shape[-1] ** 0.5)
        att = att.masked_fill(torch.triu(torch.ones(t, t), diagonal=1).bool(), float("-inf"))
        return self.out(att.softmax(-1) @ v)


class TinyBert(nn.Module):
    """A BERT-style encoder layer: word, position (``arange(T)``) and a 2-row token-type
    embedding, LayerNorm, self-attention, a head over the vocabulary; token ids and token
    types are integer inputs, each drawn within its own table's rows."""

    def __init__(self, vocab=11, dim=8, ctx=5):
        super().__init__()
        self.word, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.types = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids, token_type_ids):
        t = input_ids.shape[1]
        x = self.word(input_ids) + self.types(token_type_ids) + self.pos(
            torch.arange(t, device=input_ids.device))
        x = self.ln(x)
        a, _ = self.attn(x, x, x, need_weights=False)
        return self.head(x + a)


class RMSNorm(nn.Module):
    """HF Llama's RMSNorm: ``x * torch.rsqrt(mean(x^2) + eps) * w`` (Sqrt, Reciprocal)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TinyLlama(nn.Module):
    """A Llama-style block: RMSNorm via rsqrt, rotary positions (cos/sin tables from
    ``arange``: constants), grouped-query attention with HF's ``repeat_kv`` (an Expand of
    activations), a causal mask, SiLU-gated MLP, token ids in and ``[B, T, V]`` logits out."""

    def __init__(self, vocab=13, dim=8, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.emb = nn.Embedding(vocab, dim)
        self.n1, self.n2 = RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.up, self.gate = nn.Linear(dim, 16, bias=False), nn.Linear(dim, 16, bias=False)
        self.down = nn.Linear(16, dim, bias=False)
        self.head = nn.Linear(dim, vocab, bias=False)

    def _rotary(self, x, t):
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        f = torch.outer(torch.arange(t).float(), inv)
        cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
        half = self.hd // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def forward(self, idx):
        b, t = idx.shape
        x = self.emb(idx)
        h = self.n1(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2 * self.kv_heads, self.hd).transpose(1, 2).chunk(2, 1)
        q, k = self._rotary(q, t), self._rotary(k, t)
        rep = self.heads // self.kv_heads  # HF repeat_kv

        def repeat_kv(z):
            return z[:, :, None].expand(b, self.kv_heads, rep, t, self.hd).reshape(
                b, self.heads, t, self.hd)

        k, v = repeat_kv(k), repeat_kv(v)
        att = (q @ k.transpose(-2, -1)) / self.hd ** 0.5
        att = att.masked_fill(torch.triu(torch.ones(t, t), 1).bool(), float("-inf"))
        x = x + self.o((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))
        h = self.n2(x)
        return self.head(x + self.down(F.silu(self.gate(h)) * self.up(h)))


class TinyUNet(nn.Module):
    """A UNet level: Conv + GroupNorm + SiLU down (a strided conv), up by ConvTranspose2d
    (kernel 2 stride 2; and kernel 3, pads, output_padding, groups) and by F.interpolate
    (bilinear and nearest), a skip connection by concatenation. GroupNorm exports as
    Reshape + InstanceNormalization + Reshape, then the affine Mul and Add."""

    def __init__(self):
        super().__init__()
        self.inc = nn.Conv2d(3, 8, 3, padding=1)
        self.gn1 = nn.GroupNorm(2, 8)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.gn2 = nn.GroupNorm(4, 8)
        self.up = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.up2 = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.outc = nn.Conv2d(20, 2, 1)

    def forward(self, x):
        a = F.silu(self.gn1(self.inc(x)))
        b = F.silu(self.gn2(self.down(a)))
        lin = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
        near = F.interpolate(b, scale_factor=2, mode="nearest")
        return self.outc(torch.cat([a + self.up(b), lin + near, self.up2(b)], 1))


class TinyAudio(nn.Module):
    """A conv1d audio classifier: Conv1d (strided, padded; grouped) + GroupNorm + SiLU,
    MaxPool1d, a mean over time and a linear head."""

    def __init__(self, classes=3):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 8, 5, stride=2, padding=2)
        self.gn1 = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv1d(8, 8, 3, padding=1, groups=2)
        self.gn2 = nn.GroupNorm(4, 8)
        self.pool = nn.MaxPool1d(2)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        h = self.pool(F.silu(self.gn1(self.conv1(x))))
        h = F.silu(self.gn2(self.conv2(h)))
        return self.head(h.mean(-1))


class _SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: a global mean, 1x1 conv down, SiLU, 1x1 conv up, a sigmoid gate
    multiplying the channels."""

    def __init__(self, ch, squeezed):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(ch, squeezed, 1), nn.Conv2d(squeezed, ch, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConv(nn.Module):
    """EfficientNet's inverted bottleneck: 1x1 expansion + BatchNorm + SiLU, a depthwise 3x3
    conv (groups = channels) + BatchNorm + SiLU, squeeze-and-excitation, a 1x1 projection +
    BatchNorm, and the residual; exported in training mode (batch statistics)."""

    def __init__(self, ch=4, expand=4):
        super().__init__()
        mid = ch * expand
        self.expand = nn.Sequential(nn.Conv2d(ch, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                    nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(mid, mid, 3, padding=1, groups=mid,
                                                 bias=False), nn.BatchNorm2d(mid), nn.SiLU())
        self.se = _SqueezeExcite(mid, 2)
        self.project = nn.Sequential(nn.Conv2d(mid, ch, 1, bias=False), nn.BatchNorm2d(ch))

    def forward(self, x):
        return x + self.project(self.se(self.depthwise(self.expand(x))))


class MBConvNet(nn.Module):
    """A stem conv, two MBConv blocks and a pooled linear head (the classifier's logits)."""

    def __init__(self, classes=3):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.blocks = nn.Sequential(MBConv(), MBConv())
        self.head = nn.Linear(4, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


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
    "vit_mha": (ViT, lambda: (torch.randn(2, 3, 8, 8),), False),
    "vit_sdpa": (lambda: ViT(sdpa=True), lambda: (torch.randn(2, 3, 8, 8),), False),
    "seq2seq": (Seq2Seq, lambda: (torch.randn(2, 6, 8), torch.randn(2, 5, 8)), False),
    "causal": (CausalAttention, lambda: (torch.randn(2, 5, 8),), False),
    "bert": (TinyBert, lambda: (_ints((2, 5), 11), _ints((2, 5), 2)), False),
    "llama": (TinyLlama, lambda: (_ints((2, 5), 13),), False),
    "unet": (TinyUNet, lambda: (torch.randn(2, 3, 8, 8),), False),
    "audio": (TinyAudio, lambda: (torch.randn(2, 1, 32),), False),
    "mbconv": (MBConvNet, lambda: (torch.randn(2, 3, 6, 6),), True),
}


def module(name: str, distinct: bool = False) -> nn.Module:
    """Family ``name``'s module as ``export`` exports it (seeded); ``distinct``: every
    parameter drawn anew, so no two hold equal values (dynamo's optimizer merges initializers
    of equal values, e.g. two fresh LayerNorms' ones, into one)."""
    make, _, train = FAMILIES[name]
    torch.manual_seed(0)
    model = make()
    if distinct:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.rand_like(p) * 0.5 + 0.25)
    model.train(train)
    return model


def export(name: str, path, dynamo: bool, distinct: bool = False) -> str:
    """Export family ``name`` to ``path`` with seeded random weights (``distinct``: see
    ``module``); returns the path."""
    _, example, train = FAMILIES[name]
    model = module(name, distinct)
    kwargs = {}
    if train:
        kwargs = {"training": torch.onnx.TrainingMode.TRAINING, "do_constant_folding": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example(), str(path), dynamo=dynamo, **kwargs)
    return str(path)
