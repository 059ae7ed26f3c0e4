"""A ``--kernel`` file that crashes, includes /dev/zero, or is 1.2 MB of signatures that never
close (issue 49, red team 3): one line naming the file, exit 2, in bounded time and memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from tapescope.app.cli import main
from tapescope.gpu.kernel_template import template
from tapescope.gpu.signature import parse_kernels
from tapescope.gpu.user_kernels import USER_COMPILE_BYTES

CLI = [sys.executable, "-m", "tapescope.app.cli"]
# the command in a child whose peak RSS, its compiler's included, comes back (RUSAGE_CHILDREN)
WRAP = textwrap.dedent("""
    import json, resource, subprocess, sys
    p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"rc": p.returncode, "err": p.stderr.decode("utf-8", "replace"),
                      "peak_mb": peak}))
""")


def _softmax(tmp_path, name: str, first: str = "", body: str = "") -> str:
    """The stock softmax template with ``first`` above it and ``body`` at the top of its
    forward kernel."""
    text = template("softmax")
    at = text.index("{", text.index('extern "C" __global__ void softmax_fwd_T(')) + 1
    p = tmp_path / name
    p.write_text(first + text[:at] + body + text[at:])
    return str(p)


def _one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("tapescope parity: ")
    return lines[0]


def test_a_kernel_that_writes_through_null_is_one_line_naming_it(tmp_path, capsys):
    f = _softmax(tmp_path, "null.cu", body="\n    *(volatile int*)0 = 1;\n")
    code = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "1",
                 "--kernel", f"softmax={f}"])
    line = _one_line(code, capsys.readouterr().err)  # (and this process is still here)
    assert f"kernel {f} (op softmax) crashed with SIGSEGV" in line, line


def test_a_stock_template_still_runs_after_its_trial(tmp_path, capsys):
    f = _softmax(tmp_path, "ok.cu")
    code = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "1",
                 "--kernel", f"softmax={f}"])
    assert code == 0, capsys.readouterr().err


def test_1_2_mb_of_unclosed_signatures_is_one_pass_and_one_line(tmp_path, capsys):
    text = 'extern "C" __global__ void k(' * 42_000  # 1.2 MB: minutes with the old regex
    assert len(text) > 1_200_000
    t0 = time.monotonic()
    assert parse_kernels(text) == {}
    nested = "".join(f'extern "C" __global__ void k{i}() {{' for i in range(40_000))
    assert len(parse_kernels(nested + "}" * 40_000)) == 40_000  # bodies matched in one pass
    assert time.monotonic() - t0 < 10  # (linear: ~0.2 s here; the quadratic one took minutes)
    sig = parse_kernels('extern "C" __global__ void a(double* x) { __syncthreads(); }\n'
                        'extern "C" __global__ void b(const float* y, long long n) { }\n')
    assert (sig["a"].barrier, sig["b"].barrier) == (True, False)
    assert [str(p) for p in sig["b"].params] == ["const float* y", "long long n"]
    with pytest.raises(ValueError, match="unbalanced braces"):
        parse_kernels('extern "C" __global__ void a() { {')
    p = tmp_path / "sig.cu"
    p.write_text(text)
    code = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "1",
                 "--kernel", f"softmax={p}"])
    line = _one_line(code, capsys.readouterr().err)
    assert f"{p}: does not compile" in line and "defines no" in line, line


def test_include_dev_zero_is_refused_and_through_a_macro_bounded(tmp_path):
    plain = _softmax(tmp_path, "zero.cu", first='#include "/dev/zero"\n')
    fifo = _softmax(tmp_path, "stdin.cu", first="#include </dev/stdin>\n")
    macro = _softmax(tmp_path, "zero2.cu", first='#define Z "/dev/zero"\n#include Z\n')
    for f in (plain, fifo, macro):
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-c", WRAP, *CLI, "parity", "--workload",
                              "transformer", "--device", "host", "--steps", "1", "--kernel",
                              f"softmax={f}"], capture_output=True, text=True, timeout=300,
                             stdin=subprocess.DEVNULL)
        got = json.loads(out.stdout)
        line = _one_line(got["rc"], got["err"])
        assert f"softmax={f}" in line and time.monotonic() - t0 < 120, line
        if f == macro:  # not seen before compiling: the compiler's memory limit ends it
            assert "memory limit of 1024 MiB" in line, line
            assert got["peak_mb"] < USER_COMPILE_BYTES / 2**20 + 64, got
        else:
            assert f"{f}:1: includes '/dev/" in line and "not a regular file" in line, line
