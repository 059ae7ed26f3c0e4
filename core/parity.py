"""Parity metrics: bit differences and ulp distance between a reference tensor and another.

The ulp distance is the distance between the two values on the ordered-integer line (the IEEE
bit pattern read as a sign-magnitude integer and mapped to two's complement), so adjacent
floats are 1 apart, +0 and -0 are the same point, and the distance across zero is the sum of
the two sides. Signed-zero mismatches are bit differences (`n_diff`) with no ulp distance
(`n_signed_zero` says how many); so is a NaN against a number (`n_nan`).

NaN policy: IEEE 754 leaves a NaN's sign and payload to the implementation (x86 and CUDA make
different ones), so two NaNs are equal whatever their bits: not in `n_diff`, counted apart in
`nan_bits_differ` (docs/reference-order.md). The device diff kernel (gpu/kernels/diff.cu)
implements exactly these rules; tests hold the two to each other.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from tapescope.core import precision

# a node's summary rules live in core.summary (issue 47): re-exported, the one definition there
from tapescope.core.summary import entry_differs, entry_worst

__all__ = ["NodeParity", "ParityReport", "TensorDiff", "compare_arrays", "entry_differs",
           "entry_worst", "first_divergence", "ordered", "same_under_nan_policy", "strict_json",
           "ulp_distance"]

_BITS = {
    np.dtype(np.float64): (np.int64, np.uint64),
    np.dtype(np.float32): (np.int32, np.uint32),
    # the half types: ulp in their own units (adjacent float16s / bfloat16s are 1 apart)
    precision.FLOAT16: (np.int16, np.uint16),
    precision.BFLOAT16: (np.int16, np.uint16),
}


@dataclass(frozen=True)
class TensorDiff:
    """Parity summary of one tensor (reference vs other)."""

    n: int
    n_diff: int  # elements whose bit patterns differ (±0 included), two NaNs never
    max_ulp: int  # over differing elements where neither side is NaN
    max_abs: float  # max |other - ref| in float64, same elements
    max_rel: float  # max |other - ref| / |ref|; inf where ref is 0 or inf and they differ
    first_index: int | None  # flat (row-major) index of the first differing element
    n_nan: int = 0  # differing elements where one side is NaN and the other is not
    n_signed_zero: int = 0  # +0 vs -0
    nan_bits_differ: int = 0  # both NaN, other sign or payload: equal under the NaN policy

    @property
    def exact(self) -> bool:
        """True when every bit matches."""
        return self.n_diff == 0

    def to_json(self) -> dict:
        """A JSON-ready dict of every field."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> TensorDiff:
        """The inverse of ``to_json``; also reads strict JSON ("inf", "nan" strings). Every
        field is checked (a count is a whole number in range, never NaN, 2.5 or true): a
        malformed summary raises ValueError naming the field, never reads as exact."""
        if not isinstance(d, dict):
            raise ValueError(f"a tensor summary must be an object, not {type(d).__name__}")
        n = _count(d, "n", None)
        n_diff = _count(d, "n_diff", n)
        fi = d.get("first_index")
        if fi is not None:
            fi = _count(d, "first_index", n - 1)
        if (fi is None) != (n_diff == 0):
            raise ValueError(f"first_index {fi!r} with n_diff {n_diff}")
        return cls(n, n_diff, _count(d, "max_ulp", None), _measure(d, "max_abs"),
                   _measure(d, "max_rel"), fi, _count(d, "n_nan", n_diff, 0),
                   _count(d, "n_signed_zero", n_diff, 0), _count(d, "nan_bits_differ", n, 0))


_NO_DEFAULT = object()


def _count(d: dict, key: str, most: int | None, default: object = _NO_DEFAULT) -> int:
    """``d[key]`` as a count in 0..``most`` (a JSON whole number: not a float, not a bool)."""
    v = d.get(key, default)
    if v is _NO_DEFAULT:
        raise ValueError(f"{key!r} is missing")
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key!r} must be a whole number, not {str(v)[:40]!r}")
    if v < 0 or (most is not None and v > most):
        raise ValueError(f"{key!r} is {v}, not in 0..{'' if most is None else most}")
    return v


