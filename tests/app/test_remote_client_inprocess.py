"""app.remote_client in this process (issue 31): ``RemoteDevice`` and ``RemotePair`` against a
peer on a thread over two os.pipe pairs, standing where the worker command's process would
(``subprocess.Popen`` is replaced for the test). The peer is the real ``serve`` or one that
answers one request wrongly; each test checks the client's answer: the result, or a
RemoteError naming the request, the command and what was wrong. The subprocess tests
(tests/app/test_worker*.py) run the client in a CLI child, which a mutation run's test map
does not see."""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time

import numpy as np
import pytest

import tapescope.app.remote_client as remote_client
from tapescope.app.remote_client import RemoteDevice, RemotePair
from tapescope.app.remote_protocol import PROTOCOL, SMALL_REPLY, RemoteError
from tapescope.app.remote_server import _Worker, serve
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.app.wire import LinePipe
from tapescope.core.step_record import pack, unpack

CMD = "fake-worker --x 'a b'"
WHO = f"the worker {CMD!r}"


class Peer:
    """What ``subprocess.Popen`` gives the client: stdin, stdout, poll, kill, wait; the child
    is ``target(rfd, wfd)`` on a thread (its return value the exit status)."""

    def __init__(self, target) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.stdin = os.fdopen(req_w, "wb", buffering=0)
        self.stdout = os.fdopen(rep_r, "rb", buffering=0)
        self.returncode = None
        self.killed = False
        self.seen: list[dict] = []

        def run() -> None:
            try:
                rc = target(req_r, rep_w, self)
            finally:
                os.close(req_r)
                os.close(rep_w)
            self.returncode = -9 if self.killed else rc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def poll(self):
        return self.returncode

    def kill(self) -> None:
        self.killed = True

    def wait(self, timeout=None):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("peer", timeout)
        return self.returncode


def _popen(monkeypatch, popen) -> None:
    """The client's ``subprocess`` with ``popen`` for Popen (only the client's: the worker's
    compiler runs in real subprocesses)."""
    fake = type("subprocess", (), {"PIPE": subprocess.PIPE, "Popen": staticmethod(popen),
                                   "TimeoutExpired": subprocess.TimeoutExpired})
    monkeypatch.setattr(remote_client, "subprocess", fake)


def peer(monkeypatch, target) -> list:
    """Replace Popen with ``Peer(target)``; the list gets (argv, the Peer) of each start."""
    started = []

    def popen(argv, stdin=None, stdout=None):
        assert stdin is subprocess.PIPE and stdout is subprocess.PIPE
        p = Peer(target)
        started.append((argv, p))
        return p

    _popen(monkeypatch, popen)
    return started


def honest(rfd, wfd, p) -> int:
    return serve(rfd, wfd)


SILENT_S = 5.0  # how long a silent peer waits for the client to give up before it ends


def scripted(*answers, then_wait: bool = True):
    """A peer that reads a line per answer and writes the answer (a dict as JSON, bytes as
    they are, None: nothing and wait for EOF), then waits for EOF; requests go to ``seen``.
    A silent peer (None) ends after ``SILENT_S`` if the client has not closed its end by then:
    a client without its deadline then sees the worker end instead of waiting for ever."""

    def target(rfd, wfd, p) -> int:
        pipe = LinePipe(rfd, wfd)
        for a in answers:
            line = pipe.receive(1 << 24)
            if line is None:
                return 0
            p.seen.append(json.loads(line))
            if a is None:
                end = time.monotonic() + SILENT_S
                while (left := end - time.monotonic()) > 0 and select.select([rfd], [], [],
                                                                              left)[0]:
                    if not os.read(rfd, 1 << 16):
                        return 3  # the client closed its end: it gave up in time
                return 5
            try:
                os.write(wfd, a if isinstance(a, bytes) else json.dumps(a).encode() + b"\n")
            except BrokenPipeError:  # the client has ended this peer already: its test is done
                return 0
        while then_wait and os.read(rfd, 1 << 16):
            pass  # until the client closes its end
        return 3

    return target


HELLO = {"type": "hello", "protocol": PROTOCOL}
DEVICE = {"type": "device", "kind": "host", "describe": "device: host (fake)"}


