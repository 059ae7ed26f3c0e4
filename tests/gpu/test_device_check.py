"""benchmarks/device_check.sh --dry-run (its stages on the host backend) in an interpreter that
looks like the GPU machines': no PySide6, pyqtgraph, pytest-qt, Hypothesis or onnx. And the
headless CLI never imports Qt."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A sitecustomize that refuses the named top-level modules and logs every attempt. `import X`
# fails as for a missing package; importlib.util.find_spec(X) answers a spec with no origin
# instead of raising (PyTorch probes optional packages that way and must not crash).
_BLOCKER = '''
import importlib.machinery, os, sys
class _Absent:
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked by the test)",
                                  name=spec.name)
    def exec_module(self, module):
        pass
class _Block:
    names = set(os.environ["TS_BLOCK"].split(","))
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            with open(os.environ["TS_BLOCK_LOG"], "a") as f:
                f.write(name + "\\n")
            return importlib.machinery.ModuleSpec(name, _Absent())
        return None
sys.meta_path.insert(0, _Block())
'''
QT = ("PySide6", "shiboken6", "pyqtgraph", "pytestqt")


def _env(tmp_path: Path, blocked: tuple[str, ...]) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER)
    return dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", TS_BLOCK=",".join(blocked),
                TS_BLOCK_LOG=str(tmp_path / "imports.log"), PYTHON=sys.executable)


def _attempts(tmp_path: Path) -> list[str]:
    log = tmp_path / "imports.log"
    return log.read_text().split() if log.exists() else []


def test_headless_parity_never_imports_qt(tmp_path):
    env = _env(tmp_path, QT)
    proc = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "parity", "--workload", "mlp",
                           "--device", "host", "--steps", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bit-identical" in proc.stdout
    assert _attempts(tmp_path) == []  # not even a caught attempt


needs_bash = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="device_check.sh needs bash and coreutils' timeout")
SCRIPT = ROOT / "benchmarks" / "device_check.sh"


def _summary(out: str) -> dict[str, tuple[str, str]]:
    """stage name -> (result, exit code) from the summary rows the script prints last."""
    rows = out[out.index("device check summary"):].splitlines()[1:]
    cells = [[c.strip() for c in r.strip("|").split(" | ")] for r in rows if r.startswith("|")]
    return {c[0]: (c[1], c[2]) for c in cells}


@needs_bash
def test_a_failing_stage_is_reported_as_failed_with_its_exit_code(tmp_path):
    # the old script ran a stage as `bash -c 'cmd | tee log'` without pipefail: a stage exiting
    # 3 read "ok". Planted here: a stage failing behind a tee, one passing, one hanging past
    # the budget, and one the budget has no room left for
    env = dict(_env(tmp_path, QT), TMPDIR=str(tmp_path))
    out_dir = tmp_path / "out"
    planted = ("python3 -c 'import sys; print(\"row 1\"); sys.exit(3)' | tee "
               f"'{tmp_path / 'planted.txt'}'")  # extras run in the repository root
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--only", "extra", "--out", str(out_dir),
         "--budget", "12", "--extra", planted, "--extra", "echo fine", "--extra", "sleep 60",
         "--extra", "echo never"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (tmp_path / "planted.txt").read_text() == "row 1\n"  # it did run, behind the tee
    got = _summary(proc.stdout)
    names = list(got)
    assert len(names) == 4 and all(n.startswith(f"extra {i}: ") for i, n in enumerate(names, 1))
    assert got[names[0]] == ("FAIL", "3")
    assert got[names[1]] == ("ok", "0")
    assert got[names[2]][0].startswith("TIMEOUT after ") and got[names[2]][1] in ("124", "137")
    assert got[names[3]] == ("not run: out of budget", "-")
    # the report file holds each stage as it ended, its rows, and the same summary
    report = (out_dir / "device_check.md").read_text()
    assert "FAIL (exit 3, " in report and "row 1" in report and "ok (exit 0, " in report
    assert report.index("FAIL (exit 3") < report.index("ok (exit 0") < report.index("TIMEOUT")
    assert "### summary: NOT all passed" in report and "| FAIL | 3 |" in report
    # the folder of package links it runs the checkout through is gone with it
    assert not list(tmp_path.glob("tapescope_path.*")), list(tmp_path.glob("tapescope_path.*"))
    assert (ROOT / "core" / "__init__.py").is_file()


@needs_bash
def test_bad_usage_is_one_line_and_exit_2(tmp_path):
    for argv in (["--bogus"], ["--only", "nope"], ["--budget", "ten"], ["--out"]):
        proc = subprocess.run(["bash", str(SCRIPT), *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "", argv
        assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("device_check.sh: ")


@needs_bash
def test_the_gpu_days_stages_run_the_first_time_on_the_host(tmp_path):
    """In the default suite (CI), the dry run end to end for the stages a lease runs first:
    env, the parity cases and the provenance check of --quick, the torch candidate, and the
    pytest stage (which died on "unrecognized arguments: -n" under
    PYTEST_DISABLE_PLUGIN_AUTOLOAD: pyproject's addopts name xdist; issue 49). The nvrtc and
    bench stages have their own tests (test_nvrtc.py, test_bench_replay.py); the whole dry run
    is test_device_check_dry_run (-m slow)."""
    env = _env(tmp_path, (*QT, "hypothesis", "onnx", "onnxruntime"))
    out_dir = tmp_path / "out"
    got = {}
    for argv in (["--quick", "--only", "env,parity,provenance,torch"], ["--only", "pytest"]):
        proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", *argv, "--out", str(out_dir)],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=280)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        assert "Traceback" not in proc.stdout + proc.stderr
        got.update(_summary(proc.stdout))
    assert len([n for n in got if n.startswith("parity ")]) == 5, got
    assert got["pytest -m cuda"] == ("ok", "0"), got
    assert all(res.startswith("ok") or res.startswith("skipped: ") for res, _ in got.values())
    report = (out_dir / "device_check.md").read_text()
    # the pytest stage ran the CUDA tests (skipped here: no device), it did not die on usage
    assert "unrecognized arguments" not in report
    assert re.search(r"\d+ skipped", report), report[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(660)  # the script's own budget is 470 s
@needs_bash
def test_device_check_dry_run(tmp_path):
    # the whole dry run (~4-6 min on 2 loaded cores): every stage on the host backend, within
    # the default form's budget, in an interpreter like the GPU machines' (no PySide6,
    # Hypothesis or onnx)
    env = _env(tmp_path, (*QT, "hypothesis", "onnx", "onnxruntime"))
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--out", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "Traceback" not in out + proc.stderr
    got = _summary(out)
    parity = [n for n in got if n.startswith("parity ")]
    assert len(parity) == 16 and len(got) == 16 + 7, got
    for name, (res, rc) in got.items():
        if name.startswith("torch candidate"):
            assert res.startswith("skipped: ") or res == "ok", (name, res)
        elif " platform " in name:
            assert (res, rc) in (("ok", "0"), ("ok: differs: drift, expected for platform math",
                                               "1")), (name, res)
        else:
            assert (res, rc) == ("ok", "0"), (name, res)
    assert out.count("bit-identical; first divergence: none") >= 8  # every refmath run
    report = (tmp_path / "out" / "device_check.md").read_text()
    assert "### summary: every stage passed" in report
    assert "CPU tape (reference)" in report and "host fused episode" in report  # bench rows
    assert "audit ok" in report
    assert "introduced: [(2, 44, 'value')]; expected exactly [(2, 44, 'value')]" in report
    # onnx is blocked: the full CLI cannot build its parser, the script says so and goes on
    assert "running the subcommands directly" in out or "onnx" not in _attempts(tmp_path)
    assert not any(a.split(".")[0] in QT for a in _attempts(tmp_path))
