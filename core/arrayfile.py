"""Arrays from files someone gave you: a ``.npy`` (``--input NAME=FILE``) and a ``.safetensors``
(``--weights FILE``), read as hostile input (docs/security.md, "Inputs and weights").

What a file *declares* (a shape, a dtype, a tensor's byte range) is checked against the file's
size, the caller's expectations and budgets before anything is allocated, and the data is then
read with plain file reads into memory the process owns: never a memory map, so a file cut short
while it is read is an error (naming what is missing), never a SIGBUS. Nothing is unpickled.

Errors are ``ArrayFileError`` whose text is the reason only; the caller adds the file and the
input's name.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable

import numpy as np

from tapescope.core.atomic import open_regular

_CHUNK = 4 << 20  # bytes per read: a short read is noticed within one chunk


class ArrayFileError(ValueError):
    """A file that is not the array (or weights) it should be; the text says why."""


def _human(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _open_regular(path: str):
    """The file opened for reading (core.tapefile.open_regular), its errors as ArrayFileError."""
    try:
        return open_regular(path, ArrayFileError("not a regular file"))
    except OSError as exc:
        raise ArrayFileError(f"cannot open it ({exc.strerror or exc})") from None


def _read_into(f, out: np.ndarray, what: str) -> None:
    """Fill ``out`` from ``f``'s current position; a short read (the file was cut) is an error."""
    buf = memoryview(out.reshape(-1).view(np.uint8))
    done = 0
    while done < len(buf):
        n = f.readinto(buf[done:done + _CHUNK])
        if not n:
            raise ArrayFileError(f"{what}: the file ends {len(buf) - done} bytes early (it is "
                                 "shorter than its header says, or was cut while it was read)")
        done += n


def _kind_refusal(dtype: np.dtype) -> str | None:
    """Why a dtype is never an input array (None when it may be)."""
    if dtype.hasobject:
        return "holds Python objects (that would need pickle; never loaded)"
    if dtype.names is not None:
        return f"a structured array (fields {', '.join(dtype.names)}), not an array of numbers"
    if dtype.kind == "V":
        return f"raw bytes (dtype {dtype}), not an array of numbers"
    if dtype.itemsize == 0:
        return f"dtype {dtype} has elements of 0 bytes"
    return None


