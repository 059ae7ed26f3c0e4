"""Qt's own messages on a command line run: none on success, and what matters on error.

Qt writes warnings such as "This plugin does not support propagateSizeHints()" (the offscreen
platform, once per window shown) straight to stderr; ``tapescope gui --screenshot`` and
``tapescope report`` printed it on every run, among the lines that say what went wrong. The
handler drops Qt's debug, info and warning messages unless ``--debug`` asked for them (then
they go to stderr, prefixed ``qt:``); critical and fatal ones always go there.
"""

from __future__ import annotations

import sys


def quiet_qt(debug: bool = False) -> None:
    """Install the message handler (before the QApplication, so its start is covered too)."""
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    loud = (QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg)

    def handler(kind, _context, message: str) -> None:
        if debug or kind in loud:
            print(f"qt: {message}", file=sys.stderr, flush=True)

    qInstallMessageHandler(handler)
