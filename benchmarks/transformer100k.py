"""A 2380-block transformer: a 99,969-node tape (issue 29's live case at 100k nodes;
``benchmarks/bench_live.py --big-steps N --big-workload benchmarks/transformer100k.py``)."""
from tapescope.core.workloads.transformer import Transformer


class Big(Transformer):
    def __init__(self, **kw):
        kw.setdefault("blocks", 2380)
        super().__init__(**kw)


WORKLOAD = Big
