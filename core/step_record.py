"""One step's parity as one columnar record: a numpy structured array, one row per node.

``record_of`` makes it from the per-node ``core.parity`` diffs (the host comparison and the
device diff kernel both end in ``NodeParity``); the pair loop sets the provenance flags on it;
the live pipe carries it once per step (``pack`` / ``unpack``: its columns, zlib, base64); the
GUI's step history keeps its columns and the Qt models read them. Dicts appear only where a
file is written (``entries``: the ``NodeParity.to_json`` form of ``tapescope parity --json``
and the report).

Columns (``STEP_RECORD``): ``id``; per side (``v_`` value, ``g_`` gradient) the ``TensorDiff``
fields ``n``, ``diff`` (n_diff), ``ulp`` (max_ulp), ``abs``, ``rel``, ``first`` (first_index,
-1 for none), ``nan`` (n_nan), ``sz`` (n_signed_zero), ``nb`` (nan_bits_differ); ``g_n`` -1 says
the node has no gradient entry; ``flags`` the ``F_*`` bits below.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Sequence

import numpy as np

from tapescope.core import summary
from tapescope.core.parity import NodeParity, TensorDiff

__all__ = ["CAUSES_MAX", "FIELDS", "F_G_INTRO", "F_G_NAN", "F_G_ONESIDED", "F_INTRO", "F_U_INTRO",
           "F_V_INTRO", "F_V_NAN", "F_V_ONESIDED", "STEP_RECORD", "TENSOR_DIFF_FIELDS",
           "check", "differs", "entries", "exact", "first_divergence", "node_parity", "pack",
           "record_of", "roots", "set_introduced", "set_nan_flags", "unpack", "worst"]

FIELDS = ("n", "diff", "ulp", "abs", "rel", "first", "nan", "sz", "nb")
# the TensorDiff field each column holds, in FIELDS' order
TENSOR_DIFF_FIELDS = ("n", "n_diff", "max_ulp", "max_abs", "max_rel", "first_index", "n_nan",
                      "n_signed_zero", "nan_bits_differ")
_KIND = {"n": "<i8", "diff": "<i8", "ulp": "<u8", "abs": "<f8", "rel": "<f8", "first": "<i8",
         "nan": "<i8", "sz": "<i8", "nb": "<i8"}
STEP_RECORD = np.dtype([("id", "<i4")] + [(f"{s}_{f}", _KIND[f]) for s in "vg" for f in FIELDS]
                       + [("flags", "u1")])
F_V_ONESIDED = 1  # the value holds a NaN/inf the other side does not have
F_G_ONESIDED = 2  # the gradient does
F_V_INTRO = 4  # the value's error was introduced here (else inherited)
F_G_INTRO = 8
F_U_INTRO = 16  # a parameter update introduced error
F_V_NAN = 32  # a NaN against a number (n_nan) in the value
F_G_NAN = 64
F_INTRO = F_V_INTRO | F_G_INTRO | F_U_INTRO
_INTRO_BIT = {"value": F_V_INTRO, "grad": F_G_INTRO, "update": F_U_INTRO}

# explained introduced entries (core.explain) a live step carries beside its record: the
# Inspector's cause line (app.step_wire sends them, app.step_history keeps them)
CAUSES_MAX = 64


def _row(d: TensorDiff | None) -> tuple:
    if d is None:
        return (-1, -1, 0, 0.0, 0.0, -1, 0, 0, 0)
    return (d.n, d.n_diff, d.max_ulp, d.max_abs, d.max_rel,
            -1 if d.first_index is None else d.first_index, d.n_nan, d.n_signed_zero,
            d.nan_bits_differ)


def record_of(nodes: Iterable[NodeParity]) -> np.ndarray:
    """The record of per-node diffs (the one conversion from objects to columns)."""
    rows = [(n.id, *_row(n.value), *_row(n.grad), 0) for n in nodes]
    rec = np.array(rows, dtype=STEP_RECORD) if rows else np.zeros(0, STEP_RECORD)
    set_nan_flags(rec)
    return rec


def set_nan_flags(rec: np.ndarray) -> None:
    """Set the F_*_ONESIDED and F_*_NAN bits from the columns (``record_of`` does)."""
    # a non-finite element only one side holds: a NaN against a number, or an inf against
    # anything else (max_abs is then inf). Same-bits infinities and NaN pairs are data
    for s, one, nan in (("v", F_V_ONESIDED, F_V_NAN), ("g", F_G_ONESIDED, F_G_NAN)):
        d = rec[f"{s}_diff"] > 0
        has_nan = d & (rec[f"{s}_nan"] > 0)
        rec["flags"] |= np.where(d & (has_nan | np.isinf(rec[f"{s}_abs"])), one, 0).astype("u1")
        rec["flags"] |= np.where(has_nan, nan, 0).astype("u1")


def set_introduced(rec: np.ndarray, flags: Sequence[dict]) -> None:
    """Set the F_*_INTRO bits from per-node ``{"value", "grad", "update": bool}`` flags (what
    ``core.provenance``'s ``flags`` gives, one per row)."""
    bits = np.array([sum(b for k, b in _INTRO_BIT.items() if f.get(k)) for f in flags],
                    dtype="u1")
    rec["flags"] = (rec["flags"] & ~np.uint8(F_INTRO)) | bits


def differs(rec: np.ndarray, which: str | None = None) -> np.ndarray:
    """Per row: does the value (``which`` "value"), the gradient ("grad") or either differ."""
    if which == "value":
        return rec["v_diff"] > 0
    if which == "grad":
        return rec["g_diff"] > 0
    return (rec["v_diff"] > 0) | (rec["g_diff"] > 0)


def exact(rec: np.ndarray) -> bool:
    """True when every value and gradient matched bit for bit."""
    return not bool(differs(rec).any())


def first_divergence(rec: np.ndarray) -> tuple[int, str] | None:
    """``core.parity.first_divergence`` on the columns: the first differing value in tape
    order, else the highest differing gradient (backward runs in decreasing id)."""
    v = np.flatnonzero(rec["v_diff"] > 0)
    if v.size:
        return int(rec["id"][v[0]]), "value"
    g = np.flatnonzero(rec["g_diff"] > 0)
    if g.size:
        return int(rec["id"][g[-1]]), "grad"
    return None


def worst(rec: np.ndarray) -> np.ndarray:
    """Per row, the node's worst ulp (``core.summary.worst``, its one rule): 0 exact, >= 1 ulp
    when a side differs, -1 when a side differs by a NaN."""
    return summary.worst(rec["v_diff"], rec["v_ulp"], rec["v_nan"], rec["g_diff"], rec["g_ulp"],
                         rec["g_nan"])


def roots(rec: np.ndarray, nodes: Sequence) -> list[int]:
    """Nodes whose value differs although every input's value agrees: where drift starts."""
    bad = set(rec["id"][rec["v_diff"] > 0].tolist())
    return sorted(i for i in bad if not any(j in bad for j in nodes[i].inputs))


def _diff(rec: np.ndarray, k: int, s: str) -> TensorDiff | None:
    r = rec[k]
    if s == "g" and r["g_n"] < 0:
        return None
    n, nd, ulp, ab, rel, fi, nan, sz, nb = (r[f"{s}_{f}"].item() for f in FIELDS)
    return TensorDiff(n, nd, ulp, ab, rel, None if fi < 0 else fi, nan, sz, nb)


def node_parity(rec: np.ndarray, labels: Sequence) -> list[NodeParity]:
    """The rows as ``NodeParity`` objects; ``labels[id]`` gives each node's op and name."""
    out = []
    for k, i in enumerate(rec["id"].tolist()):
        n = labels[i]
        out.append(NodeParity(i, n.op, n.name, _diff(rec, k, "v"), _diff(rec, k, "g")))
    return out


def _side_dicts(rec: np.ndarray, s: str) -> list[dict | None]:
    cols = [rec[f"{s}_{f}"].tolist() for f in FIELDS]
    out: list[dict | None] = []
    for vals in zip(*cols, strict=True):
        if s == "g" and vals[0] < 0:
            out.append(None)
            continue
        d = dict(zip(TENSOR_DIFF_FIELDS, vals, strict=True))
        d["max_abs"], d["max_rel"] = float(d["max_abs"]), float(d["max_rel"])
        if d["first_index"] < 0:
            d["first_index"] = None
        out.append(d)
    return out


def entries(rec: np.ndarray, labels: Sequence | None, introduced: bool = False) -> list[dict]:
    """The export form: ``NodeParity.to_json`` dicts per row (``labels[id]``: op and name; ""
    and None without), with ``"introduced": {"value", "grad", "update"}`` when asked."""
    vals, grads = _side_dicts(rec, "v"), _side_dicts(rec, "g")
    out = []
    for i, f, v, g in zip(rec["id"].tolist(), rec["flags"].tolist(), vals, grads, strict=True):
        n = labels[i] if labels is not None else None
        e = {"id": i, "op": n.op if n is not None else "", "name": n.name if n is not None
             else None, "value": v, "grad": g}
        if introduced:
            e["introduced"] = {k: bool(f & b) for k, b in _INTRO_BIT.items()}
        out.append(e)
    return out


# ---- on the wire ------------------------------------------------------------------------------
def pack(rec: np.ndarray) -> str:
    """The record as text: its columns one after another (a column of a mostly exact step is
    mostly zeros, which zlib takes to almost nothing), deflated, in base64."""
    raw = b"".join(np.ascontiguousarray(rec[name]).tobytes() for name in STEP_RECORD.names)
    return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def unpack(text: str, n: int, what: str = "step record") -> np.ndarray:
    """The inverse of ``pack`` for ``n`` rows; the layout is this side's own (never read from
    the wire), and no more than the ``n`` rows' bytes are ever inflated."""
    if not isinstance(text, str) or not isinstance(n, int) or not 0 <= n <= 1 << 26:
        raise ValueError(f"{what}: malformed ({type(text).__name__} of {n!r} rows)")
    size = n * STEP_RECORD.itemsize
    try:
        z = zlib.decompressobj()
        raw = z.decompress(base64.b64decode(text, validate=True), max(size, 1))  # (0: no cap)
        if z.unconsumed_tail or not z.eof:
            raise ValueError("longer than its rows")
    except (ValueError, zlib.error) as e:
        raise ValueError(f"{what}: not a packed record of {n} rows ({e})") from None
    if len(raw) != size:
        raise ValueError(f"{what}: {len(raw)} bytes do not fill {n} rows")
    rec = np.empty(n, STEP_RECORD)
    at = 0
    for name in STEP_RECORD.names:
        dt = STEP_RECORD.fields[name][0]
        rec[name] = np.frombuffer(raw, dt, n, at)
        at += n * dt.itemsize
    return rec


def check(rec: np.ndarray, sizes: Sequence[int], has_grad: Sequence[bool]) -> None:
    """A record from elsewhere holds what a comparison can make: row ``k`` is node ``k`` with
    ``sizes[k]`` elements (and a gradient entry where ``has_grad[k]``), every count in range,
    a first index exactly where something differs, measures >= 0 (NaN allowed), known flags.
    ValueError names the row and the field; a malformed record never reads as exact."""
    n = len(rec)
    if len(sizes) != n or len(has_grad) != n:
        raise ValueError(f"{n} rows for {len(sizes)} nodes")
    if not np.array_equal(rec["id"], np.arange(n)):
        raise ValueError("its rows are not the nodes in order")
    size = np.asarray(sizes, dtype=np.int64)
    grad = np.asarray(has_grad, dtype=bool)
    bad: list[tuple[np.ndarray, str]] = [
        (rec["v_n"] != size, "value n is not the node's element count"),
        (grad & (rec["g_n"] != size), "grad n is not the node's element count"),
        (~grad & ((rec["g_n"] != -1) | (rec["g_diff"] != -1)), "a gradient entry for a node "
         "without one"),
        (rec["flags"] >= 128, "unknown flag bits")]
    for s, on in (("v", np.ones(n, bool)), ("g", grad)):
        d, tot = rec[f"{s}_diff"], rec[f"{s}_n"]
        bad += [(on & ((d < 0) | (d > tot)), f"{s}_diff out of 0..n"),
                (on & ((rec[f"{s}_nan"] < 0) | (rec[f"{s}_nan"] > d)), f"{s}_nan out of 0..n_diff"),
                (on & ((rec[f"{s}_sz"] < 0) | (rec[f"{s}_sz"] > d)), f"{s}_sz out of 0..n_diff"),
                (on & ((rec[f"{s}_nb"] < 0) | (rec[f"{s}_nb"] > tot)), f"{s}_nb out of 0..n"),
                (on & ((rec[f"{s}_first"] < 0) != (d == 0)), f"{s}_first where nothing differs"
                 " (or none where something does)"),
                (on & (rec[f"{s}_first"] >= tot), f"{s}_first past the last element"),
                (on & ((rec[f"{s}_abs"] < 0) | (rec[f"{s}_rel"] < 0)), f"{s}_abs or {s}_rel < 0")]
    for mask, why in bad:
        hit = np.flatnonzero(mask)
        if hit.size:
            raise ValueError(f"node #{int(hit[0])}: {why}")
