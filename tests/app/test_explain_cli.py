"""``parity --explain`` end to end: the platform's libm is named as the cause of every node it
makes introduce error, in the JSON, the summary line and the table."""

from __future__ import annotations

import json

from tapescope.app.cli import main
from tapescope.core.ops import REGISTRY

#: the libm variants' labels (core.explain.VARIANTS): which matches depends on the CPU
LIBM = ("the platform's (numpy's) transcendentals", "the C library's transcendentals")


def test_platform_math_is_explained_as_libm(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["parity", "--device", "host", "--workload", "transformer", "--math",
                 "platform", "--steps", "1", "--explain", "--json", str(out)])
    cap = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert code == 1
    intro = data["introduced"]
    assert intro, "platform math must introduce error on the transformer"
    nodes = {n["id"]: n for n in data["nodes"]}
    for e in intro:
        assert e["cause"] == "libm", e
        # numpy's loops are glibc's on some CPUs, their own (AVX-512) on others
        assert e["explain"]["variant"] in LIBM, e
        if e["which"] == "value":
            assert REGISTRY[e["op"]].transcendental
        else:  # a gradient: made by a consumer's rule that calls a transcendental
            assert any(REGISTRY[nodes[i]["op"]].transcendental for i in e["by"])
    assert any(f"ulp): libm, matches the reference with {v}" in cap for v in LIBM), cap
    assert " cause" in cap.splitlines()[2]  # the table's column


def test_without_explain_no_cause(tmp_path, capsys):
    out = tmp_path / "p.json"
    main(["parity", "--device", "host", "--workload", "transformer", "--math", "platform",
          "--steps", "1", "--json", str(out)])
    capsys.readouterr()
    intro = json.loads(out.read_text())["introduced"]
    assert intro and not any("cause" in e for e in intro)
