"""What the hostile ONNX models cost in seconds under the default limits (core.onnx.Limits()).

tests/core/onnx/test_hostile.py bounds each case by the budgets' own counts (work admitted,
loop iterations, bytes held) and never by a clock; this script times the same cases, each in a
fresh child process as the test runs them, and prints seconds, peak memory and ns per unit of
admitted work (the calibration behind ``max_work``: a unit should be about a nanosecond of the
reference executor; CPU seconds of the child, which include its imports). The load average is
printed: on a shared machine wall time counts other jobs' turns too.

    python benchmarks/bench_hostile.py [--cases loop_sequence_small,megabyte_of_nodes]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

CHILD = """
import json, resource, sys, tempfile
sys.path.insert(0, sys.argv[1])
from tests.core.onnx import hostile_models as hm
with tempfile.TemporaryDirectory() as d:
    out = hm.run_case(sys.argv[2], d)
ru = resource.getrusage(resource.RUSAGE_SELF)
out["peak_mb"] = ru.ru_maxrss / 1024
out["cpu"] = ru.ru_utime + ru.ru_stime
print(json.dumps(out))
"""


def main() -> int:
    from tapescope.core.onnx import Limits
    from tests.core.onnx import hostile_models as hm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    names = args.cases.split(",") if args.cases else list(hm.CASES)
    d = Limits()
    print(f"load average {os.getloadavg()[0]:.1f}; max_work {d.max_work:.3g}, "
          f"max_bytes {d.max_bytes >> 20} MiB, max_loop_iterations {d.max_loop_iterations}")
    print(f"{'case':28s} {'wall s':>8s} {'CPU s':>8s} {'work':>10s} {'ns/unit':>8s} "
          f"{'iters':>7s} {'peak MB':>8s}  ended")
    for name in names:
        proc = subprocess.run([sys.executable, "-c", CHILD, ROOT, name], capture_output=True,
                              text=True, cwd=ROOT, timeout=1200)
        if proc.returncode != 0:
            print(f"{name:28s} died: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        per = r["cpu"] * 1e9 / r["work"] if r["work"] else float("nan")  # CPU ns per unit
        print(f"{name:28s} {r['seconds']:8.2f} {r['cpu']:8.2f} {r['work']:10.3g} {per:8.2f} "
              f"{r['iterations']:7d} {r['peak_mb']:8.0f}  {r['ended'][:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
