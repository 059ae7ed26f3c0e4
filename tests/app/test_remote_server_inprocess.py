"""app.remote_server in this process (issue 31): ``serve`` on a thread over two os.pipe pairs,
driven line by line as the client would, each reply read back and checked. ``tapescope worker``
runs it in a subprocess elsewhere (tests/app/test_worker*.py), which a mutation run's test map
does not see."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

import tapescope.app.remote_server as remote_server
from tapescope.app.remote_protocol import (
    CONTAINERS_BASE,
    CONTAINERS_PER_NODE,
    PROTOCOL,
    read_node_table,
)
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.app.wire import LinePipe, decode_array
from tapescope.core.step_record import unpack

HELLO = {"cmd": "hello", "protocol": PROTOCOL}
LOOSE_S = 60.0  # a reply's deadline: far above what a loaded machine takes, never reached


class Worker:
    """``serve`` on a thread; ``ask`` sends a request (a dict, or raw bytes) and reads its reply."""

    def __init__(self) -> None:
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        self.pipe = LinePipe(self._rep_r, self._req_w)
        self.rc: list[int] = []

        def run() -> None:
            try:
                self.rc.append(remote_server.serve(req_r, rep_w))
            finally:
                os.close(req_r)
                os.close(rep_w)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def say(self, msg: dict | bytes) -> None:
        if isinstance(msg, bytes):
            os.write(self._req_w, msg)
        else:
            self.pipe.send(msg, time.monotonic() + LOOSE_S)

    def reply(self) -> dict | None:
        line = self.pipe.receive(1 << 28, time.monotonic() + LOOSE_S)
        return None if line is None else json.loads(line)

    def ask(self, msg: dict | bytes) -> dict | None:
        self.say(msg)
        return self.reply()

    def end(self) -> int:
        """Close our end (EOF) and the worker's return code."""
        if self._req_w >= 0:
            os.close(self._req_w)
            self._req_w = -1
        self.thread.join(LOOSE_S)
        assert not self.thread.is_alive()
        os.close(self._rep_r)
        return self.rc[0]

    def ended(self) -> int:
        """The worker's return code once it ended by itself (nothing more to read)."""
        self.thread.join(LOOSE_S)
        assert not self.thread.is_alive() and self.reply() is None
        return self.end()


@pytest.fixture
def worker():
    w = Worker()
    yield w
    if w._req_w >= 0:
        w.end()


def opened(w: Worker, **open_fields) -> dict:
    assert w.ask(HELLO)["type"] == "hello"
    assert w.ask({"cmd": "device", "name": "host"}) == {
        "type": "device", "kind": "host", "describe": "device: host (requested)"}
    return w.ask({"cmd": "open", "config": {"workload": "mlp"}, "provenance": "every",
                  **open_fields})


def test_hello_then_a_whole_session_then_quit(worker):
    hello = worker.ask(HELLO)
    assert hello["type"] == "hello" and hello["protocol"] == PROTOCOL
    assert isinstance(hello["tapescope"], str) and hello["tapescope"]
    assert worker.ask({"cmd": "device", "name": "host"})["kind"] == "host"
    got = worker.ask({"cmd": "open", "config": {"workload": "mlp"}, "provenance": "every"})
    assert got["type"] == "opened" and got["kind"] == "host"
    assert got["plan"] is None and got["inject"] is None
    # the same pair here: the node table the worker sent is its tape's
    local = PairRunner(SessionConfig(workload="mlp"), __import__("tapescope.gpu",
                                                                 fromlist=["gpu"]).open_device("host"))
    nodes = read_node_table(got["nodes"])
    assert [(n.id, n.op, n.name, n.shape, n.inputs) for n in nodes] == [
        (n.id, n.op, n.name, tuple(n.shape), tuple(n.inputs)) for n in local.nodes]
    step = worker.ask({"cmd": "step"})
    assert step["type"] == "stepped" and step["step"]["step"] == 1
    here = local.step()
    assert step["step"]["loss_ref"] == here.loss_ref and step["step"]["loss_cand"] == here.loss_cand
    assert step["step"]["exact"] is here.exact is True and step["step"]["provenance"] is True
    params = worker.ask({"cmd": "params"})
    rec = unpack(params["params"]["record"], params["params"]["n"])
    assert params["type"] == "params" and rec["id"].tolist() == [
        n.id for n in nodes if n.op == "param"]
    want = local.arrays(3)
    arrays = worker.ask({"cmd": "arrays", "node": 3})
    assert arrays["type"] == "arrays" and arrays["error"] is None and arrays["step"] == 1
    for side in ("ref", "cand"):
        for w in ("value", "grad"):
            a, b = decode_array(arrays[side][w]), want[side][w]
            assert (a is None) == (b is None)
            if a is not None:
                assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    stats = worker.ask({"cmd": "stats"})
    assert stats["type"] == "stats" and stats["stats"]["launches_total"] > 0
    assert worker.ask({"cmd": "quit"}) is None
    assert worker.ended() == 0


