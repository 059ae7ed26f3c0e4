"""``python -m tapescope ARGS``: the ``tapescope`` command (app/cli.py), for an environment
whose scripts folder is not on PATH."""

import sys

from tapescope.app.cli import main

sys.exit(main())
