"""The child side of ``tapescope capture``: install the recorder, then run the user's script as
``python script.py ARGS`` / ``python -m pkg.mod ARGS`` would (``runpy``, ``sys.argv`` and
``sys.path[0]`` as the script expects), unmodified.

Started as ``python -c BOOTSTRAP SCRIPT-OR-MODULE ARGS...`` with the settings in the environment
variable ``TAPESCOPE_CAPTURE`` (JSON: out, steps, max_bytes, hashes_only, digest, module, fd, apply:
the settings to flip first, app/capture/flip.py; run and events_dir for the ranks of a torchrun),
which is removed before the script runs. Events go to the parent on the pipe ``fd`` (one JSON
object a line: ``step``, ``written``, ``error``, ``none``), never on the script's own
stdout/stderr; a rank under torchrun (which passes no pipe on) writes them to
``events_dir/rankN.jsonl`` and its capture to ``OUT.rankN.capture``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import shutil
import sys
import tempfile

ENV = "TAPESCOPE_CAPTURE"


def code(root: str) -> str:
    """The ``python -c`` program. Everything of ours is under the one name ``tapescope``, so the
    user's own ``core``/``app``/... packages beside their script stay theirs. For an interpreter
    that does not have us installed, a folder holding our ``tapescope`` goes to the *end* of its
    path, where it shadows nothing of the user's."""
    return (f"import sys; sys.path.append({package_parent(root)!r}); "
            "import tapescope.app.capture.bootstrap as _b; _b.main()")


FOLDERS = ("app", "core", "gpu", "views", "resources")  # (pyproject.toml's package-dir)


_PREFIX = "tapescope_path."


def _sweep_stale(where: str) -> None:
    """Remove the link folders ``package_parent`` made in ``where`` for processes that are gone
    without their exit handlers (killed, or ended by ``os._exit``): ``tapescope_path.PID.*``,
    ours (same user), PID no longer running. Only links are inside: ``rmtree`` removes them,
    never what they point to."""
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        pid = name[len(_PREFIX):].split(".", 1)[0]
        if not name.startswith(_PREFIX) or not pid.isdigit():
            continue
        path = os.path.join(where, name)
        try:
            if os.lstat(path).st_uid != os.getuid() or not os.path.isdir(path) or \
                    os.path.islink(path):
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, True)
        except (OSError, OverflowError):
            continue  # alive under another user (PermissionError), or unreadable: left alone


def package_parent(root: str) -> str:
    """A folder whose ``tapescope`` entry is our package, laid out as installed: ``root``'s own
    parent when it is installed as ``tapescope``, else (``root`` a checkout) a temporary folder
    whose ``tapescope`` holds links to the checkout's ``app/_top`` files (the package itself)
    and its folders, removed when this process ends (the links only: ``rmtree`` does not follow
    them)."""
    if os.path.basename(root) == "tapescope":
        return os.path.dirname(root)
    _sweep_stale(tempfile.gettempdir())
    tmp = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}.")
    atexit.register(shutil.rmtree, tmp, True)
    pkg = os.path.join(tmp, "tapescope")
    os.mkdir(pkg)
    top = os.path.join(root, "app", "_top")
    for name in os.listdir(top):
        if name.endswith(".py"):
            os.symlink(os.path.join(top, name), os.path.join(pkg, name))
    for name in FOLDERS:
        os.symlink(os.path.join(root, name), os.path.join(pkg, name))
    return tmp


def main() -> None:
    cfg = json.loads(os.environ.pop(ENV))
    pipe = None
    if cfg.get("fd") is not None:
        os.set_inheritable(cfg["fd"], False)  # the script's own children do not get it
        pipe = os.fdopen(cfg["fd"], "w", buffering=1)
    elif cfg.get("events_dir"):  # a rank under torchrun (no pipe through it): a file per rank
        rank = os.environ.get("RANK", "0")
        pipe = open(os.path.join(cfg["events_dir"], f"rank{int(rank)}.jsonl"), "w",  # noqa: SIM115
                    buffering=1, encoding="utf-8")

    def tell(**msg: object) -> None:
        if pipe is not None:
            try:
                pipe.write(json.dumps(msg) + "\n")
            except OSError:
                pass

    from tapescope.app.capture.recorder import Recorder

    meta = {"argv": sys.argv[1:], "module": cfg.get("module", False), "cwd": os.getcwd()}
    from tapescope.app.capture.compiled import install
    from tapescope.app.capture.flip import apply

    holder: list[Recorder] = []
    # torch.compile's backend wrapped: each compiled graph and each call of it recorded
    install(meta, lambda: holder[0] if holder else None)
    from tapescope.app.capture.tracers import install as install_trace

    install_trace(meta)  # torch.jit.trace, torch.export with the modes off (they fail under one)
    from tapescope.app.capture.shared_np import install as install_np

    install_np(lambda: holder[0] if holder else None)  # memory shared with numpy: watched
    if cfg.get("apply"):  # capture --set / sweep: settings flipped before the script runs
        meta["applied"] = apply(cfg["apply"])

    def done(rec: Recorder) -> None:
        n = rec.steps_done()
        if rec.failed:  # recording broke at an op; the script ran on untouched
            tell(event="failed", message=rec.failed)
        if n == 0:
            rec.discard()
            tell(event="none")
            return
        out = cfg["out"]
        if cfg.get("run"):  # one of the ranks of a torchrun (core/capture/ranks.py)
            from tapescope.app.capture.collectives import rank_of
            from tapescope.core.capture.ranks import rank_path

            rank, world = rank_of() or (int(os.environ.get("RANK", "0")),
                                        int(os.environ.get("WORLD_SIZE", "1")))
            meta["rank"] = {"rank": rank, "world_size": world, "run": cfg["run"]}
            out = rank_path(out, rank)
        try:
            rec.save(out, meta)
        except Exception as e:  # noqa: BLE001 — said to the parent; the script runs on
            tell(event="error", message=" ".join(str(e).split()))
            return
        tell(event="written", path=out, steps=n, ops=rec.step_start[n], values=len(rec.v_dtype),
             stored_bytes=rec.stored_bytes, hashed=rec.n_hashed,
             compile_called=bool(meta.get("compile_called")), compile=meta.get("compile"),
             graphs=len(rec.graphs), native=rec.ops_native > 0 or rec._hot is not None,
             seconds=round(rec.t0 and __import__("time").perf_counter() - rec.t0, 3))

    rec = Recorder(cfg["steps"], cfg["max_bytes"], cfg["hashes_only"], on_done=done,
                   on_step=lambda n: tell(event="step", step=n),
                   digest=cfg.get("digest", "xxh3_128"), spool=cfg["out"])
    holder.append(rec)
    target, args = sys.argv[1], sys.argv[2:]
    if cfg.get("module"):
        sys.argv = [target, *args]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        rec.start()
        try:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        finally:
            rec.finish()
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        rec.start()
        try:
            _run_script(target)
        finally:
            rec.finish()


def _run_script(target: str) -> None:
    """Run the script file ``target`` as ``python target`` does: as ``__main__``, its code and
    ``__file__`` named by the absolute path, ``sys.argv[0]`` as given (``runpy.run_path``
    names both by the path it is handed: relative, the script's ``__file__``, its warnings and
    tracebacks differed from its own run; absolute, its ``sys.argv[0]`` did)."""
    import builtins
    import io
    import types

    path = os.path.abspath(target)
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__=None,
                         __spec__=None, __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
