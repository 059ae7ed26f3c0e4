"""``parity --device A --against B``: two candidates against one reference, and where they part.

With B the host replay (bit-identical to the reference on the mlp), A against B must be A
against the reference exactly, node by node: the check that the A-vs-B comparison reads the
same arrays the per-side comparisons read.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tapescope.app.cli import main  # noqa: E402


def test_torch_against_host(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["parity", "--workload", "mlp", "--device", "torch", "--against", "host",
                 "--steps", "2", "--explain", "--json", str(out)])
    cap = capsys.readouterr().out
    assert code == 1  # A differs from the reference
    data = json.loads(out.read_text())
    ag = data["against"]
    assert ag["device"] == "host" and ag["exact"] and ag["introduced"] == []
    assert ag["references_equal"]
    a = {n["id"]: n for n in data["nodes"]}
    between = {n["id"]: n for n in ag["between"]["nodes"]}
    assert set(between) == set(a)
    for i, n in a.items():  # B == reference, so A vs B == A vs the reference
        for w in ("value", "grad"):
            if n[w] is None or between[i][w] is None:
                continue
            assert between[i][w]["n_diff"] == n[w]["n_diff"], (i, w)
            assert between[i][w]["max_ulp"] == n[w]["max_ulp"], (i, w)
    first = data["first_divergence"]
    apart = ag["between"]["first_apart"]
    assert (apart["step"], apart["node"], apart["which"]) == (first["step"], first["node"],
                                                              first["which"])
    assert f"A and B part first at step 1 node #{first['node']} {first['op']}" in cap
    assert "B against the reference: 0 nodes differ, 0 introduced" in cap
    row = next(ln for ln in cap.splitlines() if ln.split()[:2] == [str(first["node"]),
                                                                 first["op"]]
               and "exact" in ln)
    assert "unknown" in row or any(c in row for c in ("fma", "reassociation", "accumulator"))


def test_two_equal_candidates_never_part(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["parity", "--workload", "mlp", "--device", "host", "--against", "host",
                 "--steps", "1", "--json", str(out)])
    cap = capsys.readouterr().out
    assert code == 0
    ag = json.loads(out.read_text())["against"]
    assert ag["between"]["first_apart"] is None and ag["exact"]
    assert "A and B part never; 0 nodes differ between them" in cap


def test_against_with_a_worker_is_one_line(capsys):
    assert main(["parity", "--device", "host", "--against", "torch", "--steps", "1",
                 "--worker", "tapescope worker"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--against" in err


def test_report_has_the_two_candidates_section(tmp_path, capsys):
    out = tmp_path / "r.html"
    code = main(["report", "--workload", "mlp", "--device", "torch", "--against", "host",
                 "--steps", "1", "--out", str(out)])
    capsys.readouterr()
    assert code == 1
    html = out.read_text()
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["against"]["device"] == "host" and side["against"]["exact"]
    sec = html[html.index("<section id=against>"):]
    sec = sec[: sec.index("</section>")]
    assert "A = torch cpu float64, B = device unfused float64 refmath" in sec
    assert "A and B part first at step 1, node #" in sec
    assert sec.count("<tr") == len(side["against"]["nodes"]) + 1  # a row per node + header
    assert "<tr class=diff>" in sec  # where A and B part
