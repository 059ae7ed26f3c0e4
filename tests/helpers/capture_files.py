"""Hand-edited capture files for the hostile-file tests (tests/capture/test_capture.py,
tests/capture/test_capture_digest.py)."""

from __future__ import annotations

import hashlib
import json
import struct


def rewrite_header(data: bytes, edit) -> bytes:
    """``data`` (a capture file's bytes) with its JSON header edited by ``edit(dict)`` and a
    valid trailer (the header's SHA-256)."""
    magic, hoff, hlen, _ = struct.unpack("<8sQQ32s", data[-56:])
    h = json.loads(data[hoff:hoff + hlen])
    edit(h)
    text = json.dumps(h).encode()
    return data[:hoff] + text + struct.pack("<8sQQ32s", magic, hoff, len(text),
                                            hashlib.sha256(text).digest())