# Every test's requests have shorter deadlines than the defaults (300 s and 1800 s), long
# enough for a first compile of the pair's kernels on a loaded machine under a mutation run's
# tracing (an open took over 30 s there); a silent peer ends after SILENT_S, so a client that
# waits where it should not fails in seconds, which a mutation run needs (docs/testing.md).
SHORT = {"timeout": 120.0, "open_timeout": 120.0}


def device(**kw) -> RemoteDevice:
    return RemoteDevice(CMD, "host", "mlp", 0, **{**SHORT, **kw})


# ---- RemoteDevice -----------------------------------------------------------------------------
def test_a_device_through_the_real_worker_says_hello_and_names_its_device(monkeypatch):
    started = peer(monkeypatch, honest)
    monkeypatch.delenv("TAPESCOPE_WORKER_TIMEOUT", raising=False)
    monkeypatch.delenv("TAPESCOPE_WORKER_OPEN_TIMEOUT", raising=False)
    d = RemoteDevice(CMD, "host", "mlp", 0)  # (the only test on the default deadlines)
    argv, p = started[0]
    assert argv == ["fake-worker", "--x", "a b"]  # split as a shell would, run without one
    assert d.kind == "host"
    assert d.describe() == f"device: host (requested) (through the worker {CMD!r})"
    assert (d.timeout, d.open_timeout) == (300.0, 1800.0)
    assert d.new_run() == 1 and d.new_run() == 2
    d.close()
    assert p.wait(5) == 0  # the worker got its quit (or EOF) and ended by itself
    d.close()  # twice is fine


def test_the_requests_are_hello_then_device_then_quit(monkeypatch):
    started = peer(monkeypatch, scripted(HELLO, DEVICE, {"type": "x"}))
    d = device()
    d.close()
    assert started[0][1].seen == [{"cmd": "hello", "protocol": PROTOCOL},
                                  {"cmd": "device", "name": "host"}, {"cmd": "quit"}]


def test_an_empty_command_is_refused_before_anything_runs(monkeypatch):
    started = peer(monkeypatch, honest)
    for cmd in ("", "  ", "''"[:0]):
        with pytest.raises(ValueError, match="^--worker: the command is empty$"):
            RemoteDevice(cmd, "host", "mlp", 0)
    assert started == []


def test_a_command_that_cannot_run_is_a_remote_error_naming_it(monkeypatch):
    def popen(argv, stdin=None, stdout=None):
        raise FileNotFoundError(2, "No such file or directory")

    _popen(monkeypatch, popen)
    with pytest.raises(RemoteError, match=f"^cannot run the worker command {CMD!r}: No such file "
                                          "or directory$"):
        device()


def test_a_worker_of_another_protocol_is_refused_naming_both(monkeypatch):
    started = peer(monkeypatch, scripted({"type": "hello", "protocol": PROTOCOL + 1}))
    with pytest.raises(RemoteError) as ei:
        device()
    assert str(ei.value) == (f"{WHO} speaks protocol {PROTOCOL + 1}, this tapescope speaks "
                             f"{PROTOCOL}: install the same tapescope on both sides")
    assert started[0][1].wait(5) == 3  # let go: its stdin closed


@pytest.mark.parametrize("answer,says", [
    ({"type": "error", "message": "no GPU here"}, "worker: no GPU here (answering 'device')"),
    ({"type": "error", "message": 5}, "worker: an error (answering 'device')"),
    ({"type": "stats"}, f"{WHO} sent a 'stats' reply to 'device' (expected 'device')"),
    ({"kind": "host"}, f"{WHO} sent a reply with no type to 'device' (expected 'device')"),
    ({"type": ["device"]}, f"{WHO} sent a reply with no type to 'device' (expected 'device')"),
    ({"type": "x" * 200}, f"{WHO} sent {repr('a ' + repr('x' * 200))[1:81]} to 'device'"),
    ({"type": "device", "describe": "d"},
     f"{WHO} sent a malformed 'device' reply to 'device': 'kind' is NoneType, not str"),
    ({"type": "device", "kind": "host", "describe": 1},
     f"{WHO} sent a malformed 'device' reply to 'device': 'describe' is int, not str"),
])
def test_a_wrong_device_reply_is_a_remote_error_saying_what_was_wrong(monkeypatch, answer, says):
    peer(monkeypatch, scripted(HELLO, answer))
    with pytest.raises(RemoteError) as ei:
        device()
    assert str(ei.value).startswith(says), str(ei.value)


