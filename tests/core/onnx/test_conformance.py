"""ONNX's own backend test suite, driven through core.onnx.Backend (about a minute).

Runs every category the installed onnx ships, offline: node tests (built in memory), the nine
light models, pytorch-converted, pytorch-operator and simple. ``conformance_passing.txt`` is the
list of tests that passed when it was last regenerated (``python -m core.onnx.conformance
--passing tests/core/onnx/conformance_passing.txt --doc docs/onnx-coverage.md``): any of them
failing now is a regression and is named.
"""

from __future__ import annotations

import os

import pytest

from core.onnx.conformance import run_suite, summary
from core.ops import REGISTRY

PASSING = os.path.join(os.path.dirname(__file__), "conformance_passing.txt")


@pytest.fixture(scope="module")
def outcomes():
    before = set(REGISTRY)
    yield run_suite()
    assert set(REGISTRY) == before  # running models never changes the op table


def test_light_pytorch_and_simple_models_all_pass(outcomes):
    from core.onnx.backend import Backend
    from core.onnx.limits import Limits

    assert Backend.limits == Limits()  # the nine light models run with the default limits
    s = summary(outcomes)
    for cat, total in (("light", 9), ("pytorch-converted", 82), ("pytorch-operator", 35),
                       ("simple", 23)):
        assert s[cat] == (total, total), (cat, [o for o in outcomes
                                                 if o.category == cat and not o.passed][:5])


def test_at_least_1000_node_tests_pass(outcomes):
    passed, total = summary(outcomes)["node"]
    assert total >= 1800  # the whole node suite ran, not a subset
    assert passed >= 1000


def test_no_regression_against_the_recorded_passing_list(outcomes):
    with open(PASSING) as f:
        recorded = {tuple(line.split()) for line in f if line.strip()}
    now = {(o.category, o.name): o for o in outcomes}
    regressed = [(c, n, now[(c, n)].reason if (c, n) in now else "not run")
                 for c, n in sorted(recorded) if not ((c, n) in now and now[(c, n)].passed)]
    assert not regressed, regressed[:10]
