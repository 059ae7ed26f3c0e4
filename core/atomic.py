"""Files written whole or not at all: the one way tapescope writes a file (no Qt, no gpu).

``write_atomic(path, data)`` writes to a temporary in the same folder, created exclusively
(``O_EXCL | O_NOFOLLOW``, a random name: a symlink planted there is never followed, and two
writers never share one), fsyncs it, renames it over ``path`` and fsyncs the folder. A full
disk, a read-only folder or a kill -9 at any moment leaves the old ``path`` as it was and no
temporary behind (but after a kill -9, which this module cannot clean; those are named
``.NAME.XXXXXXXXXXXX.tmp``). ``write_all`` does the same for files that belong together (a
report's HTML and JSON): both are complete on disk before either is renamed, and when a rename
fails, the ones already renamed are put back, so both or neither replace the old ones.

``check_writable(path)`` is the check before a long run: the folder exists (never created for
the user), a temporary can be created and removed in it, and ``path`` is not a folder.

Every error is an ``OSError`` whose message names the file and the reason, e.g. ``cannot write
report.html: No space left on device (the old file is unchanged)``.
"""

from __future__ import annotations

import errno
import io
import os
import re
import secrets
import stat
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["AtomicFile", "build_atomic", "check_writable", "remove_stale_temporaries",
           "write_all", "write_atomic"]

Data = bytes | str | Callable[[BinaryIO], None]  # the bytes, text (utf-8), or a writer
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 20


def _error(label: object, e: OSError, note: str = "") -> OSError:
    """``e`` as an OSError that names the file (the errno is kept for callers)."""
    why = e.strerror or str(e) or type(e).__name__
    err = OSError(f"cannot write {label}: {why}{note}")
    err.errno = e.errno
    return err


class _FdWriter(io.RawIOBase):
    """A file object over our fd whose writes all go through ``os.write`` (one place where a
    full disk shows, and where a test can make it show)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001 — io's buffer protocol
        return os.write(self.fd, memoryview(b)[:_CHUNK])

    def seek(self, pos: int, whence: int = 0) -> int:
        return os.lseek(self.fd, pos, whence)

    def tell(self) -> int:
        return os.lseek(self.fd, 0, os.SEEK_CUR)


def _temporary(path: Path) -> tuple[int, Path]:
    """A new file beside ``path``, created exclusively under a random name (fd, path)."""
    stem = path.name[:200]  # a name stays under the 255-byte limit with its tail
    for _ in range(100):
        tmp = path.with_name(f".{stem}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp  # the umask applies, as to any new file
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def _write_temporary(path: Path, data: Data, mode: int | None = None) -> Path:
    """``data`` written and fsynced to a new temporary beside ``path``; its path."""
    fd, tmp = _temporary(path)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        else:
            try:
                old = os.stat(path)
                if stat.S_ISREG(old.st_mode):
                    os.fchmod(fd, stat.S_IMODE(old.st_mode))  # a replaced file keeps its mode
            except FileNotFoundError:
                pass
        with io.BufferedWriter(_FdWriter(fd), _CHUNK) as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(fd)
    except BaseException:
        _unlink(tmp)
        raise
    finally:
        os.close(fd)
    return tmp


def _unlink(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # a platform without directory fds: the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the data itself is synced
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: Data, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` (bytes, str as utf-8, or ``writer(file)``) whole, or
    leave it as it was; an OSError names the file. ``mode``: the new file's permissions
    (default: the replaced file's, else what the umask gives)."""
    return write_all([(path, data)], mode)[0]


def write_all(files: list[tuple[str | os.PathLike, Data]], mode: int | None = None) -> list[Path]:
    """Replace every path with its data, all or none (see the module docstring)."""
    paths = [Path(p) for p, _ in files]
    temps: list[tuple[Path, Path]] = []
    try:
        for p, (_, data) in zip(paths, files, strict=True):
            try:
                temps.append((_write_temporary(p, data, mode), p))
            except OSError as e:
                kept = " (the old file is unchanged)" if os.path.lexists(p) else ""
                raise _error(p, e, kept) from e
    except BaseException:
        for tmp, _ in temps:
            _unlink(tmp)
        raise
    # every file is complete on disk: rename them, keeping the old ones to put back on failure
    backups: dict[Path, Path | None] = {}
    done: list[Path] = []
    try:
        for tmp, p in temps:
            backups[p] = _backup(p) if len(temps) > 1 else None
            try:
                os.replace(tmp, p)
            except OSError as e:
                raise _error(p, e) from e
            done.append(p)
    except BaseException:
        for p in reversed(done):
            b = backups.get(p)
            if b is not None:
                os.replace(b, p)
            else:
                _unlink(p)  # it did not exist before
        for tmp, _ in temps:
            _unlink(tmp)
        raise
    finally:
        for b in backups.values():
            if b is not None:
                _unlink(b)
    for folder in {p.parent for p in paths}:
        _fsync_dir(folder)
    return paths


