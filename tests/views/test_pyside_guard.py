"""The None-refcount workaround: tens of thousands of void Qt calls must not abort Python."""

from __future__ import annotations

import subprocess
import sys

import tapescope.views._pyside_guard as guard

SCRIPT = """
import os, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
import tapescope.views._pyside_guard  # applies the guard on import
from PySide6.QtCore import QCoreApplication, QObject, QPointF, Signal
app = QCoreApplication([])
p = QPointF()
for _ in range(50000):
    p.setX(1.0)   # a void method: on PySide6 6.12 + CPython 3.11 each call drops a None ref
class T(QObject):
    flag = Signal(bool)
t = T()
seen = []
t.flag.connect(seen.append)
for _ in range(5000):
    t.flag.emit(False)   # bool signal arguments drop references to True/False the same way
    t.flag.emit(True)
del seen
print("alive", sys.getrefcount(None) > 1000)
"""


def test_guard_applies_exactly_when_void_calls_leak():
    leaks = guard.void_call_leaks()
    assert guard.applied == (leaks and sys.version_info < (3, 12))


def test_fifty_thousand_void_calls_survive():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       timeout=60, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.strip() == "alive True"
