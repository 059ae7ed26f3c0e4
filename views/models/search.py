"""One search over a tape's nodes, shared by the graph's search bar and the parity table's filter.

No Qt here. The haystack (``op`` and ``name`` lowercased, per node) is built once per tape as
numpy string arrays, so a keystroke is one vectorised substring test (``np.char.find``) instead
of a Python loop over 10k+ nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class NodeSearch:
    """Substring search on op and name (case-insensitive), or an id (``12`` / ``#12``)."""

    def __init__(self, nodes: Sequence):
        self.n = len(nodes)
        self._ops = np.array([str(nd.op).lower() for nd in nodes], dtype=str)
        self._names = np.array([(nd.name or "").lower() for nd in nodes], dtype=str)
        self._ids = np.array([int(nd.id) for nd in nodes], dtype=np.int64)
        self._cache: tuple[str, np.ndarray] = ("", np.ones(self.n, dtype=bool))

    def mask(self, text: str) -> np.ndarray:
        """A boolean per node (in ``nodes`` order): True where the node matches ``text``
        (everything for an empty text)."""
        t = text.strip().lower()
        if t == self._cache[0]:
            return self._cache[1]
        if not t:
            m = np.ones(self.n, dtype=bool)
        else:
            m = (np.char.find(self._ops, t) >= 0) | (np.char.find(self._names, t) >= 0)
            digits = t[1:] if t.startswith("#") else t
            if digits.isdigit():
                m |= self._ids == int(digits)
        self._cache = (t, m)
        return m

    def search(self, text: str) -> list[int]:
        """Node ids matching ``text``; an exact id hit comes first, then tape order."""
        t = text.strip()
        if not t:
            return []
        ids = self._ids[self.mask(t)].tolist()
        digits = t[1:] if t.startswith("#") else t
        if digits.isdigit() and int(digits) in ids:
            ids.remove(int(digits))
            ids.insert(0, int(digits))
        return ids
