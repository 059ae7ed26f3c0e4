"""The recorder: a ``TorchDispatchMode`` that writes down every aten op of the user's unmodified
training step (forward, autograd's backward, the optimizer) without changing it.

Read-only by construction: each op runs exactly as it would (``func(*args, **kwargs)``, the
result handed back as it is); what the recorder keeps are copies (``detach().cpu()`` into numpy)
and digests. Tensors are keyed by identity and version counter (``t._version``), so an in-place
op's result is a new value, and a value is copied once: when an op makes it, or when an op first
reads it (parameters, data, optimizer state: the run's initial state).

Module paths come from global module forward hooks (a stack; backward ops get the module of the
forward op whose autograd node runs them: the hooks write down at which of autograd's node
numbers each module's forward began and ended, and a node's number says which module was
running when it was made; a parameter's gradient accumulation, the module that holds it);
the phase from autograd's engine (``_current_graph_task_id``) and the optimizer's step hooks;
a step ends at each ``optimizer.step()``. See docs/capture.md.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import gc
import inspect
import math
import os
import platform
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import xxhash
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from tapescope.app.capture.collectives import NAMESPACES as _COLLECTIVES
from tapescope.app.capture.collectives import encode as _encode_object
from tapescope.app.capture.collectives import refresh as _refresh
from tapescope.app.capture.collectives import settle as _settle
from tapescope.app.capture.limits import DEFAULT_MAX_BYTES
from tapescope.core.capture.file import (
    COMPILED_OP,
    DEFAULT_DIGEST,
    DIGESTS,
    LAYOUT_OPS,
    MAX_LOSS_CALLS,
    OVERWRITE_OPS,
    UNINITIALISED_OPS,
    Spool,
    c_strides,
    derived_digest,
    digest,
    raw_bytes,
    uninitialised_digest,
)

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OURS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), p) + os.sep for p in ("app", "core"))
_STDLIB = os.path.dirname(os.__file__) + os.sep
_PHASE = {"forward": 0, "backward": 1, "optimizer": 2}
# random ops: their outputs are the RNG's draws (recorded, never judged)
RANDOM_OPS = frozenset({
    "bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like", "randint",
    "randint_like", "randperm", "normal", "normal_", "uniform_", "exponential_", "geometric_",
    "cauchy_", "log_normal_", "random_", "multinomial", "native_dropout", "rrelu_with_noise",
    "poisson", "_standard_gamma", "_sample_dirichlet", "binomial"})
# ops that write arguments their schema does not mark (the running statistics): those are
# outputs too, first (core/capture/__init__.py's convention), whenever both are tensors
_UNMARKED_WRITES = {"aten.native_batch_norm.default": (3, 4),
                    "aten._native_batch_norm_legit.default": (3, 4),
                    "aten.cudnn_batch_norm.default": (3, 4),
                    "aten.miopen_batch_norm.default": (3, 4)}
_SKIP_NAMESPACES = ("profiler.",)


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


# dtypes whose CPU tensors numpy holds as they are (``Tensor.numpy()``, no conversion): the
# recorder's fast path; the rest (bfloat16, complex with its conj bit, float8, GPU, sparse,
# quantized ...) go through ``_np_of``
_NUMPY_DTYPES = {dt: _dtype_name(dt) for dt in (
    torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool)}
_STRIDED = torch.strided
# numpy's dtype of each torch dtype ``_np_of`` reads in place (bfloat16 through int16)
_NP_OF = {**{dt: np.dtype(n) for dt, n in _NUMPY_DTYPES.items()},
          torch.complex64: np.dtype("complex64"), torch.complex128: np.dtype("complex128")}
# argument types recorded as they are (the exact types: subclasses take ``_encode``'s way)
_PLAIN = frozenset({int, bool, str, type(None)})


# values smaller than this are hashed where they are made (a queue's round trip costs more)
_ASYNC_MIN = 1 << 16
# digests slow enough for the hashing thread to pay (by default): SHA-256 (~2 GB/s) is the
# recorder's largest per-byte cost; XXH3-128 (~15-20 GB/s) costs less than the thread's
# hand-offs and copies save (docs/capture.md, "Measured")
_THREADED = frozenset({"sha256"})
# bytes waiting for the hashing thread beyond which the step waits for it (the memory a
# deferred digest may hold: a private copy, or the tensor kept alive)
_PENDING_MAX = 256 << 20


class _Hasher:
    """Digests on a background thread (``hashlib`` releases the GIL for large buffers, so the
    user's step runs on while its values are hashed: with SHA-256, the recorder's largest
    per-byte cost).

    ``put(vid, a, span)``: hash ``a`` (C-contiguous, or made so on the thread) by
    ``hexdigest`` into ``sha[vid]``. ``span``: None when ``a`` is a private copy; else ``a`` is
    a view of a live tensor's own memory (hashes only, no copy) whose storage spans ``span =
    (lo, hi)``, which an op that writes there must not change before it is hashed: before such
    an op the recorder calls ``protect(spans written)``, which copies the queued ones (a copy
    is ~4x cheaper than their SHA-256) and waits for the one being hashed. Bounded: ``put`` waits
    while more than ``_PENDING_MAX`` bytes are queued."""

    def __init__(self, sha: list, hexdigest: Callable[[Any], str] = DIGESTS["sha256"][1]
                 ) -> None:
        self.sha = sha
        self.hexdigest = hexdigest
        self.cv = threading.Condition()
        self.queue: collections.deque[list] = collections.deque()  # [vid, array, span]
        self.current: list | None = None  # the item being hashed
        self.pending = 0  # bytes queued or being hashed
        self.live = 0  # items with a span queued or being hashed
        self.error: BaseException | None = None
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="tapescope-hash", daemon=True)
        self.thread.start()

    def put(self, vid: int, a: np.ndarray, span: tuple[int, int] | None) -> None:
        with self.cv:
            while self.pending > _PENDING_MAX and self.queue:
                self.cv.wait()
            self.queue.append([vid, a, span])
            self.pending += a.nbytes
            self.live += span is not None
            self.cv.notify_all()

    def protect(self, spans: list[tuple[int, int]]) -> None:
        """Memory in ``spans`` is about to be written: no queued digest may read it after."""
        def hit(span: tuple[int, int] | None) -> bool:
            return span is not None and any(lo < span[1] and span[0] < hi for lo, hi in spans)

        with self.cv:
            for item in self.queue:
                if hit(item[2]):
                    item[1] = np.array(item[1], order="C")  # a private copy, hashed later
                    item[2] = None
                    self.live -= 1
            while self.current is not None and hit(self.current[2]):
                self.cv.wait()

    def drain(self) -> None:
        """Wait until everything queued is hashed."""
        with self.cv:
            while self.pending:
                self.cv.wait()

    def close(self) -> None:
        self.drain()
        with self.cv:
            self.closed = True
            self.cv.notify_all()
        self.thread.join()

    def _run(self) -> None:
        sha, cv, queue, hexdigest = self.sha, self.cv, self.queue, self.hexdigest
        while True:
            with cv:
                while not queue and not self.closed:
                    cv.wait()
                if not queue:
                    return
                item = self.current = queue.popleft()
            vid, a, span = item
            try:
                sha[vid] = hexdigest(a if a.flags.c_contiguous else np.ascontiguousarray(a))
            except BaseException as e:  # noqa: BLE001 — the recorder reports it (``failed``)
                self.error = e
            with cv:
                self.current = None
                self.pending -= a.nbytes
                self.live -= span is not None
                cv.notify_all()


class _ResizeGuard:
    """While the hashing thread may read a live tensor's memory in place (``_Hasher``: no
    ``numpy()`` keeps it from being resized, ``_alias_np``): a storage resized from Python
    (``UntypedStorage.resize_``, which ``TypedStorage._resize_`` calls too: FSDP frees a
    parameter's storage so, outside aten, where the mode does not see it) first has the digests
    queued over its memory copied or finished (``_Hasher.protect``). ``remove`` puts the
    method back (a hook's handle)."""

    def __init__(self, hasher: _Hasher) -> None:
        cls = torch.UntypedStorage
        self.own = cls.__dict__.get("resize_")  # (None: inherited from torch._C.StorageBase)
        orig = cls.resize_

        def resize_(st: Any, size: int) -> Any:
            lo = st.data_ptr()
            if lo:
                hasher.protect([(lo, lo + st.nbytes())])
            return orig(st, size)

        cls.resize_ = resize_

    def remove(self) -> None:
        if self.own is None:
            del torch.UntypedStorage.resize_
        else:
            torch.UntypedStorage.resize_ = self.own


# a lazy module's parameters and buffers before its first forward (``nn.LazyLinear``): no
# memory to read (their ``shape``, ``data_ptr()`` raise)
_LAZY_TYPES = frozenset({torch.nn.parameter.UninitializedParameter,
                         torch.nn.parameter.UninitializedBuffer})


class _LazyArgument(Exception):
    """An op's argument is a lazy module's parameter not made yet (``_LAZY_TYPES``)."""


def _mode_may_leave() -> bool:
    """Whether the mode may leave the stack here: not inside ``torch.inference_mode``, whose
    end puts back the dispatch keys it found, the mode's among them; a mode gone by then leaves
    the Python key on with no mode to take it ("Hit Python dispatch key but no arguments had
    PyInterpreter" at the script's next op: validation under ``inference_mode`` right after
    the last recorded step). The mode passes ops through until a hook outside it."""
    return not torch.is_inference_mode_enabled()


def _core_free() -> bool:
    """Whether the step leaves a CPU to the hashing thread: torch's intra-op threads fewer than
    the CPUs this process may run on, or a GPU (whose step's CPU mostly waits)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return torch.get_num_threads() < cpus or torch.cuda.is_available()


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The addresses of ``t``'s storage (what a write through any view of it may change)."""
    s = t.untyped_storage()
    lo = s.data_ptr()
    return lo, lo + s.nbytes()


def _written(info: tuple, args: Any, kwargs: dict) -> list[tuple[int, int]]:
    """The storage spans an op is about to write (its schema's written arguments, and the
    running statistics batch norm writes unmarked)."""
    ts: list[torch.Tensor] = []
    for i, aname, kwarg_only in info[1]:
        ts += _tensors(args[i] if i < len(args) and not kwarg_only else kwargs.get(aname))
    for i in info[3] or ():
        if i < len(args) and isinstance(args[i], torch.Tensor):
            ts.append(args[i])
    return [_span(t) for t in ts if t.layout is _STRIDED]


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_IS_WRAPPED = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)


def _unwrapped(t: torch.Tensor) -> torch.Tensor:
    """The tensor a torch.func transform's wrapper holds (``vmap``'s batched tensor, ``grad``'s
    tracking one, nested), as the dispatch mode sees it; a module hook under ``functional_call``
    inside ``vmap(grad(...))`` sees the wrappers, which have no storage to read."""
    while _IS_WRAPPED is not None and _IS_WRAPPED(t):
        t = torch._C._functorch.get_unwrapped(t)
    return t


def _forward_hook_always(nn_module: Any, hook: Any) -> Any:
    """A global forward hook run also when the forward raises (``always_call``): the module
    stack stays the one running (a non-reentrant checkpoint stops its recompute by raising
    inside a forward; a script may catch a module's own error and go on)."""
    try:
        return nn_module.register_module_forward_hook(hook, always_call=True)
    except TypeError:  # a torch before always_call
        return nn_module.register_module_forward_hook(hook)


def _ptr(t: torch.Tensor) -> int:
    """t's data pointer, part of its identity to the recorder (``t.data = x`` moves it, no
    aten op seen); -1 for a tensor without one (sparse, a wrapper subclass: its pointer, 0 or
    a DTensor's 288, is no memory's)."""
    try:
        return -1 if _no_memory(t) else t.data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def _skey(t: torch.Tensor) -> int:
    """Where t's storage begins (its data pointer less its offset): the key of every tensor
    over that memory, a view that starts elsewhere included (``Recorder._by_ptr``); -1 for a
    tensor without one."""
    if _no_memory(t):
        return -1
    try:
        return t.data_ptr() - t.storage_offset() * t.element_size()
    except (RuntimeError, NotImplementedError):
        return -1


# the per-op path's lookups, bound once
_Tensor = torch.Tensor
_graph_task_id = torch._C._current_graph_task_id
_autograd_node = torch._C._current_autograd_node
_get_ident = threading.get_ident
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction  # (modes and subclasses alike)
_TENSOR_NUMPY = torch._C.TensorBase.numpy  # (the C method: the wrapper is torch.Tensor's own)
_getframe = sys._getframe
_NO_DISPATCH = getattr(torch._C, "_DisableTorchDispatch", None)  # None: numpy's copy only
_CHAR = ctypes.c_char
try:  # dynamo's frame callback (``Recorder.__torch_dispatch__`` turns it off)
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy
    from torch._C._dynamo.eval_frame import set_code_exec_strategy as _set_code_exec_strategy
    from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
except ImportError:  # no dynamo: nothing to turn off
    _set_code_exec_strategy = None

    def _set_eval_frame(callback: Any) -> None:
        return None


# the native tiled transpose (core/native's ts_transpose_uN, per item size), set by
# ``Recorder.start`` (``_load_transpose``): {} where native code is unavailable
_TRANSPOSE: dict[int, Any] = {}
#: below this many elements torch's copy costs less than a ctypes call
_TRANSPOSE_MIN = 4096
#: below this many elements numpy's strided copy costs less than torch's (its fixed ~4 us: a
#: dispatch guard, ``detach``, ``contiguous``, ``numpy``; 16x16 0.4 us against 3.8, 64x64
#: 1.7 against 6.5, 128x128 10.5 against 13); the zoo GPT's transposes are all below it
_NUMPY_COPY_MAX = 16384


#: values smaller than this are hashed, never derived (``Recorder._derived_source``): deciding
#: and recording one costs ~7 us of Python (the geometry's checks, the sentinel), more than a
#: C-order copy and a digest of up to ~4K elements (16x16 float32 3 us, 64x64 8-12 us,
#: 128x128 13-18 us, 384x384 68-96 us; measured 12:15, 2-core EPYC). In bytes, on any device
_DERIVE_MIN = 16384


def _load_transpose() -> None:
    """Load core/native's transposes once a process, before the step, where the library is
    built already (any earlier tapescope run on this machine built it): nothing is compiled in
    the user's process; torch's copy otherwise (the same bytes)."""
    global _TRANSPOSE
    if not _TRANSPOSE:
        try:
            from tapescope.core import native
            from tapescope.core.capture.aten_ref_shape import _native_transpose

            _TRANSPOSE = dict(_native_transpose()) if native.library(build=False) else {}
        except Exception:  # noqa: BLE001 — torch's copy instead: the same bytes
            _TRANSPOSE = {}


def _c_order(t: torch.Tensor, a: np.ndarray) -> np.ndarray:
    """A private C-order copy of ``a``, numpy's view of the not C-contiguous tensor ``t`` (a
    transpose, a permute: a value's digest and stored bytes are in C order). A swap of the
    last two axes of C-ordered memory (``t``, ``transpose(-1, -2)``: most of them) by the
    native tiled transpose (the items' bytes copied, nothing computed; 1.5-1.7x torch's copy on
    128-512 square float32 on 1 thread, and it allocates through numpy); else torch's copy
    where it can (its transpose copy is blocked: 2-6x numpy's strided one; with XXH3 these
    copies are the largest per-byte cost of hashes only), with every Python dispatch mode off,
    so that no mode, ours or the script's own, sees an op the script did not make; numpy's for
    a small value (``_NUMPY_COPY_MAX``), a tensor subclass or a layout torch calls
    contiguous."""
    if a.ndim >= 2 and a.size >= _TRANSPOSE_MIN:
        fn = _TRANSPOSE.get(a.itemsize)
        if fn is not None:
            x = a.swapaxes(-1, -2)
            # (aligned: the C reads whole items; a tensor over bytes at an odd offset,
            # torch.frombuffer's, is not)
            if x.flags.c_contiguous and x.flags.aligned and x.dtype.fields is None \
                    and not x.dtype.hasobject:
                r, c = x.shape[-2:]
                out = np.empty(a.shape, a.dtype)
                fn(x.ctypes.data, out.ctypes.data, x.size // (r * c), r, c)
                return out
    if a.size >= _NUMPY_COPY_MAX and _NO_DISPATCH is not None and type(t) in _PLAIN_TENSORS \
            and not t.is_contiguous():
        with _NO_DISPATCH():  # (torch's own numpy(): not app/capture/shared_np.py's wrapper,
            c = _TENSOR_NUMPY(t.detach().contiguous())  # which would watch our own copy)
        if c.flags.c_contiguous and c.shape == a.shape:
            return c
    return np.array(a, order="C")


def _collapsed(shape: Any, strides: Any) -> list[list[int]]:
    """``[size, stride]`` per dimension with the dimensions of one element left out and each
    run of dimensions that steps through memory as one merged: two tensors over one address
    whose forms are equal hold the same elements in the same C order (a ``view`` that splits
    or merges dimensions of a tensor that is not C-contiguous)."""
    out: list[list[int]] = []
    for sz, st in zip(shape, strides, strict=True):
        if sz == 1:
            continue
        if out and out[-1][1] == st * sz:
            out[-1] = [out[-1][0] * sz, st]
        else:
            out.append([sz, st])
    return out


def _opaque_bytes(t: torch.Tensor) -> tuple[str | None, bytes]:
    """The bytes a value numpy cannot hold is hashed by, and its ``OPAQUE_KINDS`` name (None:
    a strided tensor of a dtype without a numpy type, hashed by its own bytes). A sparse
    tensor: its layout, shape, and its index and value tensors' bytes (COO: ``_indices``,
    ``_values`` as stored; compressed: the compressed and plain indices and the values); a
    quantized one: its integers, scales and zero points; a meta tensor (no data) its dtype and
    shape, named ``meta``; a wrapper subclass with no memory of its own its type's name, dtype
    and shape, named ``subclass``. Anything else: its dtype and shape only, named
    ``unreadable``."""
    if _no_memory(t):  # (a wrapper subclass: its name, dtype and shape only; nothing run on
        # it, no ``detach``: its own ``__torch_dispatch__`` would see the recorder's reads)
        return "subclass", repr(("subclass", type(t).__name__[:64], str(t.dtype),
                                 tuple(t.shape))).encode()
    d = t.detach()
    if d.is_meta:  # (a model moved to the meta device: a shape, no data)
        return "meta", repr(("meta", str(d.dtype), tuple(d.shape))).encode()
    if d.is_nested:  # its components' sizes and bytes, in order
        try:
            parts = d.unbind()
            head = repr(("nested", str(d.dtype), [tuple(p.shape) for p in parts])).encode()
            return "nested", head + b"".join(
                _alias_np(p.cpu().contiguous().view(torch.uint8)).tobytes() for p in parts)
        except RuntimeError:
            return "unreadable", repr(("nested", str(d.dtype))).encode()
    if d.layout is torch.strided and not d.is_quantized:
        try:
            return None, _alias_np(d.cpu().contiguous().view(torch.uint8)).tobytes()
        except RuntimeError:
            pass
    head = repr((str(d.layout), str(d.dtype), tuple(d.shape))).encode()
    try:
        if d.layout is torch.sparse_coo:
            kind, parts = "sparse_coo", [d._indices(), d._values()]
        elif d.layout in (torch.sparse_csr, torch.sparse_bsr):
            kind = "sparse_csr" if d.layout is torch.sparse_csr else "sparse_bsr"
            parts = [d.crow_indices(), d.col_indices(), d.values()]
        elif d.layout in (torch.sparse_csc, torch.sparse_bsc):
            kind = "sparse_csc" if d.layout is torch.sparse_csc else "sparse_bsc"
            parts = [d.ccol_indices(), d.row_indices(), d.values()]
        elif d.is_quantized:
            kind, parts = "quantized", [d.int_repr()]
            if d.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
                head += repr((d.q_scale(), d.q_zero_point())).encode()
            else:
                parts += [d.q_per_channel_scales(), d.q_per_channel_zero_points()]
        else:
            return "unreadable", head
        return kind, head + b"".join(
            _alias_np(p.cpu().contiguous().view(torch.uint8)).tobytes() for p in parts)
    except RuntimeError:
        return "unreadable", head


def _no_memory(t: torch.Tensor) -> bool:
    """A tensor subclass whose values are not its memory's: one with its own
    ``__torch_dispatch__`` (torch's Python dispatch key: a wrapper made by
    ``_make_wrapper_subclass``, FSDP2's ``DTensor`` parameters). Its values are its inner
    tensors', which only the subclass knows; its data pointer is 0 or no address at all (a
    DTensor's: 288), and reading its memory read the heap or crashed the script."""
    if type(t) in _PLAIN_TENSORS:
        return False
    try:
        return _DISPATCH_KEYS(t).has(_PYTHON_KEY)
    except (RuntimeError, AttributeError):
        return True


_DISPATCH_KEYS = torch._C._dispatch_keys
_PYTHON_KEY = torch._C.DispatchKey.Python


# the largest uninitialised memory whose bytes are remembered (as a digest, in memory only)
# when it is made: C++ writes small index buffers so; the heap's garbage stays unrecorded
_SNAP_MAX = 1 << 20


def _span_digest(t: torch.Tensor) -> bytes | None:
    """XXH3-128 of the bytes ``t``'s elements span (a CPU strided tensor of at most
    ``_SNAP_MAX`` bytes of span), or None."""
    try:
        if not t.is_cpu or t.layout is not _STRIDED or t.numel() == 0:
            return None
        n = (1 + sum((sz - 1) * st for sz, st in zip(t.shape, t.stride(), strict=True))) \
            * t.element_size()
        if n > _SNAP_MAX or any(st < 0 for st in t.stride()):
            return None
        return xxhash.xxh3_128_digest((_CHAR * n).from_address(t.data_ptr()))
    except (RuntimeError, ValueError, TypeError):
        return None


def _alias_np(t: torch.Tensor, dtype: Any = None) -> np.ndarray:
    """A numpy array over CPU tensor ``t``'s own memory (its shape and strides; numpy's
    ``dtype``, else ``t``'s), holding its storage alive, without ``Tensor.numpy()``: that marks the
    storage not resizable for good (torch keeps a numpy view valid so), and a later
    ``resize_`` of it fails in the user's step (a QAT observer's ``running_min`` resized from
    0 elements, an ``out=`` resized, FSDP freeing a storage: "Trying to resize storage that is
    not resizable")."""
    dt = np.dtype(dtype if dtype is not None else _NUMPY_DTYPES[t.dtype])
    shape = tuple(t.shape)
    if t.numel() == 0:
        return np.empty(shape, dt)
    strides = t.stride()
    n = 1 + sum((sz - 1) * st for sz, st in zip(shape, strides, strict=True))
    buf = (_CHAR * (n * dt.itemsize)).from_address(t.data_ptr())
    # (the array's base holds the storage, so the memory stays while the array does; not the
    # tensor: the recorder's bookkeeping must see the script's tensors die as they would)
    buf._storage = t.untyped_storage()
    a = np.frombuffer(buf, dt, count=n)
    if shape == (n,) and strides == (1,):
        return a
    return np.lib.stride_tricks.as_strided(a, shape, [st * dt.itemsize for st in strides],
                                           writeable=False)


def _np_of(t: torch.Tensor) -> tuple[np.ndarray | None, bool]:
    """``t``'s value as numpy and whether that is already a private copy (else a view of the
    tensor's memory, to be copied before it is kept), or ``(None, False)`` for what numpy
    cannot hold."""
    if _no_memory(t):  # (a wrapper subclass: no memory of its own to read; not detached:
        return None, False  # its ``__torch_dispatch__`` would see that)
    a = t.detach() if t.requires_grad else t
    if a.layout is not torch.strided or a.is_quantized or a.is_meta or a.is_nested:
        return None, False
    if a._is_zerotensor():  # (forward AD's zero tangents: zeros, whatever their memory
        dt = _NP_OF.get(a.dtype)  # holds: it is never written, the heap's bytes)
        if dt is not None:
            return np.zeros(tuple(a.shape), dt), True
    own = not a.is_cpu
    if own:
        a = a.cpu()
    if a.dtype == torch.bfloat16:
        import ml_dtypes

        c = a.contiguous()
        return _alias_np(c, np.int16).view(ml_dtypes.bfloat16), own or c is not a
    try:
        r = a.resolve_conj().resolve_neg()
        dt = _NP_OF.get(r.dtype)
        if dt is None:
            raise TypeError(f"no numpy dtype for {r.dtype}")
        return _alias_np(r, dt), own or r is not a
    except (TypeError, RuntimeError):  # float8, uint16..., complex32: no numpy dtype
        return None, False


class _Losses(dict):
    """step -> the value its last backward call ran on (set by the Python path and by the C
    path's ``PyObject_SetItem``, which calls this ``__setitem__``); ``calls``: step -> every
    such value in order (gradient accumulation's micro-batches, LBFGS's closure evaluations),
    the first ``MAX_LOSS_CALLS`` (what the file's reader takes)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, list[int]] = {}

    def __setitem__(self, step: int, vid: int) -> None:
        super().__setitem__(step, vid)
        c = self.calls.setdefault(step, [])
        if len(c) < MAX_LOSS_CALLS:
            c.append(vid)


class Recorder(TorchDispatchMode):
    """Records the first ``steps`` training steps; then passes every op through untouched.

    ``on_done(recorder)`` runs once when the last step ends (the CLI writes the file there);
    ``on_step(n)`` after each recorded step (progress)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """dynamo compiles with this mode on (it would skip every frame otherwise and the
        compiled model would run eagerly); compiled graphs are recorded by
        app/capture/compiled.py as regions."""
        return True

    # large digests on a background thread (``_Hasher``): True, False, or None: with a slow
    # digest (``_THREADED``: SHA-256) when the step leaves a core free (torch's intra-op
    # threads fewer than the CPUs; a GPU step's CPU mostly waits). With none free it saves
    # nothing and its GIL hand-offs cost wall clock; with XXH3 hashing inline is cheaper
    # (docs/capture.md, "Measured")
    async_hash: bool | None = None
    # a view op's output that is its input's elements rearranged (``_derived_source``), where
    # it would be hashed, is recorded as derived: no C-order copy, no digest of its bytes
    # (False: hashed as any value, the layout before; benchmarks' A/B)
    derive_views: bool = True
    # the per-op path's common case in C (app/capture/recorder_hot.c) where it builds (False,
    # or TAPESCOPE_NO_NATIVE: the Python throughout, the same capture byte for byte)
    native: bool = True

    def __init__(self, steps: int = 2, max_bytes: int = DEFAULT_MAX_BYTES,
                 hashes_only: bool = False,
                 on_done: Callable[[Recorder], None] | None = None,
                 on_step: Callable[[int], None] | None = None,
                 digest: str = DEFAULT_DIGEST, spool: str | os.PathLike | None = None) -> None:
        super().__init__()
        if digest not in DIGESTS:
            raise ValueError(f"digest {digest!r} is unknown (known: {', '.join(DIGESTS)})")
        self.steps, self.max_bytes, self.hashes_only = steps, max_bytes, hashes_only
        self.digest = digest  # the values' digest algorithm (core.capture.file.DIGESTS)
        self._hex = DIGESTS[digest][1]
        self.on_done, self.on_step = on_done, on_step
        self.recording = True
        self.step = 1
        self.thread = threading.get_ident()
        self.thread_name: str | None = None  # the thread the recording followed (``_adopt``)
        self._adopted = False
        self._forward_seen = False  # a module forward recorded in the recording thread
        # values: per id its dtype name, shape, digest, array (None: hashed only)
        self.v_dtype: list[str] = []
        self.v_shape: list[tuple[int, ...]] = []
        self.v_sha: list[str | None] = []  # None: on the hashing thread (``_Hasher``)
        self.sha_like: list[tuple[int, int]] = []  # (value, value whose digest it shares)
        # derived values (``_made_derived``): value -> (its source, its strides over it); and
        # those whose source's digest is still on the hashing thread (made in ``_hashes_done``)
        self.derived: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.derived_later: list[int] = []
        # op row -> its first argument's memory layout (``LAYOUT_OPS``: ``_layout``)
        self.layouts: dict[int, tuple[list[int], int]] = {}
        # op row -> its first argument's layout where not C-contiguous (``ops.strided``)
        self.strided: dict[int, tuple[list[int], int]] = {}
        # value -> why it has no numpy form (``OPAQUE_KINDS``: a sparse layout, quantized)
        self.opaque: dict[int, str] = {}
        self.hasher: _Hasher | None = None
        # a stored value's array, or with a spool its index in the spool's table; None: hashed
        self.v_array: list[np.ndarray | int | None] = []
        # the file the values are written to as they are recorded (``core.capture.file.Spool``,
        # made by ``start`` beside ``spool``, the path the capture is for): None, in memory
        self.spool_path = spool
        self.spool: Spool | None = None
        self.stored_bytes = 0
        self.n_hashed = 0
        # id(tensor) -> (a weak reference to it, its uid, its data pointer): an id reused by a
        # new tensor after the old one died fails the identity check and gets a new uid, and so
        # does a tensor given other memory by ``t.data = x`` (``model.to(dtype)``,
        # ``vector_to_parameters``: no aten op, the version counter unmoved)
        self.uid: dict[int, tuple[weakref.ref, int, int]] = {}
        # storage (``_skey``) -> the tensors known over it (their uid entries' weak references):
        # a write through one may be a write to every other (``_alias_written``)
        self._by_ptr: dict[int, list[weakref.ref]] = {}
        self.next_uid = 0
        self._names_of: dict[int, tuple] = {}  # id(OpOverload) -> ``_op``
        self._uninit: set[int] = set()  # the names' indices of ops of uninitialised memory
        self._uninit_vids: set[int] = set()  # the values of uninitialised memory (sentinels)
        self.outside_writes = 0  # such values read by an op: recorded then (``_fresh_reads``)
        self._uninit_snap: dict[int, bytes] = {}  # their bytes' digests as they were made
        # storages (``_skey``) the script shares with numpy (``torch.from_numpy``,
        # ``Tensor.numpy()``: app/capture/shared_np.py) -> how many live tensors it was seen
        # through: numpy writes them with no aten op and no version counter moving, so every
        # op taking one compares its bytes with their recorded value (``_fresh_reads``)
        self._np_watch: dict[int, int] = {}
        self.seen: dict[tuple[int, int], int] = {}
        # ops, columns (interned tables for the strings)
        self.tables: dict[str, dict[str, int]] = {"names": {}, "modules": {}, "sources": {}}
        # one row per op, (op, module, phase, step, source, args, kwargs, outputs): one append
        # an op (the columns ``o_op`` ... are made from it when asked)
        self.rows: list[tuple[int, int, int, int, int, list, dict, list[int]]] = []
        self.step_start = [0]  # op index where each step starts
        self.losses: dict[int, int] = _Losses()
        self.last_ones_like: int | None = None  # the value a backward's seed was made like
        self.in_backward = False
        self.after_backward = False
        self.in_optimizer = 0
        self._closure_opt = 0  # optimizer steps whose closure is running (``_pre``)
        # the step's optimizers have stepped: it ends at the next op or module forward that is
        # not an optimizer's (``_end_step``); another optimizer stepping first is the same step
        # (two optimizers, one per parameter group, stepped one after the other)
        self.closing = False
        self._finish_later = False  # the last step ended inside an op: finish at the next hook
        self._opts_noted: set[int] = set()  # id() of the optimizers whose state is noted
        # the modules running, innermost last: (module, path, entered inside a backward: a
        # checkpoint's recompute, ``torch.utils.checkpoint``)
        self.modules: list[tuple[torch.nn.Module, str, bool]] = []
        # id(module) -> its path in the step's forward: a checkpoint's recompute (run inside
        # the backward, its module stack empty) names its modules as the forward did
        self._fwd_paths: dict[int, str] = {}
        # the module running from each of autograd's node numbers on (the hooks append at each
        # forward's start and end; numbers rise as nodes are made): a backward op's module is
        # the one its node was made in, found by bisection (``_backward_module``)
        self.module_from: list[int] = []
        self.module_path: list[str] = []
        self._param_modules: dict[int, str] = {}  # id(parameter) -> the path of its module
        self.initial: dict[str, list] = {"params": [], "buffers": [], "optimizer_state": []}
        self.roots_seen: set[int] = set()
        # the data pointers of the models' parameters and buffers (``_note_initial``, again at
        # each step's end): a write there outside an optimizer's step is the script's own
        # update (``_param_written``)
        self._param_ptr: set[int] = set()
        self._opt_ptrs: set[int] = set()  # parameters a torch.optim optimizer holds (memory)
        # class name -> the roots of that class, by slot (``_root_name``: Name, Name#2 ...)
        self._roots_by_class: dict[str, list[weakref.ref]] = {}
        self._opt_scan = -1  # the step of the last scan for them (``_optimizer_owns``)
        self._manual_update = False  # such a write since the step's backward: the step ends
        self.roots: list[tuple[str, torch.nn.Module]] = []
        self.quiet = False  # our own reads outside an op (initial state): not the user's ops
        self.error: BaseException | None = None  # on_done's own failure (writing the file)
        self.failed: str | None = None  # recording failed at an op (why); the script ran on
        self.settings: dict[str, Any] = {}
        self.devices: set[str] = set()
        self.hooks: list[Any] = []
        self.active = False
        self.done = False
        self.t0 = time.perf_counter()
        self._src_cache: dict[str, bool] = {}  # file name -> not the user's (skipped)
        self._src_idx: dict[tuple[str, int], int] = {}  # (file, line) -> its index in sources
        # the frame walk's caches (``_source``), keyed by the code object's id (a code object's
        # own hash reads its bytecode and constants: slow), the code kept alive in
        # ``_codes`` so that its id is never another's: whether it is not the user's; and per
        # (code, the instruction offset ``f_lasti``, which one line holds) the source's index
        self._code_skip: dict[int, bool] = {}
        self._codes: list[Any] = []
        self._src_at: dict[tuple[int, int], int] = {}
        self._names: dict[tuple[int, int], str] = {}
        self.graphs: list[dict] = []  # compiled graphs as data (app/capture/compiled.py)
        self._hot: Any = None  # the C per-op path (``_go_native``), or None
        self.ops_native = 0  # ops the C path recorded whole (counted when it stops)

    # ---- install / remove -------------------------------------------------------------------
    def start(self) -> Recorder:
        """Install the hooks and enter the mode."""
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_mod

        self.settings = settings()
        _load_transpose()
        if _NO_DISPATCH is not None and torch._C._len_torch_dispatch_stack():
            # a dispatch mode of the script's own is on (below ours): our reads are unseen
            self._new_value = self._new_value_unseen  # type: ignore[method-assign]
        if self.native:
            self._go_native()
        guard = self._guarded
        self.hooks = [
            nn_module.register_module_forward_pre_hook(guard(self._pre, "a module's forward")),
            _forward_hook_always(nn_module, guard(self._post, "a module's forward")),
            optim_mod.register_optimizer_step_pre_hook(guard(self._step_pre, "optimizer.step")),
            optim_mod.register_optimizer_step_post_hook(guard(self._step_post,
                                                              "optimizer.step"))]
        if self.async_hash or (self.async_hash is None and self.digest in _THREADED
                               and _core_free()):
            self.hasher = _Hasher(self.v_sha, self._hex)
            self.hooks.append(_ResizeGuard(self.hasher))
        elif self.spool_path is not None and self.spool is None and not self.hashes_only:
            # values hashed inline: each stored one goes to the file at once (the hashing
            # thread's values are hashed later: they stay in memory, as they did)
            try:
                self.spool = Spool(self.spool_path)
            except OSError:
                self.spool = None  # held in memory; writing the file says what is wrong
        self.__enter__()
        self.active = True
        return self

    def _go_native(self) -> None:
        """The C twins of ``_made``, ``_value_of`` and the argument loop, as this instance's
        own, where the extension builds (each calls the Python method for any case it does
        not know)."""
        from tapescope.app.capture import recorder_native

        global _HOT_SETUP
        mod = recorder_native.module()
        if mod is None or any(inspect.getattr_static(type(self), name) is not f
                              for name, f in _TWINS.items()):
            return  # (a method the C twins stands in for is another's: a test's, a subclass's)
        if not _HOT_SETUP:
            mod.setup(torch.Tensor, torch.nn.Parameter, _STRIDED, globals(), np.frombuffer,
                      _autograd_node)
            _HOT_SETUP = True
        hot = self._hot = mod.Hot(self.__dict__, self, self._hex, Recorder._made,
                                  Recorder._value_of)
        self._made = hot.made  # type: ignore[method-assign]
        self._value_of = hot.value_of  # type: ignore[method-assign]
        self._route_native()

    def stop(self) -> None:
        """Leave the mode (when it is the innermost one) and remove the hooks; idempotent. A
        step whose optimizers have stepped is complete (the last one asked: ``finish``, as
        when its step ends)."""
        if self._manual_update and not self.done:  # the script's own update was the last
            self.closing = True
        if self.closing and self.step >= self.steps and not self.done:
            self.finish()
            return
        if self.closing:
            self._count_step()
        self._finish_later = False
        self.recording = False
        if self._hot is not None:  # (the C path holds the recorder: the cycle undone)
            self.ops_native += self._hot.ops
            self._hot = None
            del self._made, self._value_of
            self.__dict__.pop("__torch_dispatch__", None)
        for h in self.hooks:
            h.remove()
        self.hooks = []
        self._hashes_done()
        self._leave_mode()

    def _leave_mode(self) -> None:
        """Leave the mode on this thread where ours is its innermost (else another mode
        entered after ours is still on top: ours stays, passing through). The recording may
        have followed the script into another thread (``_adopt``): each thread's own stack."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if (self.active or self._adopted) and _get_current_dispatch_mode() is self:
            self.__exit__(None, None, None)
            self.active = False

    def _hashes_done(self) -> None:
        """Wait for the hashing thread, end it, and give each value that shares a digest
        its own copy of it."""
        h, self.hasher = self.hasher, None
        if h is not None:
            h.close()
            if h.error is not None and self.failed is None:
                self.failed = (f"the recorder's hashing failed: {type(h.error).__name__}: "
                               f"{h.error}")[:300]
        for vid, like in self.sha_like:
            self.v_sha[vid] = self.v_sha[like]
        self.sha_like = []
        for vid in self.derived_later:  # (a source's digest may be one ``sha_like`` copied)
            self.v_sha[vid] = self._derived_digest(vid)
        self.derived_later = []

    # ---- hooks ------------------------------------------------------------------------------
    def _pre(self, mod: torch.nn.Module, args: Any) -> None:
        # first: while dynamo traces a module, the hook is traced too and must be nothing;
        # another thread's modules are not the step's, but for a recompute on autograd's
        # (a device's backward runs there)
        if _is_compiling():
            return
        in_bw = _graph_task_id() != -1
        if threading.get_ident() != self.thread and not in_bw and not self._adopt(mod):
            return
        if self._finish_later and _mode_may_leave():
            self.finish()
        if not self.recording:
            return
        if self._manual_update and not self.modules and not in_bw and not self.closing:
            # a step without torch.optim: the script wrote its parameters itself after the
            # backward (``_param_written``); it ends where the next forward begins
            self._manual_update = False
            self.closing = True
        if self.closing and not self._end_step(inside_op=False):
            return
        if not self.modules and in_bw:  # a checkpoint's recompute: the forward's own path
            path = self._fwd_paths.get(id(mod)) or type(mod).__name__
        elif not self.modules:
            self._forward_seen = True
            self.after_backward = False  # a new forward
            if self.in_optimizer:  # a closure's (LBFGS's step(closure)): forward, then backward,
                self._closure_opt += self.in_optimizer  # then the optimizer's own ops again
                self.in_optimizer = 0  # (after_backward); restored at the step's end
            # torch.compile(model)'s OptimizedModule: named and read as the model it wraps
            orig = getattr(mod, "_orig_mod", None) if type(mod).__name__ == \
                "OptimizedModule" else None
            path = self._root_name(orig if orig is not None else mod)
            if id(mod) not in self.roots_seen and self.step == 1:
                self.roots_seen.add(id(mod))
                self._note_initial(orig if orig is not None else mod, path)
        else:
            parent, ppath = self.modules[-1][:2]
            name = next((k for k, m in parent._modules.items() if m is mod), None)
            if name is None:  # a grandchild called directly (a ModuleList's item): its path
                name = self._names.get((id(parent), id(mod)))
                if name is None:
                    name = next((k for k, m in parent.named_modules() if m is mod and k),
                                type(mod).__name__)
                    self._names[(id(parent), id(mod))] = name
            path = f"{ppath}.{name}"
        if not in_bw:
            self._fwd_paths[id(mod)] = path
        self.modules.append((mod, path, in_bw))
        self.module_path.append(path)  # (first: a reader on autograd's thread bounds by from)
        self.module_from.append(_next_sequence_nr())

    def _post(self, mod: torch.nn.Module, args: Any, out: Any) -> None:
        if _is_compiling() or not self.recording or (threading.get_ident() != self.thread
                                                     and _graph_task_id() == -1):
            return
        if self.modules and self.modules[-1][0] is mod:
            self.modules.pop()
            self.module_path.append(self.modules[-1][1] if self.modules else "")
            self.module_from.append(_next_sequence_nr())

    def _backward_module(self, node: Any) -> str:
        """The module a backward op belongs to: the one running when its autograd node was
        made (its forward op's, a function its forward called between two children included);
        a gradient's accumulation into a parameter (AccumulateGrad, numbered last of all), the
        module holding the parameter."""
        if node is None:
            return ""
        nr = node._sequence_nr()
        if nr == _ACCUMULATE_NR:
            return self._param_module(getattr(node, "variable", None))
        i = bisect.bisect_right(self.module_from, nr) - 1
        return self.module_path[i] if i >= 0 else ""

    def _param_module(self, p: Any) -> str:
        if p is None:
            return ""
        path = self._param_modules.get(id(p))
        if path is None:  # (built when first asked, again for a parameter added since)
            table: dict[int, str] = {}
            for rpath, root in self.roots:
                for mpath, m in root.named_modules():
                    for q in m.parameters(recurse=False):  # a tied one: its first module's
                        table.setdefault(id(q), f"{rpath}.{mpath}" if mpath else rpath)
            self._param_modules = table
            path = table.setdefault(id(p), "")
        return path

    def _root_name(self, root: torch.nn.Module) -> str:
        """A top-level module's path: its class's name; where another module of that class is
        alive as a root too (a teacher and its student, two heads), the second ``Name#2``,
        the third ``Name#3`` ... (they shared one path: their initial parameters' names
        collided). A root made afresh each step (``nn.CrossEntropyLoss()(out, y)``) takes the
        slot of the dead one before it: the same name every step."""
        base = type(root).__name__
        slots = self._roots_by_class.setdefault(base, [])
        free = None
        for k, r in enumerate(slots):
            m = r()
            if m is root:
                return base if k == 0 else f"{base}#{k + 1}"
            if m is None and free is None:
                free = k
        if free is None:
            slots.append(weakref.ref(root))
            free = len(slots) - 1
        else:
            slots[free] = weakref.ref(root)
        return base if free == 0 else f"{base}#{free + 1}"

    def _adopt(self, mod: torch.nn.Module) -> bool:
        """A model's forward (a module with parameters) in another thread before any in the
        recording thread: the script trains there (its loop in a ``threading.Thread``), and
        the recording follows it -- the mode entered on that thread's stack too (a dispatch
        mode is a thread's own), the recording thread that one (``meta.thread``). False:
        another thread's forward, not the step's (an evaluation's; a loader thread's
        transforms, modules without parameters)."""
        if self._forward_seen or not self.recording or not self.active or \
                next(mod.parameters(), None) is None:
            return False
        self.__enter__()
        self._adopted = True
        self.thread = threading.get_ident()
        self.thread_name = threading.current_thread().name
        return True

    def _step_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self.thread and _graph_task_id() == -1:
            return  # (another thread's optimizer: not the step's)
        if self._finish_later and _mode_may_leave():
            self.finish()
        if not self.recording:
            return
        if self.closing:  # another optimizer, no op between: the same step
            self.closing = False
            self._route_native()
        self.in_optimizer += 1
        if id(opt) not in self._opts_noted:  # its state before its first step (any step's)
            self._opts_noted.add(id(opt))
            names = {}
            for path, root in self.roots:
                for n, p in root.named_parameters():
                    names[id(p)] = f"{path}.{n}"
            self.quiet = True
            try:
                for g in opt.param_groups:
                    for p in g["params"]:
                        for k, v in opt.state.get(p, {}).items():
                            if isinstance(v, torch.Tensor):
                                self.initial["optimizer_state"].append(
                                    [names.get(id(p), "?"), k, self._value_of(v)])
            finally:
                self.quiet = False

    def _step_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.recording or (threading.get_ident() != self.thread
                                  and _graph_task_id() == -1):
            return
        self.in_optimizer = max(0, self.in_optimizer + self._closure_opt - 1)
        self._closure_opt = 0
        if self.in_optimizer:
            return
        if _graph_task_id() != -1:
            # stepped from a gradient hook inside backward (the "optimizer step in backward"
            # pattern: one optimizer per parameter, stepped by its post-accumulate-grad hook):
            # the backward goes on, the step ends at the next forward (as a script's own
            # update's does)
            self._manual_update = True
            return
        self.closing = True
        if self._hot is not None:  # the next op comes through the Python path (``_end_step``)
            self.__dict__.pop("__torch_dispatch__", None)

    def _route_native(self) -> None:
        """The C per-op path as the instance's ``__torch_dispatch__`` (where the class's is
        ours): torch's dispatch finds the instance's own first, the C path called directly,
        no Python frame between (~0.4 us an op)."""
        if self._hot is not None and \
                inspect.getattr_static(type(self), "__torch_dispatch__") is _DISPATCH:
            self.__torch_dispatch__ = self._hot  # type: ignore[method-assign]

    def _count_step(self) -> None:
        self.closing = False
        self._manual_update = False
        if self._np_watch:
            self._sweep_watch()
        self.step_start.append(len(self.rows))
        self._note_param_ptrs()  # (a parameter given other memory since: its pointer now)
        self._by_ptr = {p: live for p, refs in self._by_ptr.items()
                        if (live := [r for r in refs if r() is not None])}
        if self.on_step is not None:
            self.on_step(self.step)
        self.after_backward = False

    def _end_step(self, inside_op: bool) -> bool:
        """The closing step ends: an op or a module's forward that is not an optimizer's has
        come. False where it was the last: recording ends (inside an op, at the next hook:
        the mode cannot be left from its own ``__torch_dispatch__``; the op is not recorded)."""
        self._count_step()
        self._route_native()
        if self.step < self.steps:
            self.step += 1
            return True
        if inside_op or not _mode_may_leave():
            self.recording = False
            self._finish_later = True
        else:
            self.finish()
        return False

    def finish(self) -> None:
        """Stop recording (the script runs on) and hand the result to ``on_done`` once."""
        if self.done:
            self._leave_mode()  # (the recording followed another thread: this one's mode)
            return
        self.done = True
        self.stop()
        if self.on_done is not None:
            try:
                self.on_done(self)
            except Exception as e:  # noqa: BLE001 — never the user's step's failure: kept
                self.error = e

    def _note_param_ptrs(self) -> None:
        """``_param_ptr`` afresh: every recorded model's parameters and buffers."""
        ts = (_unwrapped(t) for _, root in self.roots
              for t in (*root.parameters(), *root.buffers()))
        self._param_ptr = {_ptr(t) for t in ts if type(t) in _PLAIN_TENSORS} - {-1}

    def _param_written(self, t: torch.Tensor) -> None:
        """An op outside an optimizer's step wrote ``t``: where that is a model's parameter or
        buffer (its memory), after the step's backward and outside any forward, it is the
        script's own update (``with torch.no_grad(): p -= lr * p.grad``, ``p.data.add_(...)``):
        a step without torch.optim ends at the next forward. (A parameter written through
        ``p.data`` is read afresh by ``_alias_written``.)"""
        if _ptr(t) in self._param_ptr and self.after_backward and not self.modules and \
                not self._closure_opt and _graph_task_id() == -1 and \
                not self._optimizer_owns(t):
            self._manual_update = True  # (between an optimizer's closures: its own update)

    def _optimizer_owns(self, t: torch.Tensor) -> bool:
        """Whether a ``torch.optim`` optimizer holds parameter ``t`` (its memory): then a
        write outside its ``step()`` is a step's own business, and the step ends at that
        ``step()``: SAM writes the parameters (``p.add_(e_w)``) between its two backward passes,
        then its base optimizer steps; a script's own update (no optimizer) ends the step at
        the next forward. The optimizers are found by a scan of the garbage collector's
        objects (they may be made before the capture began), at most once a step where the
        parameter is not among those found."""
        p = _ptr(t)
        if p in self._opt_ptrs:
            return True
        if self._opt_scan == self.step:
            return False
        self._opt_scan = self.step
        ptrs: set[int] = set()
        opt_type = torch.optim.Optimizer
        for o in gc.get_objects():
            # (the type itself: ``isinstance`` may read an object's ``__class__``, and a
            # deprecated alias of torch's warns on the user's stderr when asked)
            if issubclass(type(o), opt_type):
                for g in getattr(o, "param_groups", ()) or ():
                    for q in g.get("params", ()) if isinstance(g, dict) else ():
                        if isinstance(q, torch.Tensor):
                            ptrs.add(_ptr(q))
        self._opt_ptrs = ptrs - {-1}
        return p in self._opt_ptrs

    def _alias_written(self, t: torch.Tensor) -> None:
        """An op wrote ``t``: every other tensor the recorder knows over its storage may hold
        written bytes too. One with a version counter of its own (``p.data``'s alias written,
        or ``p`` written through it: ``module.weight.data.normal_(0, 0.02)``, a row of it:
        ``weight.data[padding_idx].zero_()``, a mean teacher's ``ema.data.mul_(d).add_(...)``)
        would still name its old value: each is forgotten (its uid), so its next read records
        its bytes afresh. (A view sharing the counter is at a new version anyway: nothing
        changes for it.)"""
        p = _skey(t)
        refs = self._by_ptr.get(p)
        if not refs:
            return
        keep = []
        for r in refs:
            x = r()
            if x is t:
                keep.append(r)
            elif x is not None:
                e = self.uid.get(id(x))
                if e is not None and e[0]() is x:
                    del self.uid[id(x)]
        self._by_ptr[p] = keep

    def _note_initial(self, root: torch.nn.Module, path: str) -> None:
        if next(root.parameters(), None) is None and next(root.buffers(), None) is None:
            return  # (nothing to note; and not held: a loss module made afresh each step)
        self.roots.append((path, root))
        self.quiet = True
        try:
            # (a lazy module's parameters have no memory yet, ``nn.LazyLinear``: made in its
            # first forward by recorded ops, ``empty`` and its init, so not initial values)
            for n, p in root.named_parameters():
                p = _unwrapped(p)
                if type(p) not in _LAZY_TYPES:
                    self.initial["params"].append([f"{path}.{n}", self._value_of(p)])
            for n, b in root.named_buffers():
                b = _unwrapped(b)
                if type(b) not in _LAZY_TYPES:
                    self.initial["buffers"].append([f"{path}.{n}", self._value_of(b)])
        finally:
            self.quiet = False
        self._note_param_ptrs()

    # ---- values -----------------------------------------------------------------------------
    # (the per-op path: every line here runs once per op or per tensor of the user's step, so
    # it is written flat — few calls, cached lookups — and measured: benchmarks/bench_capture.py
    # --micro)
    def _key(self, t: torch.Tensor) -> tuple[int, int]:
        e = self.uid.get(id(t))
        p = _ptr(t)
        if e is not None and e[0]() is t and e[2] == p:
            u = e[1]
        else:
            u = self.next_uid
            r = weakref.ref(t)
            self.uid[id(t)] = (r, u, p)
            if p > 0:
                self._by_ptr.setdefault(_skey(t), []).append(r)
            self.next_uid += 1
        try:
            ver = t._version
        except RuntimeError:  # inference tensors have no version counter
            ver = -1
        return u, ver

    def _new_value(self, t: torch.Tensor, made: bool = False) -> int:
        """Record ``t``'s value; ``made``: an op's output (not a value first seen as an
        input)."""
        if type(t) in _LAZY_TYPES:  # (before anything is noted: the op is passed over)
            raise _LazyArgument
        name = _NUMPY_DTYPES.get(t.dtype)
        if name is not None and t.is_cpu and t.layout is _STRIDED and not t.is_neg() \
                and not t.is_nested and not t._is_zerotensor() and not _no_memory(t):
            # the common case: a CPU tensor numpy holds as it is (a ZeroTensor, forward AD's
            # zero tangents, is zeros whatever its memory holds: ``_new_value_any``)
            self.devices.add("cpu")
            vid = len(self.v_dtype)
            self.v_dtype.append(name)
            n = t.nbytes
            # hashed only: the digest of the tensor's own memory (no copy); an op's output
            # large enough on the hashing thread (the ops that write drain it first), a value
            # first seen here now (data, parameters: written outside aten, maybe)
            hashed = self.hashes_only or self.stored_bytes + n > self.max_bytes
            if hashed and made and n >= _ASYNC_MIN and self.hasher is not None:
                self.v_array.append(None)
                self.n_hashed += 1
                a = _alias_np(t)  # (holds its storage: the memory stays alive)
                self.v_shape.append(a.shape)  # should ``t.data = ...`` swap t's away
                self.v_sha.append(None)
                self.hasher.put(vid, a, _span(t))
                return vid
            if type(t) in _PLAIN_TENSORS and t.is_contiguous():
                p = t.data_ptr()
                if p:
                    # its bytes where they lie, through a ctypes array: no ``numpy()`` (~0.8
                    # us: it runs detach, to, resolve_conj and resolve_neg through the
                    # dispatcher); stored, a bytes copy that numpy reads (read-only)
                    buf = (_CHAR * n).from_address(p)
                    shape = tuple(t.shape)
                    self.v_shape.append(shape)
                    if hashed:
                        self.v_array.append(None)
                        self.n_hashed += 1
                        self.v_sha.append(self._hex(buf))
                        return vid
                    if self.spool is not None:  # to the file from the tensor's memory
                        h = self._hex(buf)
                        self.v_sha.append(h)
                        self.v_array.append(self.spool.put(buf, n, h))
                        self.stored_bytes += n
                        return vid
                    raw = buf.raw
                    c = np.frombuffer(raw, name).reshape(shape)
                    self.v_array.append(c)
                    self.stored_bytes += n
                    if n >= _ASYNC_MIN and self.hasher is not None:
                        self.v_sha.append(None)
                        self.hasher.put(vid, c, None)
                    else:
                        self.v_sha.append(self._hex(raw))
                    return vid
            a = _alias_np(t)  # a view of its memory (no ``numpy()``: it stays resizable)
            self.v_shape.append(a.shape)
            if hashed:
                self.v_array.append(None)
                self.n_hashed += 1
                self.v_sha.append(self._hex(a if a.flags.c_contiguous else _c_order(t, a)))
            else:
                # a private copy: later in-place ops must not reach it
                c = np.array(a, order="C") if a.flags.c_contiguous else _c_order(t, a)
                if self.spool is not None:
                    h = self._hex(c)
                    self.v_sha.append(h)
                    self.v_array.append(self.spool.put(c, c.nbytes, h))
                    self.stored_bytes += c.nbytes
                    return vid
                c.setflags(write=False)
                self.v_array.append(c)
                self.stored_bytes += c.nbytes
                if c.nbytes >= _ASYNC_MIN and self.hasher is not None:
                    self.v_sha.append(None)
                    self.hasher.put(vid, c, None)
                else:
                    self.v_sha.append(self._hex(c))
            return vid
        return self._new_value_any(t)

    def _new_value_unseen(self, t: torch.Tensor, made: bool = False) -> int:
        """``_new_value`` with every Python dispatch mode off: where a mode of the script's own
        was on before ours (``start``), the ops our reads run (``numpy()``'s ``detach`` ...,
        a copy) are no one's to see."""
        with _NO_DISPATCH():
            return Recorder._new_value(self, t, made)

    def _new_value_any(self, t: torch.Tensor) -> int:
        """``_new_value`` for any tensor: another device, bfloat16, conj/neg bits, or none that
        numpy can hold."""
        self.devices.add(str(t.device))
        a, private = _np_of(t)
        vid = len(self.v_dtype)
        self.v_dtype.append(_dtype_name(t.dtype))
        # (a nested tensor has no one shape: its number of components)
        self.v_shape.append(tuple(t.shape) if not t.is_nested else (t.size(0),))
        if a is None:  # no numpy form: the digest of its bytes through torch
            kind, raw = _opaque_bytes(t)
            if kind is not None:
                self.opaque[vid] = kind
            self.v_sha.append(self._hex(raw))
            self.v_array.append(None)
            self.n_hashed += 1
            return vid
        self.v_sha.append(digest(a, self.digest))  # of the tensor's own memory: no copy
        if self.hashes_only or self.stored_bytes + a.nbytes > self.max_bytes:
            self.v_array.append(None)
            self.n_hashed += 1
        elif self.spool is not None:  # to the file now: later in-place ops cannot reach it
            self.v_array.append(self.spool.put(raw_bytes(a), a.nbytes, self.v_sha[-1]))
            self.stored_bytes += a.nbytes
        else:
            if not private or not a.flags.c_contiguous:
                a = np.array(a, copy=True, order="C")  # later in-place ops must not reach it
            a.setflags(write=False)
            self.v_array.append(a)
            self.stored_bytes += a.nbytes
        return vid

    def _value_of(self, t: torch.Tensor) -> int:
        """The value id of ``t`` as it is now (recorded on first sight)."""
        if type(t) in _LAZY_TYPES:  # (before anything is noted: the op is passed over)
            raise _LazyArgument
        e = self.uid.get(id(t))  # _key, inlined: this runs for every tensor argument
        p = _ptr(t)
        if e is not None and e[0]() is t and e[2] == p:
            u = e[1]
        else:
            u = self.next_uid
            r = weakref.ref(t)
            self.uid[id(t)] = (r, u, p)
            if p > 0:
                self._by_ptr.setdefault(_skey(t), []).append(r)
            self.next_uid += 1
        try:
            k = (u, t._version)
        except RuntimeError:  # inference tensors have no version counter
            k = (u, -1)
        vid = self.seen.get(k)
        if vid is None:
            if self.derive_views and type(t) in _PLAIN_TENSORS and t._base is not None \
                    and t.layout is _STRIDED and not t.is_contiguous():
                vid = self._derived_input(t, t._base)
            if vid is None:
                vid = self._new_value(t)
            self.seen[k] = vid
        return vid

    def _made(self, t: torch.Tensor, written: bool = False) -> int:
        """The value an op just made (or wrote) in ``t``. A written argument's version counter
        moves only after the op returns through the mode (autograd's ADInplaceOrView kernel
        bumps it on the way back up), or not at all (below it, or an unmarked write): the new
        value is the one read at either version."""
        e = self.uid.get(id(t))  # _key, inlined: this runs for every output
        p = _ptr(t)
        if e is not None and e[0]() is t and e[2] == p:
            u = e[1]
        else:
            u = self.next_uid
            r = weakref.ref(t)
            self.uid[id(t)] = (r, u, p)
            if p > 0:
                self._by_ptr.setdefault(_skey(t), []).append(r)
            self.next_uid += 1
        try:
            ver = t._version
        except RuntimeError:  # inference tensors have no version counter
            ver = -1
        vid = self._new_value(t, True)
        self.seen[(u, ver)] = vid
        if written and ver >= 0:
            self.seen[(u, ver + 1)] = vid
        if written:
            self._alias_written(t)
            if self._param_ptr and not self.in_optimizer:
                self._param_written(t)
        return vid

    @staticmethod
    def _same_bytes(out: torch.Tensor, args: Any, enc_args: list) -> int | None:
        """The value id of the argument whose recorded value is ``out``'s bytes (a view's
        output over the same memory in the same order: both C-contiguous CPU tensors of one
        dtype, element count and address; ``view``, ``unsqueeze``, ``alias``, ``detach`` of a
        contiguous tensor), or None. Its digest and stored array are the argument's: no second
        SHA-256 or copy of the same bytes."""
        if out.dtype not in _NUMPY_DTYPES or not out.is_cpu or out.layout is not _STRIDED \
                or out.is_neg() or not out.is_contiguous():
            return None
        p, n, dt = out.data_ptr(), out.numel(), out.dtype
        if not p or _no_memory(out):  # (a wrapper subclass's pointer is no memory's)
            return None
        for a, e in zip(args, enc_args, strict=False):
            # (the layout first: a sparse argument has no data pointer to ask for)
            if isinstance(a, torch.Tensor) and not _no_memory(a) and a.layout is _STRIDED \
                    and a.dtype is dt \
                    and a.data_ptr() == p and a.numel() == n and not a.is_neg() \
                    and a.is_contiguous():
                return e["T"]
        return None

    def _made_uninitialised(self, t: torch.Tensor) -> int:
        """``_made`` for an output of uninitialised memory (``empty``, ``empty_like`` ...):
        its bytes are whatever the process's memory held (another tensor's freed bytes, a
        file read earlier), so they are neither stored nor hashed, or the capture would carry
        them to whoever is sent the file; its digest a sentinel of its dtype and shape. The
        judge records such an op's output as ``recorded``; an op that reads it before writing
        it is ``unjudged``, and says so."""
        u, ver = self._key(t)
        vid = len(self.v_dtype)
        dt = _NUMPY_DTYPES.get(t.dtype) or _dtype_name(t.dtype)
        shape = tuple(t.shape)
        self.devices.add(str(t.device))
        self.v_dtype.append(dt)
        self.v_shape.append(shape)
        self.v_array.append(None)
        self.v_sha.append(uninitialised_digest(self.digest, dt, shape))
        self.seen[(u, ver)] = vid  # (not counted as hashed: nothing of it is recorded)
        self._uninit_vids.add(vid)
        snap = _span_digest(t)  # (kept here only: what C++ may write over, ``_fresh_reads``)
        if snap is not None:
            self._uninit_snap[vid] = snap
        return vid

    def _note_strided(self, t: torch.Tensor) -> None:
        """The last recorded op's first argument's layout where it is not C-contiguous
        (``ops.strided``: --explain follows a kernel's order over it)."""
        if t.layout is _STRIDED and not t.is_contiguous() and self.rows:
            lay = _layout(t)
            if lay is not None and min(lay[0], default=0) >= 0:
                self.strided[len(self.rows) - 1] = lay

    def _fresh_reads(self, args: Any, enc_args: list, info: tuple) -> list:
        """``enc_args`` with each positional tensor (or one in a list) whose value is
        uninitialised memory as far as the recorded ops go read afresh, its bytes now a value
        of their own, where they changed since the ``empty`` that made it: an op reading such
        memory reads what C++ wrote there outside aten, where no version counter moves
        (``pad_packed_sequence``'s lengths, filled through their pointer; DDP's bucket
        indices), which were otherwise unjudged. Bytes as the ``empty`` found them (the heap's:
        a script reading memory it never wrote), or memory too large to have been compared
        (``_SNAP_MAX``), stay unrecorded. Only memory an op reads is considered (a view, a
        shape, an overwrite read none). A tensor over memory the script shares with numpy
        (``_np_watch``) whose bytes are no longer its recorded value's (numpy wrote them: a
        batch buffer refilled, a weight edited through ``.numpy()``) is read afresh likewise,
        by any op that takes it (a view's output is made of its bytes as they are)."""
        uninit = self._uninit_vids if info[13] else ()
        snap, watch = self._uninit_snap, self._np_watch

        def fresh(a: Any, e: Any) -> Any:
            if type(e) is dict and isinstance(a, _Tensor):
                vid = e.get("T")
                if vid in uninit:
                    was = snap.get(vid)
                    if was is None or _span_digest(a) == was:
                        return e  # (the heap's bytes as the ``empty`` found them: not recorded)
                else:
                    sk = _skey(a) if watch else -1
                    if sk not in watch:
                        return e
                    wrote = self._numpy_wrote(a, vid)
                    if watch.get(sk) == 0:  # (its array is gone: this read was the last;
                        watch.pop(sk, None)  # pop: a finalizer may run on another thread)
                    if not wrote:
                        return e
                k = self._key(a)
                vid = self._new_value(a)
                self.seen[k] = vid
                self.outside_writes += 1
                return {"T": vid}
            if type(e) is list and isinstance(a, (list, tuple)) and len(a) == len(e):
                return [fresh(x, y) for x, y in zip(a, e, strict=True)]
            return e
        skip = 1 if info[11] else 0  # (an overwrite's first argument: written, not read)
        return list(enc_args[:skip]) + [fresh(a, e) for a, e in zip(
            args[skip:], enc_args[skip:], strict=False)] + list(enc_args[len(args):])

    def _numpy_wrote(self, t: torch.Tensor, vid: Any) -> bool:
        """Whether ``t``'s bytes are no longer value ``vid``'s as recorded: compared with its
        stored array, else with its digest; False where neither is at hand (a derived view,
        whose source is compared; a digest still on the hashing thread)."""
        if type(vid) is not int or not 0 <= vid < len(self.v_array) or vid in self.derived \
                or not t.is_cpu or t.layout is not _STRIDED:
            return False
        try:
            a = _alias_np(t)
        except (TypeError, ValueError, RuntimeError):
            return False
        kept = self.v_array[vid]
        if isinstance(kept, np.ndarray):
            return kept.shape != a.shape or not np.array_equal(
                kept.reshape(-1).view(np.uint8), np.ascontiguousarray(a).reshape(-1).view(
                    np.uint8))
        h = self.v_sha[vid]
        if not isinstance(h, str):
            return False
        return self._hex(a if a.flags.c_contiguous else _c_order(t, a)) != h

    def watch_shared(self, t: torch.Tensor, holder: Any = None) -> None:
        """``t``'s memory is shared with numpy (``app/capture/shared_np.py``), watched
        (``_fresh_reads``): while ``t`` lives (``from_numpy``'s tensor: when it dies, no tensor
        is over that memory); or, ``holder`` the array ``t.numpy()`` gave, while it lives and
        then until an op next takes that memory (numpy wrote it through the array, which a
        script drops at once: ``p.numpy()[0] *= 0.5``) or no tensor known over it is left
        (``_sweep_watch``, at each step's end)."""
        k = _skey(t)
        if k <= 0 or not t.is_cpu:
            return
        watch = self._np_watch
        watch[k] = watch.get(k, 0) + 1
        keep = holder is not None

        def gone(k: int = k, watch: dict = watch, keep: bool = keep) -> None:
            n = watch.get(k)
            if n is None:
                return
            if n > 1 or keep:
                watch[k] = max(n - 1, 0)  # (0: read once more, then forgotten)
            else:
                watch.pop(k, None)
        try:
            weakref.finalize(t if holder is None else holder, gone)
        except TypeError:  # (what takes no weak reference: watched for good)
            pass

    def _sweep_watch(self) -> None:
        """Forget watched memory no array holds that no live tensor known to the recorder is
        over any more (``watch_shared``)."""
        watch, by_ptr = self._np_watch, self._by_ptr
        for k in [k for k, n in watch.items() if n == 0]:
            if not any(r() is not None for r in by_ptr.get(k, ())):
                watch.pop(k, None)

    def _unread(self, t: torch.Tensor) -> None:
        """``t``, the first argument of an op that overwrites it unread (``OVERWRITE_OPS``),
        recorded as ``_made_uninitialised``'s sentinel where this is the first the recorder
        sees of it at its version: its bytes are read by no op of the step (and may be the
        heap's garbage: a ``Parameter(torch.empty(...))`` that ``uniform_`` fills), so they
        are neither stored nor hashed; where the recorder has it already, nothing changes."""
        u, ver = self._key(t)
        if (u, ver) not in self.seen:
            self._made_uninitialised(t)

    def _made_like(self, t: torch.Tensor, like: int) -> int:
        """``_made`` for a value whose bytes are value ``like``'s (``_same_bytes``)."""
        u, ver = self._key(t)
        vid = len(self.v_dtype)
        self.v_dtype.append(self.v_dtype[like])
        self.v_shape.append(tuple(t.shape))
        h = self.v_sha[like]
        self.v_sha.append(h)
        if h is None:  # still on the hashing thread: copied when the file is made
            self.sha_like.append((vid, like))
        a = self.v_array[like]
        # stored where ``like`` is, named again at no charge to the budget (the budget is
        # disk: the file and its load hold the same bytes once)
        if type(a) is int:  # in the spool
            self.v_array.append(a)
        elif a is None or self.hashes_only:
            self.v_array.append(None)
            self.n_hashed += 1
        else:
            self.v_array.append(a.reshape(t.shape))  # a view of the same private copy
        self.seen[(u, ver)] = vid
        return vid

    def _derived_source(self, out: torch.Tensor, args: Any, enc_args: list
                        ) -> tuple[int, tuple[int, ...] | None] | None:
        """Where a view op's output ``out`` (not C-contiguous) holds exactly a tensor
        argument's elements, rearranged: ``(source value, out's strides over the source's
        C-order elements)``, or ``(value, None)`` where ``out`` holds that argument's value in
        its own C order (the same bytes: a ``view``, ``unsqueeze``, ``detach`` of a tensor
        that is not C-contiguous); None otherwise. The argument: of ``out``'s dtype, element
        count and first element's address, no conj or neg bit on either; ``out``'s dimensions
        of more than one element are the argument's (memory stride and size), reordered (a
        ``t``, ``transpose``, ``permute``), so that ``out`` is the argument's value with its
        axes permuted: a bijection of its elements. The source is the argument's value, or,
        where that is derived itself, its source (the root: a value whose digest is of its
        bytes). ``out`` then equals in two runs iff its source does. On any device: nothing
        here reads an element."""
        try:
            return self._derived_from(out, args, enc_args)
        except (RuntimeError, TypeError):  # (a tensor without storage: no data pointer)
            return None

    def _derived_from(self, out: torch.Tensor, args: Any, enc_args: list
                      ) -> tuple[int, tuple[int, ...] | None] | None:
        """``_derived_source``'s work."""
        if type(out) not in _PLAIN_TENSORS or out.layout is not _STRIDED \
                or out.is_contiguous() or out.is_quantized or out.is_conj() or out.is_neg():
            return None
        n, p, dt = out.numel(), out.data_ptr(), out.dtype
        if not n or not p:
            return None
        for a, e in zip(args, enc_args, strict=False):
            if type(a) in _PLAIN_TENSORS and a.dtype is dt and a.layout is _STRIDED \
                    and a.data_ptr() == p and a.numel() == n and not a.is_conj() \
                    and not a.is_neg():
                vid = e["T"]
                d = self.derived.get(vid)
                a_shape, a_stride = a.shape, a.stride()
                at = {}  # (memory stride, size) -> dimension, of a's of more than one element
                for i, sz in enumerate(a_shape):
                    if sz != 1:
                        at[(a_stride[i], sz)] = i
                o_stride = out.stride()
                order: list[int] = []
                for j, sz in enumerate(out.shape):
                    if sz != 1:
                        i = at.get((o_stride[j], sz))
                        if i is None:  # not a permutation; its elements' order may be the same
                            same = d is None and _collapsed(out.shape, o_stride) == \
                                _collapsed(a_shape, a_stride)
                            return (vid, None) if same else None
                        order.append(i)
                if len(order) != len(at) or len(set(order)) != len(order):
                    return None  # (a dimension of a's twice: an overlapping a)
                if d is None:
                    if order == sorted(order):
                        return vid, None  # its axes in their order: a's C-order bytes
                    src, over = vid, c_strides(a_shape)
                else:
                    src, over = d
                # a's dimensions, each once, over a dense layout of the source (C order, or
                # a derived value's): so is out's
                it = iter(order)
                return src, tuple(0 if sz == 1 else over[next(it)] for sz in out.shape)
        return None

    def _derived_input(self, t: torch.Tensor, base: torch.Tensor) -> int | None:
        """A view ``t`` first seen as an op's input (its version moved since the op that
        made it: autograd gives a view its base's version counter after the op returns)
        recorded as derived from its base's value as it is now (``_derived_source``), where
        it would be hashed; None otherwise."""
        if t.layout is not _STRIDED or t.nbytes < _DERIVE_MIN:  # (a sparse view: no nbytes)
            return None
        e = self.uid.get(id(base))
        if e is None or e[0]() is not base or e[2] != _ptr(base):
            return None
        try:
            bvid = self.seen.get((e[1], base._version))
        except RuntimeError:
            return None
        if bvid is None:
            return None
        src = self._derived_source(t, (base,), ({"T": bvid},))
        if src is None:
            return None
        return self._made_like(t, src[0]) if src[1] is None else self._made_derived(t, *src)

    def _made_derived(self, t: torch.Tensor, src: int, strides: tuple[int, ...]) -> int:
        """``_made`` for a value derived from value ``src`` (``_derived_source``): no copy and
        no digest of its bytes; its digest is the sentinel ``derived_digest`` (made when the
        file is, where ``src``'s is still on the hashing thread)."""
        u, ver = self._key(t)
        vid = len(self.v_dtype)
        self.v_dtype.append(self.v_dtype[src])
        self.v_shape.append(tuple(t.shape))
        self.v_array.append(None)
        self.n_hashed += 1
        self.derived[vid] = (src, strides)
        if self.v_sha[src] is None:
            self.v_sha.append(None)
            self.derived_later.append(vid)
        else:
            self.v_sha.append(self._derived_digest(vid))
        self.seen[(u, ver)] = vid
        return vid

    def _derived_digest(self, vid: int) -> str:
        src, strides = self.derived[vid]
        return derived_digest(self.digest, self.v_sha[src], self.v_dtype[vid],
                              self.v_shape[vid], strides)

    def _encode(self, x: Any, depth: int = 0) -> Any:
        if isinstance(x, torch.Tensor):
            return {"T": self._value_of(x)}
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"f": str(x)}
        if isinstance(x, (list, tuple)) and depth < 10:
            if all(type(v) in _PLAIN for v in x):  # sizes, dims: as they are
                return list(x)
            return [self._encode(v, depth + 1) for v in x]
        if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(x)
        if isinstance(x, complex):
            return {"c": [self._encode(x.real), self._encode(x.imag)]}
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self._encode({torch.SymInt: int, torch.SymFloat: float,
                                 torch.SymBool: bool}[type(x)](x))
        if isinstance(x, torch.ScriptObject):  # a collective's process group, reduce op
            return _encode_object(x)
        return {"?": type(x).__name__}

    def _source(self, f: Any) -> int:
        """The source line that issued the op: the first frame from ``f`` up that is the
        user's (not torch's, the standard library's or ours), interned. Cached per code
        object (is it the user's) and per (code object, instruction offset) (its line): a
        frame's ``f_lineno`` is computed from its line table, its ``f_lasti`` is not."""
        code_skip = self._code_skip
        while f is not None:
            co = f.f_code
            skip = code_skip.get(id(co))
            if skip is None:
                fn = co.co_filename
                skip = self._src_cache.get(fn)
                if skip is None:
                    skip = self._src_cache[fn] = (fn.startswith((_TORCH_DIR, _STDLIB) + _OURS)
                                                  or fn.startswith("<"))
                self._codes.append(co)  # kept alive: its id is never another code's
                code_skip[id(co)] = skip
            if not skip:
                at = (id(co), f.f_lasti)
                i = self._src_at.get(at)
                if i is None:
                    key = (co.co_filename, f.f_lineno)
                    i = self._src_idx.get(key)
                    if i is None:
                        i = self._src_idx[key] = self._intern("sources", f"{key[0]}:{key[1]}")
                    self._src_at[at] = i
                return i
            f = f.f_back
        return -1

    def _intern(self, table: str, s: str) -> int:
        t = self.tables[table]
        i = t.get(s)
        if i is None:
            i = t[s] = len(t)
        return i

    def _op(self, func: Any) -> tuple:
        """The per-OpOverload facts, once a recorder (``_op_facts``, once a process, with the
        name's index here), keyed by the OpOverload's id (its ``__hash__`` is Python's: a
        call an op); the facts hold ``func``, so that its id is never another's."""
        info = _OP_FACTS.get(id(func))
        if info is None:
            info = _OP_FACTS[id(func)] = _op_facts(func)
        name = info[0]
        info = (*info[:4], -1 if info[5] else self._intern("names", name), *info[5:])
        parts = name.split(".")
        if len(parts) > 1 and parts[1] in UNINITIALISED_OPS:  # (``aten.empty.memory_format``)
            self._uninit.add(info[4])
        self._names_of[id(func)] = info
        return info

    # ---- the mode ---------------------------------------------------------------------------
    # (every line here runs once per op of the user's step: written flat, its lookups bound
    # once; the cost is measured by benchmarks/bench_capture.py --micro)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        hot = self._hot
        if hot is not None and not self.closing:  # recorder_hot.c: this method's work,
            return hot.dispatch(func, args, kwargs)  # ``_op_rec``'s common case
        # dynamo off in this frame and the ones it calls (what ``torch._disable_dynamo``, which
        # torch wraps around a mode's __torch_dispatch__, does in two frames more: ~0.9 us an
        # op; ``_dynamo_off`` unwraps ours): a torch.compile'd frame's callback is put back
        prior = _set_eval_frame(None)
        try:
            if not self.recording or self.quiet:
                return func(*args, **(kwargs or {}))
            graph_task = _graph_task_id()
            if graph_task == -1 and _get_ident() != self.thread:
                # another thread's op (a loader's), not the step's
                return func(*args, **(kwargs or {}))
            if self.closing and not str(func).startswith(_SKIP_NAMESPACES) and \
                    not self._end_step(inside_op=True):  # (the profiler's record_function
                return func(*args, **(kwargs or {}))  # around each optimizer's step: not)
            if hot is not None:
                return hot.dispatch(func, args, kwargs)
            return self._op_rec(func, args, kwargs, graph_task)
        finally:
            if prior is not None:
                _set_eval_frame(prior)

    def _decomposed(self, func: Any, args: Any, kwargs: Any) -> Any:
        """A CompositeImplicitAutograd op met as a whole (autograd's keys off: in
        ``torch.inference_mode``, validation as scripts write it; or on an inference tensor):
        its C++ decomposition, the kernel that runs it where no mode is on (the same bits),
        run with the mode on again, so that each piece is recorded and judged (``batch_norm``,
        ``dropout``, ``cross_entropy_loss``, ``linear`` have no reference form of their own:
        ``no reference``). Where that cannot run, the op as it is, unrecorded."""
        try:
            run = func._op_dk
            key = torch._C.DispatchKey.CompositeImplicitAutograd
        except AttributeError:
            return func(*args, **(kwargs or {}))
        with self:
            return run(key, *args, **(kwargs or {}))

    def _op_rec(self, func: Any, args: Any, kwargs: Any, graph_task: int) -> Any:
        """Record and run one op of the step (``__torch_dispatch__``'s work)."""
        info = self._names_of.get(id(func))
        if info is None:
            info = self._op(func)
        if info[5]:  # a namespace that is not the step's (profiler); a composite op
            if info[5] is _DECOMPOSE:
                return self._decomposed(func, args, kwargs)
            return func(*args, **(kwargs or {}))
        if info[11] and args and isinstance(args[0], _Tensor):
            try:  # its first argument overwritten unread: its bytes are not the step's
                self._unread(args[0])
            except Exception as e:  # noqa: BLE001 — a guest never breaks the user's step
                self._broken(info[0], e)
                return func(*args, **(kwargs or {}))
        if (info[1] or info[3]) and self.hasher is not None and self.hasher.live:
            try:  # it writes: what it may write is copied or hashed first
                self.hasher.protect(_written(info, args, kwargs or {}))
            except Exception as e:  # noqa: BLE001 — a guest never breaks the user's step
                self._broken(info[0], e)
                self.hasher.drain()
                return func(*args, **(kwargs or {}))
        # inputs first: a value an op reads for the first time is recorded before it runs
        try:
            if info[8]:  # a collective: its inputs read afresh (C++ writes them)
                _refresh(self, args)
            hot = self._hot
            if hot is not None:
                enc_args = hot.encode_args(args)  # (recorder_hot.c: this loop)
            else:
                enc_args = []
                value_of = self._value_of
                for a in args:
                    tp = type(a)
                    if tp in _PLAIN:
                        enc_args.append(a)
                    elif tp is float and a - a == 0:  # finite (inf - inf, nan - nan: nan)
                        enc_args.append(a)
                    elif isinstance(a, _Tensor):
                        enc_args.append({"T": value_of(a)})
                    else:
                        enc_args.append(self._encode(a))
            if (self._uninit_vids and info[13]) or self._np_watch:  # (memory no recorded op
                enc_args = self._fresh_reads(args, enc_args, info)  # wrote, or numpy's)
            if kwargs:
                enc_kwargs = {k: self._encode(v) for k, v in kwargs.items()}
            else:
                enc_kwargs = {}
                kwargs = {}
            source = self._source(_getframe(1))
        except Exception as e:  # noqa: BLE001 — a guest never breaks the user's step
            if not isinstance(e, _LazyArgument):  # (a lazy module's parameter read as it is
                self._broken(info[0], e)  # made, ``p.data.device``: the op passed over)
            return func(*args, **(kwargs or {}))
        # the layout its first argument has before it runs (``as_strided_`` changes it)
        layout = _layout(args[0]) if info[12] and args else None
        out = info[9](*args, **kwargs)  # (``func``'s own callable: one frame less)
        try:
            if info[8]:  # a collective: its data arrives later: waited for
                _settle(info[0], out)
            n0 = len(self.rows)
            self._record(info, args, kwargs, out, enc_args, enc_kwargs, graph_task, source)
            if layout is not None:
                self.layouts[len(self.rows) - 1] = layout
            elif args and type(args[0]) in _PLAIN_TENSORS and len(self.rows) > n0:
                self._note_strided(args[0])
        except Exception as e:  # noqa: BLE001 — the op ran; recording it failed: stop
            self._broken(info[0], e)
        return out

    def _guarded(self, hook: Callable[..., None], where: str) -> Callable[..., None]:
        """``hook`` as a module or optimizer hook that never raises into the user's step: a
        failure stops recording there (``_broken``), as an op's does."""
        def run(*args: Any) -> None:
            try:
                # (the script's own TorchFunctionMode, or a subclass's ``__torch_function__``,
                # must not see the recorder's reads: a counting mode counted 12 calls more)
                with _NO_TORCH_FUNCTION():
                    hook(*args)
            except Exception as e:  # noqa: BLE001 — a guest never breaks the user's step
                self._broken(where, e)
        return run

    def _broken(self, name: str, e: BaseException) -> None:
        """Recording failed at op ``name``: stop recording (the script runs on untouched); the
        complete steps before stay, ``failed`` says why."""
        self.recording = False
        self.failed = (f"the recorder failed at {name} (step {self.step}): "
                       f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")

    # ---- compiled regions (app/capture/compiled.py) -----------------------------------------
    def add_graph(self, build: Callable[[Callable[[torch.Tensor], int]], dict]) -> int | None:
        """Record a compiled graph (``build(constant)`` makes its data; ``constant(t)`` records
        a tensor constant's value); its index, or None when recording has stopped or failed."""
        if not self.recording:
            return None
        self.quiet = True
        try:
            g = build(self._value_of)
        except Exception as e:  # noqa: BLE001 — a guest never breaks the user's compile
            self._broken(COMPILED_OP, e)
            return None
        finally:
            self.quiet = False
        self.graphs.append(g)
        return len(self.graphs) - 1

    def region(self, gid: int, inputs: list, call: Callable[[], Any]) -> Any:
        """One call of compiled graph ``gid``: its inputs recorded, ``call()`` run as it is
        (the ops it issues itself, an extern ``mm``, are inside the region: not recorded),
        its outputs recorded; one op ``tapescope.compiled_graph``."""
        graph_task = torch._C._current_graph_task_id()
        if threading.get_ident() != self.thread and graph_task == -1:
            return call()
        if self.closing and not self._end_step(inside_op=False):
            return call()
        # quiet throughout: our own reads (a ``detach``) and the ops the compiled code issues
        # itself are not the step's; outside __torch_dispatch__ the mode would see them
        self.quiet = True
        try:
            try:
                enc = [self._encode(x) for x in inputs]
                source = self._source(sys._getframe(1))
            except Exception as e:  # noqa: BLE001
                self._broken(COMPILED_OP, e)
                return call()
            out = call()
            return self._region_done(gid, out, enc, source, graph_task)
        finally:
            self.quiet = False

    def _region_done(self, gid: int, out: Any, enc: list, source: int, graph_task: int) -> Any:
        try:
            rets = out if isinstance(out, (list, tuple)) else [out]
            where = [j for j, t in enumerate(rets) if isinstance(t, torch.Tensor)]
            outs = [self._made(rets[j]) for j in where]
            if graph_task != -1:
                phase = 2 if self.in_optimizer else 1
                self.in_backward = self.after_backward = True
                module = self.modules[-1][1] if self.modules and self.modules[-1][2] else \
                    "" if self.in_optimizer else \
                    self._backward_module(torch._C._current_autograd_node())
                if self.last_ones_like is not None:
                    self.losses[self.step] = self.last_ones_like
                    self.last_ones_like = None
            else:
                phase = 2 if self.in_optimizer or (self.after_backward and not self.modules) \
                    else 0
                module = self.modules[-1][1] if self.modules else ""
            self.rows.append((self._intern("names", COMPILED_OP),
                              self._intern("modules", module), phase, self.step, source,
                              [gid, enc, where], {}, outs))
        except Exception as e:  # noqa: BLE001 — the region ran; recording it failed
            self._broken(COMPILED_OP, e)
        return out

    def _record(self, info: tuple, args: Any, kwargs: dict, out: Any, enc_args: list,
                enc_kwargs: dict, graph_task: int, source: int) -> None:
        _, writes, fresh, unmarked, name_idx, _, ones_like, view, _, _, _, _, _, _ = info
        made = self._made
        if writes:
            outs: list[int] = []
            for i, aname, kwarg_only in writes:
                v = args[i] if i < len(args) and not kwarg_only else kwargs.get(aname)
                outs += [made(t, True) for t in _tensors(v)]
            rets = out if isinstance(out, (tuple, list)) and len(fresh) > 1 else (out,)
            for is_fresh, v in zip(fresh, rets, strict=False):
                if is_fresh:
                    outs += [made(t) for t in _tensors(v)]
        elif unmarked is None and isinstance(out, _Tensor):
            if view:
                if self._uninit_vids and enc_args and isinstance(enc_args[0], dict) \
                        and enc_args[0].get("T") in self._uninit_vids:
                    # a view of uninitialised memory (DDP's gradient buckets, views of an
                    # ``empty``): its bytes are the heap's as much as its base's are
                    outs = (self._made_uninitialised(out),)
                elif (like := self._same_bytes(out, args, enc_args)) is not None:
                    outs = (self._made_like(out, like),)
                elif self.derive_views and out.layout is _STRIDED and out.nbytes >= _DERIVE_MIN \
                        and (src := self._derived_source(out, args, enc_args)) is not None:
                    outs = (self._made_like(out, src[0]) if src[1] is None
                            else self._made_derived(out, *src),)
                else:
                    outs = (made(out),)
            elif name_idx in self._uninit:
                outs = (self._made_uninitialised(out),)
            else:
                outs = (made(out),)
        else:
            outs = []
            if unmarked is not None:  # running stats written, unmarked: outputs all the same
                stats = [args[i] if i < len(args) else None for i in unmarked]
                if all(isinstance(t, torch.Tensor) for t in stats):
                    outs = [made(t, True) for t in stats]
            if isinstance(out, torch.Tensor):
                outs.append(made(out))
            else:
                outs += [made(t) for t in _tensors(out)]
        if view and not writes and args and isinstance(args[0], _Tensor):
            # a view shares its base's version counter once the op has returned through
            # autograd (ADInplaceOrView), so its next read is at the base's version, not the
            # one ``_made`` saw: that key is this value too (else it is recorded again: 68
            # copies and digests a gpt-wide capture, the bytes counted twice to the budget)
            try:
                ver = args[0]._version
            except RuntimeError:  # inference tensors: no version counter (-1 either way)
                ver = None
            if ver is not None:
                for t, vid in zip(_tensors(out), outs, strict=False):
                    e = self.uid.get(id(t))
                    if e is not None and e[0]() is t and e[2] == _ptr(t):
                        self.seen.setdefault((e[1], ver), vid)
        # phase and module
        if graph_task != -1:
            phase = 1
            self.in_backward = True
            self.after_backward = True
            modules = self.modules  # a checkpoint's recompute: the module it runs in
            if self.in_optimizer:  # an optimizer stepped from a gradient hook (in backward)
                phase, module = 2, modules[-1][1] if modules and modules[-1][2] else ""
            else:
                module = modules[-1][1] if modules and modules[-1][2] else \
                    self._backward_module(_autograd_node())
            if self.last_ones_like is not None:
                self.losses[self.step] = self.last_ones_like
                self.last_ones_like = None
        else:
            modules = self.modules
            if self.in_optimizer or (self.after_backward and not modules):
                phase = 2
            else:
                phase = 0
            module = modules[-1][1] if modules else ""
            if ones_like and args and isinstance(args[0], torch.Tensor) and args[0].dim() == 0:
                self.last_ones_like = enc_args[0]["T"]
        mt = self.tables["modules"]
        mi = mt.get(module)
        if mi is None:
            mi = mt[module] = len(mt)
        self.rows.append((name_idx, mi, phase, self.step, source, tuple(enc_args), enc_kwargs,
                          tuple(outs)))

    # ---- the result -------------------------------------------------------------------------
    def steps_done(self) -> int:
        return len(self.step_start) - 1

    # the ops' columns (from ``rows``)
    o_op = property(lambda self: [r[0] for r in self.rows])
    o_module = property(lambda self: [r[1] for r in self.rows])
    o_phase = property(lambda self: [r[2] for r in self.rows])
    o_step = property(lambda self: [r[3] for r in self.rows])
    o_source = property(lambda self: [r[4] for r in self.rows])
    o_args = property(lambda self: [r[5] for r in self.rows])
    o_kwargs = property(lambda self: [r[6] for r in self.rows])
    o_outputs = property(lambda self: [r[7] for r in self.rows])

    def header_and_arrays(self, meta: dict | None = None) -> tuple[dict, list[np.ndarray]]:
        """The capture's header and stored arrays (``core.capture.file.save``'s inputs): the
        complete steps only."""
        n_steps = self.steps_done()
        n_ops = self.step_start[n_steps]
        rows = self.rows[:n_ops]
        cols = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(8)]
        arrays: list[np.ndarray] = []
        array_of: list[int] = []
        digests: list[str] = []
        # values of the same bytes (a view's output and its input, ``_made_like``; a copy) are
        # stored once and named by each: the file and its load hold every byte once
        # (gpt-256, benchmarks/bench_capture.py: 38 % of the stored bytes were repeats)
        stored: dict[tuple[str, int], int] = {}
        spool = self.spool
        for a, d in zip(self.v_array, self.v_sha, strict=True):
            if a is None:
                array_of.append(-1)
                continue
            if spool is not None:  # in the file already: its index in the spool's table
                array_of.append(a)
                continue
            ai = stored.get((d, a.nbytes)) if d is not None else None
            if ai is None:
                ai = len(arrays)
                if d is not None:
                    stored[(d, a.nbytes)] = ai
                arrays.append(a)
                digests.append(d)
            array_of.append(ai)
        if None in self.v_sha:  # the hashing thread failed (``failed`` says why)
            raise RuntimeError(self.failed or "a value's digest is missing")
        self._digests = digests
        dtypes: dict[str, int] = {}
        dtype_idx = [dtypes.setdefault(d, len(dtypes)) for d in self.v_dtype]
        settings = dict(self.settings)
        settings["devices"] = sorted(self.devices)
        header = {
            "steps": n_steps,
            "digest": self.digest,
            "values": {"dtypes": list(dtypes), "dtype": dtype_idx, "shape": self.v_shape,
                       "digests": self.v_sha, "array": array_of,
                       # (only where there are some: a file without is read as before)
                       **({"derived": [[vid, src, list(st)] for vid, (src, st)
                                       in self.derived.items()]} if self.derived else {}),
                       **({"opaque": [[vid, k] for vid, k in sorted(self.opaque.items())]}
                          if self.opaque else {})},
            "ops": {**{k: list(v) for k, v in self.tables.items()},
                    **dict(zip(("op", "module", "phase", "step", "source", "args", "kwargs",
                                "outputs"), cols, strict=True)),
                    # (only where there are some: a file without is read as before)
                    **({"layouts": lay} if (lay := [[i, st, off] for i, (st, off)
                                                    in sorted(self.layouts.items())
                                                    if i < n_ops]) else {}),
                    **({"strided": sd} if (sd := [[i, st, off] for i, (st, off)
                                                  in sorted(self.strided.items())
                                                  if i < n_ops]) else {})},
            "losses": [self.losses.get(s, -1) for s in range(1, n_steps + 1)],
            "loss_calls": [self.losses.calls.get(s, []) for s in range(1, n_steps + 1)],
            "initial": self.initial,
            "graphs": self.graphs,
            "settings": settings,
            "meta": {"max_bytes": self.max_bytes, "hashes_only": self.hashes_only,
                     "values": len(self.v_dtype), "values_hashed": self.n_hashed,
                     "stored_bytes": self.stored_bytes,
                     "outside_writes": self.outside_writes,
                     **({"thread": self.thread_name} if self.thread_name else {}),
                     "record_seconds": round(time.perf_counter() - self.t0, 3),
                     **(meta or {})},
        }
        return header, arrays  # (``save`` encodes the header before it writes a byte)

    def save(self, path: str, meta: dict | None = None) -> str:
        """Write the capture to ``path``: with a spool, its header appended to the values
        written already and the file put in place (``path`` in the spool's folder)."""
        from tapescope.core.capture.file import save

        try:
            header, arrays = self.header_and_arrays(meta)
        except BaseException:
            self.discard()
            raise
        spool, self.spool = self.spool, None
        if spool is None:
            return str(save(path, header, arrays, digests=self._digests))
        return str(spool.finish(path, header))  # (a failure removes what it had written)

    def discard(self) -> None:
        """Remove the values written to the file so far, when no file is wanted (none is
        written; a spool left alone is removed when the recorder goes)."""
        spool, self.spool = self.spool, None
        if spool is not None:
            spool.discard()


