"""A hostile or broken worker never hangs the client nor makes it allocate: one line, exit 2.

The fakes are ``tests/app/hostile_worker.py MODE``. Each run is bounded in time (the
subprocess timeout, far above the deadlines under test) and in memory: a small wrapper runs
the client and reports its peak RSS (``RUSAGE_CHILDREN``), which must stay far below what the
hostile line would cost if it were held whole or parsed.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tapescope.app.remote import PROTOCOL
from tapescope.app.wire import MAX_DEPTH, LinePipe, LineTooLong, json_shape, parse_line

FAKE = Path(__file__).with_name("hostile_worker.py")
CLI = [sys.executable, "-m", "tapescope.app.cli"]
PEAK_MB = 450  # the client's own imports are ~150-250 MB; a held 700 MiB line is not
FAST = ["--worker-timeout", "3", "--worker-open-timeout", "3"]
# for a worker that answers at once but wrongly: deadlines far from the answer, so a loaded
# machine (its Python start alone can take seconds) never turns the malformed reply into a timeout
LOOSE = ["--worker-timeout", "60", "--worker-open-timeout", "60"]
WRAP = textwrap.dedent("""
    import json, resource, subprocess, sys
    p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"rc": p.returncode, "err": p.stderr.decode("utf-8", "replace"),
                      "peak_mb": peak}))
