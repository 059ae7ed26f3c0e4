"""How ``tapescope capture`` ends when the script does not end normally: ``os._exit`` skips
Python's shutdown (the recorder's finish, the file), and said only "the script failed (exit
4)" though 3 steps had been recorded; Ctrl-C after the file was written said only
"interrupted". Each now says what became of the steps, in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

_LOOP = """\
import os, sys, time, torch
torch.manual_seed(0)
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range({n}):
    loss = m(torch.randn(3, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"step {{step}} loss {{loss.item()!r}}", flush=True)
    {after}
"""


def _capture(tmp_path, script: str, steps: int, **kw) -> subprocess.Popen:
    (tmp_path / "train.py").write_text(script)
    return subprocess.Popen([sys.executable, "-m", "tapescope.app.cli", "capture", "--out",
                             str(tmp_path / "c.capture"), "--steps", str(steps), "--",
                             sys.executable, "train.py"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_os_exit_after_recorded_steps_says_they_were_lost_and_how_to_keep_them(tmp_path):
    script = _LOOP.format(n=10, after="if step == 2: sys.stdout.flush(); os._exit(4)")
    out, err = _capture(tmp_path, script, 5).communicate(timeout=240)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tapescope capture: the script failed (exit 4)")
    assert "its 3 recorded steps were lost" in lines[0] and "--steps 2" in lines[0]
    assert not (tmp_path / "c.capture").exists()


def test_ctrl_c_after_the_file_was_written_says_so(tmp_path):
    script = _LOOP.format(n=1000, after="time.sleep(0.2)")
    p = _capture(tmp_path, textwrap.dedent(script), 2, start_new_session=True)
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline and "step 4 " not in seen:  # (2 steps asked: written)
        line = p.stdout.readline()  # (the script prints a line every 0.2 s)
        if not line:  # (it ended: nothing more to wait for)
            break
        seen += line
    os.killpg(p.pid, signal.SIGINT)  # (a terminal's Ctrl-C: the whole foreground group)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130
    last = err.strip().splitlines()[-1]  # (above it, the script's own KeyboardInterrupt)
    assert last == f"tapescope capture: interrupted; 2 steps had been written to " \
                   f"{tmp_path / 'c.capture'}"
    from tapescope.core.capture.file import load

    assert len(load(tmp_path / "c.capture").losses) == 2


def test_the_script_sees_its_file_and_argv_as_it_does_uncaptured(tmp_path):
    """``runpy.run_path(target)`` named the script's code and ``__file__`` by the path as
    given (``train.py``, where ``python train.py`` makes both absolute): its warnings,
    tracebacks and ``__file__`` differed under the capture; ``sys.argv[0]`` stays as given."""
    script = "import sys, warnings\nprint(__file__, sys.argv[0])\nwarnings.warn('w')\n" + \
        _LOOP.format(n=2, after="pass")
    (tmp_path / "train.py").write_text(script)
    plain = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    p = _capture(tmp_path, script, 1)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    assert out.splitlines()[0] == plain.stdout.splitlines()[0] == \
        f"{tmp_path / 'train.py'} train.py"
    assert err.splitlines()[0] == plain.stderr.splitlines()[0]  # (the warning's location)
