"""The CLI contract, for every subcommand the parser knows (new ones are covered automatically):
exit 0 ok/identical, 1 differs, 2 bad input or setup; a bad input ends in exactly one line on
stderr (``tapescope <cmd>: <what and where>``) and no traceback, unless ``--debug`` asks for it.

Each case runs ``python -m tapescope.app.cli`` in a subprocess, as a user would. The bad inputs are
derived
from each subcommand's own options: an unknown flag, a bad choice, a bad number, ``--steps 0`` and
``--steps -3``, a missing or corrupt file (positional or ``--tape``), and workload scripts with a
syntax error, a ``build()`` that raises and a minibatch that raises at step 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tapescope.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]

SYNTAX_ERROR = "import numpy as np\n\n\ndef build(:\n    pass\n"
BUILD_RAISES = """
from tapescope.core.workloads import Workload


class Broken(Workload):
    name = "broken"

    def build(self):
        raise RuntimeError("no weights for you")
"""
STEP_RAISES = """
import numpy as np

from tapescope.core import ops
from tapescope.core.workloads import Workload


class RunsDry(Workload):
    name = "runs-dry"

    def build(self):
        self.w = self.tape.param(self.init(4, 3), name="w")

    def batch(self, step):
        if step >= 2:  # steps count from 1, in batch() as in every message: the second step
            raise RuntimeError("the data ran out")
        return {"x": np.ones((2, 4))}

    def episode(self, data):
        return ops.mean(data["x"] @ self.w, name="loss")
"""
# Qt's offscreen platform plugin says this on stderr for every shown window; it is not ours
QT_NOISE = ("This plugin does not support propagateSizeHints()",)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand the real parser registers (discovered, as ``tapescope`` itself does)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def bad_inputs(name: str, p: argparse.ArgumentParser) -> list[tuple[str, list[str], str]]:
    """(case id, argv after the command, a text stderr must contain) for one subcommand."""
    opts = {s: a for a in p._actions for s in a.option_strings}
    headless = ["--screenshot", "{tmp}/shot.png"] if "--screenshot" in opts else []
    positionals = [a for a in p._actions if not a.option_strings]
    # a command with a required positional gets a valid-looking one so the option is what's bad
    pos_ok = ["{tmp}/missing.tape"] if any(a.nargs is None for a in positionals) else []
    out = [("unknown-flag", [*pos_ok, "--no-such-flag"], "--no-such-flag")]
    choice = next((a for a in p._actions if a.option_strings and a.choices), None)
    if choice is not None:
        out.append((f"bad-choice{choice.option_strings[-1]}",
                    [choice.option_strings[-1], "no-such-choice", *pos_ok], "no-such-choice"))
    number = next((a for a in p._actions if a.option_strings and a.type in (int, float)
                   and a.dest != "steps"), None)
    if number is not None:
        out.append((f"bad-number{number.option_strings[-1]}",
                    [number.option_strings[-1], "many", *pos_ok], "many"))
    if "--steps" in opts:
        out += [("steps-0", ["--steps", "0", *pos_ok], "--steps"),
                ("steps-negative", ["--steps", "-3", *pos_ok], "--steps")]
    for a in positionals:
        out += [(f"missing-{a.dest}", ["{tmp}/missing.tape", *headless], "missing.tape"),
                (f"corrupt-{a.dest}", ["{tmp}/corrupt.tape", *headless], "corrupt.tape")]
    if "--tape" in opts:
        out += [("missing-tape", ["--tape", "{tmp}/missing.tape"], "missing.tape"),
                ("corrupt-tape", ["--tape", "{tmp}/corrupt.tape"], "corrupt.tape")]
    if "--workload" in opts:
        out += [("workload-missing", ["--workload", "{tmp}/nowhere.py", *headless], "nowhere.py"),
                ("workload-syntax-error", ["--workload", "{tmp}/syntax.py", *headless],
                 "line 4"),
                ("workload-build-raises", ["--workload", "{tmp}/broken.py", *headless],
                 "no weights for you"),
                ("workload-unknown", ["--workload", "no-such-workload", *headless],
                 "no-such-workload")]
        if "--steps" in opts and not headless:  # a GUI's --steps are live-session steps
            out.append(("workload-raises-at-step-2",
                        ["--workload", "{tmp}/runs_dry.py", "--steps", "3"], "step 2"))
    if "--device" in opts and "--workload" in opts and not headless:
        out.append(("device-cuda-or-ok", ["--device", "cuda", "--steps", "1"]
                    if "--steps" in opts else ["--device", "cuda"], ""))
    return out


CASES = [(name, case, argv, want) for name, p in sorted(subcommands().items())
         for case, argv, want in bad_inputs(name, p)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    (d / "syntax.py").write_text(SYNTAX_ERROR)
    (d / "broken.py").write_text(BUILD_RAISES)
    (d / "runs_dry.py").write_text(STEP_RAISES)
    (d / "corrupt.tape").write_bytes(b"PK\x03\x04 this is not a zip archive \x00\xff" * 8)
    return d


def cli(*argv: str, tmp: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``tapescope ARGV`` in a fresh interpreter (offscreen, in ``tmp``)."""
    argv = tuple(a.replace("{tmp}", str(tmp)) for a in argv)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=tmp or ROOT,
                          env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.strip() and ln not in QT_NOISE]


