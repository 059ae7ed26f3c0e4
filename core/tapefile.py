"""Tape files: version 2 (blocks, written by default) and version 1 (an ``.npz``, still read).

Version 2 (docs/tapefile.md): a 64-byte preamble (magic, version), the arrays packed into
*blocks* (each array 64-byte aligned; ~1 MiB a block, a bigger array alone in its own), then the
JSON header and a 56-byte trailer (magic, the header's offset, length and SHA-256). The header
is columnar (one list per field, not one object per node), holds each block's offset, size and
SHA-256 and each array's (block, offset), and which arrays hold a NaN/inf. ``load(lazy=True)``
reads the header only; a block is read, checked against its SHA-256 and handed out on the first
touch of one of its arrays (``lazy=False``: every block before ``load`` returns).

Version 1: ``header`` (uint8 bytes of UTF-8 JSON), ``v<id>`` (value of node id), ``g<id>``
(gradient of node id, when backward reached it), a SHA-256 of every array in the header.

Both headers hold the format tag and version, dtype, math mode, the nodes (id, op, inputs,
attrs, shape, name, requires_grad), the parameter ids and the caller's ``meta``. Loading checks
every one of these and rebuilds the tape from the stored values (nothing is recomputed, nothing
is executed).

SECURITY: a tape is untrusted input (docs/security.md). Loading never unpickles, never imports and
never allocates by a size the file declares before that size is checked: the file must be a
regular file; version 1: the zip directory and every ``.npy`` header are read first, each member
must be one the header's nodes refer to with exactly the node's dtype and shape, and compressed
members may inflate only to ``Limits.max_inflate_bytes``; version 2: the header's length is
checked against the limit and the file before it is read, every block must lie inside the file
with no two overlapping, every array inside its block, aligned, with no two overlapping, and
the dtype is a name looked up in ``FILE_DTYPES`` (never ``np.dtype(text from the file)``). Every
failure is a TapeFileError naming the file.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import json
import math as _math
import os
import re
import struct
import sys
import threading
import weakref
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from tapescope.core.atomic import open_regular, write_atomic
from tapescope.core.mathlib import MODES
from tapescope.core.names import MAX_NAME, shown
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.precision import BFLOAT16, HALF
from tapescope.core.tape import DTYPES, Node, Tape

__all__ = ["FORMAT", "VERSION", "VERSIONS", "FILE_DTYPES", "MAX_NAME", "Limits", "TapeFileError",
           "save", "load"]

FORMAT = "tapescope.tape"
VERSION = 2  # what ``save`` writes
VERSIONS = (1, 2)  # what ``load`` reads
# THE dtype allow-list of tape files: a dtype name from a file is looked up here, never passed to
# np.dtype(); it is the tape's own (core.tape.DTYPES), so a dtype added there is read and written
# here too. A dtype that can hold objects is refused even if someone adds it there.
# The half types too (core.precision.HALF): a version-2 array is raw bytes viewed as the dtype;
# in a version-1 .npy member bfloat16 is stored as its uint16 bits (numpy's .npy has no bfloat16;
# its "<V2" would load as void), the header's dtype saying what the bits are.
FILE_DTYPES: dict[str, np.dtype] = {d.name: d for d in (*DTYPES, *HALF) if not d.hasobject}
_NPY_STORED = {np.dtype(BFLOAT16): np.dtype(np.uint16)}  # v1 member dtype when not the tape's


def _npy_dtype(dt: np.dtype) -> np.dtype:
    """The dtype a version-1 .npy member of a ``dt`` tape holds."""
    return _NPY_STORED.get(dt, dt)
_MiB = 1 << 20
_MEMBER = re.compile(r"header|[vg](?:0|[1-9][0-9]{0,8})")  # member names without ".npy"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 4 * _MiB


class TapeFileError(ValueError):
    """A tape file is truncated, corrupt, foreign or inconsistent; the message names the file."""


@dataclass(frozen=True)
class Limits:
    """What reading one tape may cost; a hostile file is refused before it costs more."""

    max_header_bytes: int = 128 * _MiB  # the JSON header (~300 bytes a node: ~400k nodes)
    max_inflate_bytes: int = 512 * _MiB  # compressed members, inflated, all together
    max_rank: int = 32  # dimensions of a node's shape

    @classmethod
    def from_env(cls) -> Limits:
        """Defaults, changed by TAPESCOPE_TAPE_MAX_HEADER / _MAX_INFLATE (bytes, or 64M, 2G)."""
        kw = {}
        for var, field in (("TAPESCOPE_TAPE_MAX_HEADER", "max_header_bytes"),
                           ("TAPESCOPE_TAPE_MAX_INFLATE", "max_inflate_bytes")):
            raw = os.environ.get(var, "").strip()
            if raw:
                m = re.fullmatch(r"(\d+)\s*([KMGT]?)i?B?", raw, re.IGNORECASE)
                if not m:
                    raise ValueError(f"{var}={raw!r}: expected a number of bytes (e.g. 2G)")
                kw[field] = int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))
        return cls(**kw)


_ENV = {"max_header_bytes": "TAPESCOPE_TAPE_MAX_HEADER",
        "max_inflate_bytes": "TAPESCOPE_TAPE_MAX_INFLATE"}


def _json_attr(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_json_attr(x) for x in v]
    if isinstance(v, np.bool_):  # before np.integer: json cannot write a numpy bool
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a node name in a file, or None."""
    if name is None:
        return None
    if not isinstance(name, str):
        return f"name must be a string or null, not {type(name).__name__}"
    if len(name) > MAX_NAME:
        return f"name is {len(name)} characters (at most {MAX_NAME})"
    if not name.isprintable():
        return f"name '{shown(name, 40)}' has a non-printable character"
    return None


