"""``--math platform`` in half precision on host (issue 28): the platform's float32
transcendentals, rounded to the half type, leave refmath's only on a few inputs of all 65,536
(float16 sigmoid 6, log 1; bfloat16 sigmoid 8, exp 1: docs/reference-order.md), so the mlp
stays bit-identical, and a workload fed exactly those inputs drifts at the sigmoid, named libm."""

from __future__ import annotations

from pathlib import Path

import pytest

from tapescope.app.cli import main
from tapescope.app.runs import PairRunner, SessionConfig

HALF_LIBM = str(Path(__file__).parent / "data" / "half_libm.py")


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_platform_math_in_half_drifts_at_the_inputs_it_rounds_differently(dt):
    from tests.app.data.half_libm import INPUTS

    r = PairRunner(SessionConfig(workload=HALF_LIBM, device="host", math="platform", dtype=dt,
                                 explain=True))
    res = r.step()
    sig = next(n.id for n in r.nodes if n.op == "sigmoid")
    assert not res.exact and res.roots == [sig]
    assert res.first == {"node": sig, "op": "sigmoid", "which": "value"}
    e = next(e for e in res.nodes if e["id"] == sig)
    # the planted inputs are numpy's float32 libm against refmath; the host's is C's (5 of the
    # 6 float16 ones, all 8 bfloat16 ones differ there)
    assert 1 <= e["value"]["n_diff"] <= len(INPUTS[dt])
    (intro,) = [x for x in res.introduced if x["which"] == "value"]
    assert intro["node"] == sig  # libm: numpy's; the host's C libm is named closest to it
    assert intro["cause"] == "libm" or intro["explain"]["closest"] == "libm", intro
    same = PairRunner(SessionConfig(workload=HALF_LIBM, device="host", dtype=dt)).step()
    assert same.exact  # refmath on host: the reference's bits


@pytest.mark.parametrize("flag", ["--dtype", "--amp"])
def test_mlp_with_platform_math_in_bfloat16_is_bit_identical(flag, capsys):
    code = main(["parity", "--workload", "mlp", "--device", "host", "--math", "platform",
                 flag, "bfloat16", "--steps", "2"])
    assert code == 0, capsys.readouterr().out