def test_a_worker_that_does_not_answer_is_ended_at_the_deadline(monkeypatch):
    started = peer(monkeypatch, scripted(HELLO, None))
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as ei:
        device(open_timeout=0.2)
    assert time.monotonic() - t0 >= 0.2
    assert str(ei.value) == (f"{WHO} did not answer 'device' within 0.2 s (it was ended; "
                             "--worker-open-timeout S gives it longer)")
    assert started[0][1].killed  # ended, by its handle


def test_a_request_past_the_opening_gets_the_request_deadline(monkeypatch):
    started = peer(monkeypatch, scripted(HELLO, DEVICE, None))
    d = device(timeout=0.15, open_timeout=30)
    with pytest.raises(RemoteError) as ei:
        d.request({"cmd": "stats"}, "stats")
    assert str(ei.value) == (f"{WHO} did not answer 'stats' within 0.15 s (it was ended; "
                             "--worker-timeout S gives it longer)")
    assert started[0][1].killed


def test_a_reply_longer_than_its_bound_is_refused_and_the_worker_ended(monkeypatch):
    started = peer(monkeypatch, scripted(HELLO, DEVICE, b"A" * (3 * SMALL_REPLY)))
    d = device()
    with pytest.raises(RemoteError) as ei:
        d.request({"cmd": "stats"}, "stats", max_bytes=SMALL_REPLY)
    assert str(ei.value) == (f"{WHO} answering 'stats': a protocol line longer than "
                             f"{2 * SMALL_REPLY} bytes (more than that reply can need)")
    assert started[0][1].killed


def test_a_reply_just_within_its_bound_is_read(monkeypatch):
    pad = "p" * (2 * SMALL_REPLY - 40)
    peer(monkeypatch, scripted(HELLO, DEVICE, {"type": "stats", "pad": pad}))
    d = device()
    assert len(d.request({"cmd": "stats"}, "stats", max_bytes=SMALL_REPLY)["pad"]) == len(pad)
    d.close()


def test_a_reply_that_is_not_json_or_too_wide_is_refused_naming_the_request(monkeypatch):
    started = peer(monkeypatch, scripted(HELLO, b"{half\n"))
    with pytest.raises(RemoteError) as ei:
        device()
    assert str(ei.value) == f"{WHO} answering 'device': not a protocol line: '{{half'"
    assert started[0][1].killed
    wide = b'{"type": "device", "pad": [' + b"[]," * 5000 + b"[]]}\n"
    peer(monkeypatch, scripted(HELLO, wide))
    with pytest.raises(RemoteError, match=f"^{WHO} answering 'device': a protocol line with "
                                          "5003 arrays and objects .this message needs at most "
                                          "4096.$"):
        device()


def test_the_containers_bound_grows_with_the_nodes_opened(monkeypatch):
    wide = {"type": "stats", "pad": [[]] * 4200}
    peer(monkeypatch, scripted(HELLO, DEVICE, wide, wide))
    d = device()
    d.nodes_hint = 7  # 4096 + 16 * 7 = 4208 containers
    assert len(d.request({"cmd": "stats"}, "stats")["pad"]) == 4200
    d.nodes_hint = 6
    with pytest.raises(RemoteError, match="4202 arrays and objects .this message needs at most "
                                          "4192.$"):
        d.request({"cmd": "stats"}, "stats")


def test_a_worker_that_ends_before_answering_is_named_with_its_exit_status(monkeypatch):
    peer(monkeypatch, scripted(HELLO, then_wait=False))
    with pytest.raises(RemoteError) as ei:
        device()
    assert str(ei.value) == (f"the worker command {CMD!r} ended (exit status 3) before it "
                             "answered 'device'")


class FirstWaitTimesOut(Peer):
    """A peer whose first ``wait`` times out (its process lingers), later ones really wait;
    every timeout asked for goes into ``waits``."""

    def __init__(self, target, waits: list) -> None:
        super().__init__(target)
        self.waits = waits

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if len(self.waits) == 1:
            raise subprocess.TimeoutExpired("peer", timeout)
        return super().wait(timeout)


def test_a_worker_that_ends_but_lingers_is_named_without_a_status(monkeypatch):
    # its stdout closed but the process still running after the client's 5 s: no status
    waits = []

    def popen(argv, stdin=None, stdout=None):
        return FirstWaitTimesOut(scripted(HELLO, then_wait=False), waits)

    _popen(monkeypatch, popen)
    with pytest.raises(RemoteError) as ei:
        device()
    assert str(ei.value) == f"the worker command {CMD!r} ended before it answered 'device'"
    assert waits[0] == 5


