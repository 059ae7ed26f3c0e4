"""The worker protocol's shared parts (``app.remote``): its version, the size and time bounds
of every message, the error both sides raise, and the node table's codec.

Both ends import this and nothing of each other: the client (``app.remote_client``) and the
worker's loop (``app.remote_server``). The lines themselves travel on ``app.wire.LinePipe``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

# numpy and app.wire load in the functions that use them: the CLI's parser reads the timeouts
# above them (``tapescope --version`` imports no numpy: issue 47 item 4)

__all__ = ["PROTOCOL", "MAX_REQUEST", "SMALL_REPLY", "CONTAINERS_PER_NODE", "CONTAINERS_BASE",
           "TIMEOUT_S", "OPEN_TIMEOUT_S", "TIMEOUT_ENV", "OPEN_TIMEOUT_ENV", "OPENING",
           "HELLO_TIMEOUT_S", "HELLO_TIMEOUT_ENV", "hello_timeout",
           "OPENED_REPLY", "JUDGED_REPLY", "STEP_REPLY_PER_NODE", "RemoteError", "NodeInfo",
           "seconds",
           "worker_timeouts", "b64_len", "reply_field", "node_table", "read_node_table",
           "node_size"]

PROTOCOL = 3  # bump on any change of the messages below (2: the whole pair in the worker;
# 3: judge_capture, a capture judged where its file is)
MAX_REQUEST = 1 << 31  # bytes of one request line the worker reads (compare ships every array)
SMALL_REPLY = 1 << 20  # bytes of a reply with no arrays (an error's traceback fits many times)
# NOTE: a reply's containers are bounded per node: json.loads makes ~30x its text in objects
CONTAINERS_PER_NODE, CONTAINERS_BASE = 16, 4096
TIMEOUT_S, OPEN_TIMEOUT_S = 300.0, 1800.0  # per request; hello, device and open (first compile)
TIMEOUT_ENV, OPEN_TIMEOUT_ENV = "TAPESCOPE_WORKER_TIMEOUT", "TAPESCOPE_WORKER_OPEN_TIMEOUT"
OPENING = ("hello", "device", "open", "judge_capture")  # requests under the open timeout
# a judged capture's report (its JSON text as one string): every op's verdicts
JUDGED_REPLY = 1 << 30
# hello alone (issue 49): a command that starts and says nothing (a wrong CMD, an ssh waiting
# on a prompt nobody sees) is named in 30 s, not after the first compile's 30 minutes; hello
# waits for the smaller of this and the open timeout
HELLO_TIMEOUT_S, HELLO_TIMEOUT_ENV = 30.0, "TAPESCOPE_WORKER_HELLO_TIMEOUT"
OPENED_REPLY = 256 << 20  # the node table and the fusion plan's generated sources
# a step reply per node: the packed record (149 raw bytes a row, in base64 when nothing
# deflates) and up to three introduced entries of ~300 bytes
STEP_REPLY_PER_NODE = 2048


class RemoteError(RuntimeError):
    """The worker command failed, ended, or answered something this side cannot use."""


def seconds(value: Any, name: str) -> float:
    """``value`` as a positive, finite number of seconds; ValueError naming ``name``."""
    try:
        s = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}") from None
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return s


def worker_timeouts(timeout: float | None = None,
                    open_timeout: float | None = None) -> tuple[float, float]:
    """(per-request, opening) deadlines in seconds: the flags, else the environment
    (``TAPESCOPE_WORKER_TIMEOUT``, ``TAPESCOPE_WORKER_OPEN_TIMEOUT``), else the defaults."""
    out = []
    for given, env, flag, default in (
            (timeout, TIMEOUT_ENV, "--worker-timeout", TIMEOUT_S),
            (open_timeout, OPEN_TIMEOUT_ENV, "--worker-open-timeout", OPEN_TIMEOUT_S)):
        if given is not None:
            out.append(seconds(given, flag))
        elif os.environ.get(env):
            out.append(seconds(os.environ[env], env))
        else:
            out.append(default)
    return out[0], out[1]


def hello_timeout(given: float | None = None) -> float:
    """The hello's own deadline in seconds: the flag, else ``TAPESCOPE_WORKER_HELLO_TIMEOUT``,
    else 30 s (``HELLO_TIMEOUT_S``)."""
    if given is not None:
        return seconds(given, "--worker-hello-timeout")
    if os.environ.get(HELLO_TIMEOUT_ENV):
        return seconds(os.environ[HELLO_TIMEOUT_ENV], HELLO_TIMEOUT_ENV)
    return HELLO_TIMEOUT_S


def b64_len(nbytes: int) -> int:
    """Characters of the base64 text of ``nbytes`` bytes (what an array costs on the wire)."""
    return 4 * ((nbytes + 2) // 3)


def reply_field(reply: dict, key: str, kind: type, command: str, cmd: str) -> Any:
    """``reply[key]`` when it is a ``kind``; else RemoteError naming the reply and command."""
    v = reply.get(key)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise RemoteError(f"the worker {command!r} sent a malformed {reply.get('type')!r} reply "
                          f"to {cmd!r}: {key!r} is {type(v).__name__}, not {kind.__name__}")
    return v


@dataclass(frozen=True)
class NodeInfo:
    """A compared node as the worker's tape holds it (what the client shows and exports)."""

    id: int
    op: str
    name: str | None
    shape: tuple[int, ...]
    inputs: tuple[int, ...]