def _dynamo_off() -> None:
    """Unwrap ``Recorder.__torch_dispatch__`` from the ``torch._disable_dynamo`` wrapper that
    ``TorchDispatchMode.__init_subclass__`` put around it: it turns dynamo's frame callback
    off itself (the wrapper's two frames, its getattr and its four callback swaps cost ~0.9
    us an op), and its code is marked for dynamo to skip (the frame the callback would
    otherwise see first: a torch.compile'd frame's op). Where torch's layout differs (no
    wrapper, no code marks), the wrapper stays: the same behaviour, slower."""
    fn = getattr(Recorder.__dict__["__torch_dispatch__"], "__wrapped__", None)
    if fn is None or _set_code_exec_strategy is None:
        return
    try:
        _set_code_exec_strategy(fn.__code__, _FrameExecStrategy(_FrameAction.SKIP,
                                                                _FrameAction.DEFAULT))
    except Exception:  # noqa: BLE001 — torch's wrapper stays
        return
    Recorder.__torch_dispatch__ = fn  # type: ignore[method-assign]


_dynamo_off()
# the method the C path's instance stands in for as the recorder's own (``_go_native``)
_DISPATCH = Recorder.__dict__["__torch_dispatch__"]


_ACCUMULATE_NR = 2**64 - 1  # AccumulateGrad's node number (autograd runs it first)