def _measure(d: dict, key: str) -> float:
    """``d[key]`` as a float >= 0 (inf and nan allowed, also as strict JSON's strings)."""
    v = d.get(key)
    if isinstance(v, str) and v in ("inf", "nan"):
        return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError(f"{key!r} must be a number >= 0, not {str(v)[:40]!r}")
    return float(v)


@dataclass(frozen=True)
class NodeParity:
    """One node's parity: value always, gradient when the reference has one."""

    id: int
    op: str
    name: str | None
    value: TensorDiff
    grad: TensorDiff | None

    @property
    def exact(self) -> bool:
        """Value and gradient bit-identical."""
        return self.value.exact and (self.grad is None or self.grad.exact)

    def to_json(self) -> dict:
        """{"id", "op", "name", "value": {...TensorDiff}, "grad": {...} | None}."""
        return {"id": self.id, "op": self.op, "name": self.name, "value": self.value.to_json(),
                "grad": None if self.grad is None else self.grad.to_json()}

    @classmethod
    def from_json(cls, e: dict) -> NodeParity:
        """The inverse of ``to_json``."""
        g = e.get("grad")
        return cls(int(e["id"]), str(e["op"]), e.get("name"), TensorDiff.from_json(e["value"]),
                   None if g is None else TensorDiff.from_json(g))


@dataclass(frozen=True)
class ParityReport:
    """Every compared node's parity plus the first divergence (device-agnostic)."""

    nodes: tuple[NodeParity, ...]
    first_divergence: tuple[int, str] | None  # (node id, "value" | "grad")

    @property
    def exact(self) -> bool:
        """True when every value and gradient matched bit for bit."""
        return all(n.exact for n in self.nodes)

    @classmethod
    def of(cls, nodes: tuple[NodeParity, ...] | list[NodeParity]) -> ParityReport:
        """A report of ``nodes`` with its first divergence found by the one rule below."""
        nodes = tuple(nodes)
        return cls(nodes, first_divergence(nodes))

    def to_json(self) -> dict:
        """Plain data for views, files and the worker pipe: {"exact", "first_divergence",
        "nodes": [NodeParity.to_json()]}."""
        first = None
        if self.first_divergence is not None:
            nid, which = self.first_divergence
            op = next((n.op for n in self.nodes if n.id == nid), "")
            first = {"node": nid, "op": op, "which": which}
        return {"exact": self.exact, "first_divergence": first,
                "nodes": [n.to_json() for n in self.nodes]}

    @classmethod
    def from_json(cls, d: dict) -> ParityReport:
        """The inverse of ``to_json`` (the first divergence recomputed, never trusted)."""
        return cls.of(NodeParity.from_json(e) for e in d["nodes"])


def first_divergence(nodes: tuple[NodeParity, ...]) -> tuple[int, str] | None:
    """(node id, "value" | "grad") of the first divergence, or None when all bits agree."""
    # Forward runs in tape order: the first differing value is the root of what follows.
    for n in nodes:
        if not n.value.exact:
            return n.id, "value"
    # Backward runs in decreasing id: the first differing gradient it produced is the highest.
    for n in reversed(nodes):
        if n.grad is not None and not n.grad.exact:
            return n.id, "grad"
    return None