""")


def fake(mode: str) -> str:
    # PROTOCOL as an argument: the fake says hello without importing the app first
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} {shlex.quote(mode)} {PROTOCOL}"


def parity(worker: str, *flags: str) -> dict:
    """rc, err (stderr), peak_mb and seconds of ``tapescope parity --worker WORKER``."""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", WRAP, *CLI, "parity", "--workload", "mlp",
                          "--device", "host", "--steps", "3", "--worker", worker, *flags],
                         capture_output=True, text=True, timeout=300)
    got = json.loads(out.stdout)
    got["seconds"] = time.monotonic() - t0
    return got


def one_line(got: dict) -> str:
    lines = got["err"].strip().splitlines()
    assert got["rc"] == 2 and len(lines) == 1, got
    assert "Traceback" not in got["err"]
    assert lines[0].startswith("tapescope parity: ")
    return lines[0]


@pytest.mark.parametrize("mode,request_", [
    ("silent", "hello"),  # says nothing at all
    ("after_hello", "device"),  # stops after hello
    ("half_line", "device"),  # half a line, then sleeps
])
def test_a_worker_that_stops_answering_misses_its_deadline(mode, request_):
    got = parity(fake(mode), *FAST)
    line = one_line(got)
    assert f"did not answer {request_!r} within 3 s" in line, line
    assert "hostile_worker.py" in line and mode in line  # the worker command is named
    assert "--worker-open-timeout" in line  # and how to give it longer
    assert got["seconds"] < 120  # it ended (the fake itself would sleep 120 s)


def test_a_worker_that_stalls_mid_run_misses_the_request_deadline():
    # honest through open and the first step; the second step is never answered
    got = parity(fake("stall_mid_run"), "--worker-timeout", "10")
    line = one_line(got)
    assert "did not answer 'step' within 10 s" in line and "--worker-timeout S" in line
    assert "stall_mid_run" in line


def test_the_deadline_comes_from_the_environment_too(monkeypatch, capsys):
    monkeypatch.setenv("TAPESCOPE_WORKER_OPEN_TIMEOUT", "2")
    line = one_line(parity(fake("silent")))
    assert "within 2 s" in line
    # a bad value is refused before any worker starts: the same main() in this process (the
    # real process above shows the status and stderr as a user sees them)
    from tapescope.app.cli import main

    monkeypatch.setenv("TAPESCOPE_WORKER_OPEN_TIMEOUT", "soon")
    capsys.readouterr()
    rc = main(["parity", "--workload", "mlp", "--device", "host", "--steps", "3",
               "--worker", fake("silent")])
    got = capsys.readouterr()
    line = one_line({"rc": rc, "err": got.err})
    assert "TAPESCOPE_WORKER_OPEN_TIMEOUT" in line and "'soon'" in line and got.out == ""


def test_timeout_flags_are_checked(capsys):
    # one real process keeps the status and stderr as a user sees them; the other values go
    # through the same main() in this process (a fresh interpreter costs ~0.8 CPU s each)
    from tapescope.app.cli import main

    p = subprocess.run([*CLI, "parity", "--worker-timeout", "0"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "--worker-timeout" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    for bad in ("-1", "nan", "inf", "x"):
        capsys.readouterr()
        rc = main(["parity", "--worker-timeout", bad])
        err = capsys.readouterr().err
        assert rc == 2 and "--worker-timeout" in err, (bad, err)
        assert "Traceback" not in err


def test_700_mib_without_a_newline_is_refused_at_the_replys_bound_in_bounded_memory():
    got = parity(fake("huge_line"), *FAST)
    line = one_line(got)
    assert "answering 'device'" in line and "longer than" in line, line
    assert got["peak_mb"] < PEAK_MB, got


@pytest.mark.parametrize("mode,says", [
    ("deep", f"nested 4001 deep (at most {MAX_DEPTH})"),
    ("wide", "with 300003 arrays and objects"),
])
def test_deep_or_wide_json_is_refused_before_parsing(mode, says):
    got = parity(fake(mode), *LOOSE)
    line = one_line(got)
    assert says in line and "answering 'device'" in line, line
    assert got["peak_mb"] < PEAK_MB, got


@pytest.mark.parametrize("mode,says", [
    ("no_kind", "malformed 'device' reply to 'device': 'kind' is NoneType, not str"),
    ("no_type", "sent a reply with no type to 'device' (expected 'device')"),
])
def test_a_reply_without_its_fields_is_named_not_a_keyerror(mode, says):
    line = one_line(parity(fake(mode), *LOOSE))
    assert says in line, line
    assert "KeyError" not in line and "None" not in line.split(":", 1)[1].replace(
        "NoneType", "")


# every column's checks are tests/core/test_step_record.py (no worker needed); through a worker:
# a count out of range, and what only the client can know (the node's size, how many nodes)
@pytest.mark.parametrize("field,value,says", [
    # a step record is binary columns of this side's layout: what can be wrong is a value
    # (v_diff and v_n also in-process: tests/app/test_remote_client_inprocess.py; 12 s each here)
    pytest.param("v_diff", "-3", "v_diff out of 0..n", marks=pytest.mark.slow),
    pytest.param("v_n", "3", "value n is not the node's element count", marks=pytest.mark.slow),
    ("count", "0", "not a record of"),
])
def test_garbage_in_a_step_record_is_a_malformed_reply_never_bit_identical(field, value, says):
    got = parity(fake(f"bad_record:{field}:{value}"), "--worker-timeout", "60")
    line = one_line(got)
    assert "malformed reply to 'step'" in line and says in line, line
    assert "bit-identical" not in got["err"] and "zip()" not in line


def test_the_worker_answers_deep_or_huge_json_with_one_error_line_on_stdout():
    hello = json.dumps({"cmd": "hello", "protocol": PROTOCOL}) + "\n"
    for bad, says in ((b"[" * 200_000 + b"\n", "with 200000 arrays and objects"),
                      (b"[" * 1000 + b"\n", "nested 1000 deep"),
                      (b'{"cmd": ' + b"[]," * 100_000 + b"1}\n", "arrays and objects")):
        p = subprocess.run([*CLI, "worker"], input=hello.encode() + bad, capture_output=True,
                           timeout=120)
        assert p.returncode == 2, p.stderr[-2000:]
        assert b"Traceback" not in p.stderr and b"RecursionError" not in p.stderr
        hello_reply, reply = [json.loads(x) for x in p.stdout.splitlines()]
        assert hello_reply["type"] == "hello"
        assert reply["type"] == "error" and says in reply["message"], reply


def test_json_shape_counts_brackets_outside_strings_only():
    assert json_shape(b'{"a": [1, {"b": "[[[\\"]]"}]}', 100) == (3, 3)
    assert json_shape(b'"\\\\"[]', 100) == (1, 1)  # an escaped backslash ends no string early
    assert json_shape(b"[" * 50, 10) == (50, 0)  # over the count: the depth is not measured
    with pytest.raises(ValueError, match="nested 33 deep"):
        parse_line(b"[" * 33 + b"]" * 33, "x", 100)
    assert parse_line(b'{"a": ' + b"[" * 31 + b"]" * 31 + b"}", "x", 100) == {"a": [[[[
        [[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}


def test_a_line_is_read_in_bounded_chunks_and_refused_past_its_bound():
    import os

    r, w = os.pipe()
    try:
        os.write(w, b'{"a": 1}\n' + b"B" * 5000)
        pipe = LinePipe(r, w)
        assert pipe.receive(100, time.monotonic() + 5) == b'{"a": 1}'
        with pytest.raises(LineTooLong, match="longer than 100 bytes"):
            pipe.receive(100, time.monotonic() + 5)
        assert len(pipe._buf) == 0  # what was read of the refused line is let go
        with pytest.raises(TimeoutError):
            pipe.receive(1 << 20, time.monotonic() + 0.2)
    finally:
        os.close(r)
        os.close(w)


# issue 49 (red team 2: server_bad_requests_then_quit, server_deep_json_line): every reply to a
# line the worker cannot serve is the one error shape, and bad requests never end the worker
ERROR_SHAPE = {"type", "message", "details"}


def _error(reply: dict) -> str:
    assert set(reply) == ERROR_SHAPE and reply["type"] == "error", reply
    assert isinstance(reply["details"], str) and isinstance(reply["message"], str)
    assert "\n" not in reply["message"] and len(reply["message"]) <= 4000
    return reply["message"]


def test_a_run_of_bad_requests_is_answered_one_error_each_and_quit_still_ends_the_worker():
    bad = [{}, {"cmd": 5}, {"cmd": None}, {"cmd": "nope"}, {"cmd": "x" * 10_000},
           {"cmd": "hello", "protocol": PROTOCOL}, {"cmd": "step"}, {"cmd": "params"},
           {"cmd": "arrays", "node": "x"}, {"cmd": "device"}, {"cmd": "device", "name": [1]},
           {"cmd": "open"}, {"cmd": "open", "config": {}, "provenance": "every"},
           {"cmd": "device", "name": "nonesuch"}]
    lines = [{"cmd": "hello", "protocol": PROTOCOL}, *bad, {"cmd": "quit"}]
    p = subprocess.run([*CLI, "worker"], input="".join(json.dumps(m) + "\n" for m in lines),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "KeyError" not in p.stdout
    replies = [json.loads(x) for x in p.stdout.splitlines()]
    assert replies[0]["type"] == "hello" and len(replies) == 1 + len(bad)  # one reply each
    said = [_error(r) for r in replies[1:]]
    for msg, text in zip(bad[:-1], said[:-1], strict=True):  # the protocol's own refusals
        assert text.startswith("tapescope worker: bad request: "), (msg, text)
    assert "unknown command 'nope'" in said[3] and "'cmd' string" in said[0]
    assert "no pair is open to answer 'step'" in said[6] and "'name' as a JSON string" in said[9]
    # a request that is well formed but fails there keeps its traceback in the details
    assert said[-1].startswith("DeviceError: unknown device 'nonesuch'")
    assert "Traceback" in replies[-1]["details"]


@pytest.mark.parametrize("hello_first", [False, True])
def test_100000_open_brackets_get_the_error_shape_never_a_recursionerror(hello_first):
    hello = json.dumps({"cmd": "hello", "protocol": PROTOCOL}) + "\n" if hello_first else ""
    p = subprocess.run([*CLI, "worker"], input=hello.encode() + b"[" * 100_000 + b"\n",
                       capture_output=True, timeout=120)
    assert p.returncode == 2 and p.stderr == b"", p.stderr[-2000:]  # a garbled line: exit 2
    replies = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(replies) == 1 + hello_first
    assert "arrays and objects" in _error(replies[-1])


def test_a_silent_worker_is_named_after_the_hellos_own_short_deadline(monkeypatch):
    # issue 49 (red team 3): hello shared the first compile's 30 minutes; it has its own now,
    # short by default, and the open timeout (here the default 1800 s) no longer governs it
    from tapescope.app.remote_protocol import HELLO_TIMEOUT_ENV, HELLO_TIMEOUT_S, hello_timeout

    monkeypatch.delenv(HELLO_TIMEOUT_ENV, raising=False)
    assert hello_timeout() == HELLO_TIMEOUT_S <= 30
    never = f'{shlex.quote(sys.executable)} -c "import time; time.sleep(600)"'
    got = parity(never, "--worker-hello-timeout", "2")
    line = one_line(got)
    assert "did not answer 'hello' within 2 s" in line, line
    assert "time.sleep(600)" in line and "--worker-hello-timeout S gives it longer" in line
    assert got["seconds"] < 120  # (a sleeper left alive would hold subprocess.run for 600 s)
    monkeypatch.setenv(HELLO_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=f"^{HELLO_TIMEOUT_ENV} must be a number"):
        hello_timeout()


def _alive(pid: int) -> bool:
    """The process runs (a zombie left for init to reap has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_client_killed_with_sigkill_takes_the_workers_compiler_with_it(tmp_path):
    # issue 49 (red team 3): the worker died with its client (PR_SET_PDEATHSIG) but the g++ it
    # had started went on compiling; now the compiler's process group dies with the worker.
    # The "compiler" here is a g++ wrapper whose kernel build starts a child and sleeps.
    # Its --version is its own (the host kernels' cache key holds it): the kernels are a
    # miss in the suite's cache, so the wrapper is called, while refmath's C library (gcc's,
    # not the wrapper's) comes from that cache, as a cold private one would compile it first
    # (~30 s of the suite's CPU)
    import os
    import signal
    import uuid

    pids = tmp_path / "pids"
    cxx = tmp_path / "slow-g++"
    cxx.write_text('#!/bin/sh\ncase " $* " in *" --version "*)\n'
                   f'  echo "slow-g++ {uuid.uuid4().hex}"\n  exit 0;;\n'
                   '  *" -include host_prelude.h "*)\n'
                   f'  echo $$ >> {shlex.quote(str(pids))}\n  sleep 300 &\n'
                   f'  echo $! >> {shlex.quote(str(pids))}\n  wait\n  exit 1;;\nesac\n'
                   'exec g++ "$@"\n')
    cxx.chmod(0o755)
    # (hello's own 30 s deadline is not under test here: on a machine loaded by other test
    # processes the worker's start took longer and the client gave up before any compile)
    env = {**os.environ, "TAPESCOPE_CXX": str(cxx), "TAPESCOPE_WORKER_HELLO_TIMEOUT": "300"}
    worker = " ".join(map(shlex.quote, [*CLI, "worker"]))
    client = subprocess.Popen([*CLI, "parity", "--workload", "mlp", "--device", "host",
                               "--steps", "1", "--worker", worker], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        t0 = time.monotonic()
        while len(started) < 2 and time.monotonic() - t0 < 120 and client.poll() is None:
            time.sleep(0.2)
            started = [int(x) for x in pids.read_text().split()] if pids.exists() else []
        assert len(started) == 2, ("the worker's compile never started"
                                   + (f" (the client exited {client.returncode})"
                                      if client.poll() is not None else ""))
        assert all(_alive(p) for p in started)
        client.kill()  # SIGKILL: nothing of the client runs after this
        client.wait()
        t0 = time.monotonic()
        while any(_alive(p) for p in started) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert not any(_alive(p) for p in started), "the compiler outlived its client"
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        for p in started:  # (the processes this test started, should they have stayed)
            if _alive(p):
                os.kill(p, signal.SIGKILL)
