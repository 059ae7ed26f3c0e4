"""The entries a run plan (core.onnx.plan) runs besides plain executor steps: a node with
precomputed constant inputs, a Conv chain in one C pass, a channel shuffle as one copy. Each
has ``run(sess, env, budget, run_sub)`` and, when a case is not one it covers, runs its nodes
one by one through the executor instead, so the results never depend on it."""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import numpy as np

from tapescope.core import native
from tapescope.core.onnx import arena as _arena
from tapescope.core.onnx.errors import OnnxError


def _total(costs) -> tuple:
    """(largest predicted output or None, summed work) of a list of Budget.cost results."""
    ns = [c[0] for c in costs if c[0] is not None]
    return (max(ns) if ns else None, sum(c[1] for c in costs))


def _held(budget, y, inner: int, chain, sess):
    """``y`` held by the run's budget, and the ``inner`` intermediates the chain never made
    charged as their bytes (as the plain loop would); an error names the chain's last node and
    the model file."""
    try:
        budget.hold(y)
        if inner:
            budget.charge(y.nbytes * inner)  # the intermediates' share
    except OnnxError as exc:
        if exc.node is None:
            exc.node = chain[-1].label
        raise exc.with_file(sess.label) from None
    return y


def _charge(budget, steps, costs, sess, total=None) -> None:
    """Charge each planned node's cost to the run's budget as the plain loop would; an error
    names the node that went over and the model file. ``total`` (``_total(costs)``): when the
    whole list fits, it is admitted at once (the same count and work as one by one: nothing
    between the nodes changes the bytes held, and work only grows)."""
    if total is not None and budget.replay_all(len(steps), *total):
        return
    for st, c in zip(steps, costs, strict=True):
        try:
            budget.replay(*c)
        except OnnxError as exc:
            if exc.node is None:
                exc.node = st.label
            raise exc.with_file(sess.label) from None


class ConstArgs:
    """A node run with some inputs replaced by precomputed constants (and attributes changed;
    ``kernel``: another kernel with the node's bits)."""

    def __init__(self, st, consts: dict[int, np.ndarray], attrs: dict, kernel=None) -> None:
        self.orig = st
        self.consts = consts
        self.step = dataclasses.replace(st, attrs={**st.attrs, **attrs},
                                        kernel=kernel or st.kernel)

    def run(self, sess, env, budget, run_sub) -> None:
        sess._run_step(self.step, sess.graph, env, budget, run_sub, self.consts, replay=True)


class _Affine:
    """A per-channel Mul then Add by constants inside a chain (a BN written out as ops): the
    constants' names and whether each is its node's first operand (``ep_t``'s aff_first)."""

    def __init__(self, mul, add, c_name: str, d_name: str) -> None:
        self.mul, self.add, self.c, self.d = mul, add, c_name, d_name
        self.first = (1 if mul.node.input[0] == c_name else 0) | \
            (2 if add.node.input[0] == d_name else 0)

    def vectors(self, c, d, y_like):
        """(c, d) as the output's per-channel values, or None when either does not broadcast
        along axis 1 only (then the chain runs its nodes)."""
        cv, dv = ChannelAffine._per_channel(c, y_like), ChannelAffine._per_channel(d, y_like)
        return None if cv is None or dv is None else (cv, dv)

    def set(self, ep, keep, vecs) -> None:
        keep.extend(vecs)
        ep.mul2, ep.add2 = vecs[0].ctypes.data, vecs[1].ctypes.data
        ep.aff_first = self.first


def _bn_den(bn, var, dt):
    """sqrt(var + eps) per channel, as batch_norm computes it."""
    with np.errstate(all="ignore"):
        return np.sqrt(var + dt.type(bn.attrs.get("epsilon", 1e-5)))


def _epilogue(affine, affine_ops, y_like, dt, channels, **stages):
    """``native.epilogue(dt, channels, **stages)`` with the chain's second per-channel stage
    (``affine``, its constants ``affine_ops``) set on it: (ep, keep), or None when the C pass
    cannot take the chain (no library, or constants that are not one per channel)."""
    vecs = None
    if affine is not None:
        vecs = affine.vectors(*affine_ops, y_like)
        if vecs is None:
            return None
    made = native.epilogue(dt, channels, **stages)
    if made is not None and vecs is not None:
        affine.set(made[0], made[1], vecs)
    return made


