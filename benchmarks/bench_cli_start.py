"""How long the command line takes to start: ``tapescope --version`` (which builds the whole
parser, every subcommand registered) against ``python -c "import numpy"``, each in a fresh
process, median of N runs, both measured in the same run, interleaved. Issue 47 item 4's target:
the ratio ≤ 2 (the parser imports no ONNX, torch or Qt; tests/app/test_cli_start.py holds that).

Run: ``python benchmarks/bench_cli_start.py [--runs 21]``. The command is run as
``python -m tapescope.app.cli`` with this interpreter (the console script adds only its own
shim), so it measures the checkout this file is in when tapescope is importable from it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

CASES = {
    "tapescope --version": [sys.executable, "-m", "tapescope.app.cli", "--version"],
    'python -c "import numpy"': [sys.executable, "-c", "import numpy"],
    "python -c pass": [sys.executable, "-c", "pass"],
}


def once(cmd: list[str]) -> float:
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dt = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[-500:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21, help="runs of each command (median)")
    args = ap.parse_args()
    from machine import machine_line

    print(machine_line(peers=()))
    for cmd in CASES.values():  # warm the file cache and the .pyc files first
        once(cmd)
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(args.runs):  # interleaved: a load change hits every command alike
        for name, cmd in CASES.items():
            times[name].append(once(cmd))
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med['python -c "import numpy"']
    print(f"{'command':<28} {'median ms':>10} {'min ms':>8} {'vs import numpy':>16}")
    for name, v in times.items():
        print(f"{name:<28} {med[name] * 1e3:>10.1f} {min(v) * 1e3:>8.1f} "
              f"{med[name] / base:>15.2f}x")
    print(f"({args.runs} runs each; target: tapescope --version ≤ 2.00x import numpy)")


if __name__ == "__main__":
    main()