def save(tape: Tape, path: str | os.PathLike, meta: dict | None = None, *,
         version: int = VERSION, block_bytes: int | None = None) -> Path:
    """Write ``tape`` (structure, names, dtype, values, gradients) to ``path``: version 2 by
    default (``block_bytes``: the block size aimed at), ``version=1`` the old ``.npz``."""
    path = Path(path)
    if version not in VERSIONS:
        raise ValueError(f"tape file version {version} cannot be written (only {VERSIONS})")
    if version == 2:
        return _save_v2(tape, path, meta, block_bytes or BLOCK_BYTES)
    for n in tape.nodes:
        why = _name_problem(n.name)
        if why:  # the loader would refuse it: say so now, not when the file is opened
            raise TapeFileError(f"{path}: node {n.id} {n.op}: {why}")
    arrays: dict[str, np.ndarray] = {}
    for n in tape.nodes:
        arrays[f"v{n.id}"] = np.asarray(tape.value(n.id)).view(_npy_dtype(tape.dtype))
        g = tape.grad(n.id)
        if g is not None:
            arrays[f"g{n.id}"] = np.asarray(g).view(_npy_dtype(tape.dtype))
    header = {
        "format": FORMAT, "version": 1, "dtype": tape.dtype.name, "math": tape.math,
        "ok": tape.ok, "error": tape.error,
        "nodes": [{"id": n.id, "op": n.op, "inputs": list(n.inputs),
                   "attrs": {k: _json_attr(v) for k, v in n.attrs.items()},
                   "shape": list(n.shape), "name": n.name, "requires_grad": n.requires_grad}
                  for n in tape.nodes],
        "params": [p.id for p in tape.params()],
        "digests": {k: _digest(a) for k, a in arrays.items()},
        "meta": meta or {},
    }
    blob = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    # whole or not at all: an exclusive temporary beside it, fsynced, renamed (core.atomic)
    return write_atomic(path, lambda f: np.savez(f, header=blob, **arrays))


def load(path: str | os.PathLike, *, limits: Limits | None = None,
         lazy: bool = False) -> tuple[Tape, dict]:
    """Read a ``.tape`` file: ``(tape, meta)``; TapeFileError on anything wrong.

    ``lazy`` (version 2): return after the header; each block is read and checked on the first
    touch of one of its arrays, and a block that fails raises TapeFileError then (version 1
    files are read whole either way)."""
    path = Path(path)

    def bad(why: str) -> TapeFileError:
        return TapeFileError(f"{path}: {why}")

    try:
        lim = limits if limits is not None else Limits.from_env()
    except ValueError as e:
        raise bad(f"cannot read it with these limits: {e}") from None
    try:
        with _open_regular(path, bad) as f:
            size = os.fstat(f.fileno()).st_size
            start = f.read(len(MAGIC))
            if start == MAGIC:
                return _load_v2(f, path, size, lim, bad, lazy)
            if start[:4] != b"PK\x03\x04":
                raise bad("not a tapescope tape file (not an npz archive)")
            f.seek(0)
            with zipfile.ZipFile(f) as z:
                if "header.npy" not in z.NameToInfo:
                    raise bad("not a tapescope tape file (no header)")
                members = _members(z, size, lim, bad)
                spec = _Header(_read_header(z, members.pop("header"), bad), lim, bad)
                spec.check_members(members, lim)
                for key, zi in members.items():  # every .npy header checked before any data
                    _read_array(z, zi, key, spec, bad, data=False)
                arrays = {key: _read_array(z, zi, key, spec, bad) for key, zi in members.items()}
        return spec.rebuild(arrays), spec.meta
    except TapeFileError:
        raise
    except FileNotFoundError:
        raise bad("no such file") from None
    except PermissionError:
        raise bad("permission denied") from None
    except OSError as e:
        if e.errno is not None and e.filename is not None:  # the open itself (a link loop, ...)
            raise bad(f"cannot open it ({os.strerror(e.errno)})") from None
        raise bad(f"truncated or corrupt ({type(e).__name__}: {_one_line(e)})") from None
    except RecursionError:
        raise bad("nested too deeply to read") from None
    except MemoryError:
        raise bad("too large to load in this process's memory") from None
    except Exception as e:  # noqa: BLE001 - any other failure is still this file's, in one line
        # a deflate stream zlib cannot inflate is the file's corruption too (zipfile passes
        # zlib.error through); "unreadable" is left for failures that are not the file's bytes
        what = "truncated or corrupt" if isinstance(e, (zipfile.BadZipFile, zlib.error, EOFError,
                                                         OSError, ValueError)) else "unreadable"
        raise bad(f"{what} ({type(e).__name__}: {_one_line(e)})") from None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _open_regular(path: Path, bad):
    return open_regular(path, bad("not a regular file (a tape is read only from a plain file)"))


def _members(z: zipfile.ZipFile, size: int, lim: Limits, bad) -> dict[str, zipfile.ZipInfo]:
    """The zip directory, checked before any member is read: {key: info}."""
    out: dict[str, zipfile.ZipInfo] = {}
    claimed = 0
    for zi in z.infolist():
        name = zi.filename
        key = name[:-4] if name.endswith(".npy") else None
        if key is None or not _MEMBER.fullmatch(key):
            raise bad(f"unexpected member {name[:80]!r} (a tape holds only header.npy, "
                      "v<id>.npy and g<id>.npy)")
        if key in out:
            raise bad(f"member {name} appears twice")
        if zi.flag_bits & 0x41:
            raise bad(f"member {name} is encrypted (not supported)")
        if zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise bad(f"member {name} uses compression method {zi.compress_type} "
                      "(not supported: only stored or deflated)")
        if zi.compress_type == zipfile.ZIP_STORED and zi.compress_size != zi.file_size:
            raise bad(f"member {name}: stored size {zi.compress_size} != size {zi.file_size}")
        claimed += zi.compress_size
        out[key] = zi
    if claimed > size:
        raise bad(f"members claim {claimed} bytes but the file holds {size} (corrupt)")
    hdr = out.get("header")
    if hdr is not None and hdr.file_size > lim.max_header_bytes:
        raise bad(f"header is {hdr.file_size} bytes, over the limit of {lim.max_header_bytes} "
                  f"(raise it with {_ENV['max_header_bytes']}=BYTES)")
    return out


def _npy_start(m, bad, key: str) -> tuple[tuple, bool, np.dtype]:
    """(shape, fortran_order, dtype) from a member's .npy header (at most 64 KiB is read)."""
    version = np.lib.format.read_magic(m)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(m)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(m)
    else:
        raise bad(f"member {key}: .npy format version {version} is not supported")
    return tuple(shape), bool(fortran), dtype


@functools.lru_cache(maxsize=4096)
def _npy_header(descr: str, shape: tuple) -> bytes:
    """The .npy 1.0 header numpy writes for a C-order ``descr`` array of ``shape``. A member that
    starts with exactly these bytes declares what the node says; parsing it (numpy's
    ``literal_eval``, ~40 us) is skipped, the slow path handles every other header."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


def _data_size(m, zi: zipfile.ZipInfo, shape: tuple, dtype: np.dtype, bad, key: str) -> int:
    """The bytes the .npy header declares, which must be exactly what the member carries."""
    nbytes = _math.prod(shape) * dtype.itemsize
    if zi.file_size - m.tell() != nbytes:
        raise bad(f"member {key}: declares {shape} {dtype} = {nbytes} bytes but carries "
                  f"{zi.file_size - m.tell()}")
    return nbytes


def _read_into(m, zi: zipfile.ZipInfo, shape: tuple, dtype: np.dtype, bad, key: str):
    """Read the member's data into a new array, its size checked against the member first."""
    nbytes = _data_size(m, zi, shape, dtype, bad, key)
    arr = np.empty(_math.prod(shape), dtype)
    view = memoryview(arr).cast("B")
    got = 0
    while got < nbytes:
        chunk = m.read(min(_CHUNK, nbytes - got))
        if not chunk:
            raise bad(f"member {key} is truncated")
        view[got:got + len(chunk)] = chunk
        got += len(chunk)
    if m.read(1):  # also makes zipfile check the CRC-32 at the member's end
        raise bad(f"member {key} has trailing data")
    return arr


