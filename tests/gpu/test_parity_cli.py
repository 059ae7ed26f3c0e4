"""`tapescope parity`: exit codes, the summary, and the JSON schema of the issue."""

from __future__ import annotations

import json

from tapescope.app.cli import main
from tapescope.core.summary import NODE_KEYS, SIDE_KEYS


def test_exact_run_writes_the_schema(tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = main(["parity", "--workload", "mlp", "--device", "host", "--steps", "3",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "device: host" in text and "bit-identical" in text
    rep = json.loads(out.read_text())
    assert set(rep) == {"device", "steps", "exact", "first_divergence", "nodes", "stats",
                        "introduced", "kernels_introduced", "inject", "dtype", "losses",
                        "optimizer"}
    assert rep["optimizer"] is None  # the workload's own (the flags, when given)
    assert rep["dtype"] == "float64"
    assert [e["step"] for e in rep["losses"]] == [1, 2, 3]
    assert all(e["reference"] == e["candidate"] for e in rep["losses"])
    assert rep["device"] == "host" and rep["steps"] == 3 and rep["exact"] is True
    assert rep["first_divergence"] is None
    # an exact run introduces nothing and nothing was injected
    assert rep["introduced"] == [] and rep["kernels_introduced"] == [] and rep["inject"] is None
    assert rep["stats"]["launches_per_episode"] > 0
    node = rep["nodes"][-1]
    assert {"id", "op", "name", "value", "grad"} <= set(node)
    # a node's summary in core.summary's one form (the report's .json has the same keys)
    assert set(node) == set(NODE_KEYS) and set(node["value"]) == set(SIDE_KEYS)
    assert set(SIDE_KEYS) >= {"n", "n_diff", "max_ulp", "max_abs", "n_nan", "nan_bits_differ"}
    assert "NaNs differing only in sign/payload (equal): 0" in text
    assert node["op"] == "mean" and node["grad"]["n"] == 1


def test_platform_drift_exits_1_and_names_the_first_divergence(tmp_path, capsys):
    # numpy's float32 libm vs the host's: here they differ (numpy has its own SIMD code);
    # where they agree the run is exact and exits 0, which is checked as well.
    out = tmp_path / "p.json"
    rc = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "1",
               "--dtype", "float32", "--math", "platform", "--json", str(out)])
    rep = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert rc == (0 if rep["exact"] else 1)
    if rc == 1:
        fd = rep["first_divergence"]
        assert fd["step"] == 1 and fd["which"] == "value"
        assert fd["op"] in ("softmax", "exp", "log", "sigmoid", "tanh", "swiglu", "silu",
                            "cross_entropy")
        assert "DIFFERS" in text
    else:
        assert rep["first_divergence"] is None and "bit-identical" in text


def test_bad_input_exits_2(capsys):
    assert main(["parity", "--workload", "nope", "--device", "host"]) == 2
    assert "unknown workload" in capsys.readouterr().err
    assert main(["parity", "--steps", "0", "--device", "host"]) == 2