def _prepared(entry, x, ops: tuple, prepare):
    """``prepare()``'s answer for input ``x`` and operands ``ops``, kept on ``entry._prep`` as
    (x's shape, x's dtype, ops, answer) while the shape, dtype and operands (by identity) stay:
    remembered either way, so a case the C pass does not take (None) is not re-examined every
    run (the same shape, dtype and operands give the same answer)."""
    got = entry._prep
    if got is None or got[0] != getattr(x, "shape", None) \
            or got[1] != getattr(x, "dtype", None) or not all(map(operator.is_, got[2], ops)):
        got = entry._prep = (getattr(x, "shape", None), getattr(x, "dtype", None), ops,
                             prepare())
    return got[3]


def _chain_costs(chain, inner, env, y_like, budget):
    """The budget's charges for every node of a chain as the plain run makes them (they depend
    on shapes and attributes only), or None for a node Budget.cost does not know."""
    costs = []
    for s in chain:
        ins = [None if not n else y_like if n in inner else env.get(n, y_like)
               for n in s.node.input]
        cost = budget.cost(s.node.op_type, ins, s.attrs, s.opset)
        if cost is None:
            return None
        costs.append(cost)
    return costs


class _FewRowsMatmul:
    """A kernel set whose matmul of a few-row ``a`` by a contiguous ``b`` reads b once
    (``core.native.mm_few_rows``: the reference product's bits); everything else is ``k``'s."""

    ROWS = 2  # up to this many rows of a: a Gemm on one or two images

    def __init__(self, k) -> None:
        self._k = k

    def __getattr__(self, name):
        return getattr(self._k, name)

    def matmul(self, a, b):
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.ndim == 2 \
                and b.ndim == 2 and a.shape[0] <= self.ROWS:
            y = native.mm_few_rows(a, b)
            if y is not None:
                return y
        return self._k.matmul(a, b)


def gemm_few_rows(ctx, a, *args, **attrs):
    """The Gemm kernel with its product through :class:`_FewRowsMatmul` (reference mode: the
    plan's Gemm with a constant B made contiguous once; fc layers on one image, where a packed
    product read a weight of 10^7-10^8 elements three times per run)."""
    from tapescope.core.onnx.ops.math_ops import gemm

    if ctx.k.name == "reference":
        ctx = dataclasses.replace(ctx, k=_FewRowsMatmul(ctx.k))
    return gemm(ctx, a, *args, **attrs)


