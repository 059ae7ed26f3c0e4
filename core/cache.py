"""The per-user compiled-code cache (device kernels and the tape's native matmul): mode 0700,
content-keyed, atomic, verified on load."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["CacheError", "cache_dir", "cache_key", "KernelCache"]


class CacheError(RuntimeError):
    """The kernel cache directory is unusable (wrong owner, not a directory, ...)."""


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


class KernelCache:
    """Compiled artifacts under one directory; `get_or_build` returns a verified file path."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir()
        try:
            self._ensure_root()
        except CacheError:
            if root is not None or os.environ.get("TAPESCOPE_CACHE_DIR"):
                raise  # a directory the user chose: say so rather than go elsewhere
            # e.g. a read-only home: a per-user directory under the system temp dir instead
            self.root = Path(tempfile.gettempdir()) / f"tapescope-{os.getuid()}" / "kernels"
            self._ensure_root()

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self.root.parent.name.startswith("tapescope-"):
                os.chmod(self.root.parent, 0o700)
        except OSError as e:
            raise CacheError(f"kernel cache {self.root}: cannot create ({e})") from e
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"kernel cache {self.root}: not a directory")
        if st.st_uid != os.getuid():
            raise CacheError(f"kernel cache {self.root}: owned by uid {st.st_uid}, not you")
        if stat.S_IMODE(st.st_mode) != 0o700:
            # The cache holds shared objects we load: nobody else may write or read it.
            os.chmod(self.root, 0o700)
        self._sweep_temporaries()

    def _sweep_temporaries(self, max_age_s: float = 3600.0) -> None:
        """Remove builds that died half-way (private temporaries older than an hour)."""
        now = time.time()
        for p in self.root.glob(".*"):
            try:
                if now - p.stat().st_mtime > max_age_s:
                    p.unlink()
            except OSError:
                pass  # another process got there first

    def paths(self, key: str, suffix: str) -> tuple[Path, Path]:
        """The artifact path and its sidecar (sha256 + metadata) for a key."""
        return self.root / f"{key}{suffix}", self.root / f"{key}{suffix}.json"

    def lookup(self, key: str, suffix: str) -> Path | None:
        """The artifact when it exists and its bytes match the recorded hash, else None."""
        art, meta = self.paths(key, suffix)
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
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=suffix, dir=self.root)
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            build(tmp_path)
            digest = _sha256_file(tmp_path)
            os.chmod(tmp_path, 0o600)
            os.replace(tmp_path, art)
        finally:
            if tmp_path.exists():
                tmp_path.unlink()
        record = dict(meta or {}, key=key, sha256=digest)
        fd, tmpm = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".json", dir=self.root)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmpm, sidecar)
        return art, True
