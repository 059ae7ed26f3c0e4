"""The sanitized native build's child runs, shared by the tests that run C under AddressSanitizer
and UBSan (tests/core/test_native_sanitize.py, tests/capture/test_judge_native_diff.py and the
native entries' tests: ``child_runs_clean``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _libasan() -> str | None:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        return None
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                         timeout=30).stdout.strip()
    return out if os.path.isabs(out) and os.path.exists(out) else None


LIBASAN = _libasan()


def run_sanitized(code: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -c code args`` in a child with the sanitized native build and libasan preloaded."""
    env = dict(os.environ, TAPESCOPE_NATIVE_SANITIZE="1", LD_PRELOAD=LIBASAN,
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", PYTHONPATH=ROOT,
               TAPESCOPE_THREADS="2")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def assert_clean(p: subprocess.CompletedProcess) -> None:
    """The child ended well and neither sanitizer reported."""
    report = "AddressSanitizer" in p.stderr or "runtime error:" in p.stderr
    assert p.returncode == 0 and not report, (p.returncode, p.stderr[-4000:])


def child_runs_clean(code: str, done: str) -> None:
    """``code`` run in the sanitized child (``run_sanitized``) ends well, neither sanitizer
    reports, and its output says ``done`` (the child's count of what it ran: a child that ran
    nothing does not pass); skipped where there is no libasan or no native code."""
    import pytest

    from tapescope.core import native

    if LIBASAN is None or native.library() is None:
        pytest.skip("needs gcc with libasan (and native code)")
    p = run_sanitized(code)
    assert_clean(p)
    assert done in p.stdout, p.stdout