def _next_sequence_nr() -> int:
    """The number autograd gives this thread's next node (numbers rise as nodes are made)."""
    return torch._C._autograd._get_sequence_nr()


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()


def _layout(t: Any) -> tuple[list[int], int] | None:
    """A strided tensor's memory layout: its strides and storage offset (in elements), or
    None for anything else (no storage to lay out)."""
    if not isinstance(t, torch.Tensor) or t.layout is not _STRIDED:
        return None
    try:
        return list(t.stride()), int(t.storage_offset())
    except RuntimeError:
        return None


def _op_info(func: Any) -> tuple:
    """``(str(func), written arguments as (index, name, kwarg_only), per return whether it is
    a fresh tensor (no alias info), the unmarked written argument indices or None)``."""
    schema = func._schema
    writes = tuple((i, a.name, a.kwarg_only) for i, a in enumerate(schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write)
    fresh = tuple(r.alias_info is None for r in schema.returns)
    name = str(func)
    return name, writes, fresh, _UNMARKED_WRITES.get(name)


def _op_facts(func: Any) -> tuple:
    """``_op_info(func)``, a placeholder for the name's index (``Recorder._op``), whether it is
    skipped, a ``ones_like``, a view, a collective, what runs it, ``func`` itself (kept
    alive: its id keys ``_OP_FACTS``), whether it overwrites its first argument unread
    (``OVERWRITE_OPS``), and whether it reads its first argument's memory layout
    (``LAYOUT_OPS``: that layout is recorded)."""
    info = _op_info(func)
    name = info[0]
    skip: bool | str = name.startswith(_SKIP_NAMESPACES)
    if not skip and type(func) is OpOverload and _composite(func):
        skip = _DECOMPOSE
    # a view (its one return aliases an argument, nothing written): its value may be the
    # same bytes as an argument's (``_same_bytes``)
    view = not info[1] and info[2] == (False,)
    # what runs the op: an OpOverload's C++ callable (``OpOverload.__call__`` calls it, a
    # Python frame an op), a subclass's own ``__call__`` (TorchBind's) otherwise
    call = getattr(func, "_op", func) if type(func) is OpOverload else func
    parts = name.split(".")
    base = parts[1] if len(parts) > 1 else ""
    return (*info, None, skip, name == "aten.ones_like.default", view,
            name.startswith(_COLLECTIVES), call, func,
            base in OVERWRITE_OPS and bool(info[1]) and info[1][0][0] == 0,
            parts[0] == "aten" and base in LAYOUT_OPS,
            # whether it reads the values of its positional tensors (not a view, a factory of
            # their shape, or an op that takes their memory): one that reads memory no
            # recorded op wrote reads what C++ wrote there (``Recorder._fresh_reads``)
            not view and not skip and base not in _SHAPE_ONLY and not base.endswith("_like")
            and not base.startswith(("new_", "empty", "set_", "resize")))


# ops whose positional tensors give only their shape, dtype or memory (``_op_facts``' last)
_SHAPE_ONLY = frozenset({"size", "sym_size", "stride", "sym_stride", "numel", "sym_numel",
                         "is_same_size", "_has_compatible_shallow_copy_type", "record_stream",
                         "_resize_output_", "lift_fresh"})


# ``_op_facts``' skip entry for an op the mode meets as a whole CompositeImplicitAutograd op
# (``Recorder._decomposed``; a true value: recorder_hot.c hands it to ``_op_rec``)
_DECOMPOSE = "decompose"


def _composite(func: OpOverload) -> bool:
    """Whether ``func``'s kernel is a CompositeImplicitAutograd one (no CPU or CUDA kernel of
    its own): the mode meets such an op only with autograd's keys off (in
    ``torch.inference_mode``, or on an inference tensor), as a whole."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        name = func.name()
        return has(name, "CompositeImplicitAutograd") and not has(name, "CPU") \
            and not has(name, "CUDA")
    except (RuntimeError, AttributeError):
        return False


_HOT_SETUP = False  # recorder_hot.c's ``setup`` done (``Recorder._go_native``)
# the methods recorder_hot.c does the work of (in its common case), as defined here
_TWINS = {name: Recorder.__dict__[name] for name in (
    "_made", "_value_of", "_new_value", "_key", "_record", "_op_rec", "_made_like", "_same_bytes",
    "_source", "_encode", "_broken", "_derived_source", "_derived_from", "_made_derived")}

# id(OpOverload) -> ``_op_facts``: an OpOverload lives as long as its op's registration, and
# the facts hold it (its id is never reused while the entry is here)
_OP_FACTS: dict[int, tuple] = {}


def _tensors(x: Any) -> list[torch.Tensor]:
    """The tensors in ``x`` (a tensor, or a list/tuple of them, nested), in order; None skipped."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _cpu() -> dict:
    """The CPU's vendor and model as the kernel reports them (``cpu_vendor``, ``cpu_model``;
    MKL picks its kernels by vendor: the causes of a capture judged on another machine
    depend on it); nothing where there is no /proc/cpuinfo."""
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                key, _, val = ln.partition(":")
                key = key.strip()
                if key == "vendor_id" and "cpu_vendor" not in out:
                    out["cpu_vendor"] = val.strip()[:64]
                elif key == "model name" and "cpu_model" not in out:
                    out["cpu_model"] = val.strip()[:128]
                if len(out) == 2:
                    break
    except OSError:
        pass
    return out


def settings() -> dict:
    """The settings in force that change a run's bits."""
    s: dict[str, Any] = {
        "torch": torch.__version__, "numpy": np.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "default_dtype": _dtype_name(torch.get_default_dtype()),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "cuda_available": torch.cuda.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **_cpu(),
        "compile": "torch._dynamo" in sys.modules and bool(
            getattr(sys.modules["torch._dynamo"], "is_compiling", lambda: False)()),
    }
    try:
        s["autocast_cuda"] = torch.is_autocast_enabled("cuda")
    except RuntimeError:
        pass
    if torch.cuda.is_available():
        s["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        s["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
        s["cudnn_deterministic"] = torch.backends.cudnn.deterministic
        s["cudnn_benchmark"] = torch.backends.cudnn.benchmark
        s["gpu"] = torch.cuda.get_device_name()
    return s
