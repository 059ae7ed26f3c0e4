"""Hostile --input and --weights files (issue 49, red team 3): each is refused with one line that
names the file (and the input), before anything it declares is allocated or read, and a file
cut short while it is read is an error, never a SIGBUS (core.arrayfile reads without a map)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save
from safetensors.numpy import save_file

from tapescope.app.cli import main
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.workload import OnnxWorkload

ROOT = Path(__file__).resolve().parents[2]


def _model(path, cols: int = 4):
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "m", [helper.make_tensor_value_info("x", f, [2, 3])],
        [helper.make_tensor_value_info("y", f, [2, cols])],
        [numpy_helper.from_array(np.ones((3, cols), np.float32), "w")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _safetensors(path, entries: dict, data_size: int) -> str:
    """A .safetensors file by hand: 8-byte length, JSON header, ``data_size`` bytes of data
    (sparse: a declared GiB costs no disk)."""
    head = json.dumps(entries).encode()
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        f.truncate(8 + len(head) + data_size)
    return str(path)


def _npy_header(path, descr: str, shape: tuple, data: bytes = b"") -> str:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    Path(path).write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little")
                           + text.encode() + data)
    return str(path)


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for n in needles:
        assert n in err[0], err[0]
    assert "Traceback" not in err[0] and "MemoryError" not in err[0]
    return err[0]


# --- 1. --weights on a file cut short while it is read: an error naming it, never SIGBUS ---

CUT = textwrap.dedent("""
    import os, sys
    import numpy as np
    path, model, when = sys.argv[1], sys.argv[2], sys.argv[3]
    # the file is cut to its header (when == "open") right after whatever reads it opens it
    # (safetensors' mapped reader or tapescope's own), or (when == "read") after its header was
    # read and checked, as its first tensor is read
    def cut():
        os.truncate(path, 8 + int.from_bytes(open(path, "rb").read(8), "little"))
    class Cutting:
        def __init__(self, f):
            self.f = f
        def __getattr__(self, name):
            return getattr(self.f, name)
        def __enter__(self):
            self.f.__enter__()
            return self
        def __exit__(self, *a):
            return self.f.__exit__(*a)
        def readinto(self, b):
            cut()
            return self.f.readinto(b)
    def cutting(open_, wrap):
        def opened(*a, **k):
            h = open_(*a, **k)
            if when == "open" or not wrap:
                cut()
                return h
            return Cutting(h)
        return opened
    import safetensors, safetensors.numpy as stn
    stn.safe_open = safetensors.safe_open = cutting(stn.safe_open, False)
    try:
        import tapescope.core.arrayfile as af
        af._open_regular = cutting(af._open_regular, True)
    except ImportError:
        pass
    from tapescope.app.cli import main
    sys.exit(main(["parity", "--model", model, "--weights", path, "--device", "host",
                   "--steps", "1"]))
