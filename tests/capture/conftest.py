"""One capture per zoo command per test session, shared by the modules (and xdist workers) that
ask for the same one.

``tapescope capture -- python ZOO_SCRIPT`` is a few CPU seconds of subprocesses (the CLI, the
child with torch and the recorder); test_capture.py and test_pair.py capture the same MLP runs
(clean and planted). ``zoo_capture(argv, flags)`` runs the command once per session, the first
caller under a lock, and hands every caller the same file and the command's own output (exit
code, stdout, stderr): each test still asserts on a real CLI run of its own command. The cache is
the session's temp folder (shared by its xdist workers), keyed by the command and the zoo's
bytes; nothing outlives the session's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOO = Path(__file__).resolve().parent / "zoo"
# as the test modules' own ENV: the environment at collection, before the session's fixtures
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")


def _zoo_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(ZOO.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(ZOO)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


class _Locked:
    """An exclusive lock on ``path`` (fcntl; where there is none, no lock: each process then
    pays its own captures, as before)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.f = None

    def __enter__(self) -> None:
        try:
            import fcntl
        except ImportError:
            return
        self.f = open(self.path, "a")  # noqa: SIM115 — held until __exit__
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *exc) -> None:
        if self.f is not None:
            self.f.close()  # closing releases the lock


@pytest.fixture(scope="session")
def zoo_capture(tmp_path_factory):
    """``zoo_capture(argv, flags=(), timeout=300) -> (capture file, CompletedProcess)``:
    ``tapescope capture --out FILE *flags -- python *argv`` run in tests/capture/zoo once per
    session (per xdist run); its file is shared: read it, never write it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    root = base / "zoo-captures"
    root.mkdir(exist_ok=True)
    zoo = _zoo_digest()

    def get(argv, flags=(), timeout: float = 300) -> tuple[Path, subprocess.CompletedProcess]:
        cmd = ["capture", *flags, "--", "python", *argv]
        key = hashlib.sha256(json.dumps([zoo, cmd]).encode()).hexdigest()[:24]
        d = root / key
        f, done = d / "run.capture", d / "result.json"
        d.mkdir(exist_ok=True)
        with _Locked(d / "lock"):
            if not done.exists():
                full = [sys.executable, "-m", "tapescope.app.cli", "capture", "--out", str(f),
                        *flags, "--", "python", *argv]
                p = subprocess.run(full, cwd=ZOO, env=ENV, stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, timeout=timeout)
                tmp = done.with_suffix(".tmp")
                tmp.write_text(json.dumps({"args": full, "returncode": p.returncode,
                                           "stdout": p.stdout, "stderr": p.stderr}))
                tmp.replace(done)
        r = json.loads(done.read_text())
        return f, subprocess.CompletedProcess(r["args"], r["returncode"], r["stdout"],
                                              r["stderr"])

    return get


@pytest.fixture(scope="module")
def hot():
    """The recorder's per-op path in C (app/capture/recorder_native.py) for the modules that
    test it (test_recorder_hot, test_recorder_hot_edges), built here (a test process is
    tapescope's own); skipped without gcc, or where TAPESCOPE_NO_NATIVE turns it off (the
    suite's run on the Python path alone)."""
    if os.environ.get("TAPESCOPE_NO_NATIVE"):
        pytest.skip("TAPESCOPE_NO_NATIVE: the recorder's Python path alone")
    from tapescope.app.capture import recorder_native

    mod = recorder_native.module(build=True)
    if mod is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    return mod


@pytest.fixture(params=[True, False], ids=["c", "python"])
def recorder_path(request, monkeypatch):
    """Each test run on the recorder's C per-op path and on its Python one (True: C; skipped
    where the C path does not build)."""
    from tapescope.app.capture import recorder_native
    from tapescope.app.capture.recorder import Recorder

    if request.param and recorder_native.module(build=True) is None:
        pytest.skip("the recorder's C path does not build here (no gcc or Python.h)")
    monkeypatch.setattr(Recorder, "native", request.param)
    return request.param
