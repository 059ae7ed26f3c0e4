"""``tapescope worker`` and ``--worker CMD``: the device side through a command, same results."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tapescope.app.live_worker import MAX_WIRE_BYTES, decode_array, encode_array
from tapescope.app.qt.live import STOPPED, LiveSession
from tapescope.app.remote import PROTOCOL
from tapescope.app.runs import PairRunner, SessionConfig
from tests.helpers.live import READY_MS

# the command a user would type; the module form where the console script is not installed
WORKER = ("tapescope worker" if shutil.which("tapescope")
          else f"{shlex.quote(sys.executable)} -m tapescope.app.cli worker")
CLI = [sys.executable, "-m", "tapescope.app.cli"]


def tapescope(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("flags", [
    ["--workload", "mlp", "--steps", "3"],
    # differs (platform exp) and has introduced arrays: the JSON carries real numbers
    ["--workload", "transformer", "--math", "platform", "--steps", "2"],
    ["--workload", "transformer", "--fuse", "--dtype", "float32", "--steps", "2"],
])
def test_parity_through_a_worker_writes_the_same_json_as_a_local_run(tmp_path, flags, capsys):
    from tapescope.app.cli import main

    here, there = tmp_path / "local.json", tmp_path / "worker.json"
    # the local run in this process (the same main(); a fresh interpreter costs ~1 CPU s),
    # the worker's run as a user starts it: a client process and its worker process
    capsys.readouterr()
    a_rc = main(["parity", "--device", "host", *flags, "--json", str(here)])
    a = capsys.readouterr()
    b = tapescope("parity", "--device", "host", *flags, "--json", str(there), "--worker", WORKER)
    assert a_rc in (0, 1), a.err
    assert b.returncode == a_rc, b.stderr
    assert there.read_bytes() == here.read_bytes()
    assert "through the worker" in b.stdout.splitlines()[0]
    # and the step lines and summary the user reads are the same too
    assert b.stdout.splitlines()[1:] == a.out.splitlines()[1:]
    if "platform" in flags:
        assert a_rc == 1 and json.loads(here.read_text())["introduced"]


def one_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    return lines[0]


def test_a_worker_command_that_does_not_exist_is_one_line_and_exit_2():
    line = one_line(tapescope("parity", "--workload", "mlp", "--device", "host",
                              "--worker", "no-such-tapescope-worker --flag"))
    assert "no-such-tapescope-worker" in line and "No such file" in line
    line = one_line(tapescope("parity", "--workload", "mlp", "--device", "host",
                              "--worker", ""))
    assert "--worker" in line and "empty" in line


def test_a_protocol_mismatch_is_one_line_and_exit_2(tmp_path):
    fake = tmp_path / "old_worker.py"  # a worker of another tapescope version
    fake.write_text("import json, sys\nsys.stdin.readline()\n"
                    "print(json.dumps({'type': 'hello', 'protocol': 999}), flush=True)\n"
                    "sys.stdin.readline()\n")
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(fake))}"
    line = one_line(tapescope("parity", "--workload", "mlp", "--device", "host",
                              "--worker", cmd))
    assert "protocol 999" in line and f"speaks {PROTOCOL}" in line
    # the worker's side: a client of another version gets one error line, and exit 2
    p = subprocess.run([*CLI, "worker"], input=json.dumps({"cmd": "hello", "protocol": 999})
                       + "\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    (reply,) = [json.loads(x) for x in p.stdout.splitlines()]
    assert reply["type"] == "error" and "protocol mismatch" in reply["message"]
    assert f"protocol {PROTOCOL}" in reply["message"] and "999" in reply["message"]


def test_a_worker_that_dies_mid_run_is_one_line_and_exit_2(tmp_path):
    line = one_line(tapescope("parity", "--workload", "mlp", "--device", "host",
                              "--worker", "false"))
    assert "'false' ended (exit status 1)" in line


def test_the_worker_keeps_fd1_for_the_protocol_when_the_workload_prints(tmp_path):
    # a user workload that writes to fd 1 without a newline in every batch, through --worker
    src = (tmp_path / "branches.py")
    from tests.helpers.live import BRANCHES

    src.write_text("import os\n" + open(BRANCHES).read().replace(
        "    def batch(self, step):\n",
        "    def batch(self, step):\n        os.write(1, b'fd 1, no newline')\n"))
    here, there = tmp_path / "a.json", tmp_path / "b.json"
    a = tapescope("parity", "--workload", str(src), "--device", "host", "--steps", "2",
                  "--json", str(here))
    b = tapescope("parity", "--workload", str(src), "--device", "host", "--steps", "2",
                  "--json", str(there), "--worker", WORKER)
    assert a.returncode == b.returncode == 0, b.stderr
    assert there.read_bytes() == here.read_bytes()
    assert "fd 1, no newline" in b.stderr  # the worker's print went to stderr, not the protocol


def test_a_live_session_through_a_worker_steps_and_inspects(qtbot):
    cfg = SessionConfig(workload="mlp", device="host", worker=WORKER)
    got = []
    s = LiveSession(cfg, 0.05, max_steps=3)
    s.inspected.connect(got.append)
    s.start()
    try:
        qtbot.waitUntil(lambda: s.state == STOPPED and s.steps_done == 3, timeout=READY_MS)
        assert "through the worker" in s.info["device"]
        s.inspect(0)
        qtbot.waitUntil(lambda: bool(got), timeout=30000)
        here = PairRunner(SessionConfig(workload="mlp", device="host"))
        for _ in range(3):
            here.step()
        want = here.arrays(0)
        assert got[0].error is None and got[0].step == 3
        assert got[0].cand_value.tobytes() == want["cand"]["value"].tobytes()
        assert got[0].ref_grad.tobytes() == want["ref"]["grad"].tobytes()
    finally:
        s.close()


def test_arrays_off_the_wire_are_checked_before_anything_is_allocated():
    good = encode_array(np.arange(4.0))
    # a declared terabyte with a few bytes of data: refused from the header, not allocated
    with pytest.raises(ValueError, match="refused"):
        decode_array({**good, "shape": [1 << 37]})
    with pytest.raises(ValueError, match="refused"):
        decode_array({**good, "shape": [MAX_WIRE_BYTES // 8 + 1]})
    with pytest.raises(ValueError, match="do not fill"):  # checked before base64 decoding
        decode_array({**good, "data": base64.b64encode(b"\0" * 40).decode()})
    with pytest.raises(ValueError, match="refused"):
        decode_array({**good, "shape": [-1, -4]})
    with pytest.raises(ValueError, match="not base64"):
        decode_array({**good, "data": {"pickle": "no"}})