class FusedConv:
    """Conv [BatchNormalization] [Mul -> Add by per-channel constants] [Sum/Add] [Relu] in one
    C pass (see the module docstring)."""

    def __init__(self, chain: list, affine: _Affine | None = None) -> None:
        self.chain = chain
        self.conv = chain[0]
        self.affine = affine
        self.bn = next((s for s in chain if s.node.op_type == "BatchNormalization"), None)
        self.add = next((s for s in chain if s.node.op_type in ("Sum", "Add")
                         and (affine is None or s is not affine.add)), None)
        self.relu = any(s.node.op_type == "Relu" for s in chain)
        self.out = chain[-1].node.output[0]
        self.inner = {s.node.output[0] for s in chain[:-1]}  # never materialised
        self.res_first, self.res_name = False, None
        if self.add is not None:
            prev = chain[chain.index(self.add) - 1].node.output[0]
            ins = list(self.add.node.input)
            self.res_first = ins[0] != prev
            self.res_name = ins[0] if self.res_first else ins[1]
        cin = list(self.conv.node.input)
        # the operands besides x, fixed per model as a rule: w, bias, scale, beta, mean, var
        self.const_names = [cin[1], cin[2] if len(cin) > 2 and cin[2] else None]
        if self.bn is not None:
            self.const_names += list(self.bn.node.input[1:])
        if affine is not None:
            self.const_names += [affine.c, affine.d]
        self.x_name = cin[0]
        # the operands' names as one lookup (the absent ones, None, are not looked up)
        self._names = tuple(n for n in self.const_names if n)
        self._get = operator.itemgetter(*self._names) if len(self._names) > 1 else \
            (lambda env, n=self._names[0]: (env[n],))
        self._prep: Any = None  # (x shape, dtype, operands, prepared geometry): _prepared
        self.shuffle: Shuffle | None = None  # the channel shuffle that reads the output

    def run(self, sess, env, budget, run_sub) -> None:
        if self.shuffle is not None:
            y = self._fused(env, budget, sess, self.shuffle)
            if y is not None:
                env[self.shuffle.out] = y
                return
        _fused_or_nodes(self, sess, env, budget, run_sub)
        if self.shuffle is not None:
            self.shuffle.run(sess, env, budget, run_sub)

    def _prepare(self, x, ops, env, budget):
        """Everything about this chain that depends on x's shape and the operands only (the
        geometry, the Epilogue, the budget's charges, the weights as the product takes them),
        or None when the C pass does not cover the case."""
        from tapescope.core.onnx.ops.window import attrs_nd, pads_for
        from tapescope.core.ops.nn import out_size

        w, b = ops[0], ops[1]
        if not isinstance(x, np.ndarray) or not isinstance(w, np.ndarray) or x.ndim != 4 \
                or w.ndim != 4 or x.dtype not in (np.float32, np.float64) or w.dtype != x.dtype:
            return None
        dt = x.dtype
        at = self.conv.attrs
        group = at.get("group", 1)
        m, c = w.shape[0], x.shape[1]
        if not isinstance(group, int) or group < 1 or c % group or m % group \
                or w.shape[1] * group != c or 0 in x.shape or 0 in w.shape:
            return None
        try:
            k, st, dil = attrs_nd(x, at.get("kernel_shape") or w.shape[2:], at.get("strides"),
                                  at.get("dilations"))
            if list(k) != list(w.shape[2:]) or len(st) != 2 or len(dil) != 2 \
                    or min(st) < 1 or min(dil) < 1:
                return None
            padw = pads_for(x.shape[2:], k, st, dil, at.get("pads"),
                            at.get("auto_pad", "NOTSET"))
            outs = [out_size(x.shape[2 + i], k[i], st[i], dil[i], *padw[i]) for i in range(2)]
        except Exception:  # noqa: BLE001 - the plain Conv kernel says what is wrong
            return None
        if b is not None and (not isinstance(b, np.ndarray) or b.dtype != dt or b.size != m):
            return None
        yshape = (x.shape[0], m, outs[0], outs[1])
        bn = None
        if self.bn is not None:
            scale, beta, mean, var = ops[2:6]
            if not all(isinstance(v, np.ndarray) and v.dtype == dt and v.size == m
                       for v in (scale, beta, mean, var)):
                return None
            bn = (mean, _bn_den(self.bn, var, dt), scale, beta)
        y_like = np.broadcast_to(np.zeros((), dt), yshape)
        made = _epilogue(self.affine, ops[-2:], y_like, dt, m, bias=b, bn=bn, relu=self.relu)
        if made is None:
            return None
        costs = _chain_costs(self.chain, self.inner, env, y_like, budget)
        if costs is None:
            return None
        wprep = native.aligned(w)
        # transposed once for a small output plane's product (lanes over the channels)
        wpack = None if m == group else native.conv2d_pack(wprep, group, outs)
        call = native.conv_call(x.shape, dt, wprep, st, dil, padw, outs, group, made[0], wpack)
        if call is None:
            return None
        native.addresser()  # (the extension's addr for run_conv, where it is built)
        total = _total(costs)
        size = math.prod(yshape)
        nbytes = size * dt.itemsize
        # Budget.admit's arguments: the chain's nodes, then its output held and the
        # intermediates it never makes charged (as _charge, then _held)
        admit = (len(self.chain), *total, size, nbytes * len(self.chain))
        return dict(yshape=tuple(map(int, yshape)), m=m, call=call, keep=made[1], costs=costs,
                    total=total, w=wprep, wpack=wpack, admit=admit,
                    inner=nbytes * (len(self.chain) - 1), dt=dt, nbytes=nbytes, shuffled=None)

    def _case(self, env, budget):
        """(prepared, x, residual) for this run, or None, before any charge, when the C pass
        does not cover it."""
        try:
            x = env[self.x_name]
            got = self._get(env)
            res = env[self.res_name] if self.res_name else None
        except KeyError:
            return None
        p = self._prep
        # (_prepared's test, inline: the same shape, dtype and operands, these by identity)
        if p is None or p[0] != getattr(x, "shape", None) or p[1] != getattr(x, "dtype", None) \
                or not all(map(operator.is_, p[2], got)):
            names = iter(got)
            ops = tuple([next(names) if n else None for n in self.const_names])
            p = self._prep = (getattr(x, "shape", None), getattr(x, "dtype", None), got,
                              self._prepare(x, ops, env, budget))
        p = p[3]
        if p is None:
            return None
        if res is not None:
            if not isinstance(res, np.ndarray) or res.dtype != x.dtype \
                    or res.shape != p["yshape"]:
                return None
            res = native.aligned(res)  # (C reads them: aligned, C-contiguous)
        return p, native.aligned(x), res

    def _product(self, case, out, dst=None, relu: bool = False) -> None:
        """The chain's C pass into ``out`` (C-contiguous, the chain's output shape and dtype),
        with ``dst`` = (array, its row of each output row) the rows written there instead (``out``
        is then scratch);
        ``relu``: a Relu after the chain's last op (none if it ends in one: Relu's twice is
        Relu's once)."""
        p, x, res = case
        # a copy per run: the residual's and destination's addresses are this run's own (two
        # threads may run one session)
        call = type(p["call"]).from_buffer_copy(p["call"])
        ep = call.ep
        if res is not None:
            ep.res, ep.res_first = native.address(res), int(self.res_first)
        if dst is not None:
            ep.dst, ep.dst_row, ep.channels = native.address(dst[0]), native.address(dst[1]), p["m"]
        if relu:
            ep.relu = 1
        native.run_conv(call, x, out)

    def _fused(self, env, budget, sess, shuffle=None):
        """The chain's output (with ``shuffle``: the shuffle's output, the rows written to
        their places by the C pass), or None, before any charge, when not covered."""
        case = self._case(env, budget)
        if case is None:
            return None
        p, x, _ = case
        if shuffle is None:
            if budget.admit(*p["admit"]):  # every charge at once: none refuses
                y = _arena.empty_sized(p["yshape"], p["dt"], p["nbytes"])
                budget.hold_new(y, p["inner"])
                self._product(case, y)
                return y
            _charge(budget, self.chain, p["costs"], sess, p["total"])
            y = _arena.empty(p["yshape"], x.dtype)
            self._product(case, y)
            del case
            return _held(budget, y, len(self.chain) - 1, self.chain, sess)
        lay = shuffle.layout(sess, env, p["yshape"], x.dtype)
        if lay is None or lay[4] is None:
            return None
        sh = p["shuffled"]
        if sh is None or sh[0] is not lay:  # (the layout's answer is cached: one per shape)
            costs = p["costs"] + lay[3]
            total = _total(costs)
            size = math.prod(lay[0])
            nbytes = size * p["dt"].itemsize
            sh = p["shuffled"] = (lay, costs, total, (
                len(self.chain) + len(shuffle.chain), *total, size,
                nbytes * (len(self.chain) + 1)), nbytes * len(self.chain))
        if budget.admit(*sh[3]):
            dst = (_arena.empty(lay[0], p["dt"]), lay[4])
            budget.hold_new(dst[0], sh[4])
            self._product(case, _arena.empty_sized(p["yshape"], p["dt"], p["nbytes"]), dst)
            return dst[0]
        _charge(budget, self.chain + shuffle.chain, sh[1], sess, sh[2])
        dst = (_arena.empty(lay[0], x.dtype), lay[4])
        y = _arena.empty(p["yshape"], x.dtype)
        self._product(case, y, dst)
        del case, y
        # the chain's own output is an intermediate now
        return _held(budget, dst[0], len(self.chain), self.chain, sess)

    def write_into(self, case, buf, c0: int, relu: bool = False) -> None:
        """The chain's output [then a Relu] written into channels [c0, c0 + M) of ``buf`` (a
        Concat's output, (N, C, oh, ow), C-contiguous), nothing charged (the caller charges):
        one image's channel slice is contiguous, the product's own output; with more images
        the C pass copies each finished row to its place (``ep_t``'s dst)."""
        p = case[0]
        n, m = buf.shape[0], p["m"]
        if n == 1:
            self._product(case, buf[0, c0:c0 + m], relu=relu)
            return
        rows = p.get("rows")
        if rows is None or rows[0] != (buf.shape[1], c0):
            ch = np.arange(n, dtype=np.int64)[:, None] * buf.shape[1] + c0 + np.arange(m)
            rows = p["rows"] = ((buf.shape[1], c0), ch.reshape(-1))
        self._product(case, _arena.empty(p["yshape"], buf.dtype), (buf, rows[1]), relu)


