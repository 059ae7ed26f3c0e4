"""Hand-edited capture files for the hostile-file tests, and the one-line refusal they expect
(tests/capture/test_capture.py, test_capture_digest.py, test_ranks.py)."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess


def rewrite_header(data: bytes, edit) -> bytes:
    """``data`` (a capture file's bytes) with its JSON header edited by ``edit(dict)`` and a
    valid trailer (the header's SHA-256)."""
    magic, hoff, hlen, _ = struct.unpack("<8sQQ32s", data[-56:])
    h = json.loads(data[hoff:hoff + hlen])
    edit(h)
    text = json.dumps(h).encode()
    return data[:hoff] + text + struct.pack("<8sQQ32s", magic, hoff, len(text),
                                            hashlib.sha256(text).digest())


def one_error_line(p: subprocess.CompletedProcess, cmd: str = "parity") -> str:
    """The command's one stderr line (``tapescope CMD: ...``), exit 2, no traceback."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"tapescope {cmd}: "), p.stderr[-3000:]
    return lines[0]
