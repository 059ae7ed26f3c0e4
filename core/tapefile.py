"""Tape files: ``.tape`` = a numpy ``.npz`` archive plus a JSON header, loaded without pickle.

Layout: ``header`` (uint8 bytes of UTF-8 JSON), ``v<id>`` (value of node id), ``g<id>`` (gradient
of node id, when backward reached it). The header holds the format tag and version, dtype, math
mode, the node list (id, op, inputs, attrs, shape, name, requires_grad), the parameter ids, a
SHA-256 of every array's bytes, and the caller's ``meta``. Loading checks every one of these and
rebuilds the tape from the stored values (nothing is recomputed, nothing is executed).

SECURITY: a tape is untrusted input (docs/security.md). Loading never unpickles, never imports and
never allocates by a size the file declares before that size is checked: the file must be a
regular file, the zip directory and every ``.npy`` header are read first, each member must be
one the header's nodes refer to with exactly the node's dtype and shape, and compressed members
may inflate only to ``Limits.max_inflate_bytes``. Every failure is a TapeFileError naming the file.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math as _math
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic import write_atomic
from core.mathlib import MODES
from core.names import MAX_NAME, shown
from core.optable.registry import REGISTRY
from core.tape import DTYPES, Tape

__all__ = ["FORMAT", "VERSION", "MAX_NAME", "Limits", "TapeFileError", "save", "load"]

FORMAT = "tapescope.tape"
VERSION = 1
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


def save(tape: Tape, path: str | os.PathLike, meta: dict | None = None) -> Path:
    """Write ``tape`` (structure, names, dtype, values, gradients) to ``path``."""
    path = Path(path)
    for n in tape.nodes:
        why = _name_problem(n.name)
        if why:  # the loader would refuse it: say so now, not when the file is opened
            raise TapeFileError(f"{path}: node {n.id} {n.op}: {why}")
    arrays: dict[str, np.ndarray] = {}
    for n in tape.nodes:
        arrays[f"v{n.id}"] = np.asarray(tape.value(n.id))
        g = tape.grad(n.id)
        if g is not None:
            arrays[f"g{n.id}"] = np.asarray(g)
    header = {
        "format": FORMAT, "version": VERSION, "dtype": tape.dtype.name, "math": tape.math,
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


def load(path: str | os.PathLike, *, limits: Limits | None = None) -> tuple[Tape, dict]:
    """Read a ``.tape`` file: ``(tape, meta)``; TapeFileError on anything wrong."""
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
            if f.read(4) != b"PK\x03\x04":
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
    except RecursionError:
        raise bad("nested too deeply to read") from None
    except MemoryError:
        raise bad("too large to load in this process's memory") from None
    except Exception as e:  # noqa: BLE001 - any other failure is still this file's, in one line
        what = "truncated or corrupt" if isinstance(e, (zipfile.BadZipFile, EOFError, OSError,
                                                         ValueError)) else "unreadable"
        raise bad(f"{what} ({type(e).__name__}: {_one_line(e)})") from None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _open_regular(path: Path, bad):
    """The file opened for reading; a FIFO, device or directory is refused without blocking."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise bad("not a regular file (a tape is read only from a plain file)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
    with z.open(zi) as m:
        expect = _npy_header(spec.dtype.str, want)
        if m.read(len(expect)) == expect:  # the header this numpy writes for the node: no parse
            shape, fortran, dtype = want, False, spec.dtype
        else:
            m.seek(0)
            shape, fortran, dtype = _npy_start(m, bad, key)
        if dtype != spec.dtype or shape != want:
            raise bad(f"member {key} is {dtype}{list(shape)}, the header says "
                      f"{spec.dtype}{list(want)}")
        _data_size(m, zi, shape, dtype, bad, key)
        if not data:
            return None
        flat = _read_into(m, zi, shape, dtype, bad, key)
    # C order, as the digest was taken (np.ascontiguousarray would make a 0-d array 1-d)
    arr = np.array(flat.reshape(shape[::-1]).T, order="C") if fortran else flat.reshape(shape)
    if hashlib.sha256(memoryview(arr)).hexdigest() != spec.digests[key]:
        raise bad(f"array {key} does not match its SHA-256 checksum in the header "
                  "(the file was altered or is corrupt)")
    return arr


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
        if not _is_int(h.get("version")) or h.get("version") != VERSION:
            raise bad(f"format version {_short(h.get('version'))} is not supported "
                      f"(this build reads {VERSION})")
        dt = h.get("dtype")
        if dt not in [d.name for d in DTYPES]:
            raise bad(f"dtype {_short(dt)} is not supported (float64 or float32)")
        self.dtype = np.dtype(dt)
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