def _read_header(z: zipfile.ZipFile, zi: zipfile.ZipInfo, bad) -> Any:
    """The header member's JSON (its size was checked against the limit with the directory)."""
    with z.open(zi) as m:
        shape, _, dtype = _npy_start(m, bad, "header")
        if dtype != np.uint8 or len(shape) != 1:
            raise bad("header is not a byte array")
        raw = _read_into(m, zi, shape, dtype, bad, "header").tobytes()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"header is not valid JSON ({_one_line(e)})") from None
    except RecursionError:
        raise bad("header JSON is nested too deeply") from None


def _read_array(z: zipfile.ZipFile, zi: zipfile.ZipInfo, key: str, spec: _Header, bad,
                data: bool = True) -> np.ndarray | None:
    """One value or gradient: dtype, shape and size must be the node's before anything is
    allocated (``data=False``: only that check)."""
    want = spec.shapes[int(key[1:])]
    stored = _npy_dtype(spec.dtype)
    with z.open(zi) as m:
        expect = _npy_header(stored.str, want)
        if m.read(len(expect)) == expect:  # the header this numpy writes for the node: no parse
            shape, fortran, dtype = want, False, stored
        else:
            m.seek(0)
            shape, fortran, dtype = _npy_start(m, bad, key)
        if dtype != stored or shape != want:
            raise bad(f"member {key} is {dtype}{list(shape)}, the header says "
                      f"{stored}{list(want)}")
        _data_size(m, zi, shape, dtype, bad, key)
        if not data:
            return None
        flat = _read_into(m, zi, shape, dtype, bad, key)
    # C order, as the digest was taken (np.ascontiguousarray would make a 0-d array 1-d)
    arr = np.array(flat.reshape(shape[::-1]).T, order="C") if fortran else flat.reshape(shape)
    if hashlib.sha256(memoryview(arr)).hexdigest() != spec.digests[key]:
        raise bad(f"array {key} does not match its SHA-256 checksum in the header "
                  "(the file was altered or is corrupt)")
    return arr if stored == spec.dtype else arr.view(spec.dtype)


def _is_int(x: Any) -> bool:
    return type(x) is int


def _short(v: Any) -> str:
    """A value from the file, quoted and cut short for a one-line message."""
    text = repr(v)
    return text if len(text) <= 60 else text[:60] + "..."


def _attr_value(v: Any, depth: int = 0) -> Any:
    """A JSON attribute as the tape holds it (lists become tuples); TypeError if not plain data."""
    if v is None or type(v) in (bool, int, float, str):
        return v
    if isinstance(v, list) and depth < 4:
        return tuple(_attr_value(x, depth + 1) for x in v)
    raise TypeError(f"attribute value of type {type(v).__name__}")


