"""The recorder's per-op caches (app/capture/recorder.py) never answer stale: the source line
is cached per (code object, instruction offset), so two lines of one function are two sources
and a code object that dies never lends its cached answer to a new one at the same address;
the native transpose behind a value's C-order copy gives the bytes of torch's own copy; the
op rows give the same columns as the file holds."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core import native  # noqa: E402


def _sources(rec: R.Recorder) -> list[str]:
    names = {i: s for s, i in rec.tables["sources"].items()}
    return [names.get(i, "-") for i in rec.o_source]


def _user_code(filename: str, body: str) -> dict:
    """Functions compiled from ``body`` as a user file named ``filename`` (not torch's, not
    ours, not the standard library's: the recorder's source is a line of it)."""
    ns: dict = {"torch": torch}
    exec(compile(body, filename, "exec"), ns)  # noqa: S102 — the test's own code
    return ns


def test_two_lines_of_one_function_are_two_sources():
    ns = _user_code("/user/two_lines.py", "def f(x):\n    y = x * 2\n    return y + 1\n")
    x = torch.ones(3)
    rec = R.Recorder(steps=10).start()
    try:
        for _ in range(3):  # the same lines again: the same two sources, from the cache
            ns["f"](x)
    finally:
        rec.stop()
    assert _sources(rec) == ["/user/two_lines.py:2", "/user/two_lines.py:3"] * 3


def test_a_dead_code_objects_cache_is_not_a_new_ones():
    """Each round compiles a new function (a new code object, the old one freed: CPython
    reuses its address at once); a cache keyed by the code's address alone, without keeping
    the code alive, would name the first file for later ones."""
    x = torch.ones(3)
    rec = R.Recorder(steps=10).start()
    try:
        for i in range(20):
            ns = _user_code(f"/user/round{i}.py", "def f(x):\n    return x * 2\n")
            ns["f"](x)
            del ns
            gc.collect()
    finally:
        rec.stop()
    assert _sources(rec) == [f"/user/round{i}.py:2" for i in range(20)]
    # the invariant that makes an id-keyed cache safe, whether or not CPython reused an
    # address above: every code object the caches name by id is held alive by the recorder
    held = {id(c) for c in rec._codes}
    assert set(rec._code_skip) <= held
    assert {co for co, _ in rec._src_at} <= held


def test_a_helper_called_from_two_lines_is_its_own_line():
    """The first user frame from the op up is the source: a user helper's line, whichever line
    called it (cached per instruction offset of the helper's frame, not of its caller)."""
    ns = _user_code("/user/helper.py",
                    "def h(x):\n    return x * 3\n\ndef g(x):\n    a = h(x)\n    return h(a)\n")
    x = torch.ones(2)
    rec = R.Recorder(steps=10).start()
    try:
        ns["g"](x)
    finally:
        rec.stop()
    assert _sources(rec) == ["/user/helper.py:2", "/user/helper.py:2"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64])
@pytest.mark.parametrize("shape", [(64, 96), (3, 80, 72), (2, 1, 128, 40)])
def test_the_native_transpose_is_torchs_copy(dtype, shape):
    """A swap of the last two axes (a ``t``, a ``transpose(-1, -2)``) copied to C order by
    core/native's transpose: the bytes of torch's ``contiguous()``; other layouts (a permute
    of the middle axes, a strided slice) take torch's copy."""
    native.library()  # built as any tapescope command builds it (the recorder never does)
    R._load_transpose()
    g = torch.Generator().manual_seed(1)
    base = (torch.randn(shape, generator=g) * 100).to(dtype)
    others = (base.transpose(0, -2),) if base.dim() >= 3 else ()
    for t in (base.transpose(-1, -2), base[..., ::2], *others):
        a = t.numpy()
        assert not a.flags.c_contiguous
        c = R._c_order(t, a)
        assert c.flags.c_contiguous and c.shape == a.shape and c.dtype == a.dtype
        assert c.tobytes() == t.contiguous().numpy().tobytes()


def test_the_native_transpose_is_used_for_last_two_axes(monkeypatch):
    """The fast path is taken (not only torch's copy agreeing with itself)."""
    native.library()  # built as any tapescope command builds it (the recorder never does)
    R._load_transpose()
    if not R._TRANSPOSE:
        pytest.skip("no native code here (no compiler): torch's copy is the only path")
    calls = []
    fn = R._TRANSPOSE[4]
    monkeypatch.setitem(R._TRANSPOSE, 4, lambda *a: (calls.append(a[2:]), fn(*a)))
    t = torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64).t()
    c = R._c_order(t, t.numpy())
    assert calls == [(1, 128, 64)]
    assert np.array_equal(c, t.contiguous().numpy())


def test_a_misaligned_transpose_is_not_handed_to_c(monkeypatch):
    """A tensor over bytes at an odd offset (``torch.frombuffer``'s) is not aligned to its
    items: the native transpose reads whole items (undefined on it), so torch's or numpy's
    copy makes its C order, the same bytes."""
    native.library()
    R._load_transpose()
    calls = []
    for k, fn in list(R._TRANSPOSE.items()):
        monkeypatch.setitem(R._TRANSPOSE, k, lambda *a, fn=fn: (calls.append(a), fn(*a)))
    buf = bytearray(1 + 4 * 128 * 64)
    t = torch.frombuffer(buf, dtype=torch.float32, offset=1, count=128 * 64).reshape(128, 64)
    t.copy_(torch.randn(128, 64, generator=torch.Generator().manual_seed(3)))
    tt = t.t()
    a = tt.numpy()
    assert not a.flags.aligned and not a.flags.c_contiguous
    c = R._c_order(tt, a)
    assert calls == []
    assert c.flags.c_contiguous and c.tobytes() == tt.contiguous().numpy().tobytes()


def test_rows_are_the_files_columns():
    x = torch.ones(4, requires_grad=True)
    opt = torch.optim.SGD([x], lr=0.1)
    rec = R.Recorder(steps=10).start()
    try:
        (x * 2).sum().backward()
        opt.step()
    finally:
        rec.stop()
    header, _ = rec.header_and_arrays()
    ops = header["ops"]
    assert len(rec.rows) == len(ops["op"]) > 3
    for k in ("op", "module", "phase", "step", "source", "args", "kwargs", "outputs"):
        assert ops[k] == getattr(rec, f"o_{k}")
    assert set(ops["phase"]) == {0, 1, 2}  # forward, backward, optimizer


def test_a_cold_cache_compiles_nothing_in_the_users_process(tmp_path):
    """The recorder is a guest: with no native library built yet (an empty kernel cache), its
    start compiles nothing (no gcc run inside the user's script) and C-order copies are
    torch's, and a later ``library()`` may still build it (where it is built, the transpose is
    used: test_the_native_transpose_is_torchs_copy)."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cache.mkdir()
    child = (
        "import os, sys, torch\n"
        "from tapescope.app.capture import recorder as R\n"
        "from tapescope.core import native\n"
        "rec = R.Recorder(steps=1).start(); rec.stop()\n"
        "built = [f for _, _, fs in os.walk(sys.argv[1]) for f in fs if f.endswith('.so')]\n"
        "print('cold', bool(R._TRANSPOSE), built)\n"
        "print('native', native._lib)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TAPESCOPE_NO_NATIVE",)}
    env["TAPESCOPE_CACHE_DIR"] = str(cache)
    p = subprocess.run([sys.executable, "-c", child, str(cache)], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "cold False []" in p.stdout, p.stdout
    assert "native False" in p.stdout, p.stdout  # not loaded, and not marked as unbuildable
