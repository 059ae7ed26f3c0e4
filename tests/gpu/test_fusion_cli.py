"""``tapescope fuse`` and ``tapescope parity --fuse`` from the command line (host backend)."""

from __future__ import annotations

import json

from tapescope.app.cli import main


def test_fuse_prints_the_plan_and_checks_bits(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["fuse", "--workload", "mlp", "--device", "host", "--check",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "segment 0: nodes 9..21 (13 ops, 16 rows): matmul add relu" in text
    assert "serial loss tail" in text and "fused == unfused, bit for bit" in text
    plan = json.loads(out.read_text())
    assert plan["launches_after"]["episode"] <= 8 < plan["launches_before"]["episode"]
    assert all(k["name"].startswith("fz" + plan["plan_id"]) for k in plan["kernels"])
    assert any("__syncthreads();" in k["source"] for k in plan["kernels"])


def test_fuse_bad_workload_is_a_clear_error(capsys):
    assert main(["fuse", "--workload", "nope", "--device", "host"]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err


def test_parity_fuse_is_exact_and_reports_launches(tmp_path, capsys):
    out = tmp_path / "parity.json"
    assert main(["parity", "--workload", "mlp", "--device", "host", "--fuse", "--steps", "3",
                 "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["exact"] is True
    assert rep["stats"]["launches_per_episode"] <= 8


def test_fuse_a_recorded_tape(tmp_path, capsys):
    from tapescope.core import tapefile, workloads

    wl = workloads.get("transformer")
    loss = wl.record(0)
    path = tapefile.save(wl.tape, tmp_path / "ep.tape", meta={"loss": loss.id})
    assert main(["fuse", "--tape", str(path), "--device", "host", "--check"]) == 0
    text = capsys.readouterr().out
    assert f"tape {path}: fusion plan" in text and "serial loss tail): cross_entropy" in text
    assert "fused == unfused, bit for bit (51 nodes, values and gradients)" in text
    assert main(["fuse", "--tape", str(tmp_path / "missing.tape")]) == 2
    assert "no such file" in capsys.readouterr().err