class _Header:
    """The JSON header, every field checked for type and consistency before anything is read."""

    def __init__(self, h: Any, lim: Limits, bad) -> None:
        self.bad = bad
        if not isinstance(h, dict) or h.get("format") != FORMAT:
            raise bad("not a tapescope tape file (wrong format tag)")
        if not _is_int(h.get("version")) or h.get("version") != 1:
            raise bad(f"format version {_short(h.get('version'))} is not supported in a zip "
                      "tape (version 1)")
        dt = h.get("dtype")
        if not isinstance(dt, str) or dt not in FILE_DTYPES:
            raise bad(f"dtype {_short(dt)} is not supported ({' or '.join(FILE_DTYPES)})")
        self.dtype = FILE_DTYPES[dt]
        self.math = h.get("math", "refmath")
        if self.math not in MODES:
            raise bad(f"math mode {_short(self.math)} is not one of {MODES}")
        self.ok, self.error = h.get("ok", True), h.get("error")
        if type(self.ok) is not bool or not (self.error is None or isinstance(self.error, str)):
            raise bad("'ok' must be true/false and 'error' a string or null")
        nodes = h.get("nodes")
        if not isinstance(nodes, list):
            raise bad("'nodes' must be a list")
        self.nodes: list[tuple] = []
        for i, nd in enumerate(nodes):
            self.nodes.append(self._node(i, nd, lim))
        self.shapes = [nd[4] for nd in self.nodes]
        self.params = self._params(h.get("params"))
        self.digests = h.get("digests")
        if not isinstance(self.digests, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and _HEX64.fullmatch(v)
                for k, v in self.digests.items()):
            raise bad("'digests' must map member names to SHA-256 hex strings")
        self.meta = self._meta(h.get("meta", {}))

    def _node(self, i: int, nd: Any, lim: Limits) -> tuple:
        bad = self.bad
        if not isinstance(nd, dict):
            raise bad(f"node {i}: must be an object")
        missing = {"id", "op", "inputs", "attrs", "shape", "name", "requires_grad"} - set(nd)
        if missing:
            raise bad(f"node {i}: missing {sorted(missing)}")
        if not _is_int(nd["id"]) or nd["id"] != i:
            raise bad(f"node {i}: id {_short(nd['id'])} out of order")
        op = nd["op"]
        if not isinstance(op, str) or op not in REGISTRY:
            raise bad(f"node {i}: unknown op {str(op)[:40]!r}")
        opdef = REGISTRY[op]
        inputs = nd["inputs"]
        if not isinstance(inputs, list) or not all(_is_int(j) and 0 <= j < i for j in inputs):
            raise bad(f"node {i} {op}: inputs {str(inputs)[:80]} must be ids of earlier nodes")
        if (len(inputs) != opdef.arity) if opdef.arity is not None else not inputs:
            raise bad(f"node {i} {op}: takes {opdef.arity} inputs, the header gives "
                      f"{len(inputs)}")
        shape = nd["shape"]
        if not isinstance(shape, list) or len(shape) > lim.max_rank or not all(
                _is_int(d) and 0 <= d < 1 << 62 for d in shape):
            raise bad(f"node {i} {op}: shape {str(shape)[:80]} is not a list of sizes")
        shape = tuple(shape)
        why = _name_problem(nd["name"])
        if why:
            raise bad(f"node {i} {op}: {why}")
        if type(nd["requires_grad"]) is not bool:
            raise bad(f"node {i} {op}: requires_grad must be true or false")
        attrs = nd["attrs"]
        try:
            if not isinstance(attrs, dict):
                raise TypeError(f"attrs must be an object, not {type(attrs).__name__}")
            attrs = {str(k): _attr_value(v) for k, v in attrs.items()}
            if opdef.kind != "leaf":
                # the op's own shape rule must give the stored shape: attrs are what the op
                # takes, not arbitrary data for later stages to trip over
                got = tuple(opdef.shape([self.nodes[j][4] for j in inputs], attrs))
                if got != shape:
                    raise ValueError(f"inputs and attrs give shape {list(got)}")
        except Exception as e:  # noqa: BLE001 - whatever the op's rule raised, it is this node's
            raise bad(f"node {i} {op}: attrs {str(nd['attrs'])[:80]} do not fit "
                      f"({type(e).__name__}: {_one_line(e)})") from None
        return (op, tuple(inputs), attrs, nd["name"], shape, nd["requires_grad"])

    def _params(self, params: Any) -> list[int]:
        n = len(self.nodes)
        if not isinstance(params, list) or not all(
                _is_int(p) and 0 <= p < n and self.nodes[p][0] == "param" for p in params):
            raise self.bad(f"'params' {str(params)[:80]} must list ids of param nodes")
        if len(set(params)) != len(params):
            raise self.bad("'params' lists a node twice")
        return params

    def _meta(self, meta: Any) -> dict:
        if not isinstance(meta, dict):
            raise self.bad("'meta' must be an object")
        if "loss" in meta:
            loss = meta["loss"]
            if not _is_int(loss) or not 0 <= loss < len(self.nodes):
                raise self.bad(f"meta 'loss' {str(loss)[:40]} is not a node id")
        if "workload" in meta and not isinstance(meta["workload"], str):
            raise self.bad("meta 'workload' must be a string")
        return dict(meta)

    def check_members(self, members: dict[str, zipfile.ZipInfo], lim: Limits) -> None:
        """Every node has a value, every member belongs to a node and has a digest."""
        bad, n = self.bad, len(self.nodes)
        for key in members:
            if int(key[1:]) >= n:
                raise bad(f"member {key}.npy is not referenced by any node (refused)")
        for i in range(n):
            if f"v{i}" not in members:
                raise bad(f"node {i} {self.nodes[i][0]}: value missing")
        for key in members:
            if key not in self.digests:
                raise bad(f"member {key} has no SHA-256 checksum in the header")
        for key in self.digests:
            if key not in members:
                raise bad(f"the header has a checksum for {key[:40]!r} but no such member")
        inflate = sum(zi.file_size for zi in members.values()
                      if zi.compress_type != zipfile.ZIP_STORED)
        if inflate > lim.max_inflate_bytes:
            raise bad(f"compressed members would inflate to {inflate} bytes, over the limit of "
                      f"{lim.max_inflate_bytes} (raise it with {_ENV['max_inflate_bytes']}=BYTES)")

    def rebuild(self, arrays: dict[str, np.ndarray]) -> Tape:
        """The tape from the checked header and arrays (values stored, nothing recomputed)."""
        tape = Tape(dtype=self.dtype, math=self.math)
        params = set(self.params)
        for i, (op, inputs, attrs, name, _, rg) in enumerate(self.nodes):
            var = tape._append(op, inputs, attrs, arrays[f"v{i}"], name, rg)
            tape._grads[i] = arrays.get(f"g{i}")
            if i in params:
                tape._params.append(var.id)
        if not self.ok:
            tape.ok, tape.error = False, self.error
        return tape


# ---- version 2: blocks ----------------------------------------------------------------------
MAGIC = b"\x93TAPESCOPE\r\n\x1a\n"  # then the version (u16, little-endian); see docs/tapefile.md
TRAILER_MAGIC = b"TAPEIDX\x00"
BLOCK_BYTES = 1 * _MiB  # the block size aimed at: a touch reads at most this much beside it
_PREAMBLE = 64  # bytes before the first block
_TRAILER = struct.Struct("<8sQQ32s")  # magic, header offset, header length, header SHA-256
_ALIGN = 64  # every array starts on a multiple of this in the file and in its block
_UNREAD = object()  # an array whose block has not been read yet


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _nonfinite(a: np.ndarray | None) -> bool:
    """Does ``a`` hold a NaN or an inf (one sum, settled by isfinite only when it is not finite)."""
    if a is None or not a.size:
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        return not np.isfinite(np.add.reduce(a, axis=None)) and not bool(np.isfinite(a).all())


