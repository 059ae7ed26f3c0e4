"""TAPESCOPE_ISA forces each path the native code has (core.native.isa), on any CPU that runs
it: the host backend and the tape's native kernels are built for that path, and a parity run
is bit-identical on every one (issue 49: a path nobody ran failed on another CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tapescope.core.native import isa

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=280,
                          env={**os.environ, **env})


@pytest.mark.parametrize("path", isa.ISAS)
def test_parity_is_bit_identical_on_every_path(path):
    if path not in isa.runnable():
        pytest.skip(f"this CPU cannot run the {path} path ({', '.join(isa.runnable())})")
    proc = _cli("parity", "--workload", "mlp", "--device", "host", "--steps", "2", "--fuse",
                TAPESCOPE_ISA=path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "bit-identical" in proc.stdout


def test_the_path_in_force_is_built_with_its_flags(monkeypatch):
    from tapescope.core import native
    from tapescope.gpu import host_compiler

    for path, flag in (("avx2", "-mno-avx512f"), ("c", "-mno-avx")):
        if path not in isa.runnable():
            continue
        monkeypatch.setenv(isa.ENV, path)
        assert flag in native.flags()
        assert flag in host_compiler.host_flags(host_compiler.find_compiler())
    if "avx512" in isa.runnable():
        monkeypatch.setenv(isa.ENV, "avx512")
        assert "-mprefer-vector-width=512" in native.flags()
        assert not {"-mno-avx512f", "-mno-avx"} & set(native.flags())


def test_an_unknown_path_or_tuning_is_one_line_and_exit_2():
    for env in ({"TAPESCOPE_ISA": "avx1024"}, {"TAPESCOPE_TUNE": "cray"}):
        proc = _cli("parity", "--workload", "mlp", "--device", "host", "--steps", "1", **env)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tapescope parity: ")
        assert next(iter(env)) in lines[0]


def test_a_path_this_cpu_lacks_is_refused_naming_what_it_lacks(monkeypatch):
    monkeypatch.setattr(isa, "cpu_flags", lambda: frozenset({"sse2", "avx", "avx2"}))
    monkeypatch.setattr(isa, "_x86", lambda: True)
    monkeypatch.setenv(isa.ENV, "avx512")
    with pytest.raises(isa.ISAError, match="lacks avx512f"):
        isa.chosen()
    monkeypatch.delenv(isa.ENV)
    assert isa.chosen() == "avx2"  # unset: the widest this CPU runs
    assert isa.runnable() == ("avx2", "c")
