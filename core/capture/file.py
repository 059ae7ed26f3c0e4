"""The capture file: a recorded PyTorch run (docs/capture.md), numpy only.

A sibling of the tape file's version 2 (docs/tapefile.md) with the same layout and the same
care, but its own magic and header (a capture's ops are aten ops, not the tape's op table, so
the tape reader's node checks do not apply):

    preamble  64 bytes   b"\\x93TSCAPTURE\\r\\n\\x1a\\n", the version (u16 little-endian), zeros
    arrays    ...        each stored value's raw bytes at a 64-byte-aligned offset
    header    n bytes    UTF-8 JSON (below)
    trailer   56 bytes   b"CAPTIDX\\0", the header's offset (u64), length (u64), SHA-256 (32 bytes)

SECURITY: a capture is untrusted input (docs/security.md). ``load`` never unpickles and never
imports; the file must be a regular file; the header's length is checked against the limit and
the file before it is read, and its SHA-256 before it is parsed (a JSON object with a repeated
key is refused); every array must lie inside the file, aligned, with no two overlapping, and its
size must be exactly its declared shape times its dtype's size (Python integers: a huge declared
shape cannot overflow) before anything is allocated; a dtype is a name looked up in
``STORED_DTYPES``, never ``np.dtype(text from the file)``; every array's digest is checked
before it is handed out, read-only (an array that several values name, values of the same
bytes, is read and checked once and handed out to each). Every failure is a
``CaptureFileError`` naming the file.

DIGESTS: the header names its values' digest algorithm (``"digest"``: ``xxh3_128``, the
default, or ``sha256``; ``DIGESTS``) and lists one digest per value (``values.digests``). A
file that names none is the first layout: SHA-256, listed as ``values.sha256``. The digests
identify values (the judge: the same bytes as an input; a pair of runs, the ranks: the same
value in both) and detect a corrupt or truncated file; nothing is signed, so a cryptographic
hash buys nothing here (anyone who can edit the file can recompute one), and XXH3-128 runs
~10x faster than SHA-256 (docs/capture.md, "The file"). The header's own checksum in the
trailer stays a SHA-256.

DERIVED VALUES (optional ``values.derived``: ``[[value, source, strides], ...]``): a hashed
value that is its source's elements rearranged (a ``t``, ``transpose``, ``permute``: strides
over the source's C-order elements, each element once) carries no digest of its bytes but a
sentinel (``derived_digest``) of its source's digest and its geometry: two derived values'
digests are equal iff their sources' and geometries are. Checked at load (an earlier source
that is not derived itself, its dtype and element count, no stored array, dense strides, the
sentinel); ``Capture.derived``. A file without the column has none.

OPAQUE VALUES (optional ``values.opaque``: ``[[value, kind], ...]``): a value numpy cannot hold
(``OPAQUE_KINDS``: a sparse tensor, a quantized one, a nested one) has no stored array,
whatever the budget; its digest is of its index and value tensors' bytes (a quantized one's
integers, scales and zero points; a nested one's components' shapes and bytes). The judge
says so where such a value leaves an op unjudged; ``Capture.opaque``. Checked at load (a value
once, a known kind, no stored array). A file without the column has none.

LAYOUTS (optional ``ops.layouts``: ``[[op, strides, storage offset], ...]``): the memory layout
of the first argument of each op of ``LAYOUT_OPS`` (``as_strided``: its output shows the
input's storage; ``resize_``: it keeps the storage's order), as it was before the op ran;
``Capture.layouts``. Checked at load (an op of ``LAYOUT_OPS`` once, its first argument a
value of as many dimensions as strides, every number from 0). A file without the column has
none (its ``as_strided`` and ``resize_`` ops have no reference).

STRIDED (optional ``ops.strided``: ``[[op, strides, storage offset], ...]``): the memory layout
of each op's first argument where it was not C-contiguous (a transposed view, a slice), as
the op met it: ``--explain`` lays the value out so to follow a kernel's order over it (a
``sum``'s TensorIterator order). Checked at load as ``ops.layouts`` (any op). A file without
the column has none (those kernels are tried on C-ordered values only).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import xxhash

from tapescope.core.atomic import AtomicFile, open_regular, write_atomic
from tapescope.core.gcpause import gc_paused
from tapescope.core.precision import BFLOAT16

__all__ = ["COMPILED_OP", "DEFAULT_DIGEST", "DIGESTS", "FORMAT", "VERSION", "MAGIC", "PHASES",
           "STORED_DTYPES", "STRIDED_KW", "Capture", "CaptureFileError", "DigestMismatchError",
           "LAYOUT_KW",
           "LAYOUT_OPS", "Limits", "MAX_LOSS_CALLS", "OPAQUE_KINDS", "OVERWRITE_OPS", "Spool",
           "UNINITIALISED_OPS", "c_strides", "comparable", "derived_digest", "derived_holds",
           "digest", "is_capture", "is_dense", "load", "raw_bytes", "save", "uninitialised_digest"]

FORMAT = "tapescope.capture"
VERSION = 1
MAGIC = b"\x93TSCAPTURE\r\n\x1a\n"  # 14 bytes, then the version (u16 LE)
TRAILER_MAGIC = b"CAPTIDX\x00"
PHASES = ("forward", "backward", "optimizer")
# the op of one call of a torch.compile'd graph (app/capture/compiled.py): args
# ``[graph index, [inputs], [positions of the recorded outputs among the graph's outputs]]``
COMPILED_OP = "tapescope.compiled_graph"
# the base names of the ops whose output is uninitialised memory: whatever the process's memory
# held (another tensor's freed bytes, a file read earlier). Their outputs are neither stored nor
# hashed (a capture would carry that memory to whoever is sent the file): a sentinel digest
# (``uninitialised_digest``) and no array
UNINITIALISED_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                               "new_empty_strided", "empty_permuted"})
# the base names of the in-place ops that write every element of their first argument without
# reading it: where the recorder first meets that argument there, its bytes are read by no op of
# the step (maybe the heap's garbage: a module's ``Parameter(torch.empty(...))`` that
# ``uniform_`` fills), so they are recorded as uninitialised memory is (its sentinel digest, no
# array); the judge gives such an op zeros of its dtype and shape there (it reads neither)
OVERWRITE_OPS = frozenset({"fill_", "zero_", "copy_", "uniform_", "normal_", "bernoulli_",
                           "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"})
# the base names of the aten ops whose outputs depend on their first argument's memory layout
# (its strides and storage offset), not only on its values: the recorder records that layout
# why a value has no numpy form (``values.opaque``; ``Capture.opaque``): the recorder's names
OPAQUE_KINDS = frozenset({"sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
                          "quantized", "nested", "meta", "subclass", "unreadable"})
# (``ops.layouts``; ``Capture.layouts``)
LAYOUT_OPS = frozenset({"as_strided", "as_strided_", "as_strided_copy", "resize_"})
# the key under which the judge hands such an op's form its first argument's layout (among its
# keyword arguments: not an identifier, so never one of the op's own)
LAYOUT_KW = "@layout"
# the keyword ``--explain`` hands a kernel's variants the layout its first argument had
# (``ops.strided``; the reference forms never read it: values are layouts' own)
STRIDED_KW = "@strided"
GRAPH_KINDS = ("forward", "backward", "inference")
_NODE_OPS = ("placeholder", "call_function", "get_attr")
_PREAMBLE = 64
_ALIGN = 64
_TRAILER = struct.Struct("<8sQQ32s")
_MiB = 1 << 20
_MAX_DEPTH = 12  # nesting of one op's argument JSON
_MAX_TEXT = 4096  # one string in the header (an op name, a module path, a source line)


def _sha256_hex(buf: Any) -> str:
    return hashlib.sha256(buf).hexdigest()


# THE value digests a capture may name (its header's ``"digest"``): name -> (hex digits, the
# hex digest of a C-contiguous buffer). Both release the GIL while they hash a large buffer.
DIGESTS: dict[str, tuple[int, Any]] = {
    "xxh3_128": (32, xxhash.xxh3_128_hexdigest),
    "sha256": (64, _sha256_hex),
}
DEFAULT_DIGEST = "xxh3_128"
LEGACY_DIGEST = "sha256"  # a header that names none (the first layout: ``values.sha256``)
_HEX = frozenset("0123456789abcdef")
_HEX_BYTES = b"0123456789abcdef"  # (a whole column's digests joined: these deleted, none left)

# THE allow-list of dtypes whose values a capture stores: a name from a file is looked up here.
STORED_DTYPES: dict[str, np.dtype] = {
    n: np.dtype(t) for n, t in (
        ("float64", np.float64), ("float32", np.float32), ("float16", np.float16),
        ("bfloat16", BFLOAT16), ("int64", np.int64), ("int32", np.int32), ("int16", np.int16),
        ("int8", np.int8), ("uint8", np.uint8), ("bool", np.bool_),
        ("complex64", np.complex64), ("complex128", np.complex128))}


class CaptureFileError(ValueError):
    """A capture file is truncated, corrupt, foreign or inconsistent; the message names it."""


@dataclass(frozen=True)
class Limits:
    """What reading one capture may cost; a hostile file is refused before it costs more."""

    max_header_bytes: int = 256 * _MiB
    max_rank: int = 32
    max_elements: int = 1 << 40  # a hash-only value's declared element count


@dataclass
class Capture:
    """A loaded capture: the ops (columns), the values (their dtype, shape, digest and, when
    stored, the array), the steps, the initial state and the settings."""

    path: str
    steps: int
    ops: dict[str, list]  # op, module, phase, step, source, args, kwargs, inputs, outputs (per op)
    dtypes: list[str]  # per value
    shapes: list[tuple[int, ...]]
    digests: list[str]
    arrays: list[np.ndarray | None]  # None: over the budget (its digest only)
    losses: list[int]  # per step, the loss value's id (-1: none seen)
    initial: dict
    settings: dict
    meta: dict = field(default_factory=dict)
    # compiled graphs as data (docs/capture.md, "torch.compile"): per graph its kind,
    # backend, nodes (columns: name, op, target, args, kwargs, module, original), outputs
    graphs: list[dict] = field(default_factory=list)
    # per step, every value its backward calls ran on, in order (the last is ``losses``'):
    # gradient accumulation's micro-batches, LBFGS's closure evaluations; None: a file
    # written before session 38
    loss_calls: list[list[int]] | None = None
    digest_algorithm: str = DEFAULT_DIGEST  # the algorithm of ``digests`` (``DIGESTS``)
    # derived values (hashed, never stored: ``derived_digest``): value -> the value whose
    # elements it holds, rearranged (a ``t``/``transpose``/``permute`` of C-ordered memory:
    # equal in two runs iff that source is), and its strides over the source's C-order bytes
    derived: dict[int, int] = field(default_factory=dict)
    derived_strides: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # op -> its first argument's memory layout as it ran (``LAYOUT_OPS``): (strides, storage
    # offset), in elements
    layouts: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    opaque: dict[int, str] = field(default_factory=dict)
    # op -> the memory layout its first argument had where that was not C-contiguous (a
    # transposed view's, a slice's): (strides, storage offset), in elements; for --explain,
    # whose kernels' orders follow the layout (``ops.strided``)
    strided: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)

    @property
    def n_ops(self) -> int:
        return len(self.ops["op"])

    def value(self, vid: int) -> np.ndarray | None:
        """Value ``vid``'s recorded array (read-only), or None when only its digest is stored."""
        return self.arrays[vid]