def _save_v2(tape: Tape, path: Path, meta: dict | None, block_bytes: int) -> Path:
    """Version 2: the blocks, then the columnar header, then the trailer; one pass, atomic."""
    if tape.dtype.name not in FILE_DTYPES:
        raise TapeFileError(f"{path}: dtype {tape.dtype} cannot be written to a tape file")
    nodes = tape.nodes
    n = len(nodes)
    ops_tab: list[str] = []
    op_ix: dict[str, int] = {}
    attrs_tab: list[dict] = []
    attrs_ix: dict[str, int] = {}
    shapes_tab: list[list[int]] = []
    shape_ix: dict[tuple, int] = {}
    col_op, inputs, col_shape, col_attrs, names, rg = [], [], [], [], [], []
    for nd in nodes:
        why = _name_problem(nd.name)
        if why:  # the loader would refuse it: say so now, not when the file is opened
            raise TapeFileError(f"{path}: node {nd.id} {nd.op}: {why}")
        k = op_ix.get(nd.op)
        if k is None:
            k = op_ix[nd.op] = len(ops_tab)
            ops_tab.append(nd.op)
        col_op.append(k)
        inputs.append(list(nd.inputs))
        j = shape_ix.get(nd.shape)
        if j is None:
            j = shape_ix[nd.shape] = len(shapes_tab)
            shapes_tab.append([int(d) for d in nd.shape])
        col_shape.append(j)
        a = {str(key): _json_attr(v) for key, v in nd.attrs.items()}
        text = json.dumps(a, sort_keys=True)
        j = attrs_ix.get(text)
        if j is None:
            j = attrs_ix[text] = len(attrs_tab)
            attrs_tab.append(a)
        col_attrs.append(j)
        names.append(nd.name)
        rg.append(bool(nd.requires_grad))
    values = [np.ascontiguousarray(tape.value(i)) for i in range(n)]
    grads = [None if (g := tape.grad(i)) is None else np.ascontiguousarray(g) for i in range(n)]
    # layout: v0 g0 v1 g1 ... (a node's value and gradient side by side), each aligned; a block
    # closes before an array that would take it past block_bytes
    blocks: list[list[int]] = []
    loc = {0: [-1] * (2 * n), 1: [-1] * (2 * n)}
    order: list[tuple[np.ndarray, int, int]] = []  # (array, file offset, block)
    bstart = bend = _PREAMBLE
    for i in range(n):
        for kind, arr in ((0, values[i]), (1, grads[i])):
            if arr is None:
                continue
            at = _align(bend)
            if bend > bstart and at + arr.nbytes - bstart > block_bytes:
                blocks.append([bstart, bend - bstart])
                bstart = at
            loc[kind][2 * i:2 * i + 2] = [len(blocks), at - bstart]
            order.append((arr, at, len(blocks)))
            bend = at + arr.nbytes
    if order:
        blocks.append([bstart, bend - bstart])
    header = {
        "format": FORMAT, "version": 2, "dtype": tape.dtype.name, "byteorder": sys.byteorder,
        "math": tape.math, "ok": tape.ok, "error": tape.error,
        "ops": ops_tab, "op": col_op, "inputs": inputs,
        "shapes_table": shapes_tab, "shape": col_shape, "attrs_table": attrs_tab,
        "attrs": col_attrs, "names": names,
        "requires_grad": rg, "params": [p.id for p in tape.params()],
        "blocks": None, "values": loc[0], "grads": loc[1],
        "nonfinite_values": [i for i in range(n) if _nonfinite(values[i])],
        "nonfinite_grads": [i for i in range(n) if _nonfinite(grads[i])],
        "meta": meta or {},
    }

    def write(f) -> None:
        f.write(MAGIC + struct.pack("<H", 2) + bytes(_PREAMBLE - len(MAGIC) - 2))
        pos = _PREAMBLE
        hashers = [hashlib.sha256() for _ in blocks]
        for arr, at, b in order:
            if at > pos:
                pad = bytes(at - pos)
                f.write(pad)
                if at != blocks[b][0]:  # padding inside a block is the block's
                    hashers[b].update(pad)
            data = arr.reshape(-1).view(np.uint8)
            f.write(data)
            hashers[b].update(data)
            pos = at + arr.nbytes
        header["blocks"] = [[s, z, h.hexdigest()] for (s, z), h in zip(blocks, hashers,
                                                                          strict=True)]
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        f.write(text)
        f.write(_TRAILER.pack(TRAILER_MAGIC, pos, len(text), hashlib.sha256(text).digest()))

    return write_atomic(path, write)


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object, refused when a key appears twice (json keeps the last one silently: two
    readers could disagree on what the file says)."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(f"key {shown(k, 40)!r} appears twice in one object")
            seen.add(k)
    return d


def _read_exact(f, n: int, offset: int, bad, what: str) -> bytearray:
    """``n`` bytes at ``offset`` (n was checked against the file's size by the caller)."""
    buf = bytearray(n)
    f.seek(offset)
    got = f.readinto(buf)
    if got != n:
        raise bad(f"{what} is truncated ({got} of {n} bytes)")
    return buf


