"""The two runs a live session or a report can compare (``--compare``), by name.

Its own module, stdlib only: ``tapescope report --help`` lists them, and building the CLI's
parser must not import ``app.runs`` (numpy, the tape; issue 47 item 4). ``app.runs`` re-exports it.
"""

from __future__ import annotations

__all__ = ["COMPARES"]

COMPARES = {
    "cpu-device": "CPU ↔ device",
    "cpu-platform": "CPU ↔ CPU platform math",
    "unfused-fused": "device unfused ↔ fused",
    "f64-device": "CPU float64 ↔ device",
}