def test_a_step_asks_for_provenance_only_when_told(worker):
    assert opened(worker, provenance="off")["type"] == "opened"
    assert worker.ask({"cmd": "step", "provenance": None})["step"]["provenance"] is False
    assert worker.ask({"cmd": "step", "provenance": 1})["step"]["provenance"] is True
    assert worker.ask({"cmd": "step", "provenance": 0})["step"]["provenance"] is False
    assert worker.ask({"cmd": "step"})["step"]["step"] == 4


@pytest.mark.parametrize("fields,want", [
    ({"inject": "3:grad@2", "scan_nonfinite": 1}, ([3, "grad", 2], True, "every")),
    ({"inject": "4@1", "provenance": "off"}, ([4, "value", 1], False, "off")),
    ({"scan_nonfinite": 0}, (None, False, "every")),
])
def test_open_builds_the_pair_with_the_fault_scan_and_provenance_asked(fields, want):
    w = remote_server._Worker()
    w.handle({"cmd": "device", "name": "host"})
    got = w.handle({"cmd": "open", "config": {"workload": "mlp"}, "provenance": "every",
                    **fields})
    assert got["type"] == "opened" and got["inject"] == want[0]
    assert w.pair.scan_nonfinite is want[1] and w.pair.provenance_mode == want[2]
    assert w.pair.inject == (None if want[0] is None else type(w.pair.inject)(*want[0]))


@pytest.mark.parametrize("first,says", [
    ({"cmd": "device", "name": "host"}, "the first line must be a hello"),
    ({"protocol": PROTOCOL}, "the first line must be a hello"),
    ({"cmd": "hello", "protocol": PROTOCOL - 1},
     f"protocol mismatch: this tapescope worker speaks protocol {PROTOCOL}, the client "
     f"{PROTOCOL - 1}: install the same tapescope on both sides"),
    ({"cmd": "hello"}, f"protocol mismatch: this tapescope worker speaks protocol {PROTOCOL}, "
                       "the client None: install the same tapescope on both sides"),
])
def test_a_first_line_that_is_not_our_hello_is_one_error_and_exit_2(worker, first, says):
    got = worker.ask(first)
    assert got == {"type": "error", "message": says, "details": ""}
    assert worker.ended() == 2


def test_eof_before_the_hello_ends_quietly(worker):
    assert worker.end() == 0


@pytest.mark.parametrize("after_hello", [False, True])
def test_a_too_long_line_is_one_error_and_exit_2(monkeypatch, after_hello):
    monkeypatch.setattr(remote_server, "MAX_REQUEST", 100)  # (read as the worker starts)
    worker = Worker()
    if after_hello:
        assert worker.ask(HELLO)["type"] == "hello"
    got = worker.ask(b'{"cmd": "' + b"x" * 101 + b'"}\n')
    assert got == {"type": "error", "details": "",
                   "message": "tapescope worker: a protocol line longer than 100 bytes"}
    assert worker.ended() == 2


@pytest.mark.parametrize("after_hello", [False, True])
def test_a_line_that_is_not_json_is_one_error_naming_the_worker(worker, after_hello):
    if after_hello:
        assert worker.ask(HELLO)["type"] == "hello"
    got = worker.ask(b"{nope\n")
    assert got["type"] == "error" and got["message"] == (
        "tapescope worker: not a protocol line: '{nope'")
    assert worker.ended() == 2


def _wide(containers: int) -> bytes:
    """A request of exactly ``containers`` arrays and objects."""
    return json.dumps({"cmd": "stats", "pad": [[]] * (containers - 2)}).encode() + b"\n"


