"""``tapescope parity --json`` and the report's ``.json`` write a node's summary in one form
(core.summary.NODE_KEYS / SIDE_KEYS, issue 47 item 1): the same keys, ``n_nan`` included, and
the same numbers for the same pair run."""

from __future__ import annotations

import json

import pytest

from tapescope.app.cli import main
from tapescope.core.summary import NODE_KEYS, SIDE_KEYS


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One differing pair run (the transformer, platform math on host, 2 steps) written by
    both commands; the parity run also against a second candidate."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    tmp = tmp_path_factory.mktemp("schema")
    args = ["--workload", "transformer", "--device", "host", "--math", "platform",
            "--steps", "2"]
    # (--against host: B, refmath on host, and A against B: two more node lists in the file)
    assert main(["parity", *args, "--against", "host", "--json", str(tmp / "p.json")]) == 1
    assert main(["report", *args, "--out", str(tmp / "r.html")]) == 1
    par = json.loads((tmp / "p.json").read_text())
    return par["nodes"], json.loads((tmp / "r.json").read_text())["nodes"], par["against"]


def test_parity_json_and_the_report_json_have_one_node_schema(both):
    par, rep, against = both
    assert len(par) == len(rep) == len(against["nodes"]) == len(against["between"]["nodes"]) > 0
    for n in against["nodes"] + against["between"]["nodes"]:
        assert tuple(n) == NODE_KEYS and tuple(n["value"]) == SIDE_KEYS, n
    for p, r in zip(par, rep, strict=True):
        assert tuple(p) == tuple(r) == NODE_KEYS, (p, r)
        for side in ("value", "grad"):
            assert (p[side] is None) == (r[side] is None), (p["id"], side)
            if p[side] is not None:
                assert tuple(p[side]) == tuple(r[side]) == SIDE_KEYS, (p["id"], side)


def test_the_same_run_gives_the_same_summaries(both):
    """Every node the same numbers in both files (the same pair loop, one merge); only a
    parameter's value differs, since ``parity`` also compares the trained parameters after the
    last update (README: exit 0 needs them bit-identical too)."""
    par, rep, _ = both
    differing = [p for p in par if p["value"]["n_diff"] or (p["grad"] or {}).get("n_diff")]
    assert len(differing) > 10  # a run where the summaries have something to say
    for p, r in zip(par, rep, strict=True):
        if p["op"] == "param":
            assert p["grad"] == r["grad"] and p["value"]["n"] == r["value"]["n"]
            assert p["value"]["max_ulp"] >= r["value"]["max_ulp"]  # one more step merged in
        else:
            assert p == r
