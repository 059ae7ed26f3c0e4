"""Memory a script shares with numpy, under the recorder (docs/capture.md, "The recorder only
reads").

``torch.from_numpy(a)`` (and ``torch.as_tensor`` / ``torch.asarray`` of an array they do not
copy, ``torch.frombuffer``) gives a tensor over the array's memory, ``t.numpy()`` an array over
the tensor's: a script that refills a batch buffer through numpy (``buf[:] = ...`` between
steps) or edits a weight through ``p.numpy()`` writes tensors with no aten op, and no version
counter moves. The recorder keys a value by its tensor and version, so the next op's input was
the value recorded before the write: the judge re-ran it on bytes that op never read, and called
it (a transpose, a product) ``introduced``. While a capture runs, these entry points are wrapped:
each tensor they return or are called on has its memory watched (``Recorder.watch_shared``),
and every op that takes a tensor over watched memory compares its bytes with their recorded
value first (``Recorder._fresh_reads``; ``meta.outside_writes`` counts the values read afresh).
The wrappers call torch's own and return what it returns; they go when the last capture ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["install"]

# the recorders of the captures on in this process, innermost last (each a getter: None once
# its recorder is gone), and the entry points wrapped: (owner, name, torch's own, ours, whether
# the owner had its own attribute)
_GETTERS: list[Callable[[], Any]] = []
_WRAPPED: list[tuple[Any, str, Any, Callable, bool]] = []


def install(get_recorder: Callable[[], Any]) -> Callable[[], None]:
    """Wrap numpy's ways into tensors' memory (once) for a capture whose recorder
    ``get_recorder`` gives; returns what ends it (the wrappers go when no capture is left)."""
    if not _WRAPPED:
        _wrap()
    _GETTERS.append(get_recorder)

    def restore() -> None:
        for i in range(len(_GETTERS) - 1, -1, -1):
            if _GETTERS[i] is get_recorder:
                del _GETTERS[i]
                break
        if not _GETTERS:
            for owner, name, orig, ours, own in _WRAPPED:
                if owner.__dict__.get(name) is ours:
                    if own:
                        setattr(owner, name, orig)
                    else:
                        delattr(owner, name)
            _WRAPPED.clear()
    return restore


def _watch(t: Any, holder: Any = None) -> None:
    """``t``'s memory shared with numpy while ``holder`` lives (None: ``t``): told to the
    innermost capture's recorder."""
    import torch

    if not _GETTERS or type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        return
    rec = _GETTERS[-1]()
    if rec is not None and getattr(rec, "active", False):
        try:
            rec.watch_shared(t, holder)
        except Exception:  # noqa: BLE001 — the script's call never fails for the recorder
            pass


def _shares(t: Any, data: Any) -> bool:
    """Whether tensor ``t`` lies in numpy array ``data``'s memory (``as_tensor`` did not
    copy it)."""
    import numpy as np

    if not isinstance(data, np.ndarray) or data.size == 0:
        return False
    try:
        lo = data.__array_interface__["data"][0]
        return lo <= t.data_ptr() < lo + data.nbytes
    except (RuntimeError, TypeError, KeyError):
        return False


def _call(orig: Callable, args: tuple, kwargs: dict) -> Any:
    """``orig(*args, **kwargs)``, its warnings shown as from the wrapper's caller: torch warns
    from C++ (a read-only array to ``from_numpy``) at the innermost Python frame, which would
    be the wrapper's, so the script's stderr and its filters by module would see our file.
    Caught while it runs (every one), then each given to the script's own filters and
    registry at the caller's line (``warnings.warn_explicit``), as if no wrapper were there:
    one its filters make an error raises from the call, as it would have."""
    import sys
    import warnings

    caller = sys._getframe(2)  # (0: here, 1: the wrapper, 2: who called torch's function)
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return orig(*args, **kwargs)
    finally:
        g = caller.f_globals
        for w in caught:
            warnings.warn_explicit(w.message, w.category, caller.f_code.co_filename,
                                   caller.f_lineno, module=g.get("__name__"),
                                   registry=g.setdefault("__warningregistry__", {}),
                                   module_globals=g)


def _wrap() -> None:
    import torch

    def result_watched(orig: Callable, check: Callable[[Any, tuple], bool] | None) -> Callable:
        @functools.wraps(orig)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = _call(orig, args, kwargs)
            if _GETTERS and (check is None or check(out, args)):
                _watch(out)
            return out
        wrapped._tapescope_orig = orig  # type: ignore[attr-defined]
        return wrapped

    def self_watched(orig: Callable) -> Callable:
        @functools.wraps(orig)
        def numpy(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = _call(orig, (self, *args), kwargs)
            if _GETTERS and not kwargs.get("force") and self.is_cpu:
                _watch(self, out)  # (the array: ``p.detach().numpy()``'s tensor dies at once)
            return out
        numpy._tapescope_orig = orig  # type: ignore[attr-defined]
        return numpy

    def given_array(out: Any, args: tuple) -> bool:
        return bool(args) and _shares(out, args[0])

    for owner, name, make in (
            (torch, "from_numpy", lambda f: result_watched(f, None)),
            (torch, "frombuffer", lambda f: result_watched(f, None)),
            (torch, "as_tensor", lambda f: result_watched(f, given_array)),
            (torch, "asarray", lambda f: result_watched(f, given_array)),
            (torch.Tensor, "numpy", self_watched)):
        orig = getattr(owner, name, None)
        while getattr(orig, "_tapescope_orig", None) is not None:  # (one of ours left there)
            orig = orig._tapescope_orig
        if orig is None:
            continue
        own = name in owner.__dict__
        ours = make(orig)
        setattr(owner, name, ours)
        _WRAPPED.append((owner, name, orig, ours, own))
