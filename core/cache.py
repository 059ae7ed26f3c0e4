"""The per-user compiled-code cache (device kernels and the tape's native matmul): content-keyed,
atomic, verified on load.

SECURITY: the cache holds shared objects this process loads, so it trusts only what it wrote
itself. Entries live in a subfolder it creates and marks (``tapescope-cache/`` with a
``CACHEDIR.TAG``), mode 0700; the folder the user names (``TAPESCOPE_CACHE_DIR``) is never
chmodded and nothing outside the subfolder is ever removed. A folder or entry that is not owned
by this user, or that group/others can write, is refused with a CacheError and never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tapescope.core.atomic import build_atomic, write_atomic

__all__ = ["CacheError", "cache_dir", "cache_key", "KernelCache", "STORE", "MARKER"]

STORE = "tapescope-cache"  # the subfolder the cache creates, marks and alone manages
MARKER = "CACHEDIR.TAG"  # https://bford.info/cachedir/: backup tools skip the folder too
_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
        "# This file marks a cache folder created by tapescope (compiled kernels).\n"
        "# Everything in this folder may be deleted; tapescope rebuilds it.\n")
# core.atomic's temporaries, and the names an older get_or_build's mkstemp made
_TEMP = re.compile(r"\.[\w-]{1,16}\.\w+\.\w+|\.[\w.-]+\.[0-9a-f]{12}\.tmp")


_MARKER_MAX = 4096  # bytes of a marker read: ours is 185
_MARKER_TEMP = re.compile(re.escape(f".{MARKER}.") + r"[0-9a-f]{12}\.tmp")  # core.atomic's


def _write_marker(marker: Path) -> None:
    try:
        write_atomic(marker, _TAG, mode=0o600)  # never seen half-written by a concurrent first use
    except OSError as e:
        raise CacheError(f"kernel cache {marker.parent}: cannot create ({e})") from e


class CacheError(RuntimeError):
    """The kernel cache is unusable or holds something it did not write (wrong owner, ...)."""


def cache_dir() -> Path:
    """The per-user cache root: $TAPESCOPE_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache."""
    env = os.environ.get("TAPESCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tapescope" / "kernels"


def cache_key(*parts: str | bytes) -> str:
    """A sha256 over the parts, each length-prefixed so no two part lists collide."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _owned_private(path: Path, st: os.stat_result, what: str) -> None:
    """CacheError unless ``st`` is this user's and nobody else can write it."""
    if st.st_uid != os.getuid():
        raise CacheError(f"kernel cache {what} {path}: owned by uid {st.st_uid}, not you "
                         f"(uid {os.getuid()}); refusing to use it")
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise CacheError(f"kernel cache {what} {path}: writable by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}); refusing to use it. Delete it and "
                         "tapescope builds a fresh one.")


