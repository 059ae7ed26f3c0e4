"""CLI subcommands: each module here exposes ``register(subparsers)``.

``register`` adds one subparser and sets ``func=run`` where ``run(args) -> int`` returns the exit
code. Modules must import heavy dependencies (Qt, onnx, the device layer) inside ``run`` so that
``tapescope --help`` and every headless command start fast and work without a display.
"""