def is_capture(path: str | os.PathLike) -> bool:
    """True when ``path`` starts with the capture magic (a cheap sniff, no checks)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def raw_bytes(a: np.ndarray) -> np.ndarray:
    """``a``'s bytes, C order, as uint8 (any dtype: bfloat16 has no buffer format)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def digest(a: np.ndarray, algorithm: str = DEFAULT_DIGEST) -> str:
    """The digest of ``a``'s bytes in C order (what the file stores for a value), by
    ``algorithm`` (a name in ``DIGESTS``)."""
    return DIGESTS[algorithm][1](raw_bytes(a))


def c_strides(shape: Any) -> tuple[int, ...]:
    """The strides (in elements) of C order over ``shape``."""
    out, step = [], 1
    for sz in reversed(shape):
        out.append(step)
        step *= sz
    return tuple(reversed(out))


def is_dense(shape: tuple[int, ...] | list[int], strides: tuple[int, ...] | list[int]) -> bool:
    """Whether ``strides`` (in elements; 0 for each dimension of size 1, the canonical form)
    lay ``shape``'s elements over exactly ``prod(shape)`` consecutive elements, each once: a
    rearrangement (a bijection) of C-ordered memory, nothing repeated, nothing left out."""
    dims = sorted((st, sz) for sz, st in zip(shape, strides, strict=True) if sz != 1)
    if any(st != 0 for sz, st in zip(shape, strides, strict=True) if sz == 1):
        return False
    step = 1
    for st, sz in dims:
        if st != step:
            return False
        step *= sz
    return True


def uninitialised_digest(algorithm: str, dtype: str, shape: tuple[int, ...]) -> str:
    """The digest an output of uninitialised memory carries (``UNINITIALISED_OPS``; a sentinel
    of its dtype and shape, never the digest of any value's bytes: the prefix), so that its
    bytes are read by no one."""
    return DIGESTS[algorithm][1](b"tapescope-uninitialised\0"
                                 + f"{dtype}:{tuple(shape)}".encode("ascii"))


def derived_digest(algorithm: str, src_digest: str, dtype: str, shape: tuple[int, ...],
                   strides: tuple[int, ...]) -> str:
    """The digest a derived value carries (a sentinel, not the digest of its bytes): of the
    algorithm's length, made from its source's digest and its geometry (dtype, shape, strides
    over the source's C-order bytes, starting at its first), so that two derived values have
    one digest iff their sources' digests and geometries are the same (then so are their
    values), and never the digest of any value's bytes (the prefix)."""
    geometry = f"{dtype}:{tuple(shape)}:{tuple(strides)}".encode("ascii")
    return DIGESTS[algorithm][1](b"tapescope-view\0" + src_digest.encode("ascii") + b"\0"
                                 + geometry)


def derived_holds(cap: Capture, vid: int, x: np.ndarray) -> bool:
    """Whether array ``x`` (of value ``vid``'s shape) holds derived value ``vid``'s elements
    (``Capture.derived``: its digest a sentinel, never of its bytes): ``x`` put back in the
    source's C order (the strides are a bijection) has the source's digest."""
    strides = cap.derived_strides.get(vid)
    if strides is None or x.shape != tuple(cap.shapes[vid]):
        return False  # (the strides lay out exactly this shape: another would write outside)
    root = np.empty(x.size, x.dtype)
    np.lib.stride_tricks.as_strided(root, x.shape, [st * x.itemsize for st in strides])[...] = x
    return digest(root, cap.digest_algorithm) == cap.digests[cap.derived[vid]]


