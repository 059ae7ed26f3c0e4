"""Tape files: ``.tape`` = a numpy ``.npz`` archive plus a JSON header, loaded without pickle.

Layout: ``header`` (uint8 bytes of UTF-8 JSON), ``v<id>`` (value of node id), ``g<id>`` (gradient
of node id, when backward reached it). The header holds the format tag and version, dtype, math
mode, the node list (id, op, inputs, attrs, shape, name, requires_grad), the parameter ids, a
SHA-256 of every array's bytes, and the caller's ``meta``. Loading checks every one of these and
rebuilds the tape from the stored values (nothing is recomputed, nothing is executed).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from core.ops.registry import REGISTRY
from core.tape import Tape

FORMAT = "tapescope.tape"
VERSION = 1


class TapeFileError(ValueError):
    """A tape file is truncated, corrupt, foreign or inconsistent; the message names the file."""


def _json_attr(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_json_attr(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def _attrs_from_json(d: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def save(tape: Tape, path: str | os.PathLike, meta: dict | None = None) -> Path:
    """Write ``tape`` (structure, names, dtype, values, gradients) to ``path``."""
    path = Path(path)
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
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        np.savez(f, header=blob, **arrays)
    os.replace(tmp, path)  # never leave a half-written file under the real name
    return path


def load(path: str | os.PathLike) -> tuple[Tape, dict]:
    """Read a ``.tape`` file: ``(tape, meta)``; TapeFileError on anything wrong."""
    path = Path(path)

    def bad(why: str) -> TapeFileError:
        return TapeFileError(f"{path}: {why}")

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                raise bad("not a tapescope tape file (not an npz archive)")
        with np.load(path, allow_pickle=False) as z:
            if "header" not in z.files:
                raise bad("not a tapescope tape file (no header)")
            try:
                header = json.loads(z["header"].tobytes().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise bad(f"header is not valid JSON ({e})") from None
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise bad("not a tapescope tape file (wrong format tag)")
            if header.get("version") != VERSION:
                raise bad(f"format version {header.get('version')} is not supported "
                          f"(this build reads {VERSION})")
            arrays = {k: z[k] for k in z.files if k != "header"}
    except TapeFileError:
        raise
    except FileNotFoundError:
        raise bad("no such file") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise bad(f"truncated or corrupt ({type(e).__name__}: {e})") from None
    return _rebuild(header, arrays, bad), dict(header.get("meta") or {})


def _rebuild(header: dict, arrays: dict[str, np.ndarray], bad) -> Tape:
    try:
        dtype = np.dtype(header["dtype"])
        tape = Tape(dtype=dtype, math=header.get("math", "refmath"))
        digests = header["digests"]
        for key, a in arrays.items():
            if digests.get(key) != _digest(a):
                raise bad(f"array {key} does not match its checksum (corrupt file)")
        params = set(header["params"])
        for i, nd in enumerate(header["nodes"]):
            if nd["id"] != i:
                raise bad(f"node {i}: id {nd['id']} out of order")
            op = nd["op"]
            if op not in REGISTRY:
                raise bad(f"node {i}: unknown op {op!r}")
            inputs = tuple(int(j) for j in nd["inputs"])
            if any(not 0 <= j < i for j in inputs):
                raise bad(f"node {i} {op}: inputs {inputs} must be earlier nodes")
            v = arrays.get(f"v{i}")
            if v is None:
                raise bad(f"node {i} {op}: value missing")
            if v.dtype != dtype or list(v.shape) != list(nd["shape"]):
                raise bad(f"node {i} {op}: value is {v.dtype}{list(v.shape)}, header says "
                          f"{dtype}{nd['shape']}")
            g = arrays.get(f"g{i}")
            if g is not None and (g.dtype != dtype or g.shape != v.shape):
                raise bad(f"node {i} {op}: gradient shape/dtype does not match its value")
            var = tape._append(op, inputs, _attrs_from_json(nd["attrs"]),
                               np.array(v, order="C"), nd["name"], bool(nd["requires_grad"]))
            tape._grads[i] = None if g is None else np.array(g, order="C")
            if i in params:
                tape._params.append(var.id)
        if not header.get("ok", True):
            tape.ok, tape.error = False, header.get("error")
        return tape
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, ValueError) and str(e).startswith(str(bad(""))[:-1]):
            raise
        raise bad(f"header is inconsistent ({type(e).__name__}: {e})") from None
