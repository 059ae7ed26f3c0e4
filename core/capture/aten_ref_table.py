"""The aten reference table's machinery: ``NoReference``, the form registry, and torch's dtype
rules spelled for numpy (``core.capture.aten_ref`` is the public face; the forms live in
``aten_ref_pointwise``, ``aten_ref_nn`` and ``aten_ref_optim``).

A form is ``fn(args, kwargs) -> list[np.ndarray]`` registered under the ``str(func)`` of one or
more aten overloads. It computes in the reference order (docs/reference-order.md, "Captured aten
ops") and returns arrays of the dtype torch would return. Half inputs (float16, bfloat16) are
widened to float32, computed there and rounded once (the tape's half rule); every Python scalar
is rounded once to the compute dtype before use.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from tapescope.core import mathlib, native

__all__ = ["OUT_ELEMS", "check_elems", "default_float",
           "EW_ADD", "EW_ADDCDIV", "EW_ADDCMUL", "EW_DIV",
           "EW_LERP", "EW_MUL", "EW_SQRT", "FAST", "FORMS", "NoReference", "M", "arr",
           "as_dtype", "compute", "ew", "ew_c", "ew_same", "fast", "float_operands", "form",
           "fp_quiet", "is_float", "quiet_all", "recorded_output", "result_type", "scal", "wide"]


class NoReference(Exception):
    """The op has no reference form (or none for these arguments); the message says why."""


Form = Callable[[list, dict], list]
#: str(OpOverload) -> its form
FORMS: dict[str, Form] = {}
#: str(OpOverload) -> its form's short cut for the common tiny call (an optimizer's per-tensor
#: ops on float32 arrays and Python scalars: ~900 calls of a few microseconds a zoo GPT
#: capture's judge, where torch's dtype rules, the scalars' rounding and an in-place op's
#: write-back were half of each): ``core.capture.aten_ref.reference``'s answer, the same numpy
#: calls on the same operands, or None where it does not apply (then the form is called)
FAST: dict[str, Callable[[list, dict], list | None]] = {}

#: the transcendentals every form calls (refmath: the same bits on every backend)
M = mathlib.get("refmath")

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)
HALF = (F16, BF16)
_FLOATS = (F16, BF16, F32, F64)
_FLOAT_SET = frozenset(_FLOATS)
_NONE = type(None)
_PY_SCALARS = frozenset({bool, int, float})  # (exact types: what a recorded argument holds)
# (a tuple of types for isinstance: ``np.ndarray | np.generic`` builds a union object each test)
_ARRAYISH = (np.ndarray, np.generic)

_TORCH_DT = {
    "torch.float64": F64, "torch.double": F64, "torch.float32": F32, "torch.float": F32,
    "torch.float16": F16, "torch.half": F16, "torch.bfloat16": BF16, "torch.int64": I64,
    "torch.long": I64, "torch.int32": np.dtype(np.int32), "torch.int": np.dtype(np.int32),
    "torch.int16": np.dtype(np.int16), "torch.int8": np.dtype(np.int8),
    "torch.uint8": np.dtype(np.uint8), "torch.bool": BOOL,
    "torch.complex64": C64, "torch.cfloat": C64, "torch.complex128": C128, "torch.cdouble": C128,
}


# NOTE: a form's arithmetic makes inf and NaN as values, never warnings: each form computes in
# np.errstate(all="ignore"). Entering it costs ~0.9 us, ~1,300 times in a zoo GPT capture's
# judge, so the judge holds it once around its loop (quiet_all) and a form inside skips its own.
# A context variable, as numpy's errstate is one: a thread or task outside the block is unmoved
_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("tapescope_aten_ref_quiet",
                                                              default=False)
_HELD = contextlib.nullcontext()  # (stateless: one shared instance, entered any number of times)


def fp_quiet() -> contextlib.AbstractContextManager:
    """``np.errstate(all="ignore")`` for a form's arithmetic, or nothing inside
    :func:`quiet_all`, which holds it already."""
    return _HELD if _QUIET.get() else np.errstate(all="ignore")


# The op's recorded outputs, which bound the elements a form may allocate for an output whose
# size its arguments name (a factory's ``size``, an ``expand``'s, ``arange``'s and
# ``linspace``'s counts, an embedding backward's rows): the judge sets it for each op (the
# list as it is: the largest size is taken only by a form that checks one), so numbers in a
# capture file never make a form allocate more than the file holds (``check_elems``); None:
# no bound (a call outside the judge, e.g. the tests')
OUT_ELEMS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "tapescope_aten_ref_out_elems", default=None)


def check_elems(n: int, what: str) -> None:
    """NoReference when ``n`` elements exceed the largest recorded output's (``OUT_ELEMS``):
    checked before the form allocates them."""
    outs = OUT_ELEMS.get()
    if outs is None:
        return
    limit = max((np.size(x) for x in outs if x is not None), default=0)
    if n > limit:
        raise NoReference(f"{what} asks for {n} elements, the recorded output has {limit}")


def default_float() -> np.dtype:
    """torch's default float dtype as the run had it (``torch.set_default_dtype``, which a
    script may change at any point), for a factory given no dtype: the op's recorded output
    0's when it is of a float type (the only thing that decides it), else float32 (no
    capture: the tests' calls)."""
    outs = OUT_ELEMS.get()
    if outs:
        r = outs[0]
        if isinstance(r, np.ndarray) and r.dtype in _FLOATS:
            return r.dtype
    return F32