class DigestMismatchError(CaptureFileError):
    """Captures whose values were hashed by different algorithms, not all stored: their
    digests cannot be compared (the message names both files, their algorithms, the remedy)."""


def comparable(caps: list[Capture]) -> list[Capture]:
    """``caps`` with digests of one algorithm, to be compared across captures (a pair of runs,
    the ranks of one run). Captures of one algorithm come back as they are. Otherwise the
    captures of other algorithms than a common one (``xxh3_128`` first) are given digests
    recomputed from their stored arrays (copies of the captures; the arrays shared), which
    needs every value of theirs stored; where no algorithm allows that, ``DigestMismatchError``
    (one line: both files, their algorithms, ``--digest``)."""
    algs = {c.digest_algorithm for c in caps}
    if len(algs) < 2:
        return list(caps)
    order = sorted(algs, key=lambda n: (n != DEFAULT_DIGEST, n))
    for target in order:
        others = [c for c in caps if c.digest_algorithm != target]
        if all(all(x is not None for x in c.arrays) for c in others):
            return [c if c.digest_algorithm == target else _rehashed(c, target) for c in caps]
    a = caps[0]
    b = next(c for c in caps if c.digest_algorithm != a.digest_algorithm)
    raise DigestMismatchError(
        f"{a.path} ({a.digest_algorithm}) and {b.path} ({b.digest_algorithm}): their values' "
        "digests are of different algorithms and neither holds every value to recompute "
        f"them; capture both with one algorithm (tapescope capture --digest "
        f"{a.digest_algorithm} or --digest {b.digest_algorithm})")


def _rehashed(cap: Capture, algorithm: str) -> Capture:
    """``cap`` with every value's digest recomputed by ``algorithm`` (all stored; a derived
    value's, laid over its source's bytes, is the sentinel of its source's new digest)."""
    import dataclasses

    digests = [None if vid in cap.derived else digest(a, algorithm)
               for vid, a in enumerate(cap.arrays)]
    for vid, src in cap.derived.items():
        digests[vid] = derived_digest(algorithm, digests[src], cap.dtypes[vid], cap.shapes[vid],
                                      cap.derived_strides[vid])
    return dataclasses.replace(cap, digests=digests, digest_algorithm=algorithm)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def save(path: str | os.PathLike, header: dict, arrays: list[np.ndarray],
         digests: list[str] | None = None) -> Path:
    """Write ``header`` (its ``values.array`` indexes ``arrays``) and the arrays, atomically.
    ``header`` gets ``format``, ``version`` and ``arrays`` (offset, size, digest each), the
    digests by the algorithm the header names (``"digest"``; one that names none is the first
    layout: SHA-256, the values' digests in ``values.sha256``); ``digests``: the arrays' digests
    when the caller has them already (the recorder does), so that no array is hashed twice."""
    algorithm = header.get("digest", LEGACY_DIGEST)
    if algorithm not in DIGESTS:
        raise ValueError(f"digest algorithm {algorithm!r} is unknown (known: "
                         f"{', '.join(DIGESTS)})")
    table: list[list] = []
    pos = _PREAMBLE
    for i, a in enumerate(arrays):
        table.append([pos, a.nbytes, digests[i] if digests is not None
                      else digest(a, algorithm)])
        pos = _align(pos + a.nbytes)
    h = {"format": FORMAT, "version": VERSION, **header, "arrays": table}
    text = header_json(h)

    def write(f) -> None:
        f.write(_preamble())
        at = _PREAMBLE
        for a, (off, n, _) in zip(arrays, table, strict=True):
            if off > at:
                f.write(bytes(off - at))
            f.write(raw_bytes(a).data)
            at = off + n
        f.write(_tail(at, text))

    return write_atomic(path, write)


def _preamble() -> bytes:
    return MAGIC + struct.pack("<H", VERSION) + bytes(_PREAMBLE - len(MAGIC) - 2)


def _tail(at: int, text: bytes) -> bytes:
    """What follows the arrays, which end at offset ``at``: the padding, the header ``text``
    and the trailer that locates and checks it."""
    hoff = _align(at)
    return (bytes(hoff - at) + text
            + _TRAILER.pack(TRAILER_MAGIC, hoff, len(text), hashlib.sha256(text).digest()))


class Spool:
    """A capture file written while the run is recorded: each stored value's bytes go to a
    temporary beside the file as the recorder reads them (from the tensor's memory: one copy,
    to the file; no private copy held until the end and written again), values of the same
    bytes (digest and size) once; ``finish`` appends the header and puts the file in place
    (``core.atomic.AtomicFile``: whole or not at all; a failed write breaks it, and
    ``finish`` raises that failure). The layout is ``save``'s, byte for byte."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.out = AtomicFile(path)
        self.table: list[list] = []  # per array: [offset, size, digest], as the header's
        self._index: dict[tuple[str, int], int] = {}
        self.out.write(_preamble())
        self.at = _PREAMBLE

    def put(self, data: Any, n: int, hexdigest: str) -> int:
        """Store the ``n`` bytes of buffer ``data`` (C order), digest ``hexdigest``; the
        index of its array in the file's table (a repeat of stored bytes: the first's)."""
        key = (hexdigest, n)
        ai = self._index.get(key)
        if ai is None:
            off = _align(self.at)
            if off > self.at:
                self.out.write(bytes(off - self.at))
            self.out.write(data)
            self.at = off + n
            ai = self._index[key] = len(self.table)
            self.table.append([off, n, hexdigest])
        return ai

    def finish(self, path: str | os.PathLike, header: dict) -> Path:
        """Append ``header`` (its ``values.array`` indexes this spool's arrays) and put the
        file at ``path`` (in the folder the spool was made for)."""
        text = header_json({"format": FORMAT, "version": VERSION, **header,
                            "arrays": self.table})
        self.out.write(_tail(self.at, text))
        return self.out.commit(path)

    def discard(self) -> None:
        self.out.discard()


#: the header's parts made by encoders that write a non-finite float as ``{"f": "inf"}`` (the
#: recorder's ``_encode`` and its per-op path, compiled.py's ``enc``) or hold none (digests,
#: shapes, indices): written by orjson unchecked; every other part is checked by json's strict
#: encoder first (small: settings, meta, the initial state's names)
_ENCODED_PARTS = frozenset({"ops", "values", "arrays", "graphs"})


def header_json(h: dict) -> bytes:
    """``h`` as compact JSON, strict: a non-finite float (JSON has no word for it) is a
    ValueError, never written. orjson writes it (~10x json's encoder on a capture's op rows,
    the largest fixed cost of a short capture: docs/capture.md "Measured"), but it would write
    NaN or infinity as ``null``: every part not made by an encoder that spells such floats out
    (``_ENCODED_PARTS``) is checked by json's strict encoder first. What orjson refuses (an
    integer beyond 64 bits, a key not a string) is written by json's."""
    rest = {k: v for k, v in h.items() if k not in _ENCODED_PARTS}
    json.dumps(rest, allow_nan=False)  # ValueError: "Out of range float values ..."
    try:
        return orjson.dumps(h)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(h, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("a key appears twice in one object")
    return d


def _parse(text: bytes) -> Any:
    """The header's JSON. orjson's parse (with the write-back below, 0.8 ms against json's
    1.9 ms with its repeated-key hook on a zoo GPT capture's header) is kept only where
    orjson writes what it gave back as ``text`` itself:
    then ``text`` is orjson's own writing of an object (``header_json``), which holds no
    repeated key and which json parses to the same object. Any other text (json's writing,
    a repeated key, NaN, a 65-bit integer, spaces, deep nesting) is parsed by json with the
    repeated-key check (its errors, as before)."""
    try:
        h = orjson.loads(text)
        if orjson.dumps(h) == text:
            return h
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    return json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)


