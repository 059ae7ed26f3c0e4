"""Your own kernel (gpu/user_kernels.py, ``--kernel``, ``kernels --template``): the template is
the stock kernel, a planted departure is introduced at exactly its nodes with the right cause,
and a file that cannot stand in is one line naming the file and line (exit 2)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tapescope import gpu
from tapescope.app.cli import main
from tapescope.app.runs import SessionConfig
from tapescope.core import workloads
from tapescope.gpu.kernel_template import op_kernels, template
from tapescope.gpu.source import LIBRARY
from tapescope.gpu.source import template as library_template
from tapescope.gpu.user_kernels import parse_spec
from tests.helpers.nvrtc import needs_nvrtc

# softmax's division y = e / s rewritten as a reciprocal multiply y = e * (1 / s)
RECIP = ("y[base + l * inner] = DIV(y[base + l * inner], rv_s);",
         "y[base + l * inner] = MUL(y[base + l * inner], DIV((real_t)1, rv_s));")
# matmul's multiply-add contracted by hand
FMA = ("acc[p][q] = ADD(acc[p][q], MUL(av[p], bv[q]));",
       "acc[p][q] = fma(av[p], bv[q], acc[p][q]);")


def _write(tmp_path, op: str, edit: tuple[str, str] | None = None, name: str = "k.cu") -> str:
    text = template(op)
    if edit is not None:
        assert text.count(edit[0]) == 1, "the stock kernel changed: update the planted edit"
        text = text.replace(*edit)
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _parity(tmp_path, capsys, *argv: str) -> tuple[int, dict | None, str, str]:
    out = tmp_path / "p.json"
    code = main(["parity", "--device", "host", "--steps", "1", *argv, "--json", str(out)])
    cap = capsys.readouterr()
    return code, json.loads(out.read_text()) if out.exists() else None, cap.out, cap.err


def _ids(name: str, op: str) -> set[int]:
    wl = workloads.get(name)
    loss = wl.record(0)
    return {n.id for n in wl.tape.nodes[: loss.id + 1] if n.op == op}


def test_every_template_holds_its_stock_kernels_verbatim():
    lib = "\n".join(library_template(n) for n in LIBRARY)
    from tapescope.gpu.library import KERNELS, LEAF

    for op, k in KERNELS.items():
        if k.fwd == LEAF:
            continue
        text = template(op)
        for name in op_kernels(op):
            start = text.index(f"void {name}(")
            body = text[start:text.index("\n}\n", start) + 2]
            assert body in lib, (op, name)
            assert f" *   {name}\n" in text  # the header lists what is replaced


def test_the_unchanged_template_is_bit_identical(tmp_path, capsys):
    sm = _write(tmp_path, "softmax", name="sm.cu")
    mm = _write(tmp_path, "matmul", name="mm.cu")
    code, data, out, _ = _parity(tmp_path, capsys, "--workload", "transformer",
                                 "--kernel", f"softmax={sm}", "--kernel", f"matmul={mm}")
    assert code == 0 and data["exact"] and data["introduced"] == []
    assert "bit-identical" in out


def test_a_reciprocal_softmax_is_introduced_at_the_softmax_nodes(tmp_path, capsys):
    f = _write(tmp_path, "softmax", RECIP)
    code, data, out, _ = _parity(tmp_path, capsys, "--workload", "transformer", "--explain",
                                 "--kernel", f"softmax={f}")
    assert code == 1
    intro = data["introduced"]
    assert intro and {e["node"] for e in intro} == _ids("transformer", "softmax")
    assert all((e["which"], e["cause"]) == ("value", "reciprocal") for e in intro)
    assert "reciprocal, matches the reference with x * (1/y)" in out


def test_an_fma_matmul_is_fma_at_the_matmul_nodes_and_their_gradients(tmp_path, capsys):
    f = _write(tmp_path, "matmul", FMA)
    code, data, _, _ = _parity(tmp_path, capsys, "--workload", "mlp", "--explain",
                               "--kernel", f"matmul={f}")
    assert code == 1
    mms = _ids("mlp", "matmul")
    values = {e["node"] for e in data["introduced"] if e["which"] == "value"}
    assert values == mms
    grads = [e for e in data["introduced"] if e["which"] == "grad"]
    assert grads and all(set(e["by"]) <= mms for e in grads)  # made by matmul's backward
    assert {e["cause"] for e in data["introduced"]} == {"fma"}


def test_a_node_spec_replaces_one_node_only(tmp_path, capsys):
    f = _write(tmp_path, "matmul", FMA)
    node = min(_ids("mlp", "matmul"))
    code, data, _, _ = _parity(tmp_path, capsys, "--workload", "mlp", "--kernel", f"{node}={f}")
    assert code == 1
    assert {e["node"] for e in data["introduced"] if e["which"] == "value"} == {node}


def test_fused_plans_leave_the_users_node_unfused(tmp_path, capsys):
    f = _write(tmp_path, "softmax", RECIP)
    code, data, _, _ = _parity(tmp_path, capsys, "--workload", "transformer", "--fuse",
                               "--kernel", f"softmax={f}")
    assert code == 1
    assert {e["node"] for e in data["introduced"]} == _ids("transformer", "softmax")
    wl = workloads.get("transformer")
    dev = gpu.open_device("host")
    prog = gpu.capture(dev, wl.tape, wl.record(0), fuse=True, kernels=[parse_spec(f"softmax={f}")])
    fused = {i for s in prog.fusion.segments for i in s.node_ids}
    assert fused and not fused & _ids("transformer", "softmax")


def test_a_file_that_does_not_compile_is_one_line_with_its_line(tmp_path, capsys):
    p = tmp_path / "bad.cu"
    text = template("softmax")
    assert text.count("real_t rv_s = (real_t)0;") >= 1, "the stock kernel changed"
    p.write_text(text.replace("real_t rv_s = (real_t)0;", "real_t rv_s = ;", 1))
    line = 1 + p.read_text().split("real_t rv_s = ;")[0].count("\n")
    code, data, _, err = _parity(tmp_path, capsys, "--kernel", f"softmax={p}", "--workload",
                                 "transformer")
    assert code == 2 and data is None
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(rf"{re.escape(str(p))}:{line}: ", err), err


def test_a_wrong_signature_or_a_missing_kernel_is_refused(tmp_path, capsys):
    p = tmp_path / "sig.cu"
    p.write_text(template("matmul").replace("long long accumulate)", "int accumulate)"))
    code, _, _, err = _parity(tmp_path, capsys, "--kernel", f"matmul={p}")
    assert code == 2 and f"{p}:" in err and "mm_T takes" in err and "int accumulate" in err
    q = tmp_path / "none.cu"
    q.write_text('extern "C" __global__ void other_T(real_t* y) { y[0] = (real_t)0; }\n')
    code, _, _, err = _parity(tmp_path, capsys, "--kernel", f"matmul={q}")
    assert code == 2 and "defines no kernel mm_T" in err
    code, _, _, err = _parity(tmp_path, capsys, "--kernel", f"nosuch={q}")
    assert code == 2 and "neither an op nor the name of one node" in err
    code, _, _, err = _parity(tmp_path, capsys, "--kernel", "matmul")
    assert code == 2 and "expected OP=FILE.cu" in err
    with pytest.raises(ValueError, match="no device side"):
        SessionConfig(compare="cpu-platform", kernels=(f"matmul={q}",))
    with pytest.raises(ValueError, match="cannot go with --worker"):
        SessionConfig(worker="ssh box tapescope worker", kernels=(f"matmul={q}",))


def test_kernels_template_writes_the_file(tmp_path, capsys):
    out = tmp_path / "sm.cu"
    assert main(["kernels", "--template", "softmax", "--out", str(out)]) == 0
    assert out.read_text() == template("softmax")
    assert main(["kernels", "--template", "param", "--out", str(out)]) == 2
    assert "no stock kernels" in capsys.readouterr().err


@pytest.mark.slow  # NVRTC compiles the library (about a minute on 2 cores)
@needs_nvrtc
def test_a_user_kernel_through_the_cuda_compile(tmp_path, monkeypatch, tmp_path_factory):
    """The cuda backend (CuPy stand-in over real NVRTC) takes the same file the same way."""
    from tests.gpu import fake_cupy

    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(fake_cupy.session_cache(tmp_path_factory)))
    fake_cupy.install(monkeypatch)
    dev = gpu.open_device("cuda")
    f = _write(tmp_path, "softmax", RECIP)
    wl = workloads.get("transformer")
    loss = wl.record(0)
    plain = gpu.capture(dev, wl.tape, loss)
    mine = gpu.capture(dev, wl.tape, loss, kernels=[parse_spec(f"softmax={f}")])
    for prog in (plain, mine):
        prog.forward()
    sm = sorted(_ids("transformer", "softmax"))
    assert all(np.array_equal(plain.read(i), wl.tape.value(i)) for i in sm)
    assert any(not np.array_equal(mine.read(i), plain.read(i)) for i in sm)
    bad = tmp_path / "bad.cu"
    text = template("softmax")
    assert "real_t rv_s = (real_t)0;" in text, "the stock kernel changed"
    bad.write_text(text.replace("real_t rv_s = (real_t)0;", "real_t rv_s = ;", 1))
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))}:\d+: "):
        gpu.capture(dev, wl.tape, loss, kernels=[parse_spec(f"softmax={bad}")])