def test_a_send_to_a_worker_that_is_gone_is_an_end_not_a_crash(monkeypatch):
    def target(rfd, wfd, p) -> int:
        os.close(os.dup(rfd))
        return 4  # reads nothing: its stdin closes as it ends

    peer(monkeypatch, target)
    with pytest.raises(RemoteError, match=rf"^the worker command {CMD!r} ended \(exit status "
                                          r"4\) before it answered 'hello'$"):
        device()


# ---- RemotePair -------------------------------------------------------------------------------
def config(**kw) -> SessionConfig:
    return SessionConfig(workload="mlp", device="host", worker=CMD,
                         **{"worker_timeout": SHORT["timeout"],
                            "worker_open_timeout": SHORT["open_timeout"], **kw})


def test_a_remote_pair_gives_what_the_same_pair_here_gives(monkeypatch):
    from tapescope import gpu

    started = peer(monkeypatch, honest)
    r = RemotePair(config())
    here = PairRunner(SessionConfig(workload="mlp", device="host"), gpu.open_device("host"))
    assert [(n.id, n.op, n.name, n.shape, n.inputs) for n in r.nodes] == [
        (n.id, n.op, n.name, tuple(n.shape), tuple(n.inputs)) for n in here.nodes]
    assert r.sizes == [int(np.prod(n.shape)) for n in here.nodes]
    assert r.device_kind == "host" and r.plan is None and r.inject is None and r.store is None
    assert r.describe_device() == f"device: host (requested) (through the worker {CMD!r})"
    assert r.remote.nodes_hint == len(here.nodes)
    for _ in range(2):
        a, b = r.step(), here.step()
        assert (a.step, a.loss_ref, a.loss_cand, a.exact) == (b.step, b.loss_ref, b.loss_cand,
                                                              b.exact)
        assert a.nodes == b.nodes  # the export form: each row with its node's op and name
    assert r.step_index == 2
    assert r.compare_params().to_json() == here.compare_params().to_json()
    node = max(range(len(r.nodes)), key=lambda i: r.sizes[i])
    got, want = r.arrays(node), here.arrays(node)
    assert got["step"] == want["step"] == 2
    for side in ("ref", "cand"):
        for w in ("value", "grad"):
            x, y = got[side][w], want[side][w]
            assert (x is None) == (y is None)
            if x is not None:
                assert x.shape == r.nodes[node].shape and x.tobytes() == y.tobytes()
    assert r.stats() == here.stats()
    seen = started[0][1]
    r.close()
    assert seen.wait(5) == 0


def test_the_open_request_carries_the_config_fault_and_scan(monkeypatch):
    from tapescope.app.run_provenance import Inject

    started = peer(monkeypatch, scripted(HELLO, DEVICE, {"type": "error", "message": "stop"}))
    with pytest.raises(RemoteError, match=r"^worker: stop \(answering 'open'\)$"):
        RemotePair(config(seed=3, explain=True), provenance="off", inject=Inject(4, "grad", 2),
                   scan_nonfinite=1)
    msg = started[0][1].seen[2]
    assert msg == {"cmd": "open", "provenance": "off", "inject": "4:grad@2",
                   "scan_nonfinite": True, "config": {
                       "workload": "mlp", "device": "host", "fuse": False, "dtype": "float64",
                       "math": "refmath", "compare": "cpu-device", "seed": 3, "explain": True,
                       "torch_threads": None, "tf32": None, "deterministic": False,
                       "torch_optimizer": "tape", "amp": None, "loss_scale": None,
                       "optimizer": None}}


@pytest.mark.parametrize("amp,scale", [("float16", 1024.0), ("bfloat16", None)])
def test_a_mixed_precision_pair_through_the_worker_is_the_one_here(monkeypatch, amp, scale):
    # the open request carries --amp and --loss-scale (without them the worker ran a plain
    # half episode and said nothing): the worker's losses and exactness are the pair's here
    from tapescope import gpu

    peer(monkeypatch, honest)
    r = RemotePair(config(amp=amp, loss_scale=scale))
    here = PairRunner(SessionConfig(workload="mlp", device="host", amp=amp, loss_scale=scale),
                      gpu.open_device("host"))
    for _ in range(2):
        a, b = r.step(), here.step()
        assert (a.loss_ref, a.loss_cand, a.exact) == (b.loss_ref, b.loss_cand, b.exact)
    assert r.stats() == here.stats()
    r.close()


