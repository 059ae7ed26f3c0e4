"""Run another zoo script with a CPU kernel planted one ulp off: ``aten::relu`` replaced (for
the CPU key, below the recorder, so invisible to it as an op of its own) by ``clamp_min(x, 0)``
(relu's own CPU kernel, the same bits) with its largest element moved one ulp up.

    python planted.py cnn.py ARGS...
"""

import runpy
import sys
import warnings

import torch

warnings.filterwarnings("ignore", category=UserWarning, module="torch.library")
_lib = torch.library.Library("aten", "IMPL")


def _relu_one_ulp_off(x):
    out = torch.clamp_min(x, 0)
    flat = out.view(-1)
    if flat.numel():
        i = int(torch.argmax(flat))
        flat[i] = torch.nextafter(flat[i], torch.tensor(float("inf"), dtype=out.dtype))
    return out


_lib.impl("relu", _relu_one_ulp_off, "CPU")

if __name__ == "__main__":
    target = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(target, run_name="__main__")
