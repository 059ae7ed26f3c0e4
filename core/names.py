"""Names that come from a file, as they may be shown: escaped and cut (no Qt, no gpu).

A model or tape names its tensors and nodes; a hostile one names them ``ESC[31m`` + newlines +
10,000 ``A``s, which a terminal would colour, break into fake lines and scroll. ``shown(name)``
is the one form every name from a file takes before a terminal, a report, an error message or
the GUI sees it: characters that are not printable are written as escapes (``\\x1b``,
``\\n``, ``\\u200b``), and a long name is cut with how long it was. The tape file refuses such
names at load and save (``core.tapefile``: printable, at most ``MAX_NAME`` characters), so a
shown name of at most ``MAX_NAME`` characters is one a tape can keep.
"""

from __future__ import annotations

__all__ = ["MAX_NAME", "MAX_SHOWN", "shown"]

MAX_NAME = 256  # characters in a tape node name (core.tapefile refuses longer)
MAX_SHOWN = 80  # characters of a name in a line of text


def _escape(ch: str) -> str:
    if ch.isprintable():
        return ch
    code = ord(ch)
    if ch in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def shown(name: object, limit: int = MAX_SHOWN) -> str:
    """``name`` escaped (non-printable characters as ``\\x..``) and cut to at most ``limit``
    characters (``…`` and the full length at the end); printable short names are unchanged."""
    text = str(name)
    if len(text) <= limit and text.isprintable():
        return text
    out = "".join(_escape(c) for c in text[:limit])
    if len(out) <= limit and len(text) <= limit:
        return out
    tail = f"…({len(text)} characters)"
    return out[: max(limit - len(tail), 1)] + tail
