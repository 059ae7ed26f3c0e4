"""core.cache: keys and suffixes, where the cache lives, its root and store, the sweep of
temporaries, and entries. Crafted stores and entries, each wrong in one way, and the cache's
answer: refused with a CacheError that names what and where, rebuilt, or used. Nothing reads
source text. (The marker and first use: test_cache_first_use.py; planted entries:
test_cache_safety.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path

import pytest

from tapescope.core.cache import MARKER, STORE, CacheError, KernelCache, cache_dir, cache_key

GOOD = "k" * 64


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _built(cache: KernelCache, key: str = GOOD, suffix: str = ".so", data: bytes = b"artifact",
           meta: dict | None = None):
    calls = []

    def build(p: Path) -> None:
        calls.append(p)
        p.write_bytes(data)

    path, built = cache.get_or_build(key, suffix, build, meta)
    return path, built, calls


# ---- keys and suffixes --------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["../evil", "a/b", "/abs", "a.b", "a b", "", "k" * 201, "ké",
                                 "a\nb", "..", "."])
def test_a_key_with_path_characters_is_refused_even_with_a_good_suffix(tmp_path, key):
    cache = KernelCache(tmp_path / "c")
    with pytest.raises(CacheError, match="bad key"):
        cache.paths(key, ".so")
    with pytest.raises(CacheError, match="bad key"):
        cache.lookup(key, ".so")
    with pytest.raises(CacheError, match="bad key"):
        _built(cache, key=key)
    assert sorted(p.name for p in cache.store.iterdir()) == [MARKER]  # nothing written


@pytest.mark.parametrize("suffix", ["so", ".so/../../x", "./x", ".", "", ".tar.gz", ". so",
                                    "/.so", ".so\n"])
def test_a_bad_suffix_is_refused_even_with_a_good_key(tmp_path, suffix):
    cache = KernelCache(tmp_path / "c")
    with pytest.raises(CacheError, match="bad key"):
        cache.paths(GOOD, suffix)
    with pytest.raises(CacheError, match="bad key"):
        _built(cache, suffix=suffix)
    assert sorted(p.name for p in cache.store.iterdir()) == [MARKER]


@pytest.mark.parametrize("key", ["k", "k" * 200, "refkernels-0123_abc", "A-Z_0-9"])
def test_good_keys_and_suffixes_name_files_in_the_store(tmp_path, key):
    cache = KernelCache(tmp_path / "c")
    art, side = cache.paths(key, ".so")
    assert art == cache.store / f"{key}.so" and side == cache.store / f"{key}.so.json"
    path, built, calls = _built(cache, key=key)
    assert built and path == art and len(calls) == 1


def _independent_key(*parts: bytes) -> str:
    h = hashlib.sha256()
    for b in parts:
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def test_cache_keys_from_bytes_and_text_are_the_same_length_prefixed_digest():
    assert cache_key(b"abc", b"\x00\xff") == _independent_key(b"abc", b"\x00\xff")
    assert cache_key("abc", "é") == _independent_key(b"abc", "é".encode())
    assert cache_key("abc") == cache_key(b"abc")
    assert cache_key("ab", "c") != cache_key("a", "bc")  # the length prefix separates parts
    assert cache_key() != cache_key("") != cache_key("", "")
    assert cache_key() == hashlib.sha256().hexdigest()
    assert len(cache_key(b"x" * 10_000)) == 64


# ---- where the cache lives ----------------------------------------------------------------------
def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", "")  # empty: not set
    assert cache_dir() == tmp_path / "xdg" / "tapescope" / "kernels"
    monkeypatch.delenv("TAPESCOPE_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "tapescope" / "kernels"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache_dir() == tmp_path / "home" / ".cache" / "tapescope" / "kernels"


def test_nested_cache_folders_are_created_private(tmp_path, monkeypatch):
    root = tmp_path / "a" / "b" / "c"
    cache = KernelCache(root)
    assert cache.root == root and cache.store == root / STORE
    assert _mode(root) == 0o700 and _mode(cache.store) == 0o700
    marker = cache.store / MARKER
    assert marker.read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55\n")
    assert _mode(marker) == 0o600
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path / "x" / "y"))
    assert KernelCache().store == tmp_path / "x" / "y" / STORE  # the default root too


def _unusable(tmp_path: Path) -> Path:
    """A cache root that cannot be created (its parent is a file)."""
    f = tmp_path / "a-file"
    f.write_text("not a folder")
    return f / "kernels"


def test_an_unusable_default_root_falls_back_to_a_private_temp_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TAPESCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(_unusable(tmp_path)))
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    cache = KernelCache()
    private = tmp / f"tapescope-{os.getuid()}"
    assert cache.root == private / "kernels" and cache.store.is_dir()
    assert _mode(private) == 0o700
    assert _built(cache)[1]


def test_a_shared_fallback_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("TAPESCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(_unusable(tmp_path)))
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    planted = tmp / f"tapescope-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)  # someone made the predictable name first, open to all
    with pytest.raises(CacheError, match="writable by group or others"):
        KernelCache()


def test_a_fallback_folder_that_cannot_be_made_is_a_cache_error(tmp_path, monkeypatch):
    monkeypatch.delenv("TAPESCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(_unusable(tmp_path)))
    monkeypatch.setattr(tempfile, "tempdir", str(_unusable(tmp_path)))
    with pytest.raises(CacheError, match="cannot create"):
        KernelCache()


def test_a_chosen_root_that_cannot_be_used_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with pytest.raises(CacheError, match="cannot create"):
        KernelCache(_unusable(tmp_path))
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(_unusable(tmp_path)))
    with pytest.raises(CacheError, match="cannot create"):
        KernelCache()
    assert list(tmp.iterdir()) == []  # nothing went elsewhere


# ---- the root and the store -------------------------------------------------------------------
def test_a_root_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(CacheError):
        KernelCache(f)
    assert f.read_text() == "x"


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_a_root_owned_by_another_user_is_refused(tmp_path):
    root = tmp_path / "r"
    root.mkdir(mode=0o700)
    os.chown(root, 1, -1)
    with pytest.raises(CacheError, match="owned by uid 1"):
        KernelCache(root)


@pytest.mark.parametrize("mode", [0o777, 0o757, 0o770, 0o702, 0o720])
def test_a_root_others_can_write_needs_the_sticky_bit(tmp_path, mode):
    root = tmp_path / "r"
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(CacheError, match="sticky"):
        KernelCache(root)
    os.chmod(root, mode | stat.S_ISVTX)
    assert KernelCache(root).store.is_dir()


def test_a_readable_root_is_fine(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    os.chmod(root, 0o755)
    assert KernelCache(root).store.is_dir()
    assert _mode(root) == 0o755


def test_a_store_that_is_a_file_or_a_symlink_is_refused(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (root / STORE).write_text("x")
    with pytest.raises(CacheError, match="not a directory"):
        KernelCache(root)
    theirs = tmp_path / "theirs"
    KernelCache(theirs)  # a well-formed store, elsewhere
    (root / STORE).unlink()
    (root / STORE).symlink_to(theirs / STORE)
    with pytest.raises(CacheError, match="not a directory"):
        KernelCache(root)


@pytest.mark.parametrize("mode", [0o770, 0o702, 0o720, 0o707])
def test_a_store_others_can_write_is_refused(tmp_path, mode):
    cache = KernelCache(tmp_path / "c")
    os.chmod(cache.store, mode)
    with pytest.raises(CacheError, match="writable by group or others"):
        KernelCache(tmp_path / "c")


def test_a_store_whose_marker_is_a_directory_is_not_ours(tmp_path):
    root = tmp_path / "c"
    (root / STORE / MARKER).mkdir(parents=True)
    os.chmod(root / STORE, 0o700)
    with pytest.raises(CacheError, match=f"{MARKER} is a folder"):
        KernelCache(root)
    assert (root / STORE / MARKER).is_dir()  # left alone


def test_a_store_whose_marker_says_something_else_is_not_ours(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    (root / STORE / MARKER).write_text("Signature: 8a477f597d28d172789f06886806bc5\n")  # one short
    with pytest.raises(CacheError, match="did not create it"):
        KernelCache(root)
    (root / STORE / MARKER).write_text("Signature: 8a477f597d28d172789f06886806bc55\n# theirs\n")
    assert KernelCache(root).store.is_dir()  # any CACHEDIR.TAG with the signature is a cache's


def test_an_interrupted_creation_is_finished_with_the_full_marker(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    cache = KernelCache(root)
    text = (cache.store / MARKER).read_text()
    assert text.startswith("Signature: 8a477f597d28d172789f06886806bc55\n") and "tapescope" in text
    assert _built(cache)[1]


# ---- the sweep of temporaries -----------------------------------------------------------------
def _aged(p: Path, age_s: float) -> None:
    t = time.time() - age_s
    os.utime(p, (t, t), follow_symlinks=False)


def test_the_sweep_removes_only_regular_temporaries_older_than_an_hour(tmp_path):
    cache = KernelCache(tmp_path / "c")
    s = cache.store
    old, young = s / ".refkernels-aaaa.x1_y.so", s / ".refkernels-bbbb.x2_y.so"
    link, folder = s / ".refkernels-cccc.x3_y.so", s / ".refkernels-dddd.x4_y.so"
    keep = s / f"{GOOD}.so"  # an entry, however old
    for p in (old, young, keep):
        p.write_bytes(b"half")
    target = tmp_path / "target"
    target.write_bytes(b"someone's")
    link.symlink_to(target)
    folder.mkdir()
    _aged(old, 3700)
    _aged(young, 3500)
    _aged(keep, 10**6)
    _aged(link, 10**6)
    _aged(folder, 10**6)
    KernelCache(tmp_path / "c")
    assert not old.exists()
    assert young.exists() and keep.exists() and link.is_symlink() and folder.is_dir()
    assert target.read_bytes() == b"someone's"


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_the_sweep_leaves_another_users_temporary(tmp_path):
    cache = KernelCache(tmp_path / "c")
    theirs = cache.store / ".refkernels-aaaa.x1_y.so"
    theirs.write_bytes(b"half")
    os.chown(theirs, 1, -1)
    _aged(theirs, 10**6)
    KernelCache(tmp_path / "c")
    assert theirs.exists()


# ---- entries ----------------------------------------------------------------------------------
def test_a_built_entry_is_private_recorded_and_found_again(tmp_path):
    cache = KernelCache(tmp_path / "c")
    meta = {"compiler": "gcc"}
    path, built, calls = _built(cache, meta=meta)
    assert built and len(calls) == 1 and calls[0].parent == cache.store
    # core.atomic's exclusive temporary beside the entry (a name the sweep knows as ours)
    assert re.fullmatch(rf"\.{GOOD}\.so\.[0-9a-f]{{12}}\.tmp", calls[0].name), calls[0].name
    assert path.read_bytes() == b"artifact" and _mode(path) == 0o600
    assert _mode(cache.store / f"{GOOD}.so.json") == 0o600
    info = json.loads((cache.store / f"{GOOD}.so.json").read_text())
    assert info == {"compiler": "gcc", "key": GOOD,
                    "sha256": hashlib.sha256(b"artifact").hexdigest()}
    assert meta == {"compiler": "gcc"}  # the caller's dict is not changed
    assert sorted(p.name for p in cache.store.iterdir()) == sorted(
        [MARKER, f"{GOOD}.so", f"{GOOD}.so.json"])  # no temporary left
    again, built2, calls2 = _built(KernelCache(tmp_path / "c"))
    assert (again, built2, calls2) == (path, False, [])
    assert cache.lookup(GOOD, ".so") == path
    assert cache.lookup(GOOD, ".bin") is None


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    cache = KernelCache(tmp_path / "c")

    def build(p: Path) -> None:
        p.write_bytes(b"half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build(GOOD, ".so", build)
    assert sorted(p.name for p in cache.store.iterdir()) == [MARKER]
    assert cache.lookup(GOOD, ".so") is None


@pytest.mark.parametrize("spoil", ["bytes", "key", "sha", "json", "list", "no-sidecar",
                                   "no-artifact"])
def test_an_entry_that_fails_verification_is_rebuilt(tmp_path, spoil):
    cache = KernelCache(tmp_path / "c")
    path, _, _ = _built(cache)
    side = cache.store / f"{GOOD}.so.json"
    info = json.loads(side.read_text())
    if spoil == "bytes":
        path.write_bytes(b"artifacT")
    elif spoil == "key":
        side.write_text(json.dumps({**info, "key": "k" * 63 + "j"}))
    elif spoil == "sha":
        side.write_text(json.dumps({**info, "sha256": "0" * 64}))
    elif spoil == "json":
        side.write_text("{not json")
    elif spoil == "list":
        side.write_text(json.dumps([info]))
    elif spoil == "no-sidecar":
        side.unlink()
    else:
        path.unlink()
    assert cache.lookup(GOOD, ".so") is None
    again, built, calls = _built(cache, data=b"fresh")
    assert built and len(calls) == 1 and again.read_bytes() == b"fresh"
    assert cache.lookup(GOOD, ".so") == again


def test_a_sidecar_without_its_artifact_is_still_checked(tmp_path):
    cache = KernelCache(tmp_path / "c")
    path, _, _ = _built(cache)
    path.unlink()
    os.chmod(cache.store / f"{GOOD}.so.json", 0o666)
    with pytest.raises(CacheError, match="writable by group or others"):
        cache.lookup(GOOD, ".so")


@pytest.mark.parametrize("mode", [0o660, 0o606, 0o620, 0o602])
def test_an_entry_others_can_write_is_refused(tmp_path, mode):
    cache = KernelCache(tmp_path / "c")
    path, _, _ = _built(cache)
    os.chmod(path, mode)
    with pytest.raises(CacheError, match="writable by group or others") as ei:
        cache.lookup(GOOD, ".so")
    assert str(path) in str(ei.value) and f"{mode:o}" in str(ei.value)


def test_an_entry_others_can_read_is_used(tmp_path):
    cache = KernelCache(tmp_path / "c")
    path, _, _ = _built(cache)
    os.chmod(path, 0o644)
    os.chmod(cache.store / f"{GOOD}.so.json", 0o644)
    assert cache.lookup(GOOD, ".so") == path


def test_an_entry_that_is_a_folder_is_refused(tmp_path):
    cache = KernelCache(tmp_path / "c")
    (cache.store / f"{GOOD}.so").mkdir()
    with pytest.raises(CacheError, match="not a regular file"):
        cache.lookup(GOOD, ".so")


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_an_entry_owned_by_another_user_is_refused_naming_both_uids(tmp_path):
    cache = KernelCache(tmp_path / "c")
    path, _, _ = _built(cache)
    os.chown(cache.store / f"{GOOD}.so.json", 1, -1)
    with pytest.raises(CacheError, match=rf"owned by uid 1, not you \(uid {os.getuid()}\)"):
        cache.lookup(GOOD, ".so")


# ---- stores others may enter, refusals naming what and where, the sweep's age, a dying build -----
def test_a_store_others_may_enter_but_not_write_is_used(tmp_path):
    cache = KernelCache(tmp_path / "c")
    path, _, _ = _built(cache)
    os.chmod(cache.store, 0o711)
    os.chmod(path, 0o701)
    again = KernelCache(tmp_path / "c")
    assert again.lookup(GOOD, ".so") == path


def test_refusals_name_what_and_where(tmp_path, monkeypatch):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(CacheError, match=rf"kernel cache {f}: cannot create"):
        KernelCache(f)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(CacheError, match="TAPESCOPE_CACHE_DIR"):  # where to go instead
        KernelCache(shared)
    cache = KernelCache(tmp_path / "c")
    os.chmod(cache.store, 0o770)
    with pytest.raises(CacheError, match=rf"kernel cache folder {cache.store}: writable"):
        KernelCache(tmp_path / "c")
    os.chmod(cache.store, 0o700)
    path, _, _ = _built(cache)
    os.chmod(path, 0o666)
    with pytest.raises(CacheError, match=rf"kernel cache entry {path}: writable"):
        cache.lookup(GOOD, ".so")
    monkeypatch.delenv("TAPESCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(_unusable(tmp_path)))
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    planted = tmp / f"tapescope-{os.getuid()}"
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.raises(CacheError, match=rf"kernel cache folder {planted}: writable"):
        KernelCache()


def test_a_store_that_cannot_be_made_is_a_cache_error_naming_it(tmp_path, monkeypatch):
    import tapescope.core.cache

    def write_atomic(path, data, mode=0o666):
        raise OSError(f"cannot write {path}: Permission denied")

    monkeypatch.setattr(tapescope.core.cache, "write_atomic", write_atomic)
    store = tmp_path / "c" / STORE
    with pytest.raises(CacheError, match=rf"kernel cache {store}: cannot create \("):
        KernelCache(tmp_path / "c")


def test_the_sweep_age_is_one_hour_by_default(tmp_path):
    cache = KernelCache(tmp_path / "c")
    old = cache.store / ".refkernels-aaaa.x1_y.so"
    old.write_bytes(b"half")
    _aged(old, 3600.8)
    cache._sweep_temporaries()
    assert not old.exists()


def test_a_build_that_dies_writing_its_sidecar_leaves_no_entry_and_no_temporary(
        tmp_path, monkeypatch):
    import tapescope.core.cache

    cache = KernelCache(tmp_path / "c")
    real = tapescope.core.cache.write_atomic

    def dies_half_way(path, data, mode=0o666):
        def writer(f):
            f.write(b'{"key": ')
            raise OSError(28, "No space left on device")

        return real(path, writer, mode=mode)

    monkeypatch.setattr(tapescope.core.cache, "write_atomic", dies_half_way)
    with pytest.raises(OSError, match="No space"):
        _built(cache)
    monkeypatch.undo()
    assert sorted(p.name for p in cache.store.iterdir()) == sorted([MARKER, f"{GOOD}.so"])
    assert cache.lookup(GOOD, ".so") is None  # no sidecar: not an entry, rebuilt
    path, built, _ = _built(cache, data=b"again")
    assert built and path.read_bytes() == b"again" and cache.lookup(GOOD, ".so") == path


# ---- a foreign store, a store that cannot be made: named with what moves the cache ---------------
def test_a_foreign_store_is_refused_naming_the_variable_that_moves_the_cache(tmp_path):
    store = tmp_path / "c" / STORE
    store.mkdir(parents=True, mode=0o700)
    (store / "theirs.txt").write_text("not ours")
    with pytest.raises(CacheError) as ei:
        KernelCache(tmp_path / "c")
    msg = str(ei.value)
    assert msg.startswith(f"kernel cache {store}: exists but tapescope did not create it")
    assert f"(rm -r {store}), or choose another folder with TAPESCOPE_CACHE_DIR" in msg


def test_a_store_that_cannot_be_made_in_its_root_is_a_cache_error_naming_it(tmp_path,
                                                                             monkeypatch):
    real = Path.mkdir
    store = tmp_path / "c" / STORE

    def mkdir(self, mode=0o777, parents=False, exist_ok=False):
        if self == store:  # (the suite runs as root, whom a read-only root does not stop)
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, mode=mode, parents=parents, exist_ok=exist_ok)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(CacheError, match=rf"^kernel cache {store}: cannot create \(\[Errno 13\] "
                                         "Permission denied"):
        KernelCache(tmp_path / "c")


# ---- one builder per entry ----------------------------------------------------------------------
_RACER = """
import sys, time
from pathlib import Path
from tapescope.core.cache import KernelCache
root, log = Path(sys.argv[1]), Path(sys.argv[2])
def build(p):
    with open(log, "a") as f:
        f.write("built\\n")
    time.sleep(1.0)  # (long enough for the other process to arrive while this one builds)
    p.write_bytes(b"artifact")