class Shuffle:
    """Reshape -> Transpose -> Reshape (a channel shuffle) as one copy: the element order is
    found once per input shape by running the three kernels themselves on element indices, and
    the data then moves as whole contiguous runs (``np.take`` of rows): a copy, so exact."""

    def __init__(self, chain: list) -> None:
        self.chain = chain
        self.src = chain[0].node.input[0]
        self.out = chain[-1].node.output[0]
        self.inner = {s.node.output[0] for s in chain[:-1]}
        self._names = [list(st.node.input)[1:] for st in chain]  # each node's operands
        self._cache: dict = {}
        self._last: Any = None  # (shape, dtype, operands, layout): the last answer

    def layout(self, sess, env, shape, dtype):
        """(output shape, run, source rows, costs, destination row of each source plane or
        None) for an input of ``shape``/``dtype``, or None; cached (the last answer checked
        first, its operands by identity: one per run of a fused conv's shuffle)."""
        try:
            consts = [[env[n] if n else None for n in ns] for ns in self._names]
        except KeyError:
            return None
        flat = [c for cs in consts for c in cs]
        last = self._last
        if last is not None and last[0] == tuple(shape) and last[1] == dtype \
                and all(map(operator.is_, last[2], flat)):
            return last[3]
        key = (tuple(shape), np.dtype(dtype).str, tuple(id(c) for c in flat))
        got = self._cache.get(key)
        if got is None or any(a is not b for a, b in zip(got[1], flat, strict=True)):
            lay = self._layout(sess, np.broadcast_to(np.zeros((), dtype), shape), consts)
            if lay is None:
                return None
            out_shape, run, rows, costs = lay
            dst_row = None
            plane = int(np.prod(shape[2:])) if len(shape) == 4 else 0
            if rows is not None and run == plane and rows.size == shape[0] * shape[1] \
                    and np.array_equal(np.sort(rows), np.arange(rows.size)):
                dst_row = np.empty(rows.size, np.int64)
                dst_row[rows] = np.arange(rows.size, dtype=np.int64)
            if len(self._cache) > 8:
                self._cache.clear()
            got = self._cache[key] = ((out_shape, run, rows, costs, dst_row), flat)
        self._last = (tuple(shape), dtype, flat, got[0])
        return got[0]

    def run(self, sess, env, budget, run_sub) -> None:
        y = self._shuffled(env, budget, sess)
        if y is None:
            for st in self.chain:
                sess._run_step(st, sess.graph, env, budget, run_sub)
            return
        env[self.out] = y

    def _layout(self, sess, x, consts):
        """(output shape, row length, source rows or None for the identity, costs), or None."""
        from tapescope.core.onnx.registry import Ctx

        ids = np.arange(x.size, dtype=np.int64).reshape(x.shape)
        shapes = []
        try:
            with np.errstate(all="ignore"):
                v = ids
                for st, c in zip(self.chain, consts, strict=True):
                    ctx = Ctx(st.opset, st.node, sess.k, None, {}, sess.graph,
                              sess.lm.opsets.get("", 1), None)
                    v = st.kernel(ctx, v, *c, **st.attrs)
                    if not isinstance(v, np.ndarray) or v.dtype != np.int64:
                        return None
                    shapes.append(v.shape)
        except Exception:  # noqa: BLE001 - the plain kernels say what is wrong
            return None
        flat = v.reshape(-1)
        if flat.size != x.size:
            return None
        if np.array_equal(flat, np.arange(x.size)):
            rows, run = None, max(x.size, 1)
        else:
            run = 1
            for k in range(1, v.ndim):  # the longest contiguous runs: trailing output dims
                L = int(np.prod(v.shape[k:]))
                if L <= 1 or x.size % L:
                    continue
                r = flat.reshape(-1, L)
                if np.all(r[:, :1] % L == 0) and np.array_equal(
                        r, r[:, :1] + np.arange(L, dtype=np.int64)):
                    run = L
                    break
            rows = np.ascontiguousarray(flat.reshape(-1, run)[:, 0] // run)
        costs = []
        prev = x
        for st, c, shp in zip(self.chain, consts, shapes, strict=True):
            cost = type(sess.budget()).cost(st.node.op_type, [prev, *c], st.attrs, st.opset)
            if cost is None:
                return None
            costs.append(cost)
            prev = np.broadcast_to(np.zeros((), x.dtype), shp)
        return v.shape, run, rows, costs

    def _shuffled(self, env, budget, sess):
        if self.src not in env:
            return None
        x = env[self.src]
        if not isinstance(x, np.ndarray) or x.dtype == object:
            return None
        lay = self.layout(sess, env, x.shape, x.dtype)
        if lay is None:
            return None
        shape, run, rows, costs, _ = lay
        _charge(budget, self.chain, costs, sess)
        if rows is None:
            y = x.reshape(shape)
        else:
            y = np.take(np.ascontiguousarray(x).reshape(-1, run), rows, axis=0).reshape(shape)
        return _held(budget, y, 0, self.chain, sess)


class ChannelAffine:
    """Mul by a per-channel constant, Add of one, [Relu] (see core.onnx.plan): one C pass,
    ``((x - 0) / 1) * c + d`` per channel (``core.native.channel_norm``; ``x - 0`` and ``x / 1``
    are exact, -0.0 included, so each element takes Mul's rounding, then Add's), then Relu in
    place (``x <= 0`` becomes +0.0, NaN stays, as the Relu kernel)."""

    def __init__(self, chain: list, consts: list) -> None:
        self.chain = chain
        self.mul_c, self.add_c = consts
        self.x_name = next(i for i in chain[0].node.input if i != self.mul_c)
        self.relu = len(chain) == 3
        self.out = chain[-1].node.output[0]
        self._prep: Any = None  # (x shape, dtype, (c, d), prepared) or None: _prepared

    def run(self, sess, env, budget, run_sub) -> None:
        _fused_or_nodes(self, sess, env, budget, run_sub)

    @staticmethod
    def _per_channel(v, x):
        """``v`` as x's C channel values when numpy broadcasts it along axis 1 only (and to
        x's own shape), else None."""
        if not isinstance(v, np.ndarray) or v.dtype != x.dtype or v.ndim > x.ndim:
            return None
        full = (1,) * (x.ndim - v.ndim) + v.shape
        c = x.shape[1]
        if full[0] != 1 or any(d != 1 for d in full[2:]) or full[1] not in (1, c):
            return None
        return native.aligned(np.broadcast_to(v.reshape(-1), (c,)))

    def _prepare(self, x, c, d, budget):
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64) \
                or x.ndim < 2 or x.size == 0:
            return None
        cv, dv = self._per_channel(c, x), self._per_channel(d, x)
        if cv is None or dv is None:
            return None
        y_like = np.broadcast_to(np.zeros((), x.dtype), x.shape)
        costs = []
        for s in self.chain:
            ins = [y_like if n not in (self.mul_c, self.add_c) else c if n == self.mul_c else d
                   for n in s.node.input]
            cost = budget.cost(s.node.op_type, ins, s.attrs, s.opset)
            if cost is None:
                return None
            costs.append(cost)
        zeros, ones = np.zeros_like(cv), np.ones_like(cv)
        ep = None
        if self.relu and x.ndim == 4:
            # with Relu: a 1x1 depthwise conv with weights c (each chain +0.0 + x*c: Mul's
            # rounding, a -0.0 product becoming +0.0) and the epilogue's bias d and Relu, in
            # one pass. A zero's sign is all that +0.0 + p can change, and Relu makes every
            # zero +0.0 (+-0.0 + d is d for any other d; a NaN stays a NaN)
            made = native.epilogue(x.dtype, x.shape[1], bias=dv, relu=True)
            if made is not None:
                ep = made
        return dict(c=cv, d=dv, zeros=zeros, ones=ones, costs=costs, total=_total(costs),
                    zero=x.dtype.type(0), ep=ep, w=cv.reshape(-1, 1, 1, 1),
                    outs=x.shape[2:] if x.ndim == 4 else None)

    def _fused(self, env, budget, sess):
        try:
            x, c, d = env[self.x_name], env[self.mul_c], env[self.add_c]
        except KeyError:
            return None
        p = _prepared(self, x, (c, d), lambda: self._prepare(x, c, d, budget))
        if p is None:
            return None
        _charge(budget, self.chain, p["costs"], sess, p["total"])
        if p["ep"] is not None:
            y = native.conv2d_one_per_group(x, p["w"], (1, 1), (1, 1), ((0, 0), (0, 0)),
                                            p["outs"], p["ep"][0])
        else:
            y = native.channel_norm(x, p["zeros"], p["ones"], p["c"], p["d"])
            if y is not None and self.relu:
                np.copyto(y, p["zero"], where=y <= 0)
        if y is None:
            return None  # pragma: no cover - _prepare ran with native code there
        return _held(budget, y, len(self.chain) - 1, self.chain, sess)


