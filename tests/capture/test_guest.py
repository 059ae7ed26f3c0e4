"""A guest in the user's process (issue 42 item 5): a script beside its own ``core/`` and
``app/`` packages (common names in training repos) is captured, and it imports *its* core and
app, not ours; its losses are the same bits as without the capture, and the judge runs on it.
Run as a user runs it: from the project's folder, nothing of ours on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tapescope.core.capture.file import load  # noqa: E402

CORE = '''\
"""The user's own core package (shadows nothing of tapescope's)."""
import torch
from torch import nn

WHO = "user core"


def build():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1))
'''
APP = '''\
"""The user's own app package."""
import torch

WHO = "user app"


def batches(n):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(6, 5, generator=g), torch.randn(6, 1, generator=g)) for _ in range(n)]
'''
TRAIN = '''\
import argparse
import sys

import torch

import app
import core
from app import batches
from core import build

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
a = ap.parse_args()
print(core.WHO, "|", app.WHO, "|", [m for m in sys.modules if m.startswith("tapescope")][:1])
model = build()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for x, y in batches(a.steps):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print(f"loss {loss.item()!r}")
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("proj")
    for pkg, src in (("core", CORE), ("app", APP)):
        (d / pkg).mkdir()
        (d / pkg / "__init__.py").write_text(src)
    (d / "train.py").write_text(TRAIN)
    return d


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return dict(env, TAPESCOPE_PROGRESS="0")


def run(project: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=project, env=_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)


def test_a_script_with_its_own_core_and_app_is_captured_and_judged(project, tmp_path):
    plain = run(project, sys.executable, "train.py")
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.startswith("user core | user app | []"), plain.stdout
    out = tmp_path / "guest.capture"
    cap = run(project, sys.executable, "-m", "tapescope.app.cli", "capture", "--out", str(out),
              "--", "python", "train.py")
    assert cap.returncode == 0, cap.stderr[-3000:]
    lines = cap.stdout.splitlines()
    assert lines[-1].startswith("captured 2 steps"), cap.stdout
    # the script saw its own packages (and ours only under tapescope.*): same bytes as plain,
    # the first line aside (which names the one tapescope module the recorder loaded)
    first = lines[0].split(" | ")
    assert first[:2] == ["user core", "user app"] and first[2].startswith("['tapescope"), lines[0]
    want = plain.stdout.splitlines()[1:3]
    assert lines[1:3] == want and all(ln.startswith("loss ") for ln in want)
    c = load(out)
    assert c.steps == 2 and {"forward", "backward", "optimizer"} <= set(c.ops["phase"])
    assert any("train.py" in s for s in c.ops["source"]), "the user's own lines are recorded"
    judged = run(project, sys.executable, "-m", "tapescope.app.cli", "parity", "--capture",
                 str(out))
    assert judged.returncode in (0, 1), judged.stderr[-3000:]
    assert "no reference" not in judged.stdout.split("\n")[0]


def test_the_python_api_is_under_tapescope(project, tmp_path):
    """``with tapescope.capture(FILE, steps=N)`` (issue 42's form; the same function as
    ``tapescope.app.capture.capture``) in a script with its own core and app."""
    out = tmp_path / "api.capture"
    script = project / "api_train.py"
    script.write_text(textwrap.dedent(f'''\
        import runpy, sys
        import tapescope
        from tapescope.app.capture import capture
        assert tapescope.capture is capture
        sys.argv = ["train.py", "--steps", "2"]
        with tapescope.capture({str(out)!r}, steps=2):
            runpy.run_path("train.py", run_name="__main__")
        '''))
    p = run(project, sys.executable, "api_train.py")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("user core | user app"), p.stdout
    assert load(out).steps == 2


def test_the_path_a_capture_child_is_given_holds_the_package_as_installed(tmp_path):
    """``tapescope capture``'s child appends a folder holding our ``tapescope`` (for an
    interpreter without it): from a checkout, the package laid out as a wheel installs it
    (``tapescope.capture`` there, the folders under it), whatever else is on the path."""
    from tapescope.app.capture.bootstrap import FOLDERS, package_parent

    root = str(Path(__file__).resolve().parents[2])
    code = ("import sys; from tapescope.app.capture.bootstrap import package_parent as p\n"
            f"d = p({root!r}); print(d)\n"
            "sys.path.insert(0, d)\n"
            "for m in [m for m in sys.modules if m.split('.')[0] == 'tapescope']:\n"
            "    del sys.modules[m]\n"
            "import tapescope, tapescope.app.capture.bootstrap as b\n"
            "print(tapescope.__file__); print(b.__file__)\n"
            "print(tapescope.capture.__module__)\n")
    p = run(tmp_path, sys.executable, "-c", code)
    assert p.returncode == 0, p.stderr[-3000:]
    d, init, boot, mod = p.stdout.splitlines()
    assert init == os.path.join(d, "tapescope", "__init__.py"), p.stdout
    assert boot == os.path.join(d, "tapescope", "app", "capture", "bootstrap.py"), p.stdout
    assert mod == "tapescope.app.capture"
    assert not os.path.exists(d), "the folder is removed when the process ends"
    assert sorted(FOLDERS) == sorted(  # (every folder the package holds; tests/ is not one)
        f for f in os.listdir(root) if (Path(root) / f / "__init__.py").is_file() and f != "tests")
    site = tmp_path / "site" / "tapescope"  # installed: its own parent, nothing made
    site.mkdir(parents=True)
    assert package_parent(str(site)) == str(site.parent)


def test_a_link_folder_left_by_a_killed_process_is_swept_by_the_next(tmp_path, monkeypatch):
    """A process that makes the folder and is killed (SIGKILL: no exit handlers) leaves it in the
    temporary directory; the next ``package_parent`` removes it (its links only: the checkout
    they point to stays), and leaves a running process's folder, a foreign name and a file."""
    import signal
    import tempfile

    from tapescope.app.capture import bootstrap

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = str(Path(__file__).resolve().parents[2])
    code = ("import os, sys; from tapescope.app.capture.bootstrap import package_parent as p\n"
            f"print(p({root!r}), flush=True); os.kill(os.getpid(), 9)\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    left = Path(p.stdout.strip())
    assert left.parent == tmp_path and (left / "tapescope" / "core").is_symlink()
    alive = tmp_path / f"tapescope_path.{os.getpid()}.x"  # this process: running
    alive.mkdir()
    other = tmp_path / "tapescope_path.notapid"
    other.mkdir()
    plain = tmp_path / "tapescope_path.1.file"
    plain.write_text("not ours to remove")
    mine = bootstrap.package_parent(root)
    try:
        assert not left.exists(), "the killed process's folder is swept"
        assert alive.is_dir() and other.is_dir() and plain.is_file()
        assert (Path(root) / "core" / "__init__.py").is_file()  # the links' targets untouched
        assert Path(mine).parent == tmp_path and Path(mine).name.startswith(
            f"tapescope_path.{os.getpid()}.")
    finally:
        import shutil

        shutil.rmtree(mine, True)