def test_a_requests_containers_are_bounded_before_open_and_per_node_after(worker):
    assert json.loads(_wide(7)) and _wide(7).count(b"[") + _wide(7).count(b"{") == 7
    assert worker.ask(HELLO)["type"] == "hello"
    got = worker.ask(_wide(CONTAINERS_BASE))  # at the bound: read, and answered
    assert got["type"] == "error" and "no pair is open to answer 'stats'" in got["message"]
    assert worker.ask({"cmd": "device", "name": "host"})["type"] == "device"
    n = len(read_node_table(worker.ask({"cmd": "open", "config": {"workload": "mlp"},
                                        "provenance": "every"})["nodes"]))
    bound = CONTAINERS_BASE + CONTAINERS_PER_NODE * n
    assert worker.ask(_wide(bound))["type"] == "stats"
    got = worker.ask(_wide(bound + 1))
    assert got["type"] == "error" and got["message"] == (
        f"tapescope worker: a protocol line with {bound + 1} arrays and objects (this message "
        f"needs at most {bound})")
    assert worker.ended() == 2


def test_before_open_the_bound_is_the_base(worker):
    assert worker.ask(HELLO)["type"] == "hello"
    got = worker.ask(_wide(CONTAINERS_BASE + 1))
    assert got["type"] == "error" and f"at most {CONTAINERS_BASE})" in got["message"]
    assert worker.ended() == 2


BAD = "tapescope worker: bad request: "


@pytest.mark.parametrize("requests,says", [
    ([{"cmd": "step"}], BAD + "no pair is open to answer 'step' (send 'open' first)"),
    ([{"cmd": "open", "config": {}, "provenance": "every"}],
     BAD + "no device is open (send 'device' first)"),
    ([{"cmd": "device", "name": "host"}, {"cmd": "open", "provenance": "every"}],
     BAD + "'open' needs 'config' as a JSON object, not nothing"),
    ([{"cmd": "device", "name": "host"}, {"cmd": "open", "config": [], "provenance": "every"}],
     BAD + "'open' needs 'config' as a JSON object, not list '[]'"),
    ([{"cmd": "device", "name": "host"},
      {"cmd": "open", "config": {"workload": "mlp"}, "provenance": "every"},
      {"cmd": "open", "config": {"workload": "mlp"}, "provenance": "every"}],
     BAD + "a pair is open already"),
    ([{"cmd": "device", "name": "host"},
      {"cmd": "open", "config": {"workload": "mlp"}, "provenance": "every"},
      {"cmd": "dance"}], BAD + "unknown command 'dance'"),
    ([{"cmd": "device", "name": "host"},
      {"cmd": "open", "config": {"workload": "mlp", "bogus": 1}, "provenance": "every"}],
     "TypeError: "),
])
def test_a_request_that_cannot_be_answered_is_an_error_reply_and_the_worker_goes_on(
        worker, requests, says):
    assert worker.ask(HELLO)["type"] == "hello"
    for msg in requests[:-1]:
        assert worker.ask(msg)["type"] != "error"
    got = worker.ask(requests[-1])
    assert set(got) == {"type", "message", "details"}, got  # the one error reply shape
    assert got["type"] == "error" and got["message"].startswith(says), got
    if says.startswith(BAD):  # the protocol's own refusal: no traceback of the worker's code
        assert got["details"] == ""
    else:  # the request's work failed: its traceback rides along for --debug
        assert "Traceback" in got["details"] and len(got["details"]) <= 20000
    assert worker.ask({"cmd": "device", "name": "host"})["type"] == "device"  # still serving
    assert worker.ask({"cmd": "quit"}) is None and worker.ended() == 0


def test_a_request_for_a_node_that_is_not_there_is_an_arrays_error(worker):
    opened(worker)
    got = worker.ask({"cmd": "arrays", "node": 0})
    assert got == {"type": "arrays", "error": got["error"]} and "step" in got["error"]
    worker.ask({"cmd": "step"})
    for node in (10**6, "x", None):
        got = worker.ask({"cmd": "arrays", "node": node})
        assert got["type"] == "arrays" and isinstance(got["error"], str) and got["error"]
        assert set(got) == {"type", "error"}


