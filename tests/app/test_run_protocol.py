"""The Run protocol: ``PairRunner`` composes any two runs through it (no question of their
kind), and a step's arrays come from one store, each fetched from its run at most once."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tapescope.app.run_sides import CpuRun, DeviceRun, Run, RunSpec
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.app.tensor_window import TensorWindow

ROOT = Path(__file__).resolve().parents[2]


class Counting:
    """A candidate of a kind the pair loop has never seen: any object with the Run methods
    (here one that hands every call to a CPU run, counting array fetches)."""

    def __init__(self, inner: CpuRun) -> None:
        self.inner, self.fetched = inner, []
        self.spec, self.plan = inner.spec, None

    tape = property(lambda self: self.inner.tape)
    loss_id = property(lambda self: self.inner.loss_id)

    def advance(self, step):
        self.inner.advance(step)

    def update(self):
        self.inner.update()

    def loss(self):
        return self.inner.loss()

    def array(self, i, which):
        self.fetched.append((i, which))
        return self.inner.array(i, which)

    def compare(self, ref, nodes):
        return None

    def optimizer_arrays(self, after):
        return self.inner.optimizer_arrays(after)

    def leaf_value(self, i):
        return None

    def set_inject(self, inject):
        raise ValueError("no faults here")

    def stats(self):
        return None


def test_every_side_implements_the_protocol():
    cfg = SessionConfig(workload="mlp", device="host")
    r = PairRunner(cfg)
    assert isinstance(r.ref, CpuRun) and isinstance(r.cand, DeviceRun)
    for run in (r.ref, r.cand, Counting(r.ref)):
        assert isinstance(run, Run)


def test_a_pair_of_any_two_runs_is_the_configs_pair_bit_for_bit():
    cfg = SessionConfig(workload="transformer", compare="cpu-platform")
    want = PairRunner(cfg)
    ref = CpuRun(RunSpec("cpu", "refmath"), "transformer", 0)
    cand = Counting(CpuRun(RunSpec("cpu", "platform"), "transformer", 0))
    got = PairRunner(cfg, runs=(ref, cand))
    cand.fetched.clear()  # (provenance's start: each parameter as capture uploaded it)
    for _ in range(2):
        a, b = want.step(), got.step()
        assert not a.exact and a.record.tobytes() == b.record.tobytes()
        assert (a.loss_ref, a.loss_cand, a.first, a.introduced) == (
            b.loss_ref, b.loss_cand, b.first, b.introduced)
        # each array of the step fetched once, whoever read it (compare, provenance, the
        # Inspector's arrays, the tensor window): one store. A parameter twice: as the step
        # computed with it, and as its update left it
        for i in range(len(got.nodes)):
            got.arrays(i)
        assert TensorWindow().capture(b.step, got)
        times = Counter(cand.fetched)
        assert set(times) == {(n.id, w) for n in got.nodes for w in ("value", "grad")}
        assert {k: c for k, c in times.items() if c != 1} == {
            (i, w): 2 for i in got.params for w in ("value", "grad")}
        cand.fetched.clear()


def test_the_pair_loop_never_asks_a_run_its_kind():
    # PairRunner composes Runs: no isinstance on a run (a new kind is one more class)
    src = (ROOT / "app" / "runs.py").read_text()
    calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") == "isinstance"]
    named = {ast.unparse(c.args[1]) for c in calls}
    assert not named & {"CpuRun", "DeviceRun", "RemoteRun", "Run"}, named