""")


@pytest.mark.parametrize("when, said", [
    ("open", "the file holds 0 bytes of data"),
    ("read", "bytes early (it is shorter than its header says, or was cut")])
def test_weights_cut_while_read_are_an_error_naming_the_file_not_sigbus(tmp_path, when, said):
    m = _model(tmp_path / "m.onnx", cols=8192)  # a 96 KiB weight: more than a read buffers
    w = str(tmp_path / "w.safetensors")
    save_file({"w": np.full((3, 8192), 0.5, np.float32)}, w)
    r = subprocess.run([sys.executable, "-c", CUT, w, m, when], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])  # -7 is SIGBUS
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tapescope parity: ") and w in err[0], err
    assert said in err[0]


def test_weights_whose_header_claims_more_data_than_the_file_holds(tmp_path):
    m = _model(tmp_path / "m.onnx")
    w = _safetensors(tmp_path / "short.safetensors",
                     {"w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}}, 20)
    with pytest.raises(OnnxError, match="short.safetensors: --weights: tensor 'w': its data "
                                        "ends at byte 48 of the data, but the file holds 20"):
        OnnxWorkload(m, weights=w)


# --- 2. --weights checks names, shapes and dtypes from the header before reading any data ---

BIG = 1 << 28  # a 256 MiB tensor (sparse on disk)


@pytest.mark.parametrize("entries, refusal", [
    ({"w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
      "big": {"dtype": "F32", "shape": [BIG // 4], "data_offsets": [48, 48 + BIG]}},
     "'big' is not a weight of the model"),
    ({"w": {"dtype": "F32", "shape": [BIG // 4], "data_offsets": [0, BIG]}},
     f"'w' has shape ({BIG // 4},), the model's is (3, 4)"),
    ({"w": {"dtype": "I64", "shape": [3, 4], "data_offsets": [0, 96]},
      "pad": {"dtype": "U8", "shape": [BIG], "data_offsets": [96, 96 + BIG]}},
     "dtype 'I64' is not a float type"),
])
def test_weights_refused_from_the_header_without_reading_data(tmp_path, entries, refusal):
    m = _model(tmp_path / "m.onnx")
    OnnxWorkload(m, dtype=np.float32)  # imports and caches warm: the peak below is the read's
    w = _safetensors(tmp_path / "big.safetensors", entries,
                     max(e["data_offsets"][1] for e in entries.values()))
    tracemalloc.start()
    try:
        with pytest.raises(OnnxError) as e:
            OnnxWorkload(m, dtype=np.float32, weights=w)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refusal in str(e.value) and str(e.value).startswith(w)
    assert peak < 32 << 20, f"{peak >> 20} MiB allocated to refuse a 256 MiB tensor"


def test_weights_read_back_exact_in_every_float_type(tmp_path):
    from tapescope.core.arrayfile import read_safetensors
    from tapescope.core.precision import BFLOAT16

    vals = {"a": np.arange(12, dtype=np.float64).reshape(3, 4) / 7,
            "b": np.arange(6, dtype=np.float16).reshape(2, 3),
            "c": np.linspace(0, 1, 5).astype(BFLOAT16)}
    save_file({k: v for k, v in vals.items() if k != "c"}, str(tmp_path / "w.safetensors"))
    got = read_safetensors(str(tmp_path / "w.safetensors"), {"a": (3, 4), "b": (2, 3)})
    assert got.keys() == {"a", "b"}
    for k in got:
        assert got[k].dtype == vals[k].dtype and np.array_equal(got[k], vals[k])
    raw = vals["c"].tobytes()
    _safetensors(tmp_path / "bf.safetensors",
                 {"c": {"dtype": "BF16", "shape": [5], "data_offsets": [0, len(raw)]}}, 0)
    with open(tmp_path / "bf.safetensors", "ab") as f:
        f.write(raw)
    got = read_safetensors(str(tmp_path / "bf.safetensors"), {"c": (5,)})
    assert got["c"].dtype == BFLOAT16 and got["c"].tobytes() == raw


# --- 3. a 16 TiB --input header: refused by its size, naming the file, before allocating ---

def test_a_16_tib_input_header_is_refused_naming_the_file(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    huge = _npy_header(tmp_path / "huge.npy", "<f8", (2048, 1024, 1024, 1024))
    assert main(["onnx", m, "--input", f"x={huge}"]) == 2
    _one_line(capsys, "tapescope onnx: ", "input 'x'", huge, "16.0 TiB")
    assert main(["parity", "--model", m, "--input", f"x={huge}", "--device", "host",
                 "--steps", "1"]) == 2
    _one_line(capsys, "tapescope parity: ", huge, "--input x", "16.0 TiB")


def test_an_input_over_the_byte_budget_is_refused_before_it_is_read(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    big = tmp_path / "big.npy"
    np.save(big, np.zeros((512, 1024), np.float32))  # 2 MiB: real data, over --max-bytes 1M
    assert main(["onnx", m, "--input", f"x={big}", "--max-bytes", "1M"]) == 2
    _one_line(capsys, "input 'x'", str(big), "over the limit of 1.0 MiB", "--max-bytes")


# --- 4. an .npz, a string or a structured array: the line names the input and the file ---

def _odd_inputs(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((2, 3), np.float32))
    np.save(tmp_path / "s.npy", np.array([["a", "b", "c"], ["d", "e", "f"]]))
    np.save(tmp_path / "st.npy", np.zeros((2, 3), dtype=[("a", "f4"), ("b", "i4")]))
    np.save(tmp_path / "c.npy", np.ones((2, 3), np.complex64))
    return {"a.npz": ".npz archive", "s.npy": "strings", "st.npy": "structured array",
            "c.npy": "complex"}


def test_odd_inputs_name_the_input_and_the_file(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    for name, what in _odd_inputs(tmp_path).items():
        path = str(tmp_path / name)
        assert main(["onnx", m, "--input", f"x={path}"]) == 2
        _one_line(capsys, "tapescope onnx: ", "input 'x'", path, what)
        assert main(["onnx", m, "--input", path]) == 2  # the single input, by position
        _one_line(capsys, "input 'x'", path, what)
        assert main(["parity", "--model", m, "--input", f"x={path}", "--device", "host",
                     "--steps", "1"]) == 2
        line = _one_line(capsys, "tapescope parity: ", "--input x", path, what)
        assert "Warning" not in line


def test_a_device_or_fifo_is_not_a_file(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    os.mkfifo(tmp_path / "fifo.npy")  # never opened: a reader would block
    for path in ("/dev/zero", str(tmp_path / "fifo.npy")):
        assert main(["onnx", m, "--input", f"x={path}"]) == 2
        _one_line(capsys, "input 'x'", path, "not a regular file")
        assert main(["parity", "--model", m, "--input", f"x={path}", "--device", "host",
                     "--steps", "1"]) == 2
        _one_line(capsys, "tapescope parity: ", path, "not a regular file")


def test_a_given_input_still_reads_exactly(tmp_path, capsys):
    from tapescope.core.arrayfile import read_npy

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for i, a in enumerate((x, np.asfortranarray(x), x.astype(">f4"))):
        np.save(tmp_path / f"x{i}.npy", a)
        got = read_npy(str(tmp_path / f"x{i}.npy"))
        assert got.dtype == a.dtype and np.array_equal(got, x)
    m = _model(tmp_path / "m.onnx")
    assert main(["onnx", m, "--input", f"x={tmp_path / 'x0.npy'}"]) == 0
    assert os.path.getsize(tmp_path / "x0.npy") == 128 + 24
