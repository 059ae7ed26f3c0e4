"""The capture's size budget, in a module of its own: the package's ``capture()`` and the
recorder both read it, and the recorder may not import its own package's ``__init__``
(tests/test_import_cycles.py)."""

DEFAULT_MAX_BYTES = 256 << 20  # values stored up to this many bytes, a digest of each beyond