def test_keep_states_needs_a_local_pair(monkeypatch):
    started = peer(monkeypatch, honest)
    with pytest.raises(ValueError, match="keep_states needs the pair in this process"):
        RemotePair(config(), keep_states=2)
    assert started == []


def test_a_fault_and_the_provenance_mode_reach_the_worker(monkeypatch):
    peer(monkeypatch, honest)
    r = RemotePair(config(), provenance="off", inject="3@1")
    assert (r.inject.node, r.inject.which, r.inject.step) == (3, "value", 1)
    assert r.step().provenance is False and r.step(True).provenance is True
    r.close()


class Doctor:
    """The real worker, with one reply (by command) changed by ``change(reply) -> reply``."""

    def __init__(self, cmd: str, change) -> None:
        self.cmd, self.change = cmd, change

    def __call__(self, rfd, wfd, p) -> int:
        pipe, worker = LinePipe(rfd, wfd), _Worker()
        while True:
            line = pipe.receive(1 << 28)
            if line is None:
                return 0
            msg = json.loads(line)
            if msg["cmd"] == "hello":
                reply = HELLO
            elif msg["cmd"] == "quit":
                return 0
            else:
                reply = worker.handle(msg)
                if msg["cmd"] == self.cmd:
                    reply = self.change(reply)
            pipe.send(reply)


def _set(key, value):
    def change(reply):
        reply[key] = value
        return reply

    return change


def _nodes(col, value):
    def change(reply):
        reply["nodes"][col] = value
        return reply

    return change


@pytest.mark.parametrize("change,says", [
    (_nodes("op", None), "the node table's ops and names are not strings"),
    (_set("nodes", None), "no node table"),
    (_set("plan", []), "its plan is not a fusion plan"),
    (_set("plan", {"segments": {}}), "its plan is not a fusion plan"),
    (_set("plan", {"segments": [1]}), "its plan is not a fusion plan"),
    (_set("inject", 5), "the fault '5'"),
    (_set("inject", [1, "value"]), "the fault"),
    (_set("inject", [1, "value", 1, 0]), "the fault"),
    (_set("inject", ["1", "value", 1]), "the fault"),
    (_set("inject", [-1, "value", 1]), "the fault \"[-1, "),
    (_set("inject", [23, "value", 1]), "the fault \"[23, "),
    (_set("inject", [1, "values", 1]), "the fault"),
    (_set("inject", [1, "grad", 1.0]), "the fault"),
    (_set("inject", list(range(100))), f"the fault {str(list(range(100)))[:40]!r}"),
])
def test_a_malformed_opened_reply_is_named(monkeypatch, change, says):
    peer(monkeypatch, Doctor("open", change))
    with pytest.raises(RemoteError) as ei:
        RemotePair(config())
    assert str(ei.value).startswith(f"{WHO} sent a malformed reply to 'open': {says}"), ei.value


def test_an_opened_reply_with_a_plan_and_a_fault_at_the_edges_is_read(monkeypatch):
    plan = {"segments": [{"nodes": [1, 2], "kind": "row"}], "x": 1}
    changes = [_set("plan", plan), _set("inject", [22, "grad", 0])]
    peer(monkeypatch, Doctor("open", lambda r: changes[1](changes[0](r))))
    r = RemotePair(config())
    assert r.plan.to_json() == plan and r.plan.segments[0].nodes == [1, 2]
    assert r.plan.segments[0].kind == "row"
    assert (r.inject.node, r.inject.which, r.inject.step) == (22, "grad", 0)
    r.close()
    peer(monkeypatch, Doctor("open", _set("inject", [0, "value", 5])))
    assert RemotePair(config()).inject.node == 0


def test_an_opened_reply_without_its_kind_is_named(monkeypatch):
    peer(monkeypatch, Doctor("open", _set("kind", 3)))
    with pytest.raises(RemoteError, match=f"^{WHO} sent a malformed 'opened' reply to 'open': "
                                          "'kind' is int, not str$"):
        RemotePair(config())


def _step(**fields):
    def change(reply):
        reply["step"].update(fields)
        return reply

    return change