def read_npy(path: str, *, max_bytes: int | None = None, max_elements: int | None = None,
             check: Callable[[tuple[int, ...], np.dtype], None] | None = None) -> np.ndarray:
    """The array in a ``.npy`` file, read without pickle and without a memory map.

    Before anything is allocated: the file must be a regular ``.npy`` (an ``.npz`` archive is
    named as one), its dtype a plain one (no objects, no structured or void records), its
    declared data no larger than the file holds and within ``max_bytes`` / ``max_elements``,
    and ``check(shape, dtype)`` (the caller's own test, raising) must pass.
    """
    with _open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        magic = f.read(6)
        if magic[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
            raise ArrayFileError("an .npz archive (a zip of arrays), not a .npy array: save the "
                                 "one array with np.save")
        if magic != b"\x93NUMPY":
            raise ArrayFileError("not a .npy file (it does not start with \\x93NUMPY)")
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ArrayFileError(f".npy format version {version[0]}.{version[1]} is not "
                                     "read (1.0 and 2.0 are)")
        except ArrayFileError:
            raise
        except Exception as exc:  # numpy's own words on a malformed header
            raise ArrayFileError(f"a malformed .npy header ({' '.join(str(exc).split())[:200]})"
                                 ) from None
        shape = tuple(int(d) for d in shape)
        why = _kind_refusal(dtype)
        if why:
            raise ArrayFileError(why)
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        held = size - f.tell()
        if nbytes > held:
            raise ArrayFileError(f"its header declares shape {shape} {dtype} ({_human(nbytes)}) "
                                 f"but the file holds {_human(held)} of data")
        if max_elements is not None and count > max_elements:
            raise ArrayFileError(f"shape {shape} has {count} elements, over the limit of "
                                 f"{max_elements} (raise it with --max-elements)")
        if max_bytes is not None and nbytes > max_bytes:
            raise ArrayFileError(f"shape {shape} {dtype} takes {_human(nbytes)}, over the limit "
                                 f"of {_human(max_bytes)} (raise it with --max-bytes)")
        if check is not None:
            check(shape, dtype)
        out = np.empty(count, dtype)
        _read_into(f, out, "the array's data")
    if fortran:
        return out.reshape(shape[::-1]).transpose()
    return out.reshape(shape)


# safetensors: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
# data_offsets: [begin, end]}, "__metadata__": {...}}, then the data (offsets relative to it)
SAFETENSORS_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2")}


def _bfloat16() -> np.dtype:
    from tapescope.core.precision import BFLOAT16

    return BFLOAT16


def _unique(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ArrayFileError(f"the header names {k[:80]!r} twice")
        out[k] = v
    return out


def _safetensors_header(f, limit: int, what: str) -> tuple[dict, int, int]:
    """(the JSON header of an open ``.safetensors`` file, its data's offset, the data's size),
    checked before anything else is read."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(8)
    if len(head) < 8:
        raise ArrayFileError(f"{size} bytes: too short for a .safetensors header")
    n = int.from_bytes(head, "little")
    if n > size - 8:
        raise ArrayFileError(f"its header length ({n} bytes) is more than the file holds "
                             f"({size} bytes): not a .safetensors file, or cut short")
    if n > limit:
        raise ArrayFileError(f"its header is {_human(n)}, over the limit of {_human(limit)} "
                             f"for {what}")
    raw = f.read(n)
    if len(raw) < n:
        raise ArrayFileError("the file ends inside its header (cut while it was read?)")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique)
    except ArrayFileError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ArrayFileError(f"its header is not JSON ({' '.join(str(exc).split())[:120]})"
                             ) from None
    if not isinstance(header, dict):
        raise ArrayFileError("its header is not a JSON object")
    return header, 8 + n, size - 8 - n


def read_safetensors_header(path: str, max_header: int = 16 << 20
                            ) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (dtype code, shape)} of a ``.safetensors`` file's tensors, from its header alone
    (no tensor is read): what a state_dict's names are mapped from before anything is
    allocated. A malformed entry is one line naming it."""
    from tapescope.core.names import shown

    with _open_regular(path) as f:
        header, _, _ = _safetensors_header(f, max_header, "a weights file")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise ArrayFileError(f"tensor '{shown(name)}': shape {str(shape)[:80]} is not a "
                                 "list of sizes")
        out[name] = (str(entry.get("dtype"))[:20], tuple(shape))
    return out


def read_safetensors(path: str, shapes: dict[str, tuple[int, ...]],
                     max_header: int | None = None,
                     skip: frozenset[str] | set[str] = frozenset()) -> dict[str, np.ndarray]:
    """The float tensors of a ``.safetensors`` file, each of which must be one of ``shapes``
    (name -> the shape it must have): the header is read and checked whole (names, shapes,
    dtypes, byte ranges inside the file) before any tensor's data is read, and then only those
    ranges are read, with plain reads (no memory map: a file cut short is an error, not a
    SIGBUS). ``max_header`` bounds the JSON header (default: 1 MiB + 4 KiB per expected name).
    Names in ``skip`` are neither checked nor read (a state_dict's ``num_batches_tracked``).
    """
    limit = max_header if max_header is not None else (1 << 20) + 4096 * (len(shapes)
                                                                          + len(skip))
    with _open_regular(path) as f:
        header, base, data_size = _safetensors_header(
            f, limit, f"a model of {len(shapes)} weights")
        plan = []
        for name, entry in header.items():
            if name == "__metadata__" or name in skip:
                continue
            plan.append(_checked_entry(name, entry, shapes, data_size))
        out: dict[str, np.ndarray] = {}
        for name, dtype, shape, begin in sorted(plan, key=lambda p: p[3]):
            f.seek(base + begin)
            a = np.empty(math.prod(shape), dtype)
            _read_into(f, a, f"tensor {name!r}")
            out[name] = a.reshape(shape)
    return out


def _checked_entry(name: str, entry, shapes: dict, data_size: int):
    """(name, dtype, shape, begin) of one header entry, or the one reason it is refused."""
    from tapescope.core.names import shown

    label = f"tensor '{shown(name)}'"
    if name not in shapes:
        some = ", ".join(shown(k) for k in sorted(shapes)[:8]) + (", ..." if len(shapes) > 8
                                                                   else "")
        raise ArrayFileError(f"'{shown(name)}' is not a weight of the model (its weights: "
                             f"{some})")
    if not isinstance(entry, dict):
        raise ArrayFileError(f"{label}: its header entry is not an object")
    code, shape, offs = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise ArrayFileError(f"{label}: shape {str(shape)[:80]} is not a list of sizes")
    shape = tuple(shape)
    if shape != tuple(shapes[name]):
        raise ArrayFileError(f"'{shown(name)}' has shape {shape}, the model's is "
                             f"{tuple(shapes[name])}")
    if code == "BF16":
        dtype = _bfloat16()
    elif code in SAFETENSORS_DTYPES:
        dtype = SAFETENSORS_DTYPES[code]
    else:
        raise ArrayFileError(f"{label}: dtype {str(code)[:20]!r} is not a float type a weight "
                             "can have (F64, F32, F16, BF16)")
    if not (isinstance(offs, list) and len(offs) == 2
            and all(type(o) is int and o >= 0 for o in offs)):
        raise ArrayFileError(f"{label}: data_offsets {str(offs)[:80]} is not [begin, end]")
    begin, end = offs
    if end - begin != math.prod(shape) * dtype.itemsize:
        raise ArrayFileError(f"{label}: data_offsets {offs} hold {end - begin} bytes, its "
                             f"shape {shape} {code} needs {math.prod(shape) * dtype.itemsize}")
    if end > data_size:
        raise ArrayFileError(f"{label}: its data ends at byte {end} of the data, but the file "
                             f"holds {data_size} bytes of data (cut short?)")
    return name, dtype, shape, begin