def build_atomic(path: str | os.PathLike, build: Callable[[Path], None],
                 mode: int | None = None) -> Path:
    """Replace ``path`` with what ``build(tmp)`` writes at a temporary path beside it (for a
    writer that takes a path, as a compiler's ``-o``): the temporary is created exclusively,
    then fsynced, given ``mode`` and renamed as ``write_atomic`` does; on any failure nothing
    is left and ``path`` is as it was."""
    path = Path(path)
    try:
        fd, tmp = _temporary(path)
    except OSError as e:
        raise _error(path, e) from e
    os.close(fd)
    try:
        build(tmp)
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range`` (start the writeback of a range, wait for nothing), or None."""
    try:
        import ctypes

        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, TypeError):  # not Linux (Windows: no CDLL(None))
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


_sync_file_range = _libc_sync_file_range()
_WRITEBACK = 8 << 20  # AtomicFile starts the disk on each 8 MiB written


class AtomicFile:
    """A file written a piece at a time while its writer runs (a capture's values, each as it is
    recorded), then put in place whole: ``commit`` fsyncs it and renames it over ``path`` (or
    over another name in the same folder) as ``write_atomic`` does; ``discard``, a failed
    write, or the object's end without a commit (garbage collection, the interpreter's exit)
    removes it. The temporary is created exclusively beside ``path``, as ``write_atomic``'s.
    Pieces under 64 KiB are gathered (one ``os.write`` a MiB), larger ones written at once.
    Once a write has failed the file is broken (its length no longer what its writer counted):
    every later write and ``commit`` raise that failure. OSErrors name the file."""

    _SMALL = 1 << 16

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            self.fd, self.tmp = _temporary(self.path)
        except OSError as e:
            raise _error(self.path, e) from e
        self._buf = bytearray()
        self._written = self._started = 0  # bytes written; the first not yet sent to the disk
        self.failed: OSError | None = None
        # closed and removed when this object goes without a commit (nothing else holds the fd)
        # (a forked child, a DataLoader's worker, holds a copy of this object: only the process
        # that made the temporary writes, commits or removes it)
        self._pid = os.getpid()
        self._end = weakref.finalize(self, _close_and_unlink, self.fd, self.tmp, self._pid)

    def write(self, data) -> None:  # noqa: ANN001 — any C-contiguous buffer
        if self.failed is not None:
            raise self.failed
        if os.getpid() != self._pid:  # a forked child's copy: the fd and its offset are shared
            raise OSError(f"cannot write {self.path}: a forked child cannot write its parent's "
                          "file")
        try:
            view = memoryview(data).cast("B")
            if len(view) < self._SMALL:
                self._buf += view
                if len(self._buf) >= _CHUNK:
                    self._flush()
            else:
                self._flush()
                self._write_all(view)
        except OSError as e:
            self.failed = _error(self.path, e)
            raise self.failed from e
        except BaseException as e:  # a KeyboardInterrupt mid-write: what is written is unknown
            self.failed = OSError(f"cannot write {self.path}: interrupted while writing "
                                  f"({type(e).__name__})")
            raise

    def _flush(self) -> None:
        if self._buf:
            self._write_all(memoryview(self._buf))
            self._buf = bytearray()

    def _write_all(self, view: memoryview) -> None:
        at = 0
        while at < len(view):
            at += os.write(self.fd, view[at:at + _CHUNK])
        self._written += len(view)
        if self._written - self._started >= _WRITEBACK and _sync_file_range is not None:
            # the disk starts on what is written while the writer goes on (Linux's
            # sync_file_range, SYNC_FILE_RANGE_WRITE: it waits for nothing), so that the
            # commit's fsync waits for the last few MiB, not for the whole file
            _sync_file_range(self.fd, self._started, self._written - self._started, 2)
            self._started = self._written

    def commit(self, path: str | os.PathLike | None = None) -> Path:
        """Flush, fsync and rename the file over ``path`` (default: the one it was made for; a
        name in the same folder: the rename stays within one filesystem); its path."""
        target = self.path if path is None else Path(path)
        if target.parent != self.path.parent:
            raise ValueError(f"{target} is not in {self.path.parent}, the temporary's folder")
        if not self._end.alive:
            raise ValueError(f"{self.path}: this file was committed or discarded already")
        if os.getpid() != self._pid:
            raise ValueError(f"{self.path}: a forked child cannot commit its parent's file")
        try:
            if self.failed is not None:
                raise self.failed
            try:
                self._flush()
                try:
                    old = os.stat(target)
                    if stat.S_ISREG(old.st_mode):
                        os.fchmod(self.fd, stat.S_IMODE(old.st_mode))  # as write_atomic's
                except FileNotFoundError:
                    pass
                os.fsync(self.fd)
            except OSError as e:
                kept = " (the old file is unchanged)" if os.path.lexists(target) else ""
                raise _error(target, e, kept) from e
            os.close(self.fd)
            self.fd = -1
            try:
                os.replace(self.tmp, target)
            except OSError as e:
                raise _error(target, e) from e
        except BaseException:
            self.discard()
            raise
        self._end.detach()
        _fsync_dir(target.parent)
        return target

    def discard(self) -> None:
        """Close and remove the temporary (nothing is renamed); idempotent."""
        info = self._end.detach()  # (obj, func, args, kwargs), or None: done already
        if info is not None:
            fd, tmp, pid = info[2]
            _close_and_unlink(-1 if self.fd < 0 else fd, tmp, pid)
        self.fd = -1


def _close_and_unlink(fd: int, tmp: Path, pid: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    if os.getpid() == pid:
        _unlink(tmp)


def _backup(p: Path) -> Path | None:
    """A hard link to the current ``p`` (to put back), None when there is none."""
    if not os.path.lexists(p):
        return None
    for _ in range(100):
        b = p.with_name(f".{p.name[:200]}.{secrets.token_hex(6)}.tmp")
        try:
            os.link(p, b, follow_symlinks=False)
            return b
        except FileExistsError:
            continue
        except OSError:
            return None  # no hard links here: the other file may then be new alone
    return None


def remove_stale_temporaries(path: str | os.PathLike, older_than: float = 3600.0) -> int:
    """Remove what a writer of ``path`` killed mid-write left (our temporaries and backups,
    ``.NAME.XXXXXXXXXXXX.tmp``, yours, untouched for ``older_than`` seconds: a live writer's
    are newer, since writing or linking one sets its ctime). Nothing else is touched; the
    number removed."""
    path = Path(path)
    pattern = re.compile(re.escape(f".{path.name[:200]}.") + r"[0-9a-f]{12}\.tmp")
    cut = time.time() - older_than
    removed = 0
    try:
        names = os.listdir(path.parent)
    except OSError:
        return 0
    for name in names:
        if not pattern.fullmatch(name):
            continue
        try:
            st = os.lstat(path.parent / name)
            if st.st_uid == os.getuid() and st.st_ctime <= cut:
                os.unlink(path.parent / name)
                removed += 1
        except OSError:
            pass  # gone already, or not ours to remove
    return removed


def check_writable(path: str | os.PathLike, what: str = "") -> Path:
    """Before a run: ``path`` can be written (its folder exists, a temporary can be created and
    removed there, ``path`` is not a folder). OSError naming ``path`` (and ``what``) if not."""
    path = Path(path)
    label = f"{what} {path}".strip()
    folder = path.parent
    if not folder.is_dir():
        raise OSError(f"cannot write {label}: the folder {folder} does not exist")
    if path.is_dir():
        raise OSError(f"cannot write {label}: it is a folder")
    try:
        fd, tmp = _temporary(path)
    except OSError as e:
        raise _error(label, e) from e
    os.close(fd)
    _unlink(tmp)
    return path


def open_regular(path: str | os.PathLike, refuse: Exception):
    """The file opened for reading; a FIFO, device or directory raises ``refuse`` without
    blocking (an open that fails raises its OSError). Every reader of a file someone gave us
    opens it this way: tapes, captures, --input and --weights (core.arrayfile)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