def _rec(field, value, row=0):
    def change(reply):
        d = reply["step"]
        rec = unpack(d["record"], d["n"])
        rec[field][row] = value
        d["record"] = pack(rec)
        return reply

    return change


@pytest.mark.parametrize("change,says", [
    (_set("step", None), "the step's record is not a record of 23 nodes"),
    (_step(n=22), "the step's record is not a record of 23 nodes"),
    (_step(record="AAAA"), "the step's record"),
    (_rec("v_n", 10**6), ""),
    (_step(step=2), "step 2 after step 0"),
    (_step(exact=False), "its exact flag contradicts its record"),
    (_step(loss_ref="x"), "losses and times must be numbers"),
])
def test_a_malformed_step_reply_is_named(monkeypatch, change, says):
    peer(monkeypatch, Doctor("step", change))
    r = RemotePair(config())
    with pytest.raises(RemoteError) as ei:
        r.step()
    assert str(ei.value).startswith(f"{WHO} sent a malformed reply to 'step': {says}"), ei.value
    assert r.step_index == 0


@pytest.mark.parametrize("field,value,says", [
    ("v_diff", -3, "v_diff out of 0..n"),
    ("v_n", 3, "value n is not the node's element count"),
])
def test_a_step_record_with_a_bad_column_value_is_named(monkeypatch, field, value, says):
    # (tests/app/test_worker_hostile.py has these through a real worker process, `slow`)
    peer(monkeypatch, Doctor("step", _rec(field, value)))
    r = RemotePair(config())
    with pytest.raises(RemoteError) as ei:
        r.step()
    assert "malformed reply to 'step'" in str(ei.value) and says in str(ei.value), ei.value
    assert r.step_index == 0


def test_the_gradients_a_node_has_are_taken_from_the_first_step(monkeypatch):
    state = {"n": 0}

    def change(reply):
        state["n"] += 1
        if state["n"] == 2:  # a node without a gradient now claims one
            return _rec("g_n", 0, row=state["none"])(reply)
        rec = unpack(reply["step"]["record"], reply["step"]["n"])
        state["none"] = rec["g_n"].tolist().index(-1)
        return reply

    peer(monkeypatch, Doctor("step", change))
    r = RemotePair(config())
    assert r.step().step == 1
    assert r._has_grad[state["none"]] is False and any(r._has_grad)
    with pytest.raises(RemoteError, match="malformed reply to 'step'"):
        r.step()


def _params(change_rec=None, **fields):
    def change(reply):
        d = reply["params"]
        if change_rec is not None:
            rec = unpack(d["record"], d["n"])
            change_rec(rec)
            d["record"] = pack(rec)
        d.update(fields)
        return reply

    return change


def _rows(rec):
    rec["id"][0] += 1


def _grad(rec):
    rec["g_n"][0] = 0


def _count(rec):
    rec["v_n"][-1] += 1


@pytest.mark.parametrize("change,says", [
    (_set("params", []), "not a record of 8 parameters"),
    (_params(n=3), "not a record of 8 parameters"),
    (_params(record="AAAA"), "the parameters' record"),
    (_params(_rows), "its rows are not the parameters"),
    (_params(_grad), "its counts are not the parameters'"),
    (_params(_count), "its counts are not the parameters'"),
])
def test_a_malformed_params_reply_is_named(monkeypatch, change, says):
    peer(monkeypatch, Doctor("params", change))
    r = RemotePair(config())
    assert sum(n.op == "param" for n in r.nodes) == 8
    r.step()
    with pytest.raises(RemoteError) as ei:
        r.compare_params()
    assert str(ei.value).startswith(f"{WHO} sent a malformed reply to 'params': {says}"), ei.value


@pytest.mark.parametrize("node,err", [(True, TypeError), ("3", TypeError), (None, TypeError),
                                      (-1, IndexError), (23, IndexError)])
def test_arrays_of_a_node_that_is_not_compared_are_refused_here(monkeypatch, node, err):
    started = peer(monkeypatch, scripted(HELLO, DEVICE, None))
    monkeypatch.setattr(RemotePair, "__init__", lambda self: None)
    r = RemotePair()
    r.nodes = [None] * 23
    with pytest.raises(err) as ei:
        r.arrays(node)
    assert str(ei.value) == (f"node must be an integer id, not {node!r}" if err is TypeError
                             else f"node #{node} is not compared (ids 0..22)")
    assert started == []


