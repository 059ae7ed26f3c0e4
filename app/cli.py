"""The ``tapescope`` command line: discovers the subcommands in ``app.commands``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import app.commands


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand found in ``app.commands``."""
    parser = argparse.ArgumentParser(
        prog="tapescope",
        description="Tape inspector and debugger: CPU reference vs device, bit for bit.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(app.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"app.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; with no command it opens the GUI."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv:
        argv = ["gui"] if "gui" in parser._subparsers._group_actions[0].choices else ["--help"]
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
