"""The kernel cache touches only what it wrote, and never loads an entry someone else could have.

TAPESCOPE_CACHE_DIR may name any folder of the user's: the cache keeps to a subfolder it creates
and marks. A planted entry (another owner, or writable by group/others) is refused with a clear
CacheError before anything is loaded: the planted library here would create a marker file from
its constructor the moment it was dlopen'ed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tapescope.core.cache import MARKER, STORE, CacheError, KernelCache, _sha256_file
from tapescope.gpu.host import HostDevice

SRC = 'extern "C" __global__ void ts_safety_fill(double* y, long long n) {\n' \
      "  long long i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = 1.0;\n}\n"

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


def _evil_so(tmp_path: Path, marker: Path) -> bytes:
    """A shared object whose constructor creates ``marker`` when it is loaded."""
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("no gcc to build the planted library")
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {\n'
                   f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n')
    out = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(out)], check=True, timeout=120)
    return out.read_bytes()


def _plant(entry: Path, data: bytes) -> None:
    """Replace a cache entry's bytes and fix its sidecar hash, as a local attacker could."""
    tmp = entry.with_name("planting")
    tmp.write_bytes(data)
    os.replace(tmp, entry)  # a new inode: the running process keeps its mapping of the old one
    side = Path(str(entry) + ".json")
    info = json.loads(side.read_text())
    info["sha256"] = _sha256_file(entry)
    side.write_text(json.dumps(info))


def test_user_files_in_the_cache_dir_survive(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    os.chmod(mine, 0o750)
    files = {".profile.bak": b"old settings", ".x.so": b"not ours", "notes.txt": b"keep me",
             "build.so": b"\x7fELF mine"}
    for name, data in files.items():
        (mine / name).write_bytes(data)
        os.utime(mine / name, (1, 1))  # "old": what the sweep of temporaries used to remove
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(mine))
    cache = KernelCache()
    path, built = cache.get_or_build("k" * 64, ".bin", lambda p: p.write_bytes(b"artifact"))
    assert built and path.read_bytes() == b"artifact"
    KernelCache()  # a second start sweeps again
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o750  # never chmodded
    for name, data in files.items():
        assert (mine / name).read_bytes() == data, f"{name} was touched"
    assert path.parent != mine and path.parent.parent == mine  # entries live in a subfolder


def test_only_our_own_stale_temporaries_are_swept(tmp_path):
    cache = KernelCache(tmp_path / "c")
    store = cache.store
    assert (store / MARKER).read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    stale, fresh = store / ".refkernels-0123.abcd_123.so", store / ".refkernels-0123.zz9.so"
    other = store / ".someone-elses"
    for p in (stale, fresh, other):
        p.write_bytes(b"half")
    os.utime(stale, (1, 1))
    os.utime(other, (1, 1))
    KernelCache(tmp_path / "c")
    assert not stale.exists() and fresh.exists() and other.exists()


def test_a_planted_group_writable_entry_is_refused_never_loaded(tmp_path):
    root = tmp_path / "cache"
    mod = HostDevice("test", cache_root=root).compile(SRC)
    marker = tmp_path / "PWNED"
    _plant(mod.path, _evil_so(tmp_path, marker))
    os.chmod(mod.path, 0o664)
    with pytest.raises(CacheError, match="writable by group or others") as ei:
        HostDevice("test", cache_root=root).compile(SRC)
    assert str(mod.path) in str(ei.value)
    time.sleep(0.05)
    assert not marker.exists(), "the planted library was loaded"


def test_a_group_writable_sidecar_is_refused(tmp_path):
    cache = KernelCache(tmp_path / "c")
    art, _ = cache.get_or_build("a" * 64, ".bin", lambda p: p.write_bytes(b"x"))
    os.chmod(str(art) + ".json", 0o666)
    with pytest.raises(CacheError, match="writable by group or others"):
        cache.lookup("a" * 64, ".bin")


@needs_root
def test_an_entry_owned_by_another_user_is_refused_never_loaded(tmp_path):
    root = tmp_path / "cache"
    mod = HostDevice("test", cache_root=root).compile(SRC)
    marker = tmp_path / "PWNED"
    _plant(mod.path, _evil_so(tmp_path, marker))
    os.chmod(mod.path, 0o600)
    os.chown(mod.path, 65534, -1)
    with pytest.raises(CacheError, match="owned by uid 65534"):
        HostDevice("test", cache_root=root).compile(SRC)
    assert not marker.exists()


def test_a_symlinked_entry_is_refused(tmp_path):
    cache = KernelCache(tmp_path / "c")
    art, _ = cache.get_or_build("b" * 64, ".bin", lambda p: p.write_bytes(b"x"))
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(b"x")
    art.unlink()
    art.symlink_to(elsewhere)
    with pytest.raises(CacheError, match="not a regular file"):
        cache.lookup("b" * 64, ".bin")


def test_a_store_folder_tapescope_did_not_make_is_refused_and_left_alone(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)
    (root / STORE / "theirs.txt").write_text("mine")
    with pytest.raises(CacheError, match="did not create it"):
        KernelCache(root)
    assert (root / STORE / "theirs.txt").read_text() == "mine"


def test_a_group_writable_store_is_refused(tmp_path):
    cache = KernelCache(tmp_path / "c")
    os.chmod(cache.store, 0o770)
    with pytest.raises(CacheError, match="writable by group or others"):
        KernelCache(tmp_path / "c")


@needs_root
def test_a_store_owned_by_another_user_is_refused(tmp_path):
    cache = KernelCache(tmp_path / "c")
    os.chown(cache.store, 65534, -1)
    with pytest.raises(CacheError, match="owned by uid 65534"):
        KernelCache(tmp_path / "c")


def test_a_shared_root_needs_the_sticky_bit(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(CacheError, match="sticky"):
        KernelCache(shared)
    os.chmod(shared, 0o1777)  # like /tmp: others cannot rename our subfolder away
    assert KernelCache(shared).store.is_dir()


def test_an_interrupted_creation_is_finished(tmp_path):
    root = tmp_path / "c"
    (root / STORE).mkdir(parents=True, mode=0o700)  # mkdir happened, the marker did not
    assert (KernelCache(root).store / MARKER).exists()