def recorded_output(j: int, like: np.ndarray) -> np.ndarray | None:
    """The op's recorded output ``j`` (``OUT_ELEMS``) when it has ``like``'s dtype and shape,
    else None: what a form gives back for memory its kernel leaves unwritten (``empty``'s
    bytes inside an output), so only the written elements are judged."""
    outs = OUT_ELEMS.get()
    if outs is None or len(outs) <= j:
        return None
    r = outs[j]
    if not isinstance(r, np.ndarray) or r.dtype != like.dtype or r.shape != like.shape:
        return None
    return r


@contextlib.contextmanager
def quiet_all():
    """``np.errstate(all="ignore")`` entered once for every form called inside the block (the
    judge's loop); a form there skips its own. Code in the block that sets another errstate
    must leave it before calling a form."""
    with fp_quiet():
        token = _QUIET.set(True)
        try:
            yield
        finally:
            _QUIET.reset(token)


def _register(table: dict, what: str, names: tuple[str, ...]) -> Callable:
    """A decorator putting ``fn`` into ``table`` under every overload in ``names``, each once."""
    def deco(fn: Callable) -> Callable:
        for n in names:
            if n in table:
                raise ValueError(f"aten {what} {n!r} registered twice")
            table[n] = fn
        return fn
    return deco


def form(*names: str) -> Callable[[Form], Form]:
    """Register ``fn`` as the form of every overload in ``names`` (each defined once)."""
    return _register(FORMS, "form", names)


def fast(*names: str) -> Callable:
    """Register ``fn`` as the short cut of every overload in ``names`` (each defined once; each
    has a form: tests/capture/test_aten_ref_fast.py holds every short cut to it)."""
    return _register(FAST, "short cut", names)


def float_operands(xs: list | tuple, same_shape: bool) -> np.dtype | None:
    """The dtype of ``xs[0]``, an array of float32 or float64, where every other operand is an
    array of that dtype (and of its shape, where ``same_shape``: an in-place op's result is
    then a new array of its target's shape, which ``_into`` keeps as it is) or a Python int or
    float; else None. Then ``result_type`` is that dtype, the op computes in it, and ``ew``
    hands every array to its function as itself and each scalar as
    ``np.asarray(v, dtype)``."""
    a = xs[0]
    if type(a) is not np.ndarray:
        return None
    dt = a.dtype
    if dt is not F32 and dt is not F64:  # (builtin dtypes are one object each)
        return None
    for x in xs[1:]:
        t = type(x)
        if t is np.ndarray:
            if x.dtype is not dt or (same_shape and x.shape != a.shape):
                return None
        elif t is not float and t is not int:
            return None
    return dt


def as_dtype(d: Any) -> np.dtype | None:
    """A dtype given as torch's string ("torch.float32"), a numpy dtype, or None."""
    if d is None:
        return None
    if isinstance(d, str):
        if d not in _TORCH_DT:
            raise NoReference(f"dtype {d} has no reference type")
        return _TORCH_DT[d]
    return np.dtype(d)


def is_float(dt: np.dtype) -> bool:
    return dt in _FLOATS


def compute(dt: np.dtype) -> np.dtype:
    """The dtype an op of result type ``dt`` computes in: float32 for the half types."""
    if dt is F32 or dt is F64:  # (the common cases, by identity: no dtype comparison)
        return dt
    return F32 if dt in HALF else dt


