"""``tapescope parity --capture A --against B``: two captures of one zoo script, one arbiter
(issue 43 item 1; core/capture/pair.py, app/commands/capture_pair.py).

The zoo's MLP (tests/capture/zoo/mlp_pkg) is captured as a user writes it, once per setting:
plain, 1 and 2 threads and CPU bfloat16 autocast (``capture --set``: the child flips the setting
before the script runs), with a relu kernel planted one ulp off (zoo/planted.py) and with an
extra ``clone`` (zoo/extra_clone.py). Each pair must part where the difference enters and name
the run that left the reference; ops of one run only must be aligned around and reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.file import Capture, load  # noqa: E402
from tapescope.core.capture.judge import reference_available  # noqa: E402
from tapescope.core.capture.pair import align, pair  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ZOO = Path(__file__).resolve().parent / "zoo"
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")
PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "dot", "convolution", "linear", "sum",
            "mean", "_foreach_norm", "linalg_vector_norm", "native_layer_norm",
            "native_layer_norm_backward", "_softmax", "_softmax_backward_data")

pytestmark = [pytest.mark.skipif(not reference_available(), reason="no aten reference table"),
              # one worker pays the module fixture (six captures) once (--dist loadgroup)
              pytest.mark.xdist_group("capture-pair"), pytest.mark.timeout(900)]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=ZOO, env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(zoo_capture) -> dict[str, Path]:
    """The six captures (2 steps recorded of the script's 3); "plain" and "planted" are
    test_capture.py's own MLP runs, captured once a session (tests/capture/conftest.py)."""
    mlp = ["-m", "mlp_pkg.train"]
    spec = {"plain": ([], mlp), "t1": (["--set", "threads=1"], mlp),
            "t2": (["--set", "threads=2"], mlp), "bf16": (["--set", "autocast"], mlp),
            "planted": ([], ["planted.py", "mlp_pkg/train.py"]),
            "clone": ([], ["extra_clone.py", "mlp_pkg/train.py"])}
    out = {}
    for name, (flags, argv) in spec.items():
        f, p = zoo_capture(argv, flags)
        assert p.returncode == 0, p.stderr[-3000:]
        out[name] = f
    return out


def parity(a: Path, b: Path, tmp_path: Path, *more: str) -> tuple[subprocess.CompletedProcess,
                                                                   dict]:
    js = tmp_path / "pair.json"
    p = cli("parity", "--capture", str(a), "--against", str(b), "--json", str(js), *more)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    return p, json.loads(js.read_text())


def test_one_thread_against_two(runs, tmp_path):
    p, rep = parity(runs["t1"], runs["t2"], tmp_path)
    assert {"setting": "threads", "a": 1, "b": 2} in rep["settings_differ"]
    assert rep["alignment"]["only_a"] == rep["alignment"]["only_b"] == 0
    if p.returncode == 0:  # the same bits: every matched op, and the losses
        assert rep["agree"] and rep["first_parted"] is None and rep["n_parted"] == 0
        assert all(e["a"] == e["b"] for e in rep["losses"])
        assert "bit-identical on every matched op" in p.stdout
    else:  # parted: at a product (a sum whose order follows the threads), with its cause
        f = rep["first_parted"]
        assert f["op"].split(".")[1] in PRODUCTS, f
        assert f["left"] in ("A", "B", "both") and f["cause"], f


def test_autocast_parts_at_the_first_autocast_op(runs, tmp_path):
    p, rep = parity(runs["plain"], runs["bf16"], tmp_path)
    assert p.returncode == 1
    f = rep["first_parted"]
    assert f["module"] == "MLP.fc1" and f["step"] == 1 and f["phase"] == "forward", f
    o = f["outputs"][0]
    assert (o["dtype_a"], o["dtype_b"]) == ("float32", "bfloat16")
    assert f["left"] == "B" and "B computes in bfloat16" in f["cause"], f
    # autocast's casts are B's own ops: unmatched, named, and the cause's origin
    assert rep["alignment"]["only_b"] > 0
    assert any(e["op"] == "aten._to_copy.default" for e in rep["alignment"]["first_only_b"])
    assert "aten._to_copy.default" in f["cause"] and "an op of B only" in f["cause"]
    assert rep["b"]["applied"] == {"autocast": "bfloat16"}
    # nothing of the MLP parts before fc1: relu and the scaling matched, the same bits
    a = load(runs["plain"])
    assert a.ops["module"][:f["a"]].count("MLP.act") >= 1
    assert "first parted: step 1" in p.stdout and "left the reference there: B" in p.stdout


@pytest.mark.parametrize("planted_is", ["B", "A"])
def test_planted_kernel_is_the_run_that_left(runs, tmp_path, planted_is):
    a, b = (runs["plain"], runs["planted"]) if planted_is == "B" else \
        (runs["planted"], runs["plain"])
    p, rep = parity(a, b, tmp_path, "--explain")
    assert p.returncode == 1
    f = rep["first_parted"]
    assert f["op"] == "aten.relu.default" and f["module"] == "MLP.act", f
    assert f["left"] == planted_is, f
    clean = "A" if planted_is == "B" else "B"
    assert f[f"verdict_{planted_is.lower()}"] == "introduced"
    assert f[f"verdict_{clean.lower()}"] == "exact"
    o = f["outputs"][0]
    assert (o["n_diff"], o["max_ulp"]) == (1, 1)
    assert f"{planted_is}'s kernel introduced it" in f["cause"]
    assert rep["alignment"]["only_a"] == rep["alignment"]["only_b"] == 0


def test_an_op_of_one_run_only_is_aligned_around(runs, tmp_path):
    p, rep = parity(runs["plain"], runs["clone"], tmp_path)
    al = rep["alignment"]
    a, b = load(runs["plain"]), load(runs["clone"])
    assert b.n_ops == a.n_ops + 2  # one clone per step
    assert al["matched"] == a.n_ops and al["only_a"] == 0 and al["only_b"] == 2
    assert [e["op"] for e in al["first_only_b"]] == ["aten.clone.default"] * 2
    assert [e["step"] for e in al["first_only_b"]] == [1, 2]
    # the ops after the clone are matched to their own (shifted by one in B)
    res = align(a, b)
    shifted = [(i, j) for i, j in res["pairs"] if j == i + 1]
    assert shifted and all(a.ops["op"][i] == b.ops["op"][j] for i, j in res["pairs"])
    assert p.returncode == 0 and rep["agree"], p.stdout
    assert "2 ops of one run only, not compared" in p.stdout


def test_a_capture_against_itself_agrees(runs, tmp_path):
    p, rep = parity(runs["plain"], runs["plain"], tmp_path)
    assert p.returncode == 0 and rep["agree"] and rep["settings_differ"] == []
    assert rep["alignment"]["matched"] == load(runs["plain"]).n_ops


def test_bad_inputs_are_one_line(runs, tmp_path):
    for argv, want in ((["parity", "--capture", str(runs["plain"]), "--against",
                         str(tmp_path / "nope.capture")], "no such capture file"),
                       (["parity", "--against", str(runs["plain"])], "not a candidate")):
        p = cli(*argv)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and want in lines[0], p.stderr
        assert lines[0].startswith("tapescope parity: ")
    junk = tmp_path / "junk.capture"
    junk.write_bytes(b"not a capture")
    p = cli("parity", "--capture", str(runs["plain"]), "--against", str(junk))
    assert p.returncode == 2 and "Traceback" not in p.stderr and str(junk) in p.stderr


def _toy(ops: list[tuple[str, str]]) -> Capture:
    """A capture of one forward step: each op one float32 output of shape (2,)."""
    n = len(ops)
    arrays = [np.full(2, i, np.float32) for i in range(n)]
    from tapescope.core.capture.file import digest

    return Capture(path="toy", steps=1,
                   ops={"op": [o for o, _ in ops], "module": [m for _, m in ops],
                        "phase": ["forward"] * n, "step": [1] * n, "source": [""] * n,
                        "args": [[] for _ in ops], "kwargs": [{} for _ in ops],
                        "outputs": [[i] for i in range(n)]},
                   dtypes=["float32"] * n, shapes=[(2,)] * n,
                   digests=[digest(x) for x in arrays], arrays=arrays, losses=[-1],
                   initial={}, settings={})


def test_a_fused_kernel_against_its_pieces_is_reported_unmatched():
    """A: the pieces (mul, add) where B ran one fused op (addcmul): the ops around match."""
    a = _toy([("aten.t.default", "M.fc"), ("aten.mul.Tensor", "M"), ("aten.add.Tensor", "M"),
              ("aten.tanh.default", "M"), ("aten.sum.default", "")])
    b = _toy([("aten.t.default", "M.fc"), ("aten.addcmul.default", "M"),
              ("aten.tanh.default", "M"), ("aten.sum.default", "")])
    res = align(a, b)
    assert res["pairs"] == [(0, 0), (3, 2), (4, 3)]
    assert res["only_a"] == [1, 2] and res["only_b"] == [1]
    rep = pair(a, b)
    assert rep["alignment"]["matched"] == 3
    # value k of the toy is k everywhere: tanh (A's 3, B's 2) parts, t (0, 0) does not
    assert rep["first_parted"]["op"] == "aten.tanh.default"


def test_report_writes_the_pair_as_a_page(runs, tmp_path):
    out = tmp_path / "pair.html"
    p = cli("report", "--capture", str(runs["plain"]), "--against", str(runs["planted"]),
            "--out", str(out))
    assert p.returncode == 1, p.stderr[-3000:]
    page = out.read_text()
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["first_parted"]["op"] == "aten.relu.default" and side["first_parted"]["left"] \
        == "B"
    assert "Left the reference there: B" in page and "aten.relu.default" in page
    assert "<script" not in page and f"wrote {out}" in p.stdout


def test_a_periodic_run_never_slides_by_a_period():
    """Layer after layer of the same ops (an optimizer's per-parameter ops look alike): an op
    of one run only must cost that op alone, not a period's worth of wrong matches; and a long
    segment stays cheap."""
    from tapescope.core.capture.pair import match

    a = list(range(30)) * 400  # 12000 ops
    b = list(a)
    for at in (9000, 5000, 777):  # three extra ops in B
        b.insert(at, 99)
    del b[6000]  # and one op of A only
    got = match(a, b)
    assert len(got) == len(a) - 1 and all(a[x] == b[y] for x, y in got)
    assert all(y - x in (0, 1, 2, 3) for x, y in got)  # never shifted by a period
    # a fused op in A where B has two pieces, next to an extra op in B
    assert match([1, 2, 3, 4, 5], [1, 7, 8, 3, 4, 9, 5]) == [(0, 0), (2, 3), (3, 4), (4, 6)]


def test_a_region_value_held_derived_by_the_other_run_is_not_where_they_part():
    """A compiled region's departing node (A, stored: its bytes) whose bits B holds only as a
    derived value (``Capture.derived``: B's ``t`` of its matmul, recorded by its source and
    strides, its digest a sentinel, never the digest of its bytes): B holds the bits, so the
    runs do not part there (``first_inside`` None). Planted: B's matmul one ulp off, it does."""
    from tapescope.core.capture.file import COMPILED_OP, derived_digest, digest
    from tapescope.core.capture.pair_regions import first_inside

    src = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    x = np.ascontiguousarray(src.T)  # what A's region returned: B's t(mm) in C order
    graph = {"kind": "forward", "backend": "inductor", "outputs": [1],
             "nodes": {"name": ["arg0", "t"], "op": ["placeholder", "call_function"],
                       "target": ["", "aten.t.default"], "args": [[], [{"N": 0}]],
                       "kwargs": [{}, {}], "module": ["", "M"], "original": ["", "aten.t.default"]}}
    a = Capture(path="a", steps=1,
                ops={"op": [COMPILED_OP], "module": ["M"], "phase": ["forward"], "step": [1],
                     "source": [""], "args": [[0, [{"T": 1}], [0]]], "kwargs": [{}],
                     "outputs": [[0]]},
                dtypes=["float32", "float32"], shapes=[(4, 3), (3, 4)],
                digests=[digest(x), digest(src)], arrays=[x, src], losses=[-1], initial={},
                settings={}, graphs=[graph])
    dep = {"node": 1, "name": "t", "target": "aten.t.default", "output": 0, "module": "M",
           "original": "aten.t.default", "n": 12, "n_diff": 1, "max_ulp": 1, "max_abs": 1e-7,
           "first_index": 0, "kernel": ["t aten.t.default"], "kernel_nodes": 1}
    ra = {"ops": [{"outputs": [{"value": 0, "verdict": "introduced"}], "departures": [dep]}]}
    rb = {"ops": [{"outputs": [{"value": 0, "verdict": "exact"}]},
                  {"outputs": [{"value": 1, "verdict": "exact"}]}]}

    def b_run(mm: np.ndarray) -> Capture:
        d = digest(mm)
        return Capture(path="b", steps=1,
                       ops={"op": ["aten.mm.default", "aten.t.default"], "module": ["M", "M"],
                            "phase": ["forward"] * 2, "step": [1, 1], "source": ["", ""],
                            "args": [[], [{"T": 0}]], "kwargs": [{}, {}],
                            "outputs": [[0], [1]]},
                       dtypes=["float32", "float32"], shapes=[(3, 4), (4, 3)],
                       digests=[d, derived_digest("xxh3_128", d, "float32", (4, 3), (1, 4))],
                       arrays=[None, None], losses=[-1], initial={}, settings={},
                       derived={1: 0}, derived_strides={1: (1, 4)})

    assert a.digest_algorithm == "xxh3_128"
    assert first_inside(a, b_run(src), ra, rb, {0}, {0, 1}, None) is None
    off = src.copy()
    off.view(np.uint32)[2, 1] += 1
    got = first_inside(a, b_run(off), ra, rb, {0}, {0, 1}, None)
    assert got is not None and got["inside"]["run"] == "A" and got["inside"]["value"] == 0