def load(path: str | os.PathLike, *, limits: Limits | None = None) -> Capture:
    """Read and check a capture; every array is read into private memory and its digest
    checked before it is handed out (read-only)."""
    lim = limits or Limits()
    p = Path(path)

    def bad(why: str) -> CaptureFileError:
        return CaptureFileError(f"{p}: {why}")

    try:
        f = open_regular(p, bad("not a regular file (a capture is read only from a plain file)"))
    except OSError as e:
        raise bad(f"cannot open ({e.strerror or e})") from None
    # (the collector paused: the header's ~300,000 objects for gpt-wide's 2 steps, kept, set
    # off full collections that rescanned every object of the process, torch's too: one of
    # ~0.13 s every other load in a process that had judged before; core/gcpause.py)
    with f, gc_paused():
        return _load(f, p, os.fstat(f.fileno()).st_size, lim, bad)


def _read(f, offset: int, n: int, bad, what: str, frozen: bool = False) -> np.ndarray | bytes:
    """``n`` bytes at ``offset`` into private memory (uint8), read, not mapped: a file that
    shrinks while it is read is this error, never a SIGBUS. ``np.empty``: the pages are
    written once, by the read (``bytearray(n)`` zero-fills them first: a pass over every byte
    of the file). ``frozen``: as ``bytes`` (``f.read``'s own, written once too): an array
    made over them is read-only and cannot be made writeable, without a ``setflags`` call
    (~0.3 us each of a zoo GPT capture's ~1,400 values)."""
    if frozen:
        f.seek(offset)
        got = f.read(n)  # (a buffered file's read returns short only at the end)
        if len(got) != n:
            raise bad(f"{what} is truncated ({len(got)} of {n} bytes)")
        return got
    buf = np.empty(n, np.uint8)
    view = memoryview(buf)
    f.seek(offset)
    got = 0
    while got < n:  # one read(2) returns at most ~2 GiB
        k = f.readinto(view[got:])
        if not k:
            break
        got += k
    if got != n:
        raise bad(f"{what} is truncated ({got} of {n} bytes)")
    return buf