def _category(dt: np.dtype) -> int:
    return 2 if dt in _FLOATS else 3 if dt.kind == "c" else (0 if dt == BOOL else 1)


def _complex_of(dt: np.dtype) -> np.dtype:
    """c10's toComplexType for a float type (float16's, complex32, is not one a capture
    holds; bfloat16's is complex64)."""
    if dt == F16:
        raise NoReference("float16 with a complex operand: complex32 has no reference type")
    return C128 if dt == F64 else C64


def promote(a: np.dtype | None, b: np.dtype | None) -> np.dtype | None:
    """torch.promote_types for the dtypes a capture holds: a complex type with a float one is
    the complex type of the wider parts (complex64 and float64: complex128), with an integer
    or bool the complex type."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    ca, cb = _category(a), _category(b)
    if ca == 3 and cb == 2 or ca == 2 and cb == 3:
        c, f = (a, b) if ca == 3 else (b, a)
        return C128 if C128 in (c, f) or f == F64 else C64
    if ca != cb:
        return a if ca > cb else b
    if ca == 3:
        return a if a.itemsize >= b.itemsize else b
    if ca == 2:
        if {a, b} == {F16, BF16}:
            return F32
        return a if a.itemsize >= b.itemsize else b
    return np.promote_types(a, b)


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    # c10's combine_categories: a higher-priority group wins unless the lower one is a float
    # and the higher one is not
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.kind == "c":
        return higher
    if lower.kind == "c":  # (a float group keeps its width, made complex; an integer's: lower)
        return _complex_of(higher) if higher in _FLOATS else lower
    if higher in _FLOATS:
        return higher
    if higher == BOOL or lower in _FLOATS:
        return promote(higher, lower)
    return higher


def result_type(*xs: Any) -> np.dtype:
    """torch.result_type of tensors (numpy arrays) and Python scalars: dimensioned tensors
    first, then 0-d tensors, then Python scalars (a float scalar counts as float32, torch's
    default dtype), a later group winning only with a higher category."""
    x0 = xs[0] if xs else None
    if type(x0) is np.ndarray:
        # the common cases, cheaply: arrays of one dtype (of any dimensions: each group is
        # that dtype, and combined it stays), with Python scalars or None where it is a float
        # type (a float group wins over the scalars' group)
        dt = x0.dtype
        f = dt in _FLOAT_SET
        for x in xs:
            t = type(x)
            if t is np.ndarray:
                if x.dtype != dt:
                    break
            elif not (t is _NONE or (f and t in _PY_SCALARS)):
                break
        else:
            return dt
    dim = zero = wrapped = None
    for x in xs:
        if x is None:
            continue
        if isinstance(x, _ARRAYISH):
            dt = x.dtype
            if np.ndim(x):
                dim = promote(dim, dt)
            else:
                zero = promote(zero, dt)
        elif isinstance(x, bool):
            wrapped = promote(wrapped, BOOL)
        elif isinstance(x, int):
            wrapped = promote(wrapped, I64)
        elif isinstance(x, float):
            wrapped = promote(wrapped, F32)
        elif isinstance(x, complex):
            wrapped = promote(wrapped, C64)
        else:
            raise NoReference(f"operand of type {type(x).__name__} has no reference type")
    out = _combine(dim, _combine(zero, wrapped))
    if out is None:
        raise NoReference("no operand to take a dtype from")
    return out


def arr(x: Any, dt: np.dtype) -> np.ndarray:
    """``x`` (array or Python scalar) as an array of ``dt``: a scalar rounded once."""
    if isinstance(x, np.ndarray) and x.dtype == dt:
        return x
    with fp_quiet():
        return np.asarray(x).astype(dt) if isinstance(x, _ARRAYISH) \
            else np.asarray(x, dtype=dt)


def wide(x: Any, dt: np.dtype | None = None) -> np.ndarray | None:
    """``x`` in the compute dtype of ``dt`` (default: its own dtype); None stays None."""
    if x is None:
        return None
    return arr(x, compute(dt if dt is not None else np.asarray(x).dtype))


def scal(v: Any, out: np.dtype, round_to_storage: bool = False) -> np.ndarray:
    """A Python scalar operand of an op whose result type is ``out``, as a 0-d array of the
    compute dtype. For a half ``out``, add/sub round it to the half type first
    (``round_to_storage``), mul/div take it in float32, as torch's CPU kernels do."""
    if isinstance(v, _ARRAYISH):
        return arr(v, compute(out))
    if round_to_storage and out in HALF:
        return np.asarray(v, dtype=out).astype(F32)
    return np.asarray(v, dtype=compute(out))