class ChannelChain:
    """BatchNormalization (inference) [-> Mul -> Add by per-channel constants] [-> Relu] in one
    C pass (``core.native.ep_apply``: a Conv's epilogue on a copy of x, each op its own
    rounding in the separate ops' order; densenet's BN before each conv)."""

    def __init__(self, chain: list, affine: _Affine | None = None) -> None:
        self.chain = chain
        self.bn = chain[0]
        self.affine = affine
        self.relu = chain[-1].node.op_type == "Relu"
        self.out = chain[-1].node.output[0]
        self.inner = {s.node.output[0] for s in chain[:-1]}
        self.x_name = self.bn.node.input[0]
        self.const_names = list(self.bn.node.input[1:]) + \
            ([affine.c, affine.d] if affine is not None else [])
        self._prep: Any = None  # (x shape, dtype, operands, prepared) or None: _prepared

    def run(self, sess, env, budget, run_sub) -> None:
        _fused_or_nodes(self, sess, env, budget, run_sub)

    def _prepare(self, x, ops, env, budget):
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64) \
                or x.ndim < 2 or x.size == 0:
            return None
        dt, c = x.dtype, x.shape[1]
        scale, beta, mean, var = ops[:4]
        if not all(isinstance(v, np.ndarray) and v.dtype == dt and v.size == c
                   for v in (scale, beta, mean, var)):
            return None
        y_like = np.broadcast_to(np.zeros((), dt), x.shape)
        made = _epilogue(self.affine, ops[4:], y_like, dt, c,
                         bn=(mean, _bn_den(self.bn, var, dt), scale, beta), relu=self.relu)
        if made is None:
            return None
        costs = _chain_costs(self.chain, self.inner, env, y_like, budget)
        if costs is None:
            return None
        return dict(ep=made[0], keep=made[1], costs=costs, total=_total(costs))

    def _fused(self, env, budget, sess):
        try:
            x = env[self.x_name]
            ops = tuple([env[n] for n in self.const_names])
        except KeyError:
            return None
        p = _prepared(self, x, ops, lambda: self._prepare(x, ops, env, budget))
        if p is None:
            return None
        _charge(budget, self.chain, p["costs"], sess, p["total"])
        y = native.ep_apply(x, p["ep"])  # the Epilogue is read only: shared by every run
        if y is None:
            return None  # pragma: no cover - _prepare ran with native code there
        return _held(budget, y, len(self.chain) - 1, self.chain, sess)