def node_table(nodes: Any) -> dict:
    """The compared nodes as a few flat columns (a 10k-node tape: six JSON containers)."""
    import numpy as np

    from tapescope.app.wire import encode_array

    return {"op": [n.op for n in nodes], "name": [n.name for n in nodes],
            "ndim": encode_array(np.array([len(n.shape) for n in nodes], dtype=np.int64)),
            "dims": encode_array(np.array([d for n in nodes for d in n.shape], dtype=np.int64)),
            "nin": encode_array(np.array([len(n.inputs) for n in nodes], dtype=np.int64)),
            "inputs": encode_array(np.array([j for n in nodes for j in n.inputs],
                                            dtype=np.int64))}


def read_node_table(t: Any) -> tuple[NodeInfo, ...]:
    """The inverse of ``node_table``; ValueError when its columns do not fit together."""
    from tapescope.app.wire import decode_array

    if not isinstance(t, dict):
        raise ValueError("no node table")
    ops, names = t.get("op"), t.get("name")
    if not (isinstance(ops, list) and isinstance(names, list) and len(ops) == len(names)
            and all(isinstance(o, str) for o in ops)
            and all(x is None or isinstance(x, str) for x in names)):
        raise ValueError("the node table's ops and names are not strings, one per node")
    cols = {k: decode_array(t.get(k), f"node table {k}") for k in ("ndim", "dims", "nin",
                                                                   "inputs")}
    if any(c is None or c.dtype.kind != "i" or c.ndim != 1 for c in cols.values()):
        raise ValueError("the node table's columns are not integer lists")
    n = len(ops)
    ndim, nin = cols["ndim"], cols["nin"]
    if (len(ndim) != n or len(nin) != n or (ndim < 0).any() or (nin < 0).any()
            or ndim.sum() != len(cols["dims"]) or nin.sum() != len(cols["inputs"])
            or (cols["dims"] < 0).any()):
        raise ValueError("the node table's shapes and inputs do not fit its nodes")
    out, d, k = [], 0, 0
    dims, inputs = cols["dims"].tolist(), cols["inputs"].tolist()
    for i, (nd, ni) in enumerate(zip(ndim.tolist(), nin.tolist(), strict=True)):
        ins = tuple(inputs[k:k + ni])
        if any(not 0 <= j < i for j in ins):
            raise ValueError(f"node #{i}'s inputs {ins} are not earlier nodes")
        out.append(NodeInfo(i, ops[i], names[i], tuple(dims[d:d + nd]), ins))
        d, k = d + nd, k + ni
    return tuple(out)


def node_size(node: Any) -> int:
    import numpy as np

    return int(np.prod(node.shape, dtype=np.int64))