def ew(fn: Callable[..., Any], *xs: Any, out: np.dtype | None = None,
       scalars_as_storage: bool = False) -> np.ndarray:
    """Elementwise ``fn`` over arrays and scalars in torch's result type (or ``out``): inputs
    widened to the compute dtype (exact), one evaluation, the result rounded once to ``out``."""
    out = result_type(*xs) if out is None else out
    ct = compute(out)
    vals = [x if type(x) is np.ndarray and x.dtype == ct  # (arr's own first case, inline)
            else arr(x, ct) if isinstance(x, _ARRAYISH)
            else scal(x, out, scalars_as_storage) for x in xs]
    if _QUIET.get():  # (fp_quiet's answer without entering its null context: ~1,000 calls)
        y = np.asarray(fn(*vals))
        return y.astype(out, copy=False) if y.dtype != out else y
    with np.errstate(all="ignore"):
        y = np.asarray(fn(*vals))
        return y.astype(out, copy=False) if y.dtype != out else y


#: ``ew_c``'s operations (core/native/refmath_py.c's ``ew`` codes)
EW_ADD, EW_MUL, EW_DIV, EW_SQRT, EW_LERP, EW_ADDCMUL, EW_ADDCDIV = range(7)


# the largest operand the native elementwise loop takes (``ew_c``): on the zoo's sizes (16 to a
# few thousand elements) one call saves the form's numpy calls; past a few thousand numpy's
# vectorised loops win (4,096 float32: native 2.7 us, numpy's add 1.0 us and the form's calls)
EW_C_MAX = 4096


def ew_c(code: int, x: np.ndarray, y: np.ndarray | None, z: np.ndarray | None,
         s: float) -> np.ndarray | None:
    """A short cut's elementwise op in one native call (core.native.ew_entry: add, mul, div
    (``y`` None: by ``s``), sqrt, lerp by weight ``s``, addcmul and addcdiv by value ``s``;
    ``s`` already rounded to ``x``'s type), the numpy form's bits where no output is NaN; None
    where it is not built, does not take the operands (another type, shape or layout) or an
    output is NaN (a NaN's payload is the loop's choice: numpy's then), or ``x`` is over
    ``EW_C_MAX`` elements (numpy's own loop is the faster there: an add of 65,536 float32 36
    us in the native loop, 8 in numpy's)."""
    fn = native.ew_entry()
    if fn is None or (type(x) is np.ndarray and x.size > EW_C_MAX):
        return None
    try:
        return fn(code, x, y, z, s)
    except (TypeError, ValueError):
        return None


def ew_same(fn: Callable[..., Any], dt: np.dtype, *vals: Any) -> np.ndarray:
    """``ew(fn, *xs, out=dt)``'s evaluation where ``float_operands`` gave ``dt`` and ``vals``
    are its operands as ``ew`` hands them on (each scalar as ``np.asarray(v, dt)``)."""
    if _QUIET.get():
        y = np.asarray(fn(*vals))
    else:
        with np.errstate(all="ignore"):
            y = np.asarray(fn(*vals))
    return y.astype(dt, copy=False) if y.dtype != dt else y


_UINT_OF = {2: np.int16, 4: np.int32, 8: np.int64}


def zero_where(cond: np.ndarray, v: np.ndarray) -> np.ndarray | None:
    """``np.where(cond, +0.0, v)`` for a float32/float64 ``v``, by its bits: ``v``'s bits
    and-ed with all ones where ``cond`` is false, zero where true (+0.0 is all zero bits; a
    NaN keeps its bits). Branch-free: ``np.where`` on a mask of random signs mispredicts on
    every other element (8 ms against 1 ms on 2M floats). None for other dtypes."""
    ity = _UINT_OF.get(v.itemsize)
    if v.dtype not in (np.float32, np.float64) or ity is None or cond.dtype != np.bool_:
        return None
    m = np.empty(cond.shape, ity)
    np.negative(np.logical_not(cond).view(np.int8), out=m, casting="unsafe")
    return np.bitwise_and(v.view(ity), m).view(v.dtype)


def opt(kwargs: dict, args: list, i: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` given at position ``i`` or as a keyword (the recorder keeps torch's
    split), else ``default``."""
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)
