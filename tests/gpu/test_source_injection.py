"""No text from a file reaches generated C/CUDA source: a crafted node name never runs code.

The payload closes the C comment the old code pasted names into with a backslash-newline splice
(``*\\`` newline ``/`` is ``*/`` after translation phase 2), then calls ``system``. Every route a
tape's names can take to a compiler is tried: ``tapescope fuse --tape F --check`` in a subprocess,
fusion through the Python API, and emitc. The marker file the payload would create must never
exist, and the generated text must hold no node name at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops, tapefile, workloads
from tapescope.gpu import emitc, fusion
from tests.helpers.emitc import compile_all, emit_traced, run_traced

ROOT = Path(__file__).resolve().parents[2]


def payloads(marker: Path) -> list[str]:
    """Names that turn into code when pasted into a ``/* ... */`` comment (C and C++)."""
    cmd = f'system("touch {marker}");'
    return [
        f'*\\\n/ {cmd} /*',                     # backslash-newline splice: `*\` + NL + `/`
        f'*\\\n/ int system(const char*); {cmd} /*',  # the same, declaring system for C
        f'*/ {cmd} /*',                         # the plain close (the old code escaped this one)
        f'x\n#define ts_pwn 1\n{cmd}\n',        # a newline starting a directive / statement
    ]


def _write_named_tape(path: Path, name: str) -> Path:
    """The mlp episode saved, then its header rewritten so every node carries ``name`` (a
    version-1 file, a zip of .npy members: still read, and the easiest to rewrite)."""
    wl = workloads.get("mlp")
    loss = wl.record(0)
    tapefile.save(wl.tape, path, meta={"loss": loss.id}, version=1)
    with np.load(path, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    header = json.loads(members["header"].tobytes())
    for n in header["nodes"]:
        n["name"] = name
    members["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **members)
    return path


# The fusion tests below compile into the suite's own kernel cache (the per-user one, where the
# rest of the suite builds the same mlp library and kernels), not a fresh one that builds them all
# again (~17 CPU s of g++). Every payload's kernels are the same text as a plain name's (no name
# reaches it), so they are cache hits. Sharing hides nothing: the cache key is a hash of the full
# source, so a name that did reach the source would be a miss, compiled and run like the first,
# and its payload would create the marker.


def test_fuse_check_on_a_crafted_tape_runs_no_code(tmp_path):
    marker = tmp_path / "PWNED"
    for k, name in enumerate(payloads(marker)):
        tape = _write_named_tape(tmp_path / f"evil{k}.tape", name)
        r = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "fuse", "--tape", str(tape),
                            "--device", "host", "--check", "--source"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert not marker.exists(), f"payload {k} ran a shell command:\n{r.stdout[-2000:]}"
        # refused at load (a name with a newline is not printable) or fused without the name
        assert r.returncode in (0, 2), r.stderr[-2000:]
        if r.returncode == 2:
            assert f"evil{k}.tape" in r.stderr and "name" in r.stderr
        assert "system(" not in r.stdout


def _named_mlp(name: str) -> tuple[Tape, int]:
    """The mlp episode in memory with every node renamed (the Python API takes any name)."""
    wl = workloads.get("mlp")
    loss = wl.record(0)
    nodes = wl.tape._nodes
    nodes[:] = [n._replace(name=name) for n in nodes]
    return wl.tape, loss.id


def test_fusion_api_never_pastes_names_into_source(tmp_path):
    marker = tmp_path / "PWNED"
    dev = gpu.open_device("host")
    for name in payloads(marker):
        tape, loss = _named_mlp(name)
        assert all(n.name == name for n in tape.nodes)
        prog = gpu.capture(dev, tape, loss)
        plan = fusion.apply(prog)
        assert plan.kernels, "the mlp episode fuses at least one segment"
        prog.run_episode(None)
        assert not marker.exists(), f"{name!r} ran a shell command"
        for text in [plan.source, *(k.source for k in plan.kernels)]:
            assert "system(" not in text and "PWNED" not in text


def test_a_printable_name_does_not_reach_source_either(tmp_path):
    path = _write_named_tape(tmp_path / "named.tape", "ZqXnameZqX")
    tape, meta = tapefile.load(path)
    prog = gpu.capture(gpu.open_device("host"), tape, int(meta["loss"]))
    plan = fusion.apply(prog)
    assert plan.kernels and "ZqXnameZqX" not in plan.source
    assert all("ZqXnameZqX" not in k.source for k in plan.kernels)


@pytest.mark.parametrize("k", range(4))
def test_emitc_never_pastes_names_into_source(tmp_path, k):
    marker = tmp_path / "PWNED"
    name = payloads(marker)[k]
    t = Tape()
    x = t.param(np.array(0.5), name=name)
    c = t.const(np.array(2.0), name=name)
    loss = ops.sum(ops.tanh(ops.mul(x, c)))
    t.backward(loss)
    for n in t.nodes:
        assert n.name in (name, None)
    src = emit_traced(t, loss, {}, "grad_pwn")
    with tempfile.TemporaryDirectory(prefix="emitc-inj-") as td:
        try:
            lib = compile_all(Path(td), [src])
            run_traced(lib, "grad_pwn", t, {}, np.zeros(1))
        except AssertionError:
            pass  # a payload that only breaks the compile is still caught by the text check
    assert not marker.exists(), f"{name!r} ran a shell command"
    assert "system(" not in src and "PWNED" not in src
    assert "system(" not in emitc.emit(t, loss)
