"""A capture file's numbers never make the judge allocate more than the file holds: a size an
op's arguments name (a factory's, ``expand``'s, ``arange``'s and ``linspace``'s counts, an
embedding backward's rows) is checked against the op's recorded output before the reference
form allocates it. A file edited so that ``zeros`` asks for 2**30 elements (4 GiB) where its
recorded output has 6 is judged ``no-reference`` for that op, at once, naming both sizes; the
forms themselves refuse such sizes under the same bound."""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import NoReference, reference  # noqa: E402
from tapescope.core.capture.aten_ref_table import OUT_ELEMS  # noqa: E402
from tests.helpers.capture_files import rewrite_header  # noqa: E402


def _capture(path):
    from tapescope.app.capture import capture

    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    with capture(str(path), steps=1):
        z = torch.zeros(2, 3)
        loss = (w * z.sum(0) + w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_a_file_whose_factory_asks_for_4_gib_is_no_reference_at_once(tmp_path):
    from tapescope.core.capture.file import load
    from tapescope.core.capture.judge import judge

    f = tmp_path / "z.capture"
    _capture(f)
    data = f.read_bytes()
    _, hoff, hlen, _ = struct.unpack("<8sQQ32s", data[-56:])
    at = json.loads(data[hoff:hoff + hlen])["ops"]["names"].index("aten.zeros.default")

    def edit(h):
        ops = h["ops"]
        i = ops["op"].index(at)
        ops["args"][i] = [[1 << 15, 1 << 15]]
    bad = tmp_path / "bad.capture"
    bad.write_bytes(rewrite_header(data, edit))
    t0 = time.monotonic()
    rep = judge(load(bad))
    assert time.monotonic() - t0 < 60
    zeros = [e for e in rep["ops"] if e["op"] == "aten.zeros.default"]
    assert zeros and all(o["verdict"] == "no-reference" for e in zeros for o in e["outputs"])
    why = {d["op"]: d["reason"] for d in rep["no_reference"]}["aten.zeros.default"]
    assert "1073741824 elements" in why and "the recorded output has 6" in why
    good = judge(load(f))  # (the unedited file: the same op judged)
    assert good["no_reference"] == []


@pytest.mark.parametrize("op, args", [
    ("aten.zeros.default", [[1 << 20, 1 << 20]]),
    ("aten.full.default", [[1 << 40], 1.5]),
    ("aten.new_zeros.default", [np.ones(2, np.float32), [1 << 31]]),
    ("aten.expand.default", [np.ones((1, 3), np.float32), [1 << 34, 3]]),
    ("aten.arange.default", [1 << 40]),
    ("aten.linspace.default", [0.0, 1.0, 1 << 31]),
    ("aten.embedding_dense_backward.default",
     [np.ones((2, 4), np.float32), np.array([0, 1]), 1 << 40, -1, False]),
    ("aten.max_unpool2d.default",
     [np.ones((1, 1, 2), np.float32), np.zeros((1, 1, 2), np.int64), [1 << 20, 1 << 20]]),
    ("aten.constant_pad_nd.default", [np.ones((2, 3), np.float32), [1 << 40, 0]]),
    ("aten._pdist_forward.default", [np.ones((12, 1), np.float32), 2.0]),
    ("aten.bincount.default", [np.array([1 << 40])]),
])
def test_the_forms_check_a_named_size_before_allocating_it(op, args):
    token = OUT_ELEMS.set([np.zeros(64, np.float32), np.zeros(3, np.float32)])
    try:
        with pytest.raises(NoReference, match="asks for .* elements, the recorded output has 64"):
            reference(op, args, {})
    finally:
        OUT_ELEMS.reset(token)


@pytest.mark.parametrize("size", [[-1, 3], [2.5], ["a"], [True, 2]])
def test_a_size_of_other_than_non_negative_integers_is_no_reference(size):
    with pytest.raises(NoReference, match="size of non-negative integers"):
        reference("aten.zeros.default", [size], {})