class _Block(np.ndarray):
    """The output of a chain of Concats on one image (densenet's dense block): each Concat's
    output is a view of its first channels, ``filled`` of them written so far, and the next
    Concat of the chain writes only its new inputs after them."""

    filled = 0


def _root(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class ConcatInto:
    """Concat on the channel axis whose inputs made by fused convs for it alone (``parts``)
    are written by their C pass straight into their slices of its output; the others are
    copied, or, for a chain's first input (``grows``: the output of the ConcatInto before it),
    extended in place when its block has room (see core.onnx.plan). A copy is exact: the same
    bytes as the Concat node. ``relu``: the Relu that alone reads the output, taken by each
    slice as it is written (the fused convs' epilogue, the copies' ``x <= 0`` in place: an
    elementwise op commutes with the copy)."""

    def __init__(self, st, parts: list) -> None:
        self.step = st
        self.chain = [st]
        self.names = list(st.node.input)
        self.parts = parts  # per input: the FusedConv making it for this Concat alone, or None
        self.out = st.node.output[0]
        self.next: ConcatInto | None = None  # the one whose input 0 is our output (it grows)
        self.grows = False
        self.relu = None
        # (input shapes, dtype, the fused inputs' prepared answers, what they give: the
        # charges, their total, the output's geometry and bytes never materialised), or None
        self._cost: Any = None
        self._relu_eps: dict = {}  # (dtype, channels) -> the Relu-only Epilogue (ep_apply)

    def take_relu(self, st) -> None:
        """Take the Relu ``st`` that alone reads the output: the Concat's output becomes an
        intermediate, the Relu's output this entry's."""
        self.relu = st
        self.chain = [self.step, st]
        self.out = st.node.output[0]

    def run(self, sess, env, budget, run_sub) -> None:
        if not self._into(sess, env, budget, run_sub):
            for f in self.parts:
                if f is not None and f.out not in env:
                    f.run(sess, env, budget, run_sub)
            for st in self.chain:
                sess._run_step(st, sess.graph, env, budget, run_sub)

    def _room(self, env) -> int:
        """The channels the Concats after this one in its chain add while each adds fused
        convs' outputs only (their weights say how many): the room its block keeps for them."""
        room, nxt = 0, self.next
        while nxt is not None:
            add = 0
            for f in nxt.parts[1:]:
                w = env.get(f.const_names[0]) if f is not None else None
                if not isinstance(w, np.ndarray) or w.ndim != 4:
                    return room
                add += w.shape[0]
            room, nxt = room + add, nxt.next
        return room

    def _grown(self, x0, dt, ctot: int):
        """The block ``x0`` (input 0) is the filled start of, when it has room for ``ctot``
        channels, else None."""
        r = _root(x0)
        if isinstance(r, _Block) and r.filled == x0.shape[1] and r.dtype == dt \
                and x0.shape[0] == 1 and r.shape[2:] == x0.shape[2:] and r.shape[1] >= ctot \
                and x0.flags.c_contiguous and native.address(x0) == native.address(r):
            return r
        return None

    def _into(self, sess, env, budget, run_sub) -> bool:
        """The Concat's output into ``env`` with its fused inputs written in place (True), or
        False, before any charge of its own, when not covered (then the plain node runs)."""
        cases, vals, shapes, dt = [], [], [], None
        for name, f in zip(self.names, self.parts, strict=True):
            case = f._case(env, budget) if f is not None else None
            if f is not None and case is None:
                f.run(sess, env, budget, run_sub)  # made as it would be alone, then copied
            if case is None:
                v = env.get(name)
                if not isinstance(v, np.ndarray):
                    return False
                shapes.append(v.shape)
                d = v.dtype
            else:
                v = None
                shapes.append(case[0]["yshape"])
                d = case[1].dtype
            if dt is None:
                dt = d
            elif d != dt:
                return False  # the Concat node says what is wrong
            cases.append(case)
            vals.append(v)
        preps = [c[0] if c is not None else None for c in cases]
        got = self._cost
        if got is None or got[0] != shapes or got[1] != dt \
                or not all(map(operator.is_, got[2], preps)):
            got = self._cost = (shapes, dt, preps, self._charges(shapes, dt, cases, budget))
        if got[3] is None:
            return False
        # every charge at once when the plain nodes would be refused none (else they run, and
        # the refusal names its node): the nodes' work, the output and the values the plain
        # run would have held (the fused inputs and their intermediates, the Concat's output
        # under a Relu)
        costs, total, (n, ctot, h, w), size, inner = got[3]
        if not budget.admit(len(costs), *total, size, size * dt.itemsize + inner):
            return False
        blk, c0, first = None, 0, 0
        if self.grows and vals[0] is not None:
            blk = self._grown(vals[0], dt, ctot)
            if blk is not None:
                c0, first = vals[0].shape[1], 1
        if blk is None:
            room = self._room(env) if n == 1 and self.next is not None else 0
            if room:
                blk = _Block((n, ctot + room, h, w), dt)
                budget.hold_static({id(blk): blk}, 0)  # its views count as the plain run's do
            else:
                blk = _arena.empty((n, ctot, h, w), dt)
        relu = self.relu is not None
        for i in range(first, len(cases)):
            case, f = cases[i], self.parts[i]
            if case is None:
                part = blk[:, c0:c0 + shapes[i][1]]
                y = self._relu(vals[i]) if relu else None
                if y is not None:
                    part[...] = y
                else:
                    part[...] = vals[i]
                    if relu:  # the Relu kernel's x <= 0 -> +0.0 (NaN stays)
                        np.copyto(part, dt.type(0), where=part <= 0)
            else:
                f.write_into(case, blk, c0, relu)
            c0 += shapes[i][1]
        del cases
        if isinstance(blk, _Block):
            blk.filled = ctot
            y = blk[:, :ctot].view(np.ndarray)
            budget.charge(inner + y.nbytes)  # as the plain run holds the Concat's own output
        else:
            y = blk
            budget.hold_new(y, inner)  # (and the values above, never materialised)
        env[self.out] = y
        return True

    def _charges(self, shapes, dt, cases, budget):
        """(the charges of the Concat [and Relu] and of the fused inputs' chains, their
        _total, the output's (n, c, h, w), its elements, the bytes of the values the plain run
        would hold that this never makes), or None where the pass does not cover the shapes
        or a charge is not known."""
        if any(len(s) != 4 for s in shapes) or len({(s[0],) + tuple(s[2:]) for s in shapes}) != 1:
            return None  # the Concat node says what is wrong
        n, _, h, w = shapes[0]
        ctot = sum(s[1] for s in shapes)
        like = [np.broadcast_to(np.zeros((), dt), s) for s in shapes]
        costs = [budget.cost("Concat", like, self.step.attrs, self.step.opset)]
        if self.relu is not None:
            y_like = np.broadcast_to(np.zeros((), dt), (n, ctot, h, w))
            costs.append(budget.cost("Relu", [y_like], self.relu.attrs, self.relu.opset))
        if None in costs:
            return None
        size = n * ctot * h * w
        inner = size * dt.itemsize * (len(self.chain) - 1)
        for c, f in zip(cases, self.parts, strict=True):
            if c is not None:
                costs += c[0]["costs"]
                inner += math.prod(c[0]["yshape"]) * dt.itemsize * len(f.chain)
        return costs, _total(costs), (n, ctot, h, w), size, inner

    def _relu(self, x):
        """Relu of ``x`` by the conv epilogue's Relu in one C pass (``native.ep_apply``: the
        Relu kernel's bits, as a fused chain's), or None where it does not take ``x``."""
        if x.ndim < 2:
            return None
        key = (x.dtype, x.shape[1])
        ep = self._relu_eps.get(key)
        if ep is None:
            ep = self._relu_eps[key] = native.epilogue(x.dtype, x.shape[1], relu=True) or ()
        return native.ep_apply(x, ep[0]) if ep else None


def _fused_or_nodes(entry, sess, env, budget, run_sub) -> None:
    """A plan entry's C pass (``entry._fused``) into ``env[entry.out]``, or, where the pass
    does not cover the case, its chain's nodes one by one."""
    y = entry._fused(env, budget, sess)
    if y is None:
        for st in entry.chain:
            sess._run_step(st, sess.graph, env, budget, run_sub)
    else:
        env[entry.out] = y
