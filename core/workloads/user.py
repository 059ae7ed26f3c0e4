"""Users' own workloads: a Python file that defines a ``Workload`` subclass.

The file is the user's own program, run on purpose (like ``python file.py``); it is imported
under a private module name and must define a subclass of ``core.workloads.Workload`` — the one
named by a module-level ``WORKLOAD`` if there are several. Any error inside it, while importing or
while building, becomes a ``WorkloadError`` carrying the user's traceback, so the app can show it
and stay up.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from tapescope.core.workload import Workload


class WorkloadError(RuntimeError):
    """A user workload file could not be loaded or built; ``details`` holds the traceback."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def load_file(path: str | Path, **kwargs: Any) -> Workload:
    """Import ``path`` and instantiate its workload class with ``kwargs``."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{path}: no such workload file")
    name = f"tapescope_user_workload_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code: report whatever it raised, with its traceback
        sys.modules.pop(name, None)
        raise WorkloadError(f"{path}: {type(e).__name__}: {e}", traceback.format_exc()) from e
    cls = getattr(module, "WORKLOAD", None)
    if cls is None:
        found = [v for v in vars(module).values() if isinstance(v, type)
                 and issubclass(v, Workload) and v is not Workload
                 and v.__module__ == module.__name__]
        if len(found) != 1:
            raise WorkloadError(f"{path}: define exactly one Workload subclass, or name one with "
                                f"WORKLOAD = ... (found {len(found)})")
        cls = found[0]
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise WorkloadError(f"{path}: WORKLOAD must be a subclass of core.workloads.Workload")
    try:
        wl = cls(**kwargs)
        wl.record(0)
    except Exception as e:
        raise WorkloadError(f"{path}: {cls.__name__} failed: {type(e).__name__}: {e}",
                            traceback.format_exc()) from e
    return wl
