"""The zoo's DDP training with the Python API around it (``from tapescope.app.capture import
capture``):
each rank writes ``OUT.rankN.capture``.

    torchrun --standalone --nproc-per-node 2 ddp_api.py --out /tmp/run --steps 2
"""

import argparse
import runpy
import sys

from tapescope.app.capture import capture

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a, rest = ap.parse_known_args()
    sys.argv = ["ddp.py", *rest]
    with capture(a.out, steps=2):
        runpy.run_path(__file__.replace("ddp_api.py", "ddp.py"), run_name="__main__")
