"""What ``parity --capture A --against B`` costs against judging A and B one by one (issue 43's
target: <= 1.5x the sum of the two single judgements).

The zoo GPT (tests/capture/zoo/gpt.py) is captured twice, with 1 and with 2 torch threads
(``tapescope capture --set threads=N``), then, in this process, each capture is loaded and
judged alone (``core.capture.judge``: what ``parity --capture X`` does), and the pair is loaded,
judged and paired (``core.capture.pair``: what ``parity --capture A --against B`` does). Medians
of ``--repeat`` rounds.

Run: ``python benchmarks/bench_pair.py [--repeat 3] [--script gpt.py] [--captures A B]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ZOO = ROOT / "tests" / "capture" / "zoo"


def capture(out: Path, script: str, threads: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")
    subprocess.run([sys.executable, "-m", "tapescope.app.cli", "capture", "--out", str(out),
                    "--set",
                    f"threads={threads}", "--", "python", script], cwd=ZOO, env=env,
                   check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--script", default="gpt.py")
    ap.add_argument("--captures", nargs=2, default=None, metavar="FILE")
    a = ap.parse_args()
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge
    from tapescope.core.capture.pair import pair

    with tempfile.TemporaryDirectory() as d:
        if a.captures:
            fa, fb = a.captures
        else:
            fa, fb = Path(d) / "t1.capture", Path(d) / "t2.capture"
            capture(fa, a.script, 1)
            capture(fb, a.script, 2)
        singles, pairs, aligns = [], [], []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            judge(load(fa))
            judge(load(fb))
            t1 = time.perf_counter()
            ca, cb = load(fa), load(fb)
            rep = pair(ca, cb)
            t2 = time.perf_counter()
            singles.append(t1 - t0)
            pairs.append(t2 - t1)
            aligns.append(rep["seconds"]["align_compare"])
        s, p, al = (statistics.median(x) for x in (singles, pairs, aligns))
        print(f"captures: {load(fa).n_ops} and {load(fb).n_ops} ops ({a.script}, 1 and 2 "
              f"threads); parted: {rep['n_parted']}, matched {rep['alignment']['matched']}")
        print(f"{'judge A + judge B':<24} {s:8.3f} s")
        print(f"{'--against (A, B, pair)':<24} {p:8.3f} s   of which align + compare "
              f"{al:.3f} s")
        print(f"ratio {p / s:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
