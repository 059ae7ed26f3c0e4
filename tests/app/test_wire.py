"""app.wire, the worker pipe: its limits at their edges (an array's bytes and rank, a line's
length, containers and depth), the codecs' round trips, what a malformed message is called, and
how a line waits for its deadline. Each check is held by one test here (the mutation run of
core/app modules, docs/testing.md, found none for these before issue 31)."""

from __future__ import annotations

import base64
import os
import threading
import time

import numpy as np
import pytest

import tapescope.app.wire as wire
from tapescope.app.wire import (
    MAX_DEPTH,
    LinePipe,
    LineTimeout,
    LineTooLong,
    decode_array,
    encode_array,
    json_shape,
    parse_line,
)


@pytest.mark.parametrize("a", [np.arange(6.0).reshape(2, 3), np.float32(2.5) * np.ones(()),
                               np.array([1, -2], np.int8), np.array([7], np.uint64),
                               np.array([True, False]), np.zeros((0, 3)),
                               np.arange(6.0).reshape(2, 3).T, np.array([1.0, 2.0], ">f8")])
def test_arrays_round_trip_with_dtype_shape_and_bytes(a):
    d = encode_array(a)
    back = decode_array(d)
    assert back.dtype == a.dtype and back.shape == a.shape and back.tobytes() == a.tobytes()
    assert back.flags.writeable and back.flags.owndata
    assert d["dtype"] == a.dtype.str and d["shape"] == list(a.shape)
    assert encode_array(None) is None and decode_array(None) is None


def test_only_numeric_arrays_are_sent_or_received():
    for bad in (np.array(["x"]), np.array([1j]), np.array([None], object)):
        with pytest.raises(ValueError, match="numeric dtypes only"):
            encode_array(bad)
    good = encode_array(np.zeros(2))
    for dt in ("<c16", "|O", "<U1", "<M8[s]"):
        with pytest.raises(ValueError, match="not a numeric dtype"):
            decode_array({**good, "dtype": dt}, "input #3")


@pytest.mark.parametrize("bad,says", [
    ({"shape": [2]}, "malformed"), ({"dtype": "<f8", "data": ""}, "malformed"),
    ({"dtype": "nope", "shape": [1], "data": ""}, "malformed"),
    ({"dtype": "<f8", "shape": 2, "data": "AAAA"}, "malformed"),
    ({"dtype": "<f8", "shape": [1], "data": "AA AAAAAAAA"}, "not base64"),
    ({"dtype": "<f8", "shape": [1], "data": 5}, "not base64"),
])
def test_a_malformed_array_message_names_what_it_was(bad, says):
    with pytest.raises(ValueError, match=f"node #4 value: .*{says}"):
        decode_array(bad, "node #4 value")


@pytest.mark.parametrize("shape", ["23", "6", {"2": 0, "3": 0}, [2.0, 3.0], [True, 3], ["2", "3"],
                                   None, [[2], 3]])
def test_a_shape_that_is_not_a_list_of_integers_is_refused_not_read_as_digits(shape):
    good = encode_array(np.arange(6.0).reshape(2, 3))
    with pytest.raises(ValueError, match="node #4 value: malformed array message .*shape .* is "
                                         "not a list of integers"):
        decode_array({**good, "shape": shape}, "node #4 value")
    assert decode_array(good).shape == (2, 3)  # the list the encoder sends is fine


def test_the_byte_limit_edge_exactly_at_and_one_past(monkeypatch):
    monkeypatch.setattr(wire, "MAX_WIRE_BYTES", 64)
    at = encode_array(np.arange(8.0))  # 64 bytes
    assert decode_array(at).size == 8
    over = encode_array(np.arange(65, dtype=np.uint8))
    with pytest.raises(ValueError, match="refused .at most 64 bytes"):
        decode_array(over)


def test_the_rank_limit_is_32_dimensions():
    assert decode_array(encode_array(np.zeros((1,) * 32))).ndim == 32
    with pytest.raises(ValueError, match="32 dimensions"):
        decode_array(encode_array(np.zeros((1,) * 33)))
    with pytest.raises(ValueError, match="refused"):
        decode_array({**encode_array(np.zeros(0)), "shape": [0, -1]})  # 0 bytes, still refused


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_base64_of_the_wrong_length_is_refused_before_decoding_and_says_what_it_holds(n):
    good = encode_array(np.arange(n, dtype=np.uint8))
    short = base64.b64encode(bytes(n - 1)).decode()
    long = base64.b64encode(bytes(n + 1)).decode()
    for data, held in ((short, n - 1), (long, n + 1)):
        if len(data) == len(good["data"]):  # the same base64 length: caught after decoding
            with pytest.raises(ValueError, match=f"{held} bytes do not fill"):
                decode_array({**good, "data": data})
            continue
        with pytest.raises(ValueError, match=f"{held} bytes do not fill"):
            decode_array({**good, "data": data})
    with pytest.raises(ValueError, match="malformed"):
        decode_array({**good, "data": "=" * len(good["data"])})