def _arrays(fn):
    def change(reply):
        fn(reply)
        return reply

    return change


@pytest.mark.parametrize("change,says", [
    (_arrays(lambda r: r.pop("step")), "no step number"),
    (_arrays(lambda r: r.update(step="1")), "no step number"),
    (_arrays(lambda r: r.pop("cand")), "no 'cand' arrays"),
    (_arrays(lambda r: r.update(ref=[])), "no 'ref' arrays"),
    (_arrays(lambda r: r["cand"]["grad"].update(shape=[1, *r["cand"]["grad"]["shape"]])),
     "node #2 grad has shape (1, "),
    (_arrays(lambda r: r["ref"]["value"].update(shape=[], data="AAAAAAAAAAA=")),
     "node #2 value has shape (), not "),
])
def test_a_malformed_arrays_reply_is_named(monkeypatch, change, says):
    peer(monkeypatch, Doctor("arrays", change))
    r = RemotePair(config())
    r.step()
    with pytest.raises(RemoteError) as ei:
        r.arrays(2)
    assert str(ei.value).startswith(f"{WHO} sent a malformed reply to 'arrays': {says}"), ei.value


def test_an_array_that_does_not_decode_is_named_with_its_node_side_and_field(monkeypatch):
    peer(monkeypatch, Doctor("arrays", _arrays(lambda r: r["cand"]["value"].update(data="!"))))
    r = RemotePair(config())
    r.step()
    with pytest.raises(RemoteError, match="^node #2 cand value from the worker: malformed"):
        r.arrays(2)


def test_a_worker_that_has_no_arrays_yet_says_so(monkeypatch):
    peer(monkeypatch, honest)
    r = RemotePair(config())
    with pytest.raises(ValueError, match="^no step has run yet$"):
        r.arrays(2)
    peer(monkeypatch, Doctor("arrays", _set("error", "e" * 1000)))
    r = RemotePair(config())
    with pytest.raises(ValueError) as ei:
        r.arrays(2)
    assert str(ei.value) == "e" * 400


@pytest.mark.parametrize("stats,ok", [(None, True), ({"a": 1}, True), ([1], False), (3, False)])
def test_stats_are_an_object_or_none(monkeypatch, stats, ok):
    peer(monkeypatch, Doctor("stats", _set("stats", stats)))
    r = RemotePair(config())
    if ok:
        assert r.stats() == stats
    else:
        with pytest.raises(RemoteError, match=f"^{WHO} sent a malformed reply to 'stats': its "
                                              "stats are not an object$"):
            r.stats()


def deaf(rfd, wfd, p) -> int:
    """A peer that answers hello and device, then reads nothing more (until it is killed, or
    for SILENT_S: a client that blocks on its send sees it end instead)."""
    pipe = LinePipe(rfd, wfd)
    for a in (HELLO, DEVICE):
        p.seen.append(json.loads(pipe.receive(1 << 20)))
        os.write(wfd, json.dumps(a).encode() + b"\n")
    end = time.monotonic() + SILENT_S
    while not p.killed and time.monotonic() < end:
        time.sleep(0.01)
    return 5


def test_a_request_the_worker_does_not_read_misses_its_deadline_instead_of_blocking(
        monkeypatch):
    started = peer(monkeypatch, deaf)
    d = device(timeout=0.1)
    assert (d.workload, d.seed) == ("mlp", 0)
    with pytest.raises(RemoteError, match="did not answer 'stats' within 0.1 s"):
        d.request({"cmd": "stats", "pad": "x" * (4 << 20)}, "stats")  # more than a pipe holds
    assert started[0][1].killed


def test_a_worker_that_lingers_after_quit_is_killed(monkeypatch):
    waits = []
    made = []
    _popen(monkeypatch, lambda argv, stdin=None, stdout=None:
           made.append(FirstWaitTimesOut(honest, waits)) or made[-1])
    d = device()
    d.close()
    assert waits == [5, None] and made[0].killed