class KernelCache:
    """Artifacts under ``<root>/tapescope-cache``; `get_or_build` returns a verified path."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir()
        try:
            self._ensure()
        except CacheError:
            if root is not None or os.environ.get("TAPESCOPE_CACHE_DIR"):
                raise  # a directory the user chose: say so rather than go elsewhere
            # e.g. a read-only home: a per-user directory under the system temp dir instead
            private = Path(tempfile.gettempdir()) / f"tapescope-{os.getuid()}"
            try:
                private.mkdir(mode=0o700, exist_ok=True)
            except OSError as e:
                raise CacheError(f"kernel cache {private}: cannot create ({e})") from e
            # a predictable name in a shared folder: it must be ours and private
            _owned_private(private, os.lstat(private), "folder")
            self.root = private / "kernels"
            self._ensure()

    @property
    def store(self) -> Path:
        """The marked subfolder that holds every entry (the only place the cache writes)."""
        return self.root / STORE

    def _ensure(self) -> None:
        root, store = self.root, self.store
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(f"kernel cache {root}: cannot create ({e})") from e
        st = os.stat(root)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"kernel cache {root}: not a directory")
        if st.st_uid not in (os.getuid(), 0):
            raise CacheError(f"kernel cache {root}: owned by uid {st.st_uid}, not you")
        if stat.S_IMODE(st.st_mode) & 0o022 and not st.st_mode & stat.S_ISVTX:
            # others could rename our subfolder away and put theirs in its place
            raise CacheError(f"kernel cache {root}: writable by group or others without the "
                             "sticky bit; choose a private folder (TAPESCOPE_CACHE_DIR)")
        try:
            store.mkdir(mode=0o700)
        except FileExistsError:
            pass  # ours from before, or another process's first use at this very moment
        except OSError as e:
            raise CacheError(f"kernel cache {store}: cannot create ({e})") from e
        st = os.lstat(store)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"kernel cache {store}: not a directory (refusing to use it)")
        _owned_private(store, st, "folder")
        if not self._tagged(store):
            raise CacheError(f"kernel cache {store}: exists but tapescope did not create it "
                             f"(no {MARKER}); refusing to use or clean it. If it is yours to "
                             f"discard, remove it (rm -r {store}), or choose another folder "
                             "with TAPESCOPE_CACHE_DIR")
        self._sweep_temporaries()

    @staticmethod
    def _tagged(store: Path) -> bool:
        """True when ``store`` carries our marker, writing it when the folder is ours and the
        marker is missing (a first use, ours or a concurrent one) or torn (empty or cut short:
        what an older tapescope's in-place write left); CacheError for a marker that is not a
        small regular file."""
        marker = store / MARKER
        fix = (f"remove it (rm -r {store}; tapescope rebuilds the cache) or choose another "
               "folder with TAPESCOPE_CACHE_DIR")
        try:
            st = os.lstat(marker)
        except FileNotFoundError:
            # a fresh folder holds nothing but a concurrent first use's marker (or its temporary,
            # or the marker just renamed into place since the lstat)
            if any(p.name != MARKER and not _MARKER_TEMP.fullmatch(p.name)
                   for p in store.iterdir()):
                return False
            _write_marker(marker)
            return True
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_MAX:
            kind = ("a symlink" if stat.S_ISLNK(st.st_mode) else "a folder"
                    if stat.S_ISDIR(st.st_mode) else "not a regular file"
                    if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes")
            raise CacheError(f"kernel cache {store}: its {MARKER} is {kind}, not the marker "
                             f"tapescope writes; refusing to use the cache: {fix}")
        try:
            fd = os.open(marker, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as e:
            raise CacheError(f"kernel cache {store}: cannot read its {MARKER} ({e.strerror}): "
                             f"{fix}") from None
        try:
            text = os.read(fd, _MARKER_MAX + 1)
        finally:
            os.close(fd)
        if text.startswith(_TAG.encode()[:43]):
            return True
        if _TAG.encode().startswith(text) and st.st_uid == os.getuid():
            _write_marker(marker)  # torn: empty or a prefix of ours, in our own folder
            return True
        return False

    def _sweep_temporaries(self, max_age_s: float = 3600.0) -> None:
        """Remove our own builds that died half-way (temporaries older than an hour)."""
        now = time.time()
        for p in self.store.iterdir():
            if not _TEMP.fullmatch(p.name):
                continue  # only names this cache makes
            try:
                st = os.lstat(p)
                if (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                        and now - st.st_mtime > max_age_s):
                    p.unlink()
            except OSError:
                pass  # another process got there first

    def paths(self, key: str, suffix: str) -> tuple[Path, Path]:
        """The artifact path and its sidecar (sha256 + metadata) for a key."""
        if not re.fullmatch(r"[0-9A-Za-z_-]{1,200}", key) or not re.fullmatch(r"\.\w+", suffix):
            raise CacheError(f"kernel cache: bad key {key!r} / suffix {suffix!r}")
        return self.store / f"{key}{suffix}", self.store / f"{key}{suffix}.json"

    def _check_entry(self, path: Path) -> bool:
        """False when absent; CacheError when present but not a private regular file of ours."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            raise CacheError(f"kernel cache entry {path}: not a regular file; refusing to load it")
        _owned_private(path, st, "entry")
        return True

    def lookup(self, key: str, suffix: str) -> Path | None:
        """The artifact when it exists, is ours and its bytes match the recorded hash, else None.

        CacheError (never a load) for an entry another user owns or others can write.
        """
        art, meta = self.paths(key, suffix)
        have_art, have_meta = self._check_entry(art), self._check_entry(meta)  # both checked
        if not (have_art and have_meta):
            return None
        try:
            info = json.loads(meta.read_text())
            if info.get("key") != key or _sha256_file(art) != info.get("sha256"):
                return None
        except (OSError, ValueError, AttributeError):
            return None
        return art

    def get_or_build(
        self, key: str, suffix: str, build: Callable[[Path], None], meta: dict | None = None
    ) -> tuple[Path, bool]:
        """Return (path, built): a verified cached artifact, or build one into place atomically.

        `build(tmp_path)` writes the artifact to a private temporary name in the cache dir; it is
        renamed into place only when complete, then the sidecar (its sha256) follows. A corrupt,
        half-written or foreign entry fails verification and is rebuilt.
        """
        hit = self.lookup(key, suffix)
        if hit is not None:
            return hit, False
        art, sidecar = self.paths(key, suffix)
        with _one_builder(art):
            hit = self.lookup(key, suffix)  # (what the process we waited on built)
            if hit is not None:
                return hit, False
            return self._build(key, art, sidecar, build, meta), True

    @staticmethod
    def _build(key: str, art: Path, sidecar: Path, build: Callable[[Path], None],
               meta: dict | None) -> Path:
        digest = []

        def build_and_hash(tmp: Path) -> None:
            build(tmp)
            digest.append(_sha256_file(tmp))

        build_atomic(art, build_and_hash, mode=0o600)  # an exclusive temporary, then renamed
        record = dict(meta or {}, key=key, sha256=digest[0])
        write_atomic(sidecar, json.dumps(record), mode=0o600)
        return art


#: how long a build waits for another process building the same entry before building it too
LOCK_WAIT_S = 600.0


@contextlib.contextmanager
def _one_builder(art: Path):
    """Held while this process builds ``art``: a second process (a tapescope window and its
    worker starting at once, a test suite's workers) that wants the same entry waits here for
    the first one's build instead of compiling it again, then finds it in the cache. An
    advisory lock (flock on ``<entry>.lock``, freed by the kernel when its holder dies, the
    file removed after the build); after
    LOCK_WAIT_S, or where there is no flock, the build goes ahead unlocked (the atomic rename
    keeps two builders of one entry safe, as before)."""
    try:
        import fcntl
    except ImportError:  # (not POSIX: build unlocked)
        yield
        return
    lock = art.with_name(art.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            except OSError:
                break
        yield
    finally:
        # removed while held: a process still waiting on it then finds the entry built (one
        # that opens a new lock file meanwhile builds once more, safely, as without a lock)
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)  # (the lock goes with it)
