"""The ``tapescope`` command line: discovers the subcommands in ``app.commands``.

One contract for every command (README, "The CLI contract"): exit 0 when it went well (for a
comparison: bit-identical), 1 when a comparison found a difference, 2 for a bad input or setup.
A command reports a bad input by raising; ``main`` turns any exception into exactly one line on
stderr, ``tapescope <command>: <what and where>``, and exit 2. ``--debug`` (before or after the
command) adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback
import warnings
from types import TracebackType
from typing import Any

import tapescope.app.commands

MAX_LINE = 600  # a message is one line, and a bounded one (a hostile input may say a lot)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGES = tuple(os.path.join(_ROOT, p) + os.sep for p in ("app", "core", "gpu", "views"))


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (``tapescope train: --steps ...``), exit 2."""

    def error(self, message: str) -> None:  # noqa: D102 — argparse's hook
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand found in ``app.commands``."""
    parser = Parser(
        prog="tapescope",
        description="Tape inspector and debugger: CPU reference vs device, bit for bit. "
                    "Exit status: 0 ok (bit-identical), 1 differs, 2 bad input or setup.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the traceback too (also after the command)")
    from tapescope.app.about import version

    parser.add_argument("--version", action="version", version=f"tapescope {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(tapescope.app.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"tapescope.app.commands.{info.name}")
        if callable(getattr(module, "register", None)):  # others are helpers of the commands
            module.register(sub)
    for p in sub.choices.values():
        if "--debug" not in p._option_string_actions:
            # SUPPRESS: the subcommand's default never overwrites a --debug given before it
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                           help="on an error, print the traceback too")
    return parser


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _ours_or_library(path: str) -> bool:
    path = os.path.abspath(path)
    if path.startswith("<") or not os.path.isfile(path):
        return True
    libs = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.__file__)}
    return path.startswith(_PACKAGES) or any(path.startswith(p + os.sep) for p in libs)


def _user_frame(e: BaseException) -> tuple[str, int] | None:
    """The innermost frame of the user's own code (a workload script) in the exception chain, or
    where the op that poisoned a tape was recorded (``TapeError.recorded_at``)."""
    for x in _chain(e):
        tb: TracebackType | None = x.__traceback__
        found = None
        for frame, line in traceback.walk_tb(tb):
            if not _ours_or_library(frame.f_code.co_filename):
                found = (frame.f_code.co_filename, line)
        if found is not None:
            return found
        # a poisoned tape raises at the episode's end: where the bad op was recorded
        for path, line in getattr(x, "recorded_at", ()):
            if not _ours_or_library(path):
                found = (path, line)
        if found is not None:
            return found
    return None


def one_line(e: BaseException) -> str:
    """``e`` as one bounded line: its message (with its type when that says something) and,
    when the user's own code raised it, the file and line."""
    msg = " ".join(str(e).split())
    # our own errors, OSError and ValueError say what they are; for others the type is news
    plain = type(e).__module__.split(".")[0] == "tapescope" \
        or isinstance(e, (OSError, ValueError))
    if not msg:
        msg = type(e).__name__
    elif not plain:
        msg = f"{type(e).__name__}: {msg}"
    where = _user_frame(e)
    if where is not None:
        path, line = where
        name = os.path.basename(path)
        if f"{name}, line {line}" not in msg and f"{name} line {line}" not in msg:
            msg += f" ({path} line {line})"
    if len(msg) > MAX_LINE:
        msg = msg[: MAX_LINE - 1] + "…"
    return msg


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; with no command it opens the GUI."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with warnings.catch_warnings():
        if "--debug" not in argv:
            # stderr carries only tapescope's own lines: a numpy RuntimeWarning (a float16 model
            # overflowing, an empty batch), a ComplexWarning or a library's warning is not
            # printed. Appended, so it only catches what no other filter does: -W or
            # PYTHONWARNINGS (and a test's "error" filters) still win; --debug shows them.
            warnings.simplefilter("ignore", append=True)
        return _main(argv)


def _main(argv: list[str]) -> int:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    if not [a for a in argv if a != "--debug"]:
        argv = [*argv, "gui"] if "gui" in commands else ["--help"]
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the command they were given to, with its --help
            (commands.get(getattr(args, "command", None)) or parser).error(
                f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as e:  # a usage error (one line, 2) or --help (0): a code, not a raise
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    real_stdout = sys.stdout
    out = sys.stdout = _StdoutOrNothing(real_stdout)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # (here, where a reader gone is caught; not at the interpreter's exit)
        return 141 if out.gone else code  # (the files it writes written all the same)
    except KeyboardInterrupt as e:  # (a command may say what it had done: its message)
        said = f"; {e.args[0]}" if e.args and isinstance(e.args[0], str) else ""
        print(f"tapescope {args.command}: interrupted{said}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (``| head``): quiet, as coreutils are (128 + SIGPIPE)
        _stdout_gone()
        return 141
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            raise
        # SystemExit("message"): a command's own way of saying "bad input"
        msg, prefix = " ".join(str(e.code).split()), f"tapescope {args.command}: "
        print(msg if msg.startswith(prefix) else prefix + msg, file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 — the contract: any failure is one line and exit 2
        if args.debug:
            traceback.print_exception(e)
        msg = out_of_memory(args) if any(isinstance(x, MemoryError) for x in _chain(e)) \
            else one_line(e)
        print(f"tapescope {args.command}: {msg}", file=sys.stderr, flush=True)
        return 2
    finally:
        sys.stdout = real_stdout


class _StdoutOrNothing:
    """``sys.stdout`` until its reader leaves (``parity ... --json OUT | head``), then nothing:
    the command goes on to write its files (the ``--json``, a report) instead of dying at the
    print that met the closed pipe, and exits 141 as a command SIGPIPE ends."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.gone = False

    def write(self, s: str) -> int:
        if not self.gone:
            try:
                return self._real.write(s)
            except BrokenPipeError:
                self._leave()
        return len(s)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._real.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self.gone = True
        _stdout_gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _stdout_gone() -> None:
    """Point stdout at /dev/null: the interpreter's last flush at exit would fail again and
    print 'Exception ignored' on stderr."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def out_of_memory(args: argparse.Namespace) -> str:
    """The one line for a MemoryError: which budget to raise (the process's memory) or lower
    (the command's own, where it has them)."""
    own = [f"{flag} (now {getattr(args, key) or 'its default'})" for key, flag in
           (("max_bytes", "--max-bytes"), ("max_elements", "--max-elements"))
           if hasattr(args, key)]
    lower = f"; or lower {' or '.join(own)} so that the run is refused before it" if own else ""
    return ("out of memory: the process's memory ran out (MemoryError); raise its memory limit "
            f"(ulimit -v, the container's limit) or use a machine with more{lower}")


if __name__ == "__main__":
    sys.exit(main())