def _load(f, p: Path, size: int, lim: Limits, bad) -> Capture:
    if size < _PREAMBLE + _TRAILER.size:
        raise bad(f"not a capture file (too short: {size} bytes)")
    pre = _read(f, 0, _PREAMBLE, bad, "the preamble").tobytes()
    if pre[:len(MAGIC)] != MAGIC:
        raise bad("not a capture file (no tapescope capture magic at its start)")
    (ver,) = struct.unpack("<H", pre[len(MAGIC):len(MAGIC) + 2])
    if ver != VERSION:
        raise bad(f"capture version {ver} is not supported (this tapescope reads {VERSION})")
    magic, hoff, hlen, hsha = _TRAILER.unpack(_read(f, size - _TRAILER.size, _TRAILER.size, bad,
                                                    "the trailer").tobytes())
    if magic != TRAILER_MAGIC:
        raise bad("truncated or corrupt (no trailer at its end)")
    if hlen > lim.max_header_bytes:
        raise bad(f"header of {hlen} bytes is over the limit ({lim.max_header_bytes})")
    if hoff < _PREAMBLE or hoff + hlen != size - _TRAILER.size:
        raise bad("truncated or corrupt (the trailer's header offset is outside the file)")
    text = _read(f, hoff, hlen, bad, "the header", True)
    if hashlib.sha256(text).digest() != hsha:
        raise bad("corrupt header (its SHA-256 does not match the trailer)")
    try:
        h = _parse(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad(f"header is not valid JSON ({' '.join(str(e).split())[:120]})") from None
    spec = _Spec(h, hoff, lim, bad)
    bufs = _read_arrays(f, spec, bad)
    arrays: list[np.ndarray | None] = [None] * spec.n_values
    shapes, dtypes, ndarray = spec.shapes, spec.dtypes, np.ndarray
    for vid, ai in enumerate(spec.array_of):
        if ai < 0:
            continue
        # an array several values name (the same bytes) was read and checked once; the
        # value's array made over its bytes in one call (a slice's view and reshape were
        # ~1 us of each of a zoo GPT capture's ~1,400; its size was checked: _stored_fit)
        buf, off = bufs[ai]
        a = ndarray(shapes[vid], STORED_DTYPES[dtypes[vid]], buf, off)
        if type(buf) is not bytes:  # (one read's bytes: read-only already)
            a.setflags(write=False)
        arrays[vid] = a
    for vid, src in spec.derived.items():
        # a derived value whose source is stored: the source's bytes laid out by its strides
        # (checked dense over the source's elements: ``_derived``; numpy checks them against
        # the buffer again), read-only, no copy
        ai = spec.array_of[src]
        if ai >= 0:
            buf, off = bufs[ai]
            a = ndarray(shapes[vid], STORED_DTYPES[dtypes[vid]], buf, off,
                        [st * arrays[src].itemsize for st in spec.derived_strides[vid]])
            a.setflags(write=False)
            arrays[vid] = a
    return Capture(path=str(p), steps=spec.steps, ops=spec.ops, dtypes=spec.dtypes,
                   shapes=spec.shapes, digests=spec.digests, arrays=arrays, losses=spec.losses,
                   initial=spec.initial, settings=spec.settings, meta=spec.meta,
                   graphs=spec.graphs, digest_algorithm=spec.algorithm,
                   derived=spec.derived, derived_strides=spec.derived_strides,
                   layouts=spec.layouts, opaque=spec.opaque, loss_calls=spec.loss_calls,
                   strided=spec.strided)


# arrays at least this large are hashed on the load's pool (a smaller one's hand-off costs
# more than its digest)
_POOL_MIN = 1 << 16
# algorithms whose digests are hashed on a pool while the next arrays are read: SHA-256 (~2
# GB/s) costs as much as the read; XXH3 (~15-20 GB/s) is a tenth of it, inline
_POOLED = frozenset({"sha256"})
# the stored arrays of a capture whose arrays span at most this many bytes are read with one
# read (a read per array cost ~2 us each: 2 of a zoo GPT capture's 10 ms load, 918 arrays)
_SLAB_MAX = 16 * _MiB


def _hash_workers() -> int:
    """Threads that hash the arrays while the next ones are read (the digests release the
    GIL): the CPUs this process may run on but the reading one, at most 4; 0: hash inline."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(0, min(4, cpus - 1))


def _slab(f, spec: _Spec) -> tuple[bytes, int] | None:
    """``(bytes, file offset)``: the span of the file that holds every stored array, read with
    one read into private, immutable memory, where it is at most ``_SLAB_MAX`` bytes; None
    where it is larger or the read comes back short (the arrays are then read one by one, so
    a truncated file names its first truncated array)."""
    named = {ai for ai in spec.array_of if ai >= 0}
    if not named:
        return None
    lo = min(spec.table[ai][0] for ai in named)
    hi = max(spec.table[ai][0] + spec.table[ai][1] for ai in named)
    if hi - lo > _SLAB_MAX:
        return None
    try:
        return _read(f, lo, hi - lo, CaptureFileError, "the arrays", True), lo
    except CaptureFileError:
        return None


def _read_arrays(f, spec: _Spec, bad) -> dict[int, tuple[np.ndarray | bytes, int]]:
    """Every named array's bytes (array index -> (private memory, the array's offset in
    it): an array made over ``bytes`` is read-only already), each read once and its digest
    checked against the header before any is handed out. With a slow digest (``_POOLED``)
    large arrays are hashed on a pool while the next are read; the checks are made in file
    order either way, so a corrupt file names the same first bad array (and value) as hashing
    each where it is read."""
    hexdigest = DIGESTS[spec.algorithm][1]
    workers = _hash_workers() if spec.algorithm in _POOLED else 0
    order: list[tuple[int, int, str, Any]] = []  # (array, value, digest, digest or future)
    bufs: dict[int, tuple[np.ndarray | bytes, int]] = {}
    pool = None
    if workers:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tapescope-load")

    def check() -> None:
        for ai, vid, want, got in order:
            if (got if isinstance(got, str) else got.result()) != want:
                raise bad(f"corrupt array {ai} (value {vid}): its {spec.algorithm} digest does "
                          "not match the header")

    slab = None if workers else _slab(f, spec)
    if slab is not None:
        # hashed inline in value order, the first mismatch refused where it is met: the same
        # first bad array check() names; a memoryview's slice, not an array's (~0.2 us less)
        mem, lo = slab
        whole, table = memoryview(mem), spec.table
        for vid, ai in enumerate(spec.array_of):
            if ai < 0 or ai in bufs:
                continue
            off, n, want = table[ai]
            start = off - lo
            if hexdigest(whole[start:start + n]) != want:
                raise bad(f"corrupt array {ai} (value {vid}): its {spec.algorithm} digest does "
                          "not match the header")
            bufs[ai] = (mem, start)
        return bufs
    try:
        for vid, ai in enumerate(spec.array_of):
            if ai < 0 or ai in bufs:
                continue
            off, n, want = spec.table[ai]
            try:
                buf = _read(f, off, n, bad, f"array {ai} (value {vid})")
            except CaptureFileError:
                check()  # an earlier corrupt array is the first failure, as when serial
                raise
            bufs[ai] = (buf, 0)
            got = pool.submit(hexdigest, buf) if pool is not None and n >= _POOL_MIN \
                else hexdigest(buf)
            order.append((ai, vid, want, got))
        check()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return bufs


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# Column checks at C speed (``map``, ``min``, ``max`` over a whole column): each holds only
# where the per-entry check holds for every entry, so a column that passes is not walked entry
# by entry, and one that does not is walked to name its first bad entry (the same refusal).
# The types are exact (JSON makes no subclasses; ``type(True) is bool``, never int).
def _ints(v: list, lo: int, hi: int | None = None) -> bool:
    """Every entry an int (no bool) with ``lo <= x`` and, given ``hi``, ``x < hi``."""
    return not v or (set(map(type, v)) == {int} and min(v) >= lo
                     and (hi is None or max(v) < hi))


def _texts(v: list) -> bool:
    """Every entry a string of at most ``_MAX_TEXT`` characters."""
    return not v or (set(map(type, v)) == {str} and max(map(len, v)) <= _MAX_TEXT)


def _hexes(v: list | tuple, n_hex: int) -> bool:
    """Every entry a digest of ``n_hex`` lowercase hex digits (``_Spec._digest_ok``): the
    column joined (a join of anything but strings raises), each entry's length, and the
    joined text's ASCII bytes with the hex digits deleted empty (``bytes.translate``: ~4x
    cheaper than a regular expression's match, ~0.14 ms of a zoo GPT load's 1,393 digests)."""
    if not v:
        return True
    try:
        text = "".join(v).encode("ascii")
    except (TypeError, UnicodeEncodeError):
        return False
    return set(map(len, v)) == {n_hex} and not text.translate(None, _HEX_BYTES)


# an argument's types that are valid at any depth within the limit (``_Spec._arg``)
_PLAIN = frozenset({type(None), bool, int, float})


MAX_LOSS_CALLS = 1 << 16  # backward calls a step's list may hold (the recorder keeps the first)


class _Spec:
    """The header, every field checked (types, ranges, sizes) before any array is read."""

    def __init__(self, h: Any, hoff: int, lim: Limits, bad) -> None:
        self.bad = bad
        if not isinstance(h, dict) or h.get("format") != FORMAT:
            raise bad(f"not a capture header (format is not {FORMAT!r})")
        if h.get("version") != VERSION:
            raise bad(f"header version {h.get('version')!r} is not {VERSION}")
        self.steps = h.get("steps")
        if not _is_int(self.steps) or self.steps < 0:
            raise bad("header: 'steps' is not a count")
        # the values' digest algorithm; a header that names none is the first layout (SHA-256)
        alg = h.get("digest", None)
        if alg is None:
            self.algorithm, self.digest_key = LEGACY_DIGEST, "sha256"
        elif isinstance(alg, str) and alg in DIGESTS:
            self.algorithm, self.digest_key = alg, "digests"
        else:
            raise bad(f"header: 'digest' names the algorithm {str(alg)[:40]!r}, which this "
                      f"tapescope does not know (it knows {', '.join(DIGESTS)})")
        self.n_hex = DIGESTS[self.algorithm][0]
        self._values(h, lim)
        self._derived(h["values"], lim)
        self._opaque(h["values"])
        self._arrays(h, hoff)
        self._ops(h)
        self.losses = self._list(h, "losses", lambda v: _is_int(v) and -1 <= v < self.n_values,
                                 n=self.steps)
        self.loss_calls = None
        if "loss_calls" in h:  # (optional: a file before session 38 has none)
            self.loss_calls = self._list(h, "loss_calls", lambda c: isinstance(c, list) and len(
                c) <= MAX_LOSS_CALLS and all(_is_int(v) and 0 <= v < self.n_values for v in c),
                n=self.steps)
        self.initial = self._dict(h, "initial")
        for key in ("params", "buffers"):
            for e in self.initial.get(key, []):
                if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                        and _is_int(e[1]) and 0 <= e[1] < self.n_values):
                    raise bad(f"header: initial {key} entry {str(e)[:60]!r} is malformed")
        self.settings = self._dict(h, "settings")
        self.meta = self._dict(h, "meta")
        # settings flipped by ``capture --set`` / ``sweep`` (name -> value): read by ``pair`` as
        # a mapping of plain values (a string or list there was a traceback)
        applied = self.meta.get("applied")
        if applied is not None and not (isinstance(applied, dict) and all(
                type(v) in _PLAIN or (type(v) is str and len(v) <= _MAX_TEXT)
                for v in applied.values())):
            raise bad(f"header: meta 'applied' {str(applied)[:60]!r} is not an object of "
                      "settings and their values")
        self._graphs(h)

    def _digest_ok(self, d: Any, where: str) -> None:
        """``d`` is a digest of this file's algorithm: its hex digits, lowercase."""
        if not (isinstance(d, str) and len(d) == self.n_hex and _HEX.issuperset(d)):
            raise self.bad(f"header: {where}'s digest {str(d)[:70]!r} is not a {self.algorithm} "
                           f"digest ({self.n_hex} lowercase hex digits)")

    def _dict(self, h: dict, key: str) -> dict:
        v = h.get(key, {})
        if not isinstance(v, dict):
            raise self.bad(f"header: {key!r} is not an object")
        return v

    def _list(self, h: dict, key: str, ok, n: int | None = None, fast=None) -> list:
        """``h[key]``, a list (of ``n`` entries) whose every entry is ``ok``; ``fast(list)``:
        a column check that holds only where every entry is ``ok`` (the entries are then not
        walked one by one)."""
        v = h.get(key)
        if not isinstance(v, list):
            raise self.bad(f"header: {key!r} is not a list")
        if n is not None and len(v) != n:
            raise self.bad(f"header: {key!r} has {len(v)} entries, not {n}")
        if fast is not None and fast(v):
            return v
        for i, x in enumerate(v):
            if not ok(x):
                raise self.bad(f"header: {key!r} entry {i} ({str(x)[:60]!r}) is malformed")
        return v

    def _values(self, h: dict, lim: Limits) -> None:
        v = self._dict(h, "values")
        names = self._list(v, "dtypes", lambda s: isinstance(s, str) and 0 < len(s) <= 64)
        di = self._list(v, "dtype", lambda i: _is_int(i) and 0 <= i < len(names),
                        fast=lambda c: _ints(c, 0, len(names)))
        n = len(di)
        self.n_values = n
        self.dtypes = [names[i] for i in di]

        def shape_ok(s: Any) -> bool:
            return isinstance(s, list) and len(s) <= lim.max_rank and \
                all(_is_int(d) and 0 <= d for d in s)

        def shapes_ok(c: list) -> bool:
            return not c or (set(map(type, c)) == {list} and max(map(len, c)) <= lim.max_rank
                             and _ints(list(chain.from_iterable(c)), 0))

        shapes = self._list(v, "shape", shape_ok, n=n, fast=shapes_ok)
        self.shapes = list(map(tuple, shapes))
        self.elements = list(map(math.prod, self.shapes))  # Python integers: no overflow
        if self.elements and max(self.elements) > lim.max_elements:
            for vid, s in enumerate(self.shapes):
                if math.prod(s) > lim.max_elements:
                    raise self.bad(f"value {vid}: declared shape {list(s)} has more than "
                                   f"{lim.max_elements} elements")
        self.digests = self._list(v, self.digest_key, lambda s: True, n=n)
        if not _hexes(self.digests, self.n_hex):
            for vid, d in enumerate(self.digests):
                self._digest_ok(d, f"value {vid}")
        self.array_of = self._list(v, "array", lambda i: _is_int(i) and i >= -1, n=n,
                                   fast=lambda c: _ints(c, -1))

    def _opaque(self, v: dict) -> None:
        """``values.opaque`` (optional): ``[[value, kind], ...]``, each a value listed once, of a
        kind in ``OPAQUE_KINDS``, with no stored array."""
        self.opaque: dict[int, str] = {}
        if "opaque" not in v:
            return
        col, where = v["opaque"], "header: 'values.opaque'"
        if not isinstance(col, list):
            raise self.bad(f"{where} is not a list")
        if len(col) > self.n_values:
            raise self.bad(f"{where} has {len(col)} entries, more than the {self.n_values} "
                           "values")
        for k, e in enumerate(col):
            at = f"{where} entry {k} ({str(e)[:60]!r})"
            if not (isinstance(e, list) and len(e) == 2 and _is_int(e[0])
                    and 0 <= e[0] < self.n_values and isinstance(e[1], str)):
                raise self.bad(f"{at} is malformed (not [value, kind])")
            if e[1] not in OPAQUE_KINDS:
                raise self.bad(f"{at}: the kind is not one of {', '.join(sorted(OPAQUE_KINDS))}")
            if e[0] in self.opaque:
                raise self.bad(f"{at}: value {e[0]} is listed twice")
            if self.array_of[e[0]] != -1:
                raise self.bad(f"{at}: value {e[0]} has a stored array")
            self.opaque[e[0]] = e[1]

    def _derived(self, v: dict, lim: Limits) -> None:
        """``values.derived`` (optional): ``[[value, source, strides], ...]``, each a value
        hashed only, later than its source (a value that is not derived itself) and of its
        dtype and element count, laid over it densely (``is_dense``), with the sentinel
        ``derived_digest`` makes of them."""
        self.derived: dict[int, int] = {}
        self.derived_strides: dict[int, tuple[int, ...]] = {}
        if "derived" not in v:
            return
        col = v["derived"]
        where = "header: 'values.derived'"
        if not isinstance(col, list):
            raise self.bad(f"{where} is not a list")
        if len(col) > self.n_values:
            raise self.bad(f"{where} has {len(col)} entries, more than the {self.n_values} "
                           "values")
        n, derived = self.n_values, self.derived
        for k, e in enumerate(col):
            at = f"{where} entry {k} ({str(e)[:60]!r})"
            if not (isinstance(e, list) and len(e) == 3 and _is_int(e[0]) and _is_int(e[1])
                    and isinstance(e[2], list) and len(e[2]) <= lim.max_rank
                    and all(_is_int(s) and s >= 0 for s in e[2])):
                raise self.bad(f"{at} is malformed (not [value, source, [strides]])")
            vid, src, strides = e[0], e[1], tuple(e[2])
            if not 0 <= src < vid < n:
                raise self.bad(f"{at}: its source is not an earlier value (values 0..{n - 1})")
            if vid in derived:
                raise self.bad(f"{at}: value {vid} is listed twice")
            if src in derived:
                raise self.bad(f"{at}: its source {src} is derived itself")
            if self.dtypes[vid] != self.dtypes[src] or self.elements[vid] != self.elements[src]:
                raise self.bad(f"{at}: its dtype or element count is not its source's")
            if self.array_of[vid] != -1:
                raise self.bad(f"{at}: a derived value has a stored array")
            shape = self.shapes[vid]
            if len(strides) != len(shape) or not is_dense(shape, strides):
                raise self.bad(f"{at}: its strides do not lay {list(shape)} over its source "
                               "densely")
            derived[vid] = src
            self.derived_strides[vid] = strides
        for vid, src in derived.items():  # (a source listed after its derived value)
            if src in derived:
                raise self.bad(f"{where}: the source {src} of value {vid} is derived itself")
            if self.digests[vid] != derived_digest(self.algorithm, self.digests[src],
                                                   self.dtypes[vid], self.shapes[vid],
                                                   self.derived_strides[vid]):
                raise self.bad(f"{where}: value {vid}'s digest is not the one its source and "
                               "strides make")

    def _arrays(self, h: dict, hoff: int) -> None:
        def ok(e: Any) -> bool:
            return isinstance(e, list) and len(e) == 3 and _is_int(e[0]) and _is_int(e[1])

        def fast(c: list) -> bool:
            if not c:
                return True
            if set(map(type, c)) != {list} or set(map(len, c)) != {3}:
                return False
            offs, sizes, _ = zip(*c, strict=True)
            return set(map(type, offs)) == {int} and set(map(type, sizes)) == {int}

        self.table = self._list(h, "arrays", ok, fast=fast)
        # several values may name one array (values of the same bytes, stored once: a
        # view's output and its input): each must need exactly its size and carry its digest
        fit = self._stored_fit()
        # where every array is named and fits, each array's digest is a value's, checked
        # already (_values): the table's own check would pass (~0.15 ms of a zoo GPT load)
        if not (fit and self._every_array_named()) \
                and not _hexes([e[2] for e in self.table], self.n_hex):
            for ai, e in enumerate(self.table):
                self._digest_ok(e[2], f"array {ai}")
        if not fit:
            self._stored_each()
        spans = sorted((off, n, i) for i, (off, n, _) in enumerate(self.table))
        end = _PREAMBLE
        for off, n, i in spans:
            # an entry no value names is placed too: its size is no value's, and a negative
            # one would move ``end`` back and fit an offset past the file under ``hoff``
            if off % _ALIGN or off < end or off + n > hoff or n < 0:
                raise self.bad(f"array {i} (offset {off}, {n} bytes) " + (
                    "has a negative size" if n < 0 else "is misplaced: unaligned, overlapping "
                    "another, or outside the file's data"))
            end = off + n

    def _stored_fit(self) -> bool:
        """Every stored value names an array of the file, of a stored dtype, of exactly its
        size and with its digest: ``_stored_each``'s checks, all values at once."""
        vids = [vid for vid, ai in enumerate(self.array_of) if ai >= 0]
        if not vids:
            return True
        ais = [self.array_of[vid] for vid in vids]
        if max(ais) >= len(self.table):
            return False
        names = {self.dtypes[vid] for vid in vids}
        if not names <= STORED_DTYPES.keys():
            return False
        size = {name: STORED_DTYPES[name].itemsize for name in names}
        el, dt, table, dg = self.elements, self.dtypes, self.table, self.digests
        return [el[vid] * size[dt[vid]] for vid in vids] == [table[ai][1] for ai in ais] \
            and [dg[vid] for vid in vids] == [table[ai][2] for ai in ais]

    def _every_array_named(self) -> bool:
        """Every entry of the table is some value's array (where every value's array index
        is below the table's length: ``_stored_fit``)."""
        named = set(self.array_of)
        named.discard(-1)
        return len(named) == len(self.table)

    def _stored_each(self) -> None:
        """Each stored value checked, in order: the first that does not fit is refused by
        name."""
        for vid, ai in enumerate(self.array_of):
            if ai < 0:
                continue
            if ai >= len(self.table):
                raise self.bad(f"value {vid} names array {ai}; the file has {len(self.table)}")
            name = self.dtypes[vid]
            if name not in STORED_DTYPES:
                raise self.bad(f"value {vid}: dtype {name[:40]!r} cannot be stored "
                               f"(stored dtypes: {', '.join(STORED_DTYPES)})")
            want = math.prod(self.shapes[vid]) * STORED_DTYPES[name].itemsize
            off, n, digest = self.table[ai]
            if n != want:
                raise self.bad(f"value {vid}: array {ai} holds {n} bytes but shape "
                               f"{list(self.shapes[vid])} of {name} needs {want}")
            if self.digests[vid] != digest:
                raise self.bad(f"value {vid}: its digest and array {ai}'s differ")

    def _ops(self, h: dict) -> None:
        o = self._dict(h, "ops")
        text = lambda s: isinstance(s, str) and len(s) <= _MAX_TEXT  # noqa: E731
        names = self._list(o, "names", text, fast=_texts)
        modules = self._list(o, "modules", text, fast=_texts)
        sources = self._list(o, "sources", text, fast=_texts)
        op = self._list(o, "op", lambda i: _is_int(i) and 0 <= i < len(names),
                        fast=lambda c: _ints(c, 0, len(names)))
        n = len(op)
        module = self._list(o, "module", lambda i: _is_int(i) and 0 <= i < len(modules), n=n,
                            fast=lambda c: _ints(c, 0, len(modules)))
        phase = self._list(o, "phase", lambda i: _is_int(i) and 0 <= i < len(PHASES), n=n,
                           fast=lambda c: _ints(c, 0, len(PHASES)))
        step = self._list(o, "step", lambda i: _is_int(i) and 1 <= i <= self.steps, n=n,
                          fast=lambda c: _ints(c, 1, self.steps + 1))
        source = self._list(o, "source", lambda i: _is_int(i) and -1 <= i < len(sources), n=n,
                            fast=lambda c: _ints(c, -1, len(sources)))
        vid = lambda i: _is_int(i) and 0 <= i < self.n_values  # noqa: E731
        ids = lambda v: isinstance(v, list) and all(vid(i) for i in v)  # noqa: E731
        outputs = self._list(o, "outputs", ids, n=n, fast=lambda c: not c or (
            set(map(type, c)) == {list} and _ints(list(chain.from_iterable(c)), 0,
                                                  self.n_values)))
        args = self._list(o, "args", lambda a: isinstance(a, list) and self._arg(a, 0), n=n,
                          fast=lambda c: not c or (set(map(type, c)) == {list} and self._level(
                              list(chain.from_iterable(c)), 1)))
        kwargs = self._list(o, "kwargs", lambda a: isinstance(a, dict) and self._arg(a, 0), n=n,
                            fast=lambda c: not c or (
                                set(map(type, c)) == {dict}
                                and set(map(type, chain.from_iterable(c))) <= {str}
                                and self._level(list(chain.from_iterable(map(dict.values, c))),
                                                1)))
        self.ops = {"op": [names[i] for i in op], "module": [modules[i] for i in module],
                    "phase": [PHASES[i] for i in phase], "step": step,
                    "source": [sources[i] if i >= 0 else "" for i in source],
                    "args": args, "kwargs": kwargs, "outputs": outputs}
        self._layouts(o)
        self._strided(o)

    def _strided(self, o: dict) -> None:
        """``ops.strided`` (optional): as ``ops.layouts``, for any op whose first argument is
        a value (numbers only: nothing is allocated by them but the ``--explain`` variant's
        own, which checks its span)."""
        self.strided = self._layout_column(o, "strided", False)

    def _layouts(self, o: dict) -> None:
        """``ops.layouts`` (optional): ``[[op, strides, storage offset], ...]``, each an op of
        ``LAYOUT_OPS`` whose first argument is a value, listed once, with a stride (an integer
        from 0) per dimension of that value and an offset from 0."""
        self.layouts = self._layout_column(o, "layouts", True)

    def _layout_column(self, o: dict, name: str, layout_ops: bool
                       ) -> dict[int, tuple[tuple[int, ...], int]]:
        """The ops' column ``name`` of ``[op, strides, storage offset]`` entries, checked (an
        op of ``LAYOUT_OPS`` where ``layout_ops``)."""
        out: dict[int, tuple[tuple[int, ...], int]] = {}
        if name not in o:
            return out
        col, n = o[name], len(self.ops["op"])
        where = f"header: 'ops.{name}'"
        if not isinstance(col, list):
            raise self.bad(f"{where} is not a list")
        if len(col) > n:
            raise self.bad(f"{where} has {len(col)} entries, more than the {n} ops")
        for k, e in enumerate(col):
            at = f"{where} entry {k} ({str(e)[:60]!r})"
            if not (isinstance(e, list) and len(e) == 3 and _is_int(e[0]) and 0 <= e[0] < n
                    and isinstance(e[1], list) and all(_is_int(s) and s >= 0 for s in e[1])
                    and _is_int(e[2]) and e[2] >= 0):
                raise self.bad(f"{at} is malformed (not [op, [strides], offset])")
            i = e[0]
            if i in out:
                raise self.bad(f"{at}: op {i} is listed twice")
            parts = self.ops["op"][i].split(".")
            if layout_ops and (len(parts) < 2 or parts[1] not in LAYOUT_OPS):
                raise self.bad(f"{at}: op {i} ({self.ops['op'][i][:60]}) reads no layout")
            a = self.ops["args"][i]
            if not (a and isinstance(a[0], dict) and _is_int(a[0].get("T"))
                    and 0 <= a[0]["T"] < self.n_values):
                raise self.bad(f"{at}: op {i}'s first argument is not a value")
            if len(e[1]) != len(self.shapes[a[0]["T"]]):
                raise self.bad(f"{at}: {len(e[1])} strides for a value of "
                               f"{len(self.shapes[a[0]['T']])} dimensions")
            out[i] = (tuple(e[1]), e[2])
        return out

    def _graphs(self, h: dict) -> None:
        """Compiled graphs: data only (targets are names the judge looks up in its table,
        never code); every node reference points at an earlier node, every region op names a
        graph and gives one input per placeholder and one output position per output."""
        gs = h.get("graphs", [])
        if not isinstance(gs, list):
            raise self.bad("header: 'graphs' is not a list")
        self.graphs = []
        text = lambda s: isinstance(s, str) and len(s) <= _MAX_TEXT  # noqa: E731
        for gi, g in enumerate(gs):
            where = f"header: graph {gi}"
            if not isinstance(g, dict) or g.get("kind") not in GRAPH_KINDS \
                    or not text(g.get("backend")):
                raise self.bad(f"{where} is malformed (kind, backend)")
            nodes = g.get("nodes")
            if not isinstance(nodes, dict):
                raise self.bad(f"{where}: 'nodes' is not an object")
            cols = {}
            for key in ("name", "op", "target", "args", "kwargs", "module", "original"):
                c = nodes.get(key)
                if not isinstance(c, list) or (cols and len(c) != len(cols["name"])):
                    raise self.bad(f"{where}: node column {key!r} is missing or of another "
                                   "length")
                cols[key] = c
            n = len(cols["name"])
            for i in range(n):
                if not (text(cols["name"][i]) and cols["op"][i] in _NODE_OPS
                        and text(cols["target"][i]) and text(cols["module"][i])
                        and text(cols["original"][i]) and isinstance(cols["args"][i], list)
                        and isinstance(cols["kwargs"][i], dict)
                        and self._node_arg(cols["args"][i], i, 0)
                        and all(isinstance(k, str) and self._node_arg(v, i, 1)
                                for k, v in cols["kwargs"][i].items())):
                    raise self.bad(f"{where}: node {i} ({str(cols['name'][i])[:40]!r}) is "
                                   "malformed")
            outs = g.get("outputs")
            if not isinstance(outs, list) or not all(
                    o is None or (_is_int(o) and 0 <= o < n) for o in outs):
                raise self.bad(f"{where}: 'outputs' is malformed")
            self.graphs.append({"kind": g["kind"], "backend": g["backend"], "nodes": cols,
                                "outputs": outs})
        for i, name in enumerate(self.ops["op"]):
            if name != COMPILED_OP:
                continue
            a = self.ops["args"][i]
            ok = len(a) == 3 and _is_int(a[0]) and 0 <= a[0] < len(self.graphs) \
                and isinstance(a[1], list) and isinstance(a[2], list)
            if ok:
                g = self.graphs[a[0]]
                n_in = g["nodes"]["op"].count("placeholder")
                ok = len(a[1]) == n_in and len(a[2]) == len(self.ops["outputs"][i]) and all(
                    _is_int(j) and 0 <= j < len(g["outputs"]) and g["outputs"][j] is not None
                    for j in a[2])
            if not ok:
                raise self.bad(f"op {i} ({COMPILED_OP}) does not fit its graph (graph index, "
                               "one input per placeholder, one output per position)")

    def _node_arg(self, a: Any, node: int, depth: int) -> bool:
        """A node's argument: a recorded argument (``_arg``) or ``{"N": earlier node}``."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(a, list):
            return all(self._node_arg(x, node, depth + 1) for x in a)
        if isinstance(a, dict) and len(a) == 1 and "N" in a:
            return _is_int(a["N"]) and 0 <= a["N"] < node
        return self._arg(a, depth + 1)

    def _level(self, level: list, depth: int) -> bool:
        """Whether every entry of ``level`` is an argument at ``depth`` (``_arg`` of each),
        a level at a time: the plain entries and values ({"T": id}) inline, the entries of its
        lists the next level (an and of the same checks, in another order)."""
        n = self.n_values
        while level:
            if depth > _MAX_DEPTH:
                return False
            lists = []
            for x in level:  # (a value first: two of three entries of a zoo GPT's arguments)
                t = type(x)
                if t is dict:
                    if len(x) == 1:
                        v = x.get("T")
                        if type(v) is int and 0 <= v < n:
                            continue
                elif t is list:
                    lists.append(x)
                    continue
                elif t in _PLAIN or (t is str and len(x) <= _MAX_TEXT):
                    continue
                if not self._arg(x, depth):
                    return False
            level = list(chain.from_iterable(lists))
            depth += 1
        return True

    def _arg(self, a: Any, depth: int) -> bool:
        """One recorded argument: None, bool, int, float, str, a list of them, or a tagged
        object ({"T": value id}, {"f": "nan"|"inf"|"-inf"}, {"c": [re, im]}, {"?": text},
        a collective's {"g": [rank, size]} and {"r": reduce op name})."""
        if depth > _MAX_DEPTH:
            return False
        if a is None or isinstance(a, (bool, int, float)):
            return True
        if isinstance(a, str):
            return len(a) <= _MAX_TEXT
        if isinstance(a, list):
            return all(self._arg(x, depth + 1) for x in a)
        if isinstance(a, dict):
            if depth == 0:  # the kwargs object itself
                return all(isinstance(k, str) and self._arg(v, 1) for k, v in a.items())
            if len(a) != 1:
                return False
            (k, v), = a.items()
            if k == "T":
                return _is_int(v) and 0 <= v < self.n_values
            if k == "f":
                return v in ("nan", "inf", "-inf")
            if k == "c":  # [re, im]: each a number or a non-finite float's tag (as "f")
                return isinstance(v, list) and len(v) == 2 and all(
                    type(x) in (int, float) or (type(x) is dict and len(x) == 1
                                                and x.get("f") in ("nan", "inf", "-inf"))
                    for x in v)
            if k == "?":
                return isinstance(v, str) and len(v) <= _MAX_TEXT
            if k == "g":  # a collective's process group: [rank, size]
                return isinstance(v, list) and len(v) == 2 and all(
                    _is_int(x) and 0 <= x < 1 << 24 for x in v) and v[0] < v[1]
            if k == "r":  # a collective's reduce op: its name (SUM, AVG, MAX ...)
                return isinstance(v, str) and 0 < len(v) <= 32
        return False