def test_a_long_traceback_is_cut_to_its_last_20000_characters(worker, monkeypatch):
    def handle(self, msg):
        raise RuntimeError("x" * 30000 + "END")

    monkeypatch.setattr(remote_server._Worker, "handle", handle)
    worker.ask(HELLO)
    got = worker.ask({"cmd": "step"})
    # the message is one line of at most MESSAGE_CHARS; the whole of it is in the details
    assert got["message"] == "RuntimeError: " + "x" * (remote_server.MESSAGE_CHARS - 15) + "…"
    assert len(got["details"]) == 20000 and got["details"].endswith("END\n")


def test_a_worker_out_of_memory_says_so_naming_the_request(worker, monkeypatch):
    def handle(self, msg):
        raise MemoryError

    monkeypatch.setattr(remote_server._Worker, "handle", handle)
    worker.ask(HELLO)
    got = worker.ask({"cmd": "s" * 100})
    assert got == {"type": "error", "details": "",
                   "message": f"the worker ran out of memory answering {'s' * 40!r}"}
    assert worker.ask({"cmd": "quit"}) is None and worker.ended() == 0


@pytest.mark.slow  # importing torch: ~5-13 s here (the mutation run selects it)
@pytest.mark.parametrize("name", ["torch", "torch:cpu"])
def test_device_torch_runs_the_candidate_in_pytorch(worker, name):
    pytest.importorskip("torch")
    import torch

    worker.ask(HELLO)
    got = worker.ask({"cmd": "device", "name": name})
    assert got == {"type": "device", "kind": "torch",
                   "describe": f"device: torch {torch.__version__} on cpu"}
    # the device is opened once: a later request names what is open
    assert worker.ask({"cmd": "device", "name": "host"})["kind"] == "torch"


@pytest.mark.slow  # importing torch: ~5-13 s here (the mutation run selects it)
def test_device_torch_cuda_names_cuda_where_torch_has_it(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # (nothing runs on it here)
    side = remote_server._TorchSide("torch:cuda")
    assert side.kind == "torch:cuda"
    assert side.describe() == f"device: torch {torch.__version__} on cuda"


def test_hello_names_the_installed_tapescope_or_unknown(worker, monkeypatch):
    import importlib.metadata as md

    try:
        want = md.version("tapescope")
    except md.PackageNotFoundError:
        want = "unknown"
    assert worker.ask(HELLO)["tapescope"] == want

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", missing)
    assert remote_server._version() == "unknown"


@pytest.mark.slow  # importing torch: ~5-13 s here (the mutation run selects it)
def test_device_torch_cuda_without_a_gpu_is_an_error_naming_it(worker):
    torch = pytest.importorskip("torch")
    worker.ask(HELLO)
    got = worker.ask({"cmd": "device", "name": "torch:cuda"})
    if torch.cuda.is_available():
        assert got == {"type": "device", "kind": "torch:cuda",
                       "describe": f"device: torch {torch.__version__} on cuda"}
    else:
        assert got["message"] == ("ValueError: --device torch:cuda: torch.cuda has no device "
                                  "on the worker")


def test_open_sends_the_fusion_plan_of_a_fused_pair():
    w = remote_server._Worker()
    w.handle({"cmd": "device", "name": "host"})
    got = w.handle({"cmd": "open", "config": {"workload": "mlp", "fuse": True},
                    "provenance": "every"})
    assert got["plan"] == w.pair.plan.to_json() and got["plan"]["segments"]
    assert json.loads(json.dumps(got)) == got  # plain JSON


def test_open_gives_the_pair_the_gpu_device_but_no_device_for_torch(monkeypatch):
    made = []

    class Recorder:
        def __init__(self, config, dev, **kw):
            made.append((config, dev, kw))
            raise RuntimeError("recorded")

    monkeypatch.setattr(remote_server, "PairRunner", Recorder)
    for device in (object.__new__(remote_server._TorchSide), "a gpu device"):
        w = remote_server._Worker()
        w.device = device
        with pytest.raises(RuntimeError, match="recorded"):
            w.handle({"cmd": "open", "config": {"workload": "mlp", "seed": 4},
                      "provenance": "off"})
    assert [m[1] for m in made] == [None, "a gpu device"]
    assert made[0][0] == SessionConfig(workload="mlp", seed=4)
    assert made[0][2] == {"provenance": "off", "inject": None, "scan_nonfinite": False}
