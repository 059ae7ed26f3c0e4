"""Text from a file, as a widget may show it: plain, cut, escaped where Qt reads markup.

Qt reads a QLabel's text, a tooltip or a message box as rich text when it looks like HTML
(``Qt.mightBeRichText``): a node named ``<img src="/dev/zero">`` made the window read
/dev/zero until it died (std::bad_alloc), one named ``<img src="/home/me/x.png">`` made it
read a file the model chose, and a 100 KB name in a label made the window 781,849 px wide
(issue 49). So every name, attribute and message from a file reaches a widget through one of
these (no Qt here: the Qt-free models use them too):

- ``cut(text)``: a name or value as shown in one line: ``core.names.shown`` at 120 characters
  (non-printable characters escaped, a longer text cut with its length);
- ``html(text)``: ``cut`` and HTML-escaped, for the few rich-text labels (Inspector header,
  backward stepper) that put it between their own tags;
- ``tip(text)``: a tooltip (the place for the full text): at most ``MAX_TIP`` characters, and
  when it holds ``<`` or ``&``, escaped inside ``<p>``, which Qt then reads as the HTML it is;
- ``message(text)``: a message or status line (newlines kept), at most ``MAX_MESSAGE``
  characters; widgets showing it use ``Qt.PlainText``.

A QLabel that shows such text either has ``Qt.PlainText`` or gets ``html(...)`` parts only;
``tests/app/test_window_hostile_names.py`` walks the window's widgets to hold it to that.
"""

from __future__ import annotations

from html import escape

from tapescope.core.names import shown

__all__ = ["MAX_MESSAGE", "MAX_SHOWN", "MAX_TIP", "cut", "html", "message", "tip"]

MAX_SHOWN = 120  # characters of a name in a label, a table cell, a graph box's line
MAX_TIP = 4096  # characters of a tooltip: the full name, unless it is longer than this
MAX_MESSAGE = 4096  # characters of a message box's or status line's text


def cut(text: object, limit: int = MAX_SHOWN) -> str:
    """``text`` as one line of at most ``limit`` characters (escaped, cut with its length)."""
    return shown(text, limit)


def html(text: object, limit: int = MAX_SHOWN) -> str:
    """``cut(text)``, HTML-escaped: safe between the tags of a rich-text label."""
    return escape(cut(text, limit), quote=True)


def message(text: object, limit: int = MAX_MESSAGE) -> str:
    """``text`` (lines kept) cut to at most ``limit`` characters, with how long it was."""
    s = str(text)
    if len(s) <= limit:
        return s
    tail = f"…({len(s):,} characters)"
    return s[: max(limit - len(tail), 1)] + tail


def tip(text: object, limit: int = MAX_TIP) -> str:
    """A tooltip for ``text``: cut to ``limit`` characters; when it holds ``<`` or ``&`` (which
    Qt could read as markup), escaped inside ``<p style='white-space:pre-wrap'>`` so Qt shows
    exactly these characters, lines kept. Plain text without them is returned as it is."""
    s = message(text, limit)
    if "<" not in s and "&" not in s:
        return s
    return "<p style='white-space:pre-wrap'>" + escape(s, quote=False) + "</p>"
