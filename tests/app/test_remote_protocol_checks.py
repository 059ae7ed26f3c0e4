"""app.remote_protocol in this process (issue 31): the deadlines' parsing, a reply field's type
check and the node table's codec, each check with an input that breaks only it. The worker runs
in a subprocess elsewhere (tests/app/test_worker*.py), which a mutation run's test map does not
see; these are the checks it can hold."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from tapescope.app.remote_protocol import (
    OPEN_TIMEOUT_ENV,
    OPEN_TIMEOUT_S,
    TIMEOUT_ENV,
    TIMEOUT_S,
    NodeInfo,
    RemoteError,
    b64_len,
    node_size,
    node_table,
    read_node_table,
    reply_field,
    seconds,
    worker_timeouts,
)
from tapescope.app.wire import encode_array


@pytest.mark.parametrize("value,want", [("2.5", 2.5), (3, 3.0), ("1e-3", 0.001), (0.05, 0.05)])
def test_seconds_reads_positive_finite_numbers(value, want):
    assert seconds(value, "--x") == want


@pytest.mark.parametrize("value,says", [
    ("soon", "--x must be a number of seconds, not 'soon'"),
    (None, "--x must be a number of seconds, not None"),
    ([1], "--x must be a number of seconds, not \\[1\\]"),
    (0, "--x must be a positive number of seconds, not 0"),
    ("-1", "--x must be a positive number of seconds, not '-1'"),
    ("inf", "--x must be a positive number of seconds, not 'inf'"),
    ("nan", "--x must be a positive number"),
])
def test_seconds_refuses_what_is_not_a_positive_finite_number_naming_the_setting(value, says):
    with pytest.raises(ValueError, match=f"^{says}"):
        seconds(value, "--x")


def test_worker_timeouts_take_the_flags_then_the_environment_then_the_defaults(monkeypatch):
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(OPEN_TIMEOUT_ENV, raising=False)
    assert worker_timeouts() == (TIMEOUT_S, OPEN_TIMEOUT_S) == (300.0, 1800.0)
    monkeypatch.setenv(TIMEOUT_ENV, "7")
    assert worker_timeouts() == (7.0, 1800.0)
    monkeypatch.setenv(OPEN_TIMEOUT_ENV, "9")
    assert worker_timeouts() == (7.0, 9.0)
    assert worker_timeouts(2, None) == (2.0, 9.0)
    assert worker_timeouts(None, 3) == (7.0, 3.0)
    monkeypatch.setenv(TIMEOUT_ENV, "")  # empty: not set
    assert worker_timeouts() == (300.0, 9.0)
    with pytest.raises(ValueError, match="^--worker-timeout must be a positive"):
        worker_timeouts(-1, None)
    with pytest.raises(ValueError, match="^--worker-open-timeout must be a positive"):
        worker_timeouts(None, 0)
    monkeypatch.setenv(OPEN_TIMEOUT_ENV, "never")
    with pytest.raises(ValueError, match=f"^{OPEN_TIMEOUT_ENV} must be a number"):
        worker_timeouts()
    assert (TIMEOUT_ENV, OPEN_TIMEOUT_ENV) == ("TAPESCOPE_WORKER_TIMEOUT",
                                               "TAPESCOPE_WORKER_OPEN_TIMEOUT")


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6, 100])
def test_b64_len_is_the_length_of_the_base64_text(n):
    assert b64_len(n) == len(base64.b64encode(bytes(n)))


def test_reply_field_gives_a_field_of_its_kind_and_names_a_malformed_one():
    reply = {"type": "device", "kind": "host", "n": 3, "ok": True, "flag": 1}
    assert reply_field(reply, "kind", str, "w --x", "device") == "host"
    assert reply_field(reply, "n", int, "w --x", "device") == 3
    assert reply_field(reply, "ok", bool, "w --x", "device") is True
    for key, kind, says in (("kind", int, "'kind' is str, not int"),
                            ("ok", int, "'ok' is bool, not int"),  # True is no count
                            ("flag", bool, "'flag' is int, not bool"),
                            ("gone", str, "'gone' is NoneType, not str")):
        with pytest.raises(RemoteError) as ei:
            reply_field(reply, key, kind, "w --x", "device")
        assert str(ei.value) == (f"the worker 'w --x' sent a malformed 'device' reply to "
                                 f"'device': {says}")


NODES = (NodeInfo(0, "input", "x", (2, 3), ()), NodeInfo(1, "param", None, (3,), ()),
         NodeInfo(2, "add", "y", (2, 3), (0, 1)), NodeInfo(3, "sum", None, (), (2,)),
         NodeInfo(4, "mul", "z", (0, 4), (3, 3)))


def test_the_node_table_round_trips_every_field():
    t = node_table(NODES)
    assert read_node_table(t) == NODES
    assert read_node_table(node_table(())) == ()
    assert [node_size(n) for n in NODES] == [6, 3, 6, 1, 0]
    assert type(node_size(NODES[0])) is int


def _with(**cols) -> dict:
    t = node_table(NODES)
    for k, v in cols.items():
        t[k] = encode_array(np.array(v, dtype=np.int64)) if isinstance(v, list) and k in (
            "ndim", "dims", "nin", "inputs") else v
    return t


@pytest.mark.parametrize("table,says", [
    (None, "no node table"), ([], "no node table"),
    (_with(op=None), "ops and names are not strings"),
    (_with(name="xyz"), "ops and names are not strings"),
    (_with(op=["input"] * 4), "ops and names are not strings, one per node"),
    (_with(op=["input", 1, "add", "sum", "mul"]), "ops and names are not strings"),
    (_with(name=["x", None, 2, None, "z"]), "ops and names are not strings"),
    (_with(ndim=None), "columns are not integer lists"),
    (_with(dims=encode_array(np.zeros(7))), "columns are not integer lists"),
    (_with(nin=encode_array(np.zeros((1, 5), np.int64))), "columns are not integer lists"),
    (_with(inputs=encode_array(np.zeros(5, np.uint64))), "columns are not integer lists"),
    (_with(ndim=[2, 1, 2, 0]), "shapes and inputs do not fit its nodes"),
    (_with(nin=[0, 0, 2, 1, 2, 0]), "shapes and inputs do not fit"),
    (_with(ndim=[3, 1, 2, -1, 2]), "shapes and inputs do not fit"),
    (_with(nin=[1, 0, 1, 1, 2], inputs=[0, 0, 2, 3, 3]), "node #0's inputs (0,) are not "
                                                         "earlier nodes"),
    (_with(nin=[0, -1, 3, 1, 2]), "shapes and inputs do not fit"),
    (_with(dims=[2, 3, 3, 2, -3, 0, 4]), "shapes and inputs do not fit"),
    (_with(inputs=[0, 1, 2, 3, 4]), "node #4's inputs (3, 4) are not earlier nodes"),
    (_with(inputs=[0, -1, 2, 3, 3]), "node #2's inputs (0, -1) are not earlier nodes"),
    (_with(dims={"dtype": "<i8", "shape": [1], "data": "!"}), "node table dims: malformed"),
])
def test_a_node_table_that_does_not_fit_together_is_refused_saying_why(table, says):
    with pytest.raises(ValueError, match=f"^(the node table.s )?{re.escape(says)}"):
        read_node_table(table)


def test_a_refused_node_table_count_is_exact_at_each_edge():
    # one dim too few or one too many for the shapes' ranks (the sum, not the count, is checked)
    for dims in ([2, 3, 3, 2, 3, 0], [2, 3, 3, 2, 3, 0, 4, 1]):
        with pytest.raises(ValueError, match="do not fit"):
            read_node_table(_with(dims=dims))
    for inputs in ([0, 1, 2, 3], [0, 1, 2, 3, 3, 0]):
        with pytest.raises(ValueError, match="do not fit"):
            read_node_table(_with(inputs=inputs))
    # a node's inputs are only the earlier ones: its own id is refused, the one before is fine
    ok = read_node_table(_with(inputs=[0, 1, 2, 3, 2]))
    assert ok[4].inputs == (3, 2) and ok[3].inputs == (2,) and ok[2].inputs == (0, 1)
