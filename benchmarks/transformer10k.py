"""A 238-block transformer: a 10,005-node tape (issue 15's 10k live case; benchmarks/bench_live.py
--big-steps N runs it as a live workload file)."""
from tapescope.core.workloads.transformer import Transformer


class Big(Transformer):
    def __init__(self, **kw):
        kw.setdefault("blocks", 238)
        super().__init__(**kw)


WORKLOAD = Big