@pytest.mark.parametrize("extra", [0, 1])
@pytest.mark.parametrize("cmd", ["step", "params", "arrays", "stats"])
def test_each_reply_is_read_up_to_its_own_bound_and_refused_one_byte_past(monkeypatch, cmd,
                                                                          extra):
    from tapescope.app.remote_protocol import STEP_REPLY_PER_NODE, b64_len

    bound = []  # the reply's bound in bytes, once the node table is known

    def pad(reply):
        base = len(json.dumps({**reply, "pad": ""}))
        return {**reply, "pad": "x" * (bound[0] + extra - base)}

    peer(monkeypatch, Doctor(cmd, pad))
    r = RemotePair(config())
    n, node = len(r.nodes), max(range(len(r.nodes)), key=lambda i: r.sizes[i])
    bound.append(SMALL_REPLY + {"step": STEP_REPLY_PER_NODE * n,
                                "params": STEP_REPLY_PER_NODE * n,
                                "arrays": 4 * b64_len(8 * r.sizes[node]) + 4096,
                                "stats": SMALL_REPLY}[cmd])  # (the default)
    if cmd != "step":
        r.step()
    ask = {"step": r.step, "params": r.compare_params, "arrays": lambda: r.arrays(node),
           "stats": r.stats}[cmd]
    if extra == 0:
        ask()
    else:
        with pytest.raises(RemoteError, match=f"answering {cmd!r}: a protocol line longer than "
                                              f"{bound[0]} bytes"):
            ask()


def test_a_gradient_of_no_elements_is_still_a_gradient(monkeypatch):
    from tapescope.core.parity import NodeParity, compare_arrays
    from tapescope.core.step_record import record_of

    monkeypatch.setattr(RemotePair, "__init__", lambda self: None)
    r = RemotePair()
    r.command, r._has_grad = CMD, None
    empty, three = compare_arrays(np.zeros((0, 4)), np.zeros((0, 4))), compare_arrays(
        np.zeros(3), np.zeros(3))
    r.nodes, r.sizes = [None, None], [0, 3]
    rec = record_of([NodeParity(0, "param", None, empty, empty),
                     NodeParity(1, "add", None, three, None)])
    got = r._record({"n": 2, "record": pack(rec)}, "step", "the step's record")
    assert got.tobytes() == rec.tobytes() and r._has_grad == [True, False]


def test_a_plan_without_segments_has_none(monkeypatch):
    peer(monkeypatch, Doctor("open", _set("plan", {"plan_id": "p"})))
    r = RemotePair(config())
    assert r.plan.segments == [] and r.plan.to_json() == {"plan_id": "p"}
    r.close()


def test_a_remote_pair_opens_its_worker_with_the_configs_settings(monkeypatch):
    started = peer(monkeypatch, scripted(HELLO, DEVICE, {"type": "error", "message": "stop"}))
    cfg = config(seed=5, worker_timeout=7, worker_open_timeout=9)
    made = []
    real = remote_client.RemoteDevice

    def remote(*args):
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(remote_client, "RemoteDevice", remote)
    with pytest.raises(RemoteError, match="answering 'open'"):
        RemotePair(cfg)
    d = made[0]
    assert (d.command, d.workload, d.seed, d.timeout, d.open_timeout) == (CMD, "mlp", 5, 7.0, 9.0)
    msg = started[0][1].seen[2]  # the defaults: provenance every step, no fault, no scan
    assert (msg["provenance"], msg["inject"], msg["scan_nonfinite"]) == ("every", None, False)
    peer(monkeypatch, honest)
    r = RemotePair(cfg)
    assert r.config is cfg and r.command == CMD
    r.close()
    with pytest.raises(ValueError, match="^keep_states needs the pair in this process: drop "
                                         "--worker$"):
        RemotePair(cfg, keep_states=1)


def test_the_quit_is_sent_to_its_own_1_s_deadline(monkeypatch):
    # close never blocks on a worker that stopped reading: the quit has 1 s, then EOF and kill
    peer(monkeypatch, honest)
    d = device()
    sent, real = [], d.pipe.send

    def send(msg, deadline=None):
        sent.append((msg, deadline, time.monotonic()))
        return real(msg, deadline)

    d.pipe.send = send
    d.close()
    (msg, deadline, now), = sent
    assert msg == {"cmd": "quit"}
    assert isinstance(deadline, float) and 0.5 < deadline - now <= 1.0


def test_an_opened_reply_longer_than_a_small_reply_is_read(monkeypatch):
    # the node table and a fused plan's generated sources: the open reply has its own bound
    pad = "p" * (2 * SMALL_REPLY)  # past the default bound, 2 small replies
    peer(monkeypatch, Doctor("open", _set("pad", pad)))
    r = RemotePair(config())
    assert len(r.nodes) == 23
    r.close()
