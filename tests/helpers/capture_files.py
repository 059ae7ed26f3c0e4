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


def judged_capture(path, make_step, steps: int = 2) -> dict:
    """``make_step()`` (a fresh model, optimizer and seeded data: a step function returning
    the loss) captured for ``steps`` steps to ``path`` and judged; the captured losses are
    asserted to be an uncaptured run's bits (the recorder only reads). The judge's report."""
    from tapescope.app.capture import capture
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge

    step = make_step()
    with capture(path, steps=steps):
        losses = [step() for _ in range(steps)]
    plain = make_step()
    assert losses == [plain() for _ in range(steps)]
    return judge(load(path))


def assert_refused(path, want: str, column: str) -> None:
    """Loading ``path`` fails with one line that starts with the path, names ``column`` and
    matches ``want`` (the hostile-file tests' check)."""
    import pytest

    from tapescope.core.capture.file import CaptureFileError, load

    with pytest.raises(CaptureFileError, match=want) as e:
        load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg and column in msg