def test_every_subcommand_is_covered():
    # the discovery is what makes new commands (worker, kernels, ...) part of the contract
    names = {c[0] for c in CASES}
    assert {"train", "parity", "report", "fuse", "gradcheck", "gui", "onnx"} <= names
    assert all(any(c[0] == n and c[1] == "unknown-flag" for c in CASES) for n in names)


@pytest.mark.parametrize(("name", "case", "argv", "want"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_bad_input_exits_2_with_one_line(files, name, case, argv, want):
    proc = cli(name, *argv, tmp=files)
    lines = error_lines(proc)
    if case == "device-cuda-or-ok":  # no GPU here: a setup error; with one: ran (0 or 1)
        if proc.returncode in (0, 1):
            assert "Traceback" not in proc.stderr
            return
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"tapescope {name}") or lines[0].startswith("tapescope:"), lines
    assert want in lines[0], lines


def test_an_unknown_command_is_one_line():
    proc = cli("no-such-command")
    assert proc.returncode == 2 and len(error_lines(proc)) == 1, proc.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(files, where):
    argv = ["train", "--workload", "{tmp}/runs_dry.py", "--steps", "3"]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    proc = cli(*argv, tmp=files)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" in proc.stderr and "the data ran out" in proc.stderr
    assert "runs_dry.py" in proc.stderr  # the user's frame is in it
    assert proc.stderr.strip().splitlines()[-1].startswith("tapescope train: step 2")


def test_step_errors_name_the_users_line(files):
    proc = cli("parity", "--workload", "{tmp}/runs_dry.py", "--device", "host", "--steps", "3",
               tmp=files)
    line = error_lines(proc)
    assert proc.returncode == 2 and len(line) == 1, proc.stderr
    assert "step 2" in line[0] and "the data ran out" in line[0]
    assert "runs_dry.py line 16" in line[0], line  # where: the user's raise statement


def test_report_exits_0_after_writing_its_files(tmp_path):
    # it used to write both files and then crash the interpreter on the way out (rc 139)
    out = tmp_path / "r.html"
    proc = cli("report", "--workload", "mlp", "--device", "host", "--steps", "1",
               "--out", str(out))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert out.exists() and out.with_suffix(".json").exists()
    assert "bit-identical" in proc.stdout


def test_a_reader_that_leaves_early_does_not_cost_the_json(tmp_path):
    """``parity ... --json OUT | head -2``: the command printed its table first and died at
    the print that met the closed pipe, so OUT was never written (session 43, a capture's
    parity). It goes on with stdout gone: OUT is written whole, the exit is still 141, nothing
    on stderr."""
    out = tmp_path / "p.json"
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "parity", "--workload",
                            "mlp", "--device", "host", "--steps", "2", "--json", str(out)],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")
    assert json.loads(out.read_text())["steps"]


def test_a_reader_that_leaves_early_is_quiet():
    """``tapescope doctor | head -1`` (``parity ... | head``): the pipe closed under the command
    is no error line ('[Errno 32] Broken pipe') and no 'Exception ignored' at the interpreter's
    exit: the exit status of a command SIGPIPE ends (141), nothing on stderr."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the command writes its first line
    try:
        p = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "doctor"], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")
