"""The kernel cache's first use survives its own races, and its marker is read safely.

Four processes opening the same fresh caches at once must all succeed (the marker is written
atomically, and a folder holding only a concurrent writer's marker temporary is a fresh one); a
torn (empty or cut short) marker of ours is rewritten; a marker that is a symlink (to /dev/zero:
a read without a bound never ends), a folder or a big file is refused with a message that says
how to fix it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tapescope.core.cache import _TAG, MARKER, STORE, CacheError, KernelCache

ROOT = str(Path(__file__).resolve().parents[2])
RACE = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from tapescope.core.cache import KernelCache, CacheError
    base, n, go = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    while not os.path.exists(go):  # all four start together
        time.sleep(0.001)
    refused = []
    for i in range(n):
        try:
            KernelCache(os.path.join(base, f"c{i}"))
        except CacheError as e:
            refused.append(str(e))
    print(json.dumps(refused))
""")


def test_four_processes_opening_fresh_caches_at_once_all_succeed(tmp_path):
    n, go = 150, tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACE, ROOT, str(tmp_path / "caches"),
                               str(n), str(go)], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    go.touch()
    refused = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        refused += json.loads(out)
    assert refused == [], refused[:3]  # before: ~5 % refused "did not create it"
    for i in range(n):
        store = tmp_path / "caches" / f"c{i}" / STORE
        assert (store / MARKER).read_text() == _TAG
        assert sorted(p.name for p in store.iterdir()) == [MARKER]  # no temporary left


def fresh_store(tmp_path: Path) -> Path:
    KernelCache(tmp_path / "c")
    return tmp_path / "c" / STORE


@pytest.mark.parametrize("torn", ["", _TAG[:10]])
def test_a_torn_marker_of_ours_is_rewritten(tmp_path, torn):
    store = fresh_store(tmp_path)
    (store / MARKER).write_text(torn)
    KernelCache(tmp_path / "c")
    assert (store / MARKER).read_text() == _TAG


@pytest.mark.parametrize("plant,says", [
    (lambda m: m.symlink_to("/dev/zero"), "a symlink"),
    (lambda m: m.mkdir(), "a folder"),
    (lambda m: m.write_bytes(_TAG.encode() + b"#" * 10_000), "10185 bytes"),
])
def test_a_marker_that_is_not_a_small_file_is_refused_with_how_to_fix_it(tmp_path, plant,
                                                                         says):
    store = fresh_store(tmp_path)
    os.unlink(store / MARKER)
    plant(store / MARKER)
    with pytest.raises(CacheError) as e:
        KernelCache(tmp_path / "c")
    msg = str(e.value)
    assert f"its {MARKER} is {says}" in msg and f"rm -r {store}" in msg
    assert "TAPESCOPE_CACHE_DIR" in msg


def test_a_foreign_folder_is_refused_with_how_to_fix_it(tmp_path):
    store = tmp_path / "c" / STORE
    store.mkdir(parents=True, mode=0o700)
    (store / "theirs.txt").write_text("not ours")
    with pytest.raises(CacheError, match=rf"did not create it \(no {MARKER}\).*rm -r"):
        KernelCache(tmp_path / "c")
    (store / MARKER).write_text("Signature: something else entirely\n")
    with pytest.raises(CacheError, match="did not create it"):
        KernelCache(tmp_path / "c")
    assert (store / "theirs.txt").read_text() == "not ours"  # never cleaned


# ---- the marker: its signature, its 4 KiB bound, a torn one, a first use's temporary --------
def test_a_marker_holding_only_the_signature_is_a_cache_marker(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    (root / STORE / MARKER).write_text("Signature: 8a477f597d28d172789f06886806bc55")
    assert KernelCache(root).store.is_dir()


def test_a_first_use_finds_only_a_concurrent_markers_temporary_and_finishes(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    (root / STORE / f".{MARKER}.0123456789ab.tmp").write_text("Sig")  # another's, mid-write
    assert (KernelCache(root).store / MARKER).read_text().startswith("Signature: ")


@pytest.mark.parametrize("size,ok", [(4096, True), (4097, False)])
def test_a_marker_is_read_up_to_4_kib(tmp_path, size, ok):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    sig = "Signature: 8a477f597d28d172789f06886806bc55\n"
    (root / STORE / MARKER).write_text(sig + "#" * (size - len(sig)))
    if ok:
        assert KernelCache(root).store.is_dir()
    else:
        with pytest.raises(CacheError, match=f"{MARKER} is 4097 bytes"):
            KernelCache(root)


@pytest.mark.parametrize("kind", ["a symlink", "a folder", "not a regular file"])
def test_a_marker_that_is_not_a_small_file_is_refused_saying_what_it_is_and_how_to_fix(
        tmp_path, kind):
    root = tmp_path / "c"
    store = root / STORE
    store.mkdir(parents=True, mode=0o700)
    marker = store / MARKER
    if kind == "a symlink":
        real = tmp_path / "tag"
        real.write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
        marker.symlink_to(real)
    elif kind == "a folder":
        marker.mkdir()
    else:
        os.mkfifo(marker)
    with pytest.raises(CacheError) as ei:
        KernelCache(root)
    msg = str(ei.value)
    assert f"its {MARKER} is {kind}, not the marker" in msg
    assert f"rm -r {store}" in msg and "TAPESCOPE_CACHE_DIR" in msg


def test_only_the_43_byte_signature_is_needed_whatever_follows_it(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    (root / STORE / MARKER).write_bytes(b"Signature: 8a477f597d28d172789f06886806bc55\r\n# x\r\n")
    assert KernelCache(root).store.is_dir()
    assert (root / STORE / MARKER).read_bytes().endswith(b"# x\r\n")  # not rewritten


def test_a_torn_marker_of_ours_is_rewritten_whole(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    for torn in (b"", b"Signature: 8a47"):
        (root / STORE / MARKER).write_bytes(torn)
        assert KernelCache(root).store.is_dir()
        assert (root / STORE / MARKER).read_text().startswith(
            "Signature: 8a477f597d28d172789f06886806bc55\n# This file marks")
