"""The Qt-free models the views show (the graph model and its layout, array statistics, node
details, parity rows, search, scope runs, the backward stepper's model, the synthetic demo tape,
the repro folder, plain-text cutting, the number format and the ulp colour scale). They import
no Qt, not even lazily: the headless worker, the CLI and the report read them. pyproject's
import-linter contract ``models`` holds the folder to that, and tests/test_layers.py imports
each with PySide6 blocked (docs/layers.md)."""
