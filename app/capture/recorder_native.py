"""The recorder's per-op path in C (recorder_hot.c beside this file), built at first use with
gcc into the kernel cache (``core.cache``, keyed by its source, the compiler and this Python's
ABI), the way core.native builds its own CPython extension. None where there is no compiler or
``Python.h``, the build fails, or ``TAPESCOPE_NO_NATIVE`` is set: the recorder's Python runs
instead (the same capture, byte for byte; tests/capture/test_recorder_hot.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

_SRC = Path(__file__).resolve().parent / "recorder_hot.c"
# no -march=native: nothing here is arithmetic, the same object runs on every CPU of a home
_FLAGS = ["-O2", "-fPIC", "-shared", "-fno-strict-aliasing"]
_mod: Any = False  # False: not tried yet; None: unavailable


def _build(build: bool) -> Any:
    import sysconfig

    from tapescope.core.cache import CacheError, KernelCache, cache_key
    from tapescope.core.native import BUILD_TIMEOUT_S, _compiler_id, load_extension

    cc = shutil.which(os.environ.get("CC", "gcc"))
    inc = sysconfig.get_paths().get("include")
    if cc is None or not inc or not os.path.isfile(os.path.join(inc, "Python.h")) \
            or not _SRC.is_file():
        return None
    key = cache_key(_SRC.read_bytes(), " ".join(_FLAGS), _compiler_id(cc),
                    sysconfig.get_config_var("EXT_SUFFIX") or "", inc)

    def compile_to(out: Path) -> None:
        from tapescope.core.progress import progress

        with progress(f"compiling the recorder's per-op path with {Path(cc).name} "
                      "(cached after)"):
            subprocess.run([cc, *_FLAGS, f"-I{inc}", "-o", str(out), str(_SRC)],
                           check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)

    try:
        if build:
            path, _ = KernelCache().get_or_build(f"recorder-hot-{key}", ".so", compile_to)
        else:
            path = KernelCache().lookup(f"recorder-hot-{key}", ".so")
            if path is None:
                return None  # not built yet, and not to be built here
        return load_extension("_ts_recorder_hot", path)
    except (OSError, ImportError, CacheError, subprocess.SubprocessError):
        return None  # the recorder's Python instead: the same capture, slower


def module(build: bool = False) -> Any:
    """The extension (``Hot``, ``setup``) where it is built already, or None; ``build``: built
    first where it is not (tapescope's own processes: the CLI before it starts the script, a
    benchmark; never the user's, where the recorder is a guest: nothing is compiled there).
    ``TAPESCOPE_NO_NATIVE`` set: None (asked at each call, so that a test can turn it off)."""
    global _mod
    if os.environ.get("TAPESCOPE_NO_NATIVE"):
        return None
    if _mod is False or (_mod is None and build):
        _mod = _build(build)
    return _mod