path, built = KernelCache(root).get_or_build("k" * 64, ".so", build)
print(path, built, path.read_bytes().decode())
"""


def test_two_processes_wanting_one_entry_build_it_once(tmp_path):
    """A window and its worker (or a test suite's workers) starting at once on a cold cache:
    the second waits on the first one's build and loads it, instead of compiling it again."""
    import subprocess
    import sys

    KernelCache(tmp_path / "c")  # (the store and marker made first, as any earlier use would)
    log = tmp_path / "log"
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path / "c"), str(log)],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert log.read_text() == "built\n"  # one build
    assert sorted(o[1] for o in outs) == ["False", "True"]  # one built it, one found it
    assert {o[0] for o in outs} == {str(tmp_path / "c" / STORE / ("k" * 64 + ".so"))}
    assert {o[2] for o in outs} == {"artifact"}
    assert sorted(p.name for p in (tmp_path / "c" / STORE).iterdir()) == sorted(
        [MARKER, "k" * 64 + ".so", "k" * 64 + ".so.json"])  # the lock file gone


def test_a_build_whose_lock_is_held_too_long_goes_ahead(tmp_path, monkeypatch):
    """A holder that never finishes (stopped, hung) delays a build by LOCK_WAIT_S, never for
    ever: the build then runs unlocked, and the entry is right."""
    import fcntl

    from tapescope.core import cache as cache_mod

    cache = KernelCache(tmp_path / "c")
    monkeypatch.setattr(cache_mod, "LOCK_WAIT_S", 0.3)
    art, _ = cache.paths(GOOD, ".so")
    fd = os.open(art.with_name(art.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        path, built, calls = _built(cache)
        assert built and len(calls) == 1 and path.read_bytes() == b"artifact"
        assert 0.3 <= time.monotonic() - t0 < 10
    finally:
        os.close(fd)
