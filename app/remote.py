"""The whole pair through a worker command: ``--worker "ssh gpu-box tapescope worker"``.

GPUs live in servers, the app on a laptop. ``RemoteDevice`` runs the worker command (split with
``shlex``, never a shell) and speaks the worker protocol with it over the command's stdin and
stdout, every request to a deadline and every reply read in bounded chunks. ``RemotePair`` is a
``PairRunner`` that lives in that worker: the reference (the CPU tape) and the candidate both
run on the worker's machine, each step only its record comes back (``app.step_wire``: the
step's scalars and ``core.step_record.pack`` of its columns, checked row by row here), and
tensors move only when the user asks (``arrays``: inspect, the element view, a repro). So a
run through a worker gives the same numbers, and the same ``--json``, as a local one.

The protocol (``PROTOCOL``): one JSON object per line each way, a request and exactly one reply:
``hello``, ``device``, ``open`` (the session config: the worker builds its ``PairRunner``),
then ``step``, ``params``, ``arrays``, ``stats``, ``quit``. The client's first line is
``{"cmd": "hello", "protocol": N}``; a worker of another version answers with one error line
and exits 2. Nothing is ever pickled: arrays travel as dtype, shape and base64 of the raw
bytes (``app.wire.encode_array``), and a received array's size is checked against its declared
shape and a cap before anything is allocated; a record's layout is this side's own. ``serve``
is the worker's side (``tapescope worker``).

Three modules, one per concern, and this one names them all (``from tapescope.app.remote import
...``
keeps working): ``app.remote_protocol`` (the version, the bounds, ``RemoteError``, the node
table's codec), ``app.remote_client`` (``RemoteDevice``, ``RemotePair``) and
``app.remote_server`` (``serve``). The worker imports no client code, the client no server code.
"""

from __future__ import annotations

from tapescope.app.remote_client import RemoteDevice, RemotePair
from tapescope.app.remote_protocol import (
    CONTAINERS_BASE,
    CONTAINERS_PER_NODE,
    MAX_REQUEST,
    OPEN_TIMEOUT_ENV,
    OPEN_TIMEOUT_S,
    OPENED_REPLY,
    OPENING,
    PROTOCOL,
    SMALL_REPLY,
    STEP_REPLY_PER_NODE,
    TIMEOUT_ENV,
    TIMEOUT_S,
    NodeInfo,
    RemoteError,
    seconds,
    worker_timeouts,
)
from tapescope.app.remote_server import serve

__all__ = ["PROTOCOL", "RemoteDevice", "RemoteError", "RemotePair", "serve", "worker_timeouts",
           "seconds", "NodeInfo", "MAX_REQUEST", "SMALL_REPLY", "CONTAINERS_PER_NODE",
           "CONTAINERS_BASE", "TIMEOUT_S", "OPEN_TIMEOUT_S", "TIMEOUT_ENV", "OPEN_TIMEOUT_ENV",
           "OPENING", "OPENED_REPLY", "STEP_REPLY_PER_NODE"]