# ---- lines ------------------------------------------------------------------------------------
def test_json_shape_and_parse_line_at_their_edges():
    assert json_shape(b"{}", 5) == (1, 1)
    assert json_shape(b'{"a": 1}', 0) == (1, 0)
    assert json_shape(b"1", 5) == (0, 0)
    assert json_shape(b'{"a": "\\\\", "b": []}', 5) == (2, 2)
    six = b'{"a": [[], [], {}], "b": []}'
    assert json_shape(six, 6) == (6, 3)
    assert parse_line(six, "x", 6) == {"a": [[], [], {}], "b": []}  # exactly at the bound
    with pytest.raises(ValueError, match="x: a protocol line with 6 arrays and objects .* 5"):
        parse_line(six, "x", 5)
    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert json_shape(deepest, 100) == (MAX_DEPTH, MAX_DEPTH)
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_line(deepest, "x", 100)  # as deep as may be: parsed, then not an object
    with pytest.raises(ValueError, match="x: not a protocol line: 'nope"):
        parse_line(b"nope {", "x", 100)
    with pytest.raises(ValueError, match="x: not a protocol line"):
        parse_line(b'{"a": 1', "x", 100)


def _pipe():
    r, w = os.pipe()
    return r, w, LinePipe(r, w)


def test_lines_split_across_reads_and_several_in_one_read():
    r, w, pipe = _pipe()
    try:
        os.write(w, b'{"a": 1}\n{"b"')
        assert pipe.receive(100, time.monotonic() + 5) == b'{"a": 1}'
        os.write(w, b': 2}\n\n')
        assert pipe.receive(100, time.monotonic() + 5) == b'{"b": 2}'
        assert pipe.receive(100, time.monotonic() + 5) == b""  # an empty line is a line
        line = b"x" * 100
        os.write(w, line + b"\n")
        assert pipe.receive(100, time.monotonic() + 5) == line  # exactly at the bound
        os.write(w, line + b"y\n")
        with pytest.raises(LineTooLong, match="longer than 100 bytes"):
            pipe.receive(100, time.monotonic() + 5)
        os.close(w)
        w = -1
        assert pipe.receive(100, time.monotonic() + 5) is None
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_partial_line_at_eof_is_the_end_not_a_message():
    r, w, pipe = _pipe()
    os.write(w, b'{"a": 1}\n{"trunc')
    os.close(w)
    try:
        assert pipe.receive(100) == b'{"a": 1}'
        assert pipe.receive(100) is None and pipe.receive(100) is None
    finally:
        os.close(r)


def test_a_message_larger_than_the_pipe_is_sent_whole_and_read_back():
    r, w, pipe = _pipe()
    msg = {"data": "A" * (3 << 20), "n": [1.5, float("inf")]}
    got: list = []
    t = threading.Thread(target=lambda: got.append(LinePipe(r, -1).receive(4 << 20,
                                                                          time.monotonic() + 60)))
    t.start()
    try:
        pipe.send(msg, time.monotonic() + 60)
        t.join(60)
        assert parse_line(got[0], "x", 10) == msg
    finally:
        os.close(r)
        os.close(w)


def test_a_send_nobody_reads_misses_its_deadline():
    r, w, pipe = _pipe()
    os.set_blocking(w, False)  # as the client's end to the worker is
    try:
        t0 = time.monotonic()
        with pytest.raises(LineTimeout, match="sending"):
            pipe.send({"data": "A" * (1 << 20)}, time.monotonic() + 0.3)
        assert time.monotonic() - t0 >= 0.29
    finally:
        os.close(r)
        os.close(w)


def test_a_receive_past_its_deadline_times_out_and_without_one_waits():
    r, w, pipe = _pipe()
    try:
        with pytest.raises(LineTimeout, match="receiving"):
            pipe.receive(100, time.monotonic() - 1)  # already past: no wait at all
        threading.Timer(0.3, lambda: os.write(w, b"late\n")).start()
        assert pipe.receive(100) == b"late"  # no deadline: waits for the line
    finally:
        os.close(r)
        os.close(w)


# ---- malformed messages, JSON shapes and waits, each at its exact edge ---------------------------
def test_a_malformed_array_without_a_name_is_called_array_and_its_shape_is_quoted():
    good = encode_array(np.zeros(6))
    with pytest.raises(ValueError, match=r"^array: malformed array message \(shape '23' is not"):
        decode_array({**good, "shape": "23"})
    with pytest.raises(ValueError, match=r"^array: malformed array message \(data is not base64 "
                                         r"text\)$"):
        decode_array({**good, "data": "!"})


