"""core.progress: one updating stderr line on a terminal (a pty here), nothing in a pipe; the
first kernel compile and `tapescope parity` show it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tapescope.core import progress as pg
from tests.helpers.terminal import drain_pty, open_pty

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty: Linux")


def test_nothing_is_drawn_off_a_terminal(monkeypatch):
    buf = io.StringIO()
    with pg.progress("compiling", stream=buf) as p:
        p.advance()
    assert buf.getvalue() == "" and not pg.enabled(buf)
    master, slave = open_pty()
    with os.fdopen(slave, "w") as tty:
        assert pg.enabled(tty)
        monkeypatch.setenv("TAPESCOPE_PROGRESS", "0")
        assert not pg.enabled(tty)
    os.close(master)


def test_a_terminal_gets_what_how_far_and_how_long():
    master, slave = open_pty()
    with os.fdopen(slave, "w") as tty:
        with pg.progress("parity mlp", total=3, stream=tty) as p:
            p.advance(2)
            with pg.progress("compiling 5 kernels", stream=tty):  # nested: a second line
                time.sleep(0.4)
        text = drain_pty(master)
    os.close(master)
    assert "parity mlp" in text and "2/3" in text and "compiling 5 kernels" in text
    assert "0:00:0" in text  # elapsed time
    assert "\x1b[" in text  # drawn in place (cursor movement), and erased after (transient)


def test_the_first_host_compile_says_so_on_a_terminal(monkeypatch, tmp_path):
    from tapescope import gpu

    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path / "cache"))  # a cache miss
    master, slave = open_pty()
    tty = os.fdopen(slave, "w")
    monkeypatch.setattr(sys, "stderr", tty)
    dev = gpu.open_device("host")
    mod = dev.compile('extern "C" __global__ void k(double* y) { y[0] = 1.0; }')
    assert mod.built
    tty.flush()
    text = drain_pty(master, timeout=5)
    tty.close()
    os.close(master)
    assert "compiling 1 host kernels with " in text and "(cached after)" in text


def test_parity_progress_goes_to_the_terminal_and_stdout_stays_clean(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TAPESCOPE_PROGRESS", None)
    argv = [sys.executable, "-m", "tapescope.app.cli", "parity", "--workload", "mlp", "--device",
            "host",
            "--steps", "3"]
    master, slave = open_pty()
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    text = drain_pty(master, until=lambda: proc.poll() is not None, timeout=300)
    out = proc.communicate(timeout=60)[0].decode()
    os.close(master)
    assert proc.returncode == 0, out
    assert "parity mlp" in text and "/3" in text  # steps done of 3
    assert "\x1b" not in out and "step    3" in out and "bit-identical" in out
    # in a pipe (a log, CI): no progress at all, stderr empty
    piped = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert piped.returncode == 0 and piped.stderr == ""


def test_a_listener_hears_start_advance_and_end_off_a_terminal_too():
    heard: list[dict] = []
    buf = io.StringIO()  # not a terminal: nothing drawn, the listener still hears
    with pg.listening(heard.append):
        with pg.progress("compiling 3 kernels", stream=buf):
            with pg.progress("parity mlp", total=2, stream=buf) as p:
                p.advance()
                p.advance()
    with pg.progress("after", stream=buf):  # no listener any more
        pass
    assert buf.getvalue() == ""
    assert [(m["event"], m["what"], m["done"], m["total"]) for m in heard] == [
        ("start", "compiling 3 kernels", 0, None), ("start", "parity mlp", 0, 2),
        ("advance", "parity mlp", 1, 2), ("advance", "parity mlp", 2, 2),
        ("end", "parity mlp", 2, 2), ("end", "compiling 3 kernels", 0, None)]
    assert all(m["elapsed"] >= 0 for m in heard)


def test_ticks_count_the_executors_questions_and_pass_on_a_real_cancel():
    import threading

    class Bar:
        n = 0

        def advance(self, k: int = 1) -> None:
            self.n += k

    bar, stop = Bar(), threading.Event()
    t = pg.Ticks(bar, stop)
    assert not t.is_set() and not t.is_set() and bar.n == 2
    stop.set()
    assert t.is_set() and bar.n == 3
    assert pg.file_label("loading", "/no/such.tape") == "loading such.tape"