def _load_v2(f, path: Path, size: int, lim: Limits, bad, lazy: bool) -> tuple[Tape, dict]:
    ver = f.read(2)
    if len(ver) < 2:
        raise bad("truncated (the file ends inside its preamble)")
    (v,) = struct.unpack("<H", ver)
    if v != 2:
        raise bad(f"format version {v} is not supported (this build reads {VERSIONS})")
    if size < _PREAMBLE + _TRAILER.size:
        raise bad(f"truncated ({size} bytes: shorter than a preamble and a trailer)")
    magic, hoff, hlen, hsha = _TRAILER.unpack(
        _read_exact(f, _TRAILER.size, size - _TRAILER.size, bad, "the trailer"))
    if magic != TRAILER_MAGIC:
        raise bad("truncated or corrupt (no trailer at the end of the file)")
    if hlen > lim.max_header_bytes:
        raise bad(f"header is {hlen} bytes, over the limit of {lim.max_header_bytes} "
                  f"(raise it with {_ENV['max_header_bytes']}=BYTES)")
    if hoff < _PREAMBLE or hoff + hlen + _TRAILER.size != size:
        raise bad(f"truncated or corrupt (the trailer puts a {hlen}-byte header at {hoff} in a "
                  f"file of {size} bytes)")
    raw = _read_exact(f, hlen, hoff, bad, "the header")
    if hashlib.sha256(raw).digest() != hsha:
        raise bad("the header does not match its SHA-256 checksum in the trailer "
                  "(the file was altered or is corrupt)")
    try:
        h = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise bad(f"header: {e}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"header is not valid JSON ({_one_line(e)})") from None
    except RecursionError:
        raise bad("header JSON is nested too deeply") from None
    del raw
    spec = _HeaderV2(h, lim, bad, hoff)
    store = _Store(f, path, size, spec, bad)
    if not lazy:
        for b in range(len(spec.blocks)):
            store.read_block(b, check_claims=False)
    return spec.build(store, lazy), spec.meta


def _int_list(h: dict, key: str, bad, n: int | None = None, lo: int | None = None,
              hi: int | None = None) -> list[int]:
    """``h[key]``: a list of ``n`` integers (never bools or floats) in [lo, hi)."""
    v = h.get(key)
    if not isinstance(v, list) or (n is not None and len(v) != n) or not (
            set(map(type, v)) <= {int}):
        raise bad(f"'{key}' must be a list of {'' if n is None else f'{n} '}integers")
    if v and ((lo is not None and min(v) < lo) or (hi is not None and max(v) >= hi)):
        raise bad(f"'{key}' holds a value outside [{lo}, {hi})")
    return v


class _HeaderV2:
    """A version-2 header, every field checked for type, range and consistency; whole columns at
    a time (a 100k-node header in a fraction of a second)."""

    def __init__(self, h: Any, lim: Limits, bad, hoff: int) -> None:
        self.bad = bad
        if not isinstance(h, dict) or h.get("format") != FORMAT:
            raise bad("not a tapescope tape file (wrong format tag)")
        if not _is_int(h.get("version")) or h.get("version") != 2:
            raise bad(f"header version {_short(h.get('version'))} is not 2 (the preamble's)")
        dt = h.get("dtype")
        if not isinstance(dt, str) or dt not in FILE_DTYPES:
            raise bad(f"dtype {_short(dt)} is not supported ({' or '.join(FILE_DTYPES)})")
        self.dtype = FILE_DTYPES[dt]
        if h.get("byteorder") != sys.byteorder:
            raise bad(f"byte order {_short(h.get('byteorder'))} is not this machine's "
                      f"({sys.byteorder})")
        self.math = h.get("math")
        if self.math not in MODES:
            raise bad(f"math mode {_short(self.math)} is not one of {MODES}")
        self.ok, self.error = h.get("ok"), h.get("error")
        if type(self.ok) is not bool or not (self.error is None or isinstance(self.error, str)):
            raise bad("'ok' must be true/false and 'error' a string or null")
        self._structure(h, lim)
        self._layout(h, hoff)
        self.meta = _check_meta(h.get("meta"), self.n, bad)

    def _structure(self, h: dict, lim: Limits) -> None:
        bad = self.bad
        ops_tab = h.get("ops")
        if not isinstance(ops_tab, list) or not all(isinstance(o, str) for o in ops_tab):
            raise bad("'ops' must be a list of op names")
        for o in ops_tab:
            if o not in REGISTRY:
                raise bad(f"unknown op {shown(o, 40)!r}")
        if len(set(ops_tab)) != len(ops_tab):
            raise bad("'ops' names an op twice")
        self.ops = ops_tab
        op = _int_list(h, "op", bad, None, 0, len(ops_tab))
        n = self.n = len(op)
        nested = h.get("inputs")
        if not isinstance(nested, list) or len(nested) != n or not (
                set(map(type, nested)) <= {list}):
            raise bad(f"'inputs' must be a list of {n} lists of node ids")
        arity = list(map(len, nested))
        inputs = list(itertools.chain.from_iterable(nested))
        if not set(map(type, inputs)) <= {int} or (inputs and (min(inputs) < 0
                                                               or max(inputs) >= n)):
            raise bad(f"'inputs' must hold node ids (integers from 0 to {n - 1})")
        opa, ara = np.array(op, dtype=np.int64), np.array(arity, dtype=np.int64)
        defs = [REGISTRY[o] for o in ops_tab]
        want = np.array([-1 if d.arity is None else d.arity for d in defs] or [0])[opa]
        wrong = np.flatnonzero(np.where(want >= 0, ara != want, ara == 0))
        if wrong.size:
            i = int(wrong[0])
            raise bad(f"node {i} {ops_tab[op[i]]}: takes {defs[op[i]].arity} inputs, the header "
                      f"gives {arity[i]}")
        owner = np.repeat(np.arange(n), ara)
        late = np.flatnonzero(np.array(inputs, dtype=np.int64) >= owner)
        if late.size:
            i = int(owner[late[0]])
            raise bad(f"node {i} {ops_tab[op[i]]}: inputs must be ids of earlier nodes")
        table = h.get("shapes_table")
        if not isinstance(table, list):
            raise bad("'shapes_table' must be a list of shapes")
        for k, sh in enumerate(table):
            if not isinstance(sh, list) or len(sh) > lim.max_rank or not all(
                    _is_int(d) and 0 <= d < 1 << 62 for d in sh):
                raise bad(f"shape {k} {str(sh)[:80]} of 'shapes_table' is not a list of at most "
                          f"{lim.max_rank} sizes (0 <= d < 2**62; the rank limit)")
        stab = [tuple(sh) for sh in table]
        shape = _int_list(h, "shape", bad, n, 0, len(stab))
        self.shapes = shapes = [stab[k] for k in shape] if stab else []
        self.shapes_table, self.shape = stab, shape
        self.inputs = ins = list(map(tuple, nested))
        table = h.get("attrs_table")
        if not isinstance(table, list):
            raise bad("'attrs_table' must be a list of objects")
        try:
            self.attrs_table = [_attrs_of(a) for a in table]
        except TypeError as e:
            raise bad(f"'attrs_table': {e}") from None
        attrs = self.attrs = _int_list(h, "attrs", bad, n, 0, len(table))
        names = h.get("names")
        if not isinstance(names, list) or len(names) != n:
            raise bad(f"'names' must be a list of {n} names")
        strs = [x for x in names if x is not None]
        # one C call for the common case; the name at fault is looked for only when it fails
        if not (set(map(type, strs)) <= {str} and "".join(strs).isprintable()
                and max(map(len, strs), default=0) <= MAX_NAME):
            for i, name in enumerate(names):
                why = _name_problem(name)
                if why:
                    raise bad(f"node {i} {ops_tab[op[i]]}: {why}")
        self.names = names
        rg = h.get("requires_grad")
        if not isinstance(rg, list) or len(rg) != n or not set(map(type, rg)) <= {bool}:
            raise bad(f"'requires_grad' must be a list of {n} true/false")
        self.rg = rg
        # each op's own shape rule must give the stored shape: checked once per distinct
        # (op, attrs, shape, input shapes) row (a transformer's blocks repeat: a few hundred)
        wide = 4  # inputs in a row; nodes with more (concat) are keyed one by one
        rows = np.full((n, 3 + wide), -1, dtype=np.int64)
        rows[:, 0], rows[:, 1], rows[:, 2] = opa, attrs, shape
        sha = np.array(shape, dtype=np.int64)
        inp = np.array(inputs, dtype=np.int64)
        starts = np.cumsum(ara) - ara
        pos = np.arange(len(inputs)) - np.repeat(starts, ara)
        fits = pos < wide
        rows[owner[fits], 3 + pos[fits]] = sha[inp[fits]]
        leaf = np.array([d.kind == "leaf" for d in defs] or [False])[opa]
        check = ~leaf & (ara <= wide)
        sub = rows[check]
        order = np.lexsort(sub.T[::-1])  # stable: the first node of each distinct row leads
        srt = sub[order]
        lead = np.ones(len(srt), dtype=bool)
        lead[1:] = (srt[1:] != srt[:-1]).any(axis=1)
        todo = np.flatnonzero(check)[order[lead]].tolist() + np.flatnonzero(
            ~leaf & (ara > wide)).tolist()
        for i in sorted(todo):
            d = defs[op[i]]
            try:
                got = tuple(d.shape([shapes[j] for j in ins[i]], self.attrs_table[attrs[i]]))
            except Exception as e:  # noqa: BLE001 - whatever the rule raised is this node's
                raise bad(f"node {i} {ops_tab[op[i]]}: attrs {_short(table[attrs[i]])} do not "
                          f"fit ({type(e).__name__}: {_one_line(e)})") from None
            if got != shapes[i]:
                raise bad(f"node {i} {ops_tab[op[i]]}: inputs and attrs give shape {list(got)}, "
                          f"the header says {list(shapes[i])}")
        self.op = op
        params = h.get("params")
        if not isinstance(params, list) or not all(
                _is_int(p) and 0 <= p < n and ops_tab[op[p]] == "param" for p in params):
            raise bad(f"'params' {str(params)[:80]} must list ids of param nodes")
        if len(set(params)) != len(params):
            raise bad("'params' lists a node twice")
        self.params = params

    def _layout(self, h: dict, hoff: int) -> None:
        """Blocks inside the file, in order, never overlapping; arrays inside their blocks,
        aligned, never overlapping; checked before any block is read."""
        bad, n, item = self.bad, self.n, self.dtype.itemsize
        blocks = h.get("blocks")
        if not isinstance(blocks, list):
            raise bad("'blocks' must be a list of [offset, size, sha256]")
        end = _PREAMBLE
        for b, blk in enumerate(blocks):
            if not (isinstance(blk, list) and len(blk) == 3 and _is_int(blk[0])
                    and _is_int(blk[1]) and isinstance(blk[2], str) and _HEX64.fullmatch(blk[2])):
                raise bad(f"block {b} must be [offset, size, sha256 hex]")
            start, size = blk[0], blk[1]
            if start < end:
                raise bad(f"block {b} at {start} overlaps the preamble or block {b - 1} "
                          "(blocks lie in file order, apart)" if b else
                          f"block 0 at {start} overlaps the {_PREAMBLE}-byte preamble")
            if size < 0 or start + size > hoff:
                raise bad(f"block {b} ({size} bytes at {start}) is not inside the data "
                          f"(which ends at {hoff})")
            end = start + size
        self.blocks = blocks
        bstart = np.array([b[0] for b in blocks] or [0], dtype=np.int64)
        bsize = np.array([b[1] for b in blocks] or [0], dtype=np.int64)
        per_shape = [_math.prod(s) * item for s in self.shapes_table]
        for k, nb in enumerate(per_shape):
            if nb > hoff:
                raise bad(f"shape {list(self.shapes_table[k])} declares {nb} bytes, more than the "
                          "file holds")
        nbytes = [per_shape[k] for k in self.shape]
        nb = np.array(nbytes, dtype=np.int64)
        self.nbytes = nbytes
        starts, ends = [], []
        filled = np.zeros(len(blocks), dtype=np.int64)  # where each block's last array ends
        for kind in ("values", "grads"):
            flat = _int_list(h, kind, bad, 2 * n, -1, 1 << 62)
            loc = np.array(flat, dtype=np.int64).reshape(n, 2)
            blk, off = loc[:, 0], loc[:, 1]
            absent = blk == -1
            if kind == "values" and absent.any():
                i = int(np.flatnonzero(absent)[0])
                raise bad(f"node {i} {self.ops[self.op[i]]}: value missing")
            if (off[absent] != -1).any():
                raise bad(f"'{kind}': an absent array's offset must be -1")
            here = ~absent
            for what, wrong in (
                    ("is in no block", here & ((blk < 0) | (blk >= len(blocks)))),
                    ("has a negative offset", here & (off < 0)),
                    (f"is not aligned (offset not a multiple of {item})",
                     here & (off % item != 0))):
                if wrong.any():
                    i = int(np.flatnonzero(wrong)[0])
                    raise bad(f"node {i} {self.ops[self.op[i]]}: its {kind[:-1]} (block "
                              f"{int(blk[i])}, offset {int(off[i])}) {what}")
            b = np.where(here, blk, 0)
            outside = here & (off + nb > bsize[b])
            if outside.any():
                i = int(np.flatnonzero(outside)[0])
                raise bad(f"node {i} {self.ops[self.op[i]]}: its {kind[:-1]} ({nbytes[i]} bytes "
                          f"at offset {int(off[i])}) lies outside block {int(blk[i])} "
                          f"({int(bsize[blk[i]])} bytes)")
            np.maximum.at(filled, b[here], (off + nb)[here])
            keep = here & (nb > 0)
            starts.append((bstart[b] + off)[keep])
            ends.append((bstart[b] + off + nb)[keep])
            setattr(self, f"loc_{kind}", loc)
        # the writer ends a block with its last array: bytes past it mean the header's dtype or
        # shapes are not the ones written (a float32 body relabelled bfloat16 fits, half-read)
        short = np.flatnonzero(filled != bsize[:len(blocks)]) if len(blocks) else filled[:0]
        if short.size:
            k = int(short[0])
            raise bad(f"block {k} is {int(bsize[k])} bytes but its arrays end at byte "
                      f"{int(filled[k])} (the header's dtype or shapes are not the file's)")
        s, e = np.concatenate(starts), np.concatenate(ends)
        order = np.argsort(s, kind="stable")
        clash = np.flatnonzero(e[order][:-1] > s[order][1:])
        if clash.size:
            k = int(clash[0])
            raise bad(f"two arrays overlap in the file (bytes {int(s[order][k])}.."
                      f"{int(e[order][k])} and {int(s[order][k + 1])}..)")
        self.claims = {}
        for kind, loc in (("values", self.loc_values), ("grads", self.loc_grads)):
            ids = _int_list(h, f"nonfinite_{kind}", bad, None, 0, max(n, 1))
            if len(set(ids)) != len(ids) or (ids and (loc[ids, 0] == -1).any()):
                raise bad(f"'nonfinite_{kind}' must list distinct nodes that have a {kind[:-1]}")
            flags = np.zeros(n, dtype=bool)
            flags[ids] = True
            self.claims[kind] = flags

    def build(self, store: _Store, lazy: bool) -> Tape:
        """The tape: nodes from the header, values and gradients from the store (read, or
        read on first touch)."""
        tape = Tape(dtype=self.dtype, math=self.math)
        proxies = [MappingProxyType(a) for a in self.attrs_table]  # read-only, shared
        dt, ops_tab, op, attrs = self.dtype, self.ops, self.op, self.attrs
        n = self.n
        tape._nodes = list(map(functools.partial(tuple.__new__, Node), zip(
            range(n), [ops_tab[k] for k in op], self.inputs, [proxies[k] for k in attrs],
            self.shapes, itertools.repeat(dt, n), self.names, self.rg, strict=True)))
        if lazy:
            tape._values, tape._grads = _Lazy(store, 0), _Lazy(store, 1)
        else:
            tape._values, tape._grads = store.arrays[0], store.arrays[1]
        tape._params = list(self.params)
        if not self.ok:
            tape.ok, tape.error = False, self.error
        return tape


def _attrs_of(a: Any) -> dict:
    if not isinstance(a, dict):
        raise TypeError(f"attrs must be an object, not {type(a).__name__}")
    return {str(k): _attr_value(v) for k, v in a.items()}


def _check_meta(meta: Any, n: int, bad) -> dict:
    if not isinstance(meta, dict):
        raise bad("'meta' must be an object")
    if "loss" in meta:
        loss = meta["loss"]
        if not _is_int(loss) or not 0 <= loss < n:
            raise bad(f"meta 'loss' {str(loss)[:40]} is not a node id")
    if "workload" in meta and not isinstance(meta["workload"], str):
        raise bad("meta 'workload' must be a string")
    return dict(meta)


class _Store:
    """The arrays of one version-2 file, by (kind, node id); a block read and checked (its
    SHA-256, then the header's NaN/inf claims for its arrays) before any of them is handed out.

    The bytes checked are the bytes used: each block is read into memory this process owns,
    hashed there and viewed (read-only) in place, so a file changed after the check changes
    nothing already read; a block read after the file changed size is refused."""

    def __init__(self, f, path: Path, size: int, spec: _HeaderV2, bad) -> None:
        self.f = os.fdopen(os.dup(f.fileno()), "rb", buffering=0)
        weakref.finalize(self, self.f.close)
        self.size, self.spec, self.bad = size, spec, bad
        self.lock = threading.Lock()
        self.blocks_read = self.bytes_read = 0
        n = spec.n
        self.arrays: list[list] = [[_UNREAD] * n, [None] * n]
        self.by_block = []  # per kind: (node ids sorted by block, each block's first index)
        for kind, loc in enumerate((spec.loc_values, spec.loc_grads)):
            ids = np.flatnonzero(loc[:, 0] >= 0)
            order = ids[np.argsort(loc[ids, 0], kind="stable")]
            bounds = np.searchsorted(loc[order, 0], np.arange(len(spec.blocks) + 1))
            self.by_block.append((order.tolist(), bounds.tolist()))
            if kind == 1:
                for i in ids.tolist():
                    self.arrays[1][i] = _UNREAD
        self.locs = (spec.loc_values, spec.loc_grads)

    def get(self, kind: int, i: int) -> np.ndarray | None:
        a = self.arrays[kind][i]
        if a is _UNREAD:
            with self.lock:
                if self.arrays[kind][i] is _UNREAD:
                    self.read_block(int(self.locs[kind][i, 0]))
            a = self.arrays[kind][i]
        return a

    def read_block(self, b: int, check_claims: bool = True) -> None:
        bad, spec = self.bad, self.spec
        start, size, digest = spec.blocks[b]
        if os.fstat(self.f.fileno()).st_size != self.size:
            raise bad(f"block {b}: the file changed size since it was opened "
                      "(truncated or rewritten)")
        buf = np.empty(size, dtype=np.uint8)  # size: inside the file, checked at the open
        self.f.seek(start)
        view, got = memoryview(buf), 0
        while got < size:
            k = self.f.readinto(view[got:got + _CHUNK * 4])
            if not k:
                raise bad(f"block {b} is truncated ({got} of {size} bytes; the file changed "
                          "since it was opened?)")
            got += k
        if hashlib.sha256(view).hexdigest() != digest:
            raise bad(f"block {b} does not match its SHA-256 checksum in the header "
                      "(the file was altered or is corrupt)")
        buf.flags.writeable = False
        dt, shapes, nbytes = spec.dtype, spec.shapes, spec.nbytes
        made: list[tuple[int, int, np.ndarray]] = []
        for kind, (order, bounds) in enumerate(self.by_block):
            loc = self.locs[kind]
            claims = spec.claims["values" if kind == 0 else "grads"]
            for i in order[bounds[b]:bounds[b + 1]]:
                off = int(loc[i, 1])
                a = buf[off:off + nbytes[i]].view(dt).reshape(shapes[i])
                if check_claims and _nonfinite(a) != claims[i]:
                    raise bad(f"block {b}: the header's list of arrays with a NaN/inf is wrong "
                              f"for node {i}'s {('value', 'gradient')[kind]} (the file was "
                              "altered or is corrupt)")
                made.append((kind, i, a))
        for kind, i, a in made:  # only a block that passed every check is handed out
            self.arrays[kind][i] = a
        self.blocks_read += 1
        self.bytes_read += size


class _Lazy:
    """What a lazily read tape keeps as ``_values`` or ``_grads``: a list-like by node id whose
    arrays come from the file's blocks on first touch (Tape indexes, appends, assigns and
    truncates it like its own list). ``nonfinite()`` answers from the header's NaN/inf claims
    without reading (each claim is checked when its block is read)."""

    __slots__ = ("_store", "_kind", "_items", "_ids", "_own")

    def __init__(self, store: _Store, kind: int, items: list | None = None,
                 ids: range | None = None, own: set | None = None) -> None:
        self._store, self._kind = store, kind
        self._items = list(store.arrays[kind]) if items is None else items
        self._ids = range(len(self._items)) if ids is None else ids  # file ids of the items
        self._own = set() if own is None else own  # positions set here, not from the file

    @property
    def blocks_read(self) -> int:
        """Blocks of the file read so far (by any sequence of the same file)."""
        return self._store.blocks_read

    @property
    def bytes_read(self) -> int:
        """Bytes of those blocks (what the tape holds in memory of the file's arrays)."""
        return self._store.bytes_read

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            k = range(len(self._items))[i]
            if k.step != 1:
                return [self[j] for j in k]
            stop = min(k.stop, len(self._ids)) if k.start < len(self._ids) else k.start
            return _Lazy(self._store, self._kind, self._items[i], self._ids[k.start:stop],
                         {p - k.start for p in self._own if k.start <= p < k.stop})
        a = self._items[i]
        if a is _UNREAD:
            a = self._items[i] = self._store.get(self._kind, self._ids[i])
        return a

    def __setitem__(self, i: int, value) -> None:
        i = range(len(self._items))[i]
        self._items[i] = value
        self._own.add(i)

    def __delitem__(self, i) -> None:
        k = range(len(self._items))[i] if isinstance(i, slice) else None
        if k is None or k.step != 1 or k.stop != len(self._items):
            raise TypeError("a lazily read tape's arrays are only ever cut at the end")
        del self._items[k.start:]
        self._ids = self._ids[:min(k.start, len(self._ids))]
        self._own = {p for p in self._own if p < k.start}

    def append(self, value) -> None:
        self._own.add(len(self._items))
        self._items.append(value)

    def __iter__(self):
        for i in range(len(self._items)):
            yield self[i]

    def snapshot(self) -> _Lazy:
        """A copy that reads the same blocks (a block read through either serves both)."""
        return _Lazy(self._store, self._kind, list(self._items), self._ids, set(self._own))

    def nonfinite(self) -> np.ndarray:
        """Per item: does it hold a NaN/inf (the file's claim for an array not set here)."""
        n = len(self._items)
        out = np.zeros(n, dtype=bool)
        claims = self._store.spec.claims["values" if self._kind == 0 else "grads"]
        m = len(self._ids)
        if m:
            out[:m] = claims[self._ids.start:self._ids.stop]
        for p in self._own:
            out[p] = _nonfinite(self._items[p])
        return out