def test_json_shape_sees_an_escaped_quote_as_inside_its_string():
    # unescaped, the quote after the backslash would end the string and the bracket count
    assert json_shape(b'{"a": "x\\"[", "b": 1}', 10) == (1, 1)
    assert parse_line(b'{"a": "x\\"["}', "x", 1) == {"a": 'x"['}


def test_json_shape_measures_depth_after_a_closed_branch():
    assert json_shape(b"[[], [[[]]]]", 10) == (5, 4)
    assert json_shape(b'{"a": [{}, {}, {}], "b": [[[1]]]}', 10) == (8, 4)


def test_a_line_that_is_not_utf8_is_quoted_with_replacements_and_cut_at_80_bytes():
    with pytest.raises(ValueError, match="^x: not a protocol line: '\ufffd\ufffd nope'$"):
        parse_line(b"\xff\xfe nope", "x", 10)
    with pytest.raises(ValueError) as ei:
        parse_line(b"z" * 200, "x", 10)
    assert str(ei.value) == f"x: not a protocol line: {'z' * 80!r}"


def test_a_pipe_wait_times_out_naming_its_direction_exactly():
    r, w, pipe = _pipe()
    try:
        with pytest.raises(LineTimeout) as ei:
            pipe.receive(100, time.monotonic() + 0.05)
        assert str(ei.value) == "receiving"
        os.set_blocking(w, False)
        with pytest.raises(LineTimeout) as ei:
            pipe.send({"data": "A" * (1 << 20)}, time.monotonic() + 0.05)
        assert str(ei.value) == "sending"
    finally:
        os.close(r)
        os.close(w)


def test_a_receive_on_a_two_way_fd_waits_for_input_not_for_room_to_write():
    import socket

    a, b = socket.socketpair()
    try:
        a.setblocking(False)  # always writable: a wait that counted that would read at once
        pipe = LinePipe(a.fileno(), a.fileno())
        with pytest.raises(LineTimeout, match="receiving"):
            pipe.receive(100, time.monotonic() + 0.05)
        b.sendall(b'{"a": 1}\n')
        assert pipe.receive(100, time.monotonic() + 5) == b'{"a": 1}'
    finally:
        a.close()
        b.close()


def test_a_wait_sleeps_until_its_deadline_instead_of_waking_every_millisecond(monkeypatch):
    polls = []
    real = wire.select.poll

    class Counting:
        def __init__(self):
            self.p = real()

        def register(self, fd, mask):
            self.p.register(fd, mask)

        def poll(self, ms):
            polls.append(ms)
            return self.p.poll(ms)

    monkeypatch.setattr(wire.select, "poll", Counting)
    r, w, pipe = _pipe()
    try:
        with pytest.raises(LineTimeout):
            pipe.receive(100, time.monotonic() + 0.2)
    finally:
        os.close(r)
        os.close(w)
    assert 1 <= len(polls) <= 5, polls  # one wait (and a millisecond or two of remainder)
    assert 100 <= polls[0] <= 202


def test_a_write_the_pipe_turns_away_is_tried_again_not_dropped(monkeypatch):
    real, calls = os.write, []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real(fd, data)

    r, w, pipe = _pipe()
    try:
        monkeypatch.setattr(wire.os, "write", write)
        pipe.send({"a": [1, 2]}, time.monotonic() + 5)
        monkeypatch.undo()
        assert LinePipe(r, -1).receive(100, time.monotonic() + 5) == b'{"a": [1, 2]}'
        assert len(calls) == 2
    finally:
        os.close(r)
        os.close(w)


def test_a_line_exactly_at_the_bound_may_wait_for_its_newline():
    r, w, pipe = _pipe()
    try:
        os.write(w, b"x" * 100)
        with pytest.raises(LineTimeout):  # held: 100 bytes, not yet too long
            pipe.receive(100, time.monotonic() + 0.05)
        os.write(w, b"\n")
        assert pipe.receive(100, time.monotonic() + 5) == b"x" * 100
    finally:
        os.close(r)
        os.close(w)


def test_a_line_is_read_no_further_than_one_byte_past_its_bound():
    r, w, pipe = _pipe()
    try:
        os.write(w, b"y" * 50)
        with pytest.raises(LineTimeout):
            pipe.receive(100, time.monotonic() + 0.05)
        os.write(w, b"z" * 5000)
        with pytest.raises(LineTooLong):
            pipe.receive(100, time.monotonic() + 5)
        os.set_blocking(r, False)
        assert len(os.read(r, 1 << 16)) == 5000 - (102 - 50)  # held at most 102 bytes in all
    finally:
        os.close(r)
        os.close(w)