def _check_pair(ref: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r, o = np.asarray(ref), np.asarray(other)
    if r.dtype != o.dtype:
        raise TypeError(f"parity: dtypes differ ({r.dtype} vs {o.dtype})")
    if r.dtype not in _BITS:
        raise TypeError(f"parity: unsupported dtype {r.dtype} "
                        "(float64, float32, float16, bfloat16)")
    if r.shape != o.shape:
        raise ValueError(f"parity: shapes differ ({r.shape} vs {o.shape})")
    return np.ascontiguousarray(r).reshape(-1), np.ascontiguousarray(o).reshape(-1)


def ordered(x: np.ndarray) -> np.ndarray:
    """Map floats to int64 so that numeric order is integer order and ±0 both map to 0."""
    a = np.asarray(x)
    sint, _ = _BITS[a.dtype]
    bits = a.view(sint).astype(np.int64)
    lo = np.int64(np.iinfo(sint).min)
    # Negative floats: sign-magnitude → two's complement around 0 (MIN - bits).
    return np.where(bits >= 0, bits, lo - bits)


def complex_parts(x: np.ndarray) -> np.ndarray:
    """A complex array as its float parts, real and imaginary side by side along the last axis
    (what a comparison or an ulp map reads of it; a 0-d one becomes 2 elements); any other
    array as it is."""
    if x.dtype.kind != "c":
        return x
    return np.ascontiguousarray(x).view(np.float32 if x.dtype == np.complex64 else np.float64)


def ulp_distance(ref: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per-element ulp distance as uint64 (0 where either side is NaN: those are flagged apart)."""
    r, o = _check_pair(ref, other)
    a, b = ordered(r), ordered(o)
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    # Modular uint64 subtraction in the right direction is exact: |a - b| < 2**64.
    d = np.where(a >= b, ua - ub, ub - ua)
    d[np.isnan(r) | np.isnan(o)] = 0
    return d


def same_under_nan_policy(ref: np.ndarray, other: np.ndarray) -> bool:
    """The one rule of "the same bits" for the product and its tests: the same dtype and shape,
    every element the same bits, except that two NaNs are equal whatever their sign and payload
    (the NaN policy, docs/reference-order.md: which NaN survives an add of two NaNs is the
    compiler's choice of operand order, e.g. gcc's tuning for one CPU or another)."""
    r, o = np.asarray(ref), np.asarray(other)
    if r.dtype != o.dtype or r.shape != o.shape:
        return False
    return compare_arrays(r, o).n_diff == 0


def compare_arrays(ref: np.ndarray, other: np.ndarray) -> TensorDiff:
    """Summarise how `other` differs from `ref` (same shape and dtype)."""
    r, o = _check_pair(ref, other)
    sint, _ = _BITS[r.dtype]
    bits = r.view(sint) != o.view(sint)
    both_nan = bits & np.isnan(r) & np.isnan(o)  # the NaN policy: equal, counted apart
    diff = bits & ~both_nan
    n_diff = int(diff.sum())
    nan_bits = int(both_nan.sum())
    if n_diff == 0:
        return TensorDiff(r.size, 0, 0, 0.0, 0.0, None, nan_bits_differ=nan_bits)
    nan = diff & (np.isnan(r) | np.isnan(o))
    num = diff & ~nan
    szero = num & (r == 0) & (o == 0)
    ulp = ulp_distance(r, o)[num]
    with np.errstate(all="ignore"):  # inf - inf and x / 0 are handled just below
        rf, of = r[num].astype(np.float64), o[num].astype(np.float64)
        ab = np.abs(of - rf)
        ab = np.where(np.isnan(ab), np.inf, ab)  # inf vs -inf
        den = np.abs(rf)
        rel = np.where(
            (den == 0) | np.isinf(den), np.where(ab > 0, np.inf, 0.0), ab / den
        )
    return TensorDiff(
        n=r.size,
        n_diff=n_diff,
        max_ulp=int(ulp.max()) if ulp.size else 0,
        max_abs=float(ab.max()) if ab.size else 0.0,
        max_rel=float(rel.max()) if rel.size else 0.0,
        first_index=int(np.argmax(diff)),
        n_nan=int(nan.sum()),
        n_signed_zero=int(szero.sum()),
        nan_bits_differ=nan_bits,
    )


def strict_json(x: object) -> object:
    """``x`` made strict-JSON-safe: non-finite floats become "inf", "-inf", "nan" strings."""
    if isinstance(x, dict):
        return {str(k): strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict_json(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if hasattr(x, "item"):  # numpy scalars
        return strict_json(x.item())
    return x
