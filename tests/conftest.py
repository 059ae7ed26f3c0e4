"""Suite-wide settings: Hypothesis runs the same examples on every run unless asked otherwise.

Profile "ci" (the default): ``derandomize=True`` draws examples from a seed derived from each test,
and ``database=None`` means nothing replayed from ``.hypothesis/`` eats a test's budget, so a
property test either finds a planted bug on every run or on none (docs/testing.md). Tests keep
their own ``max_examples``. ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples (and
remembers failures in ``.hypothesis/``), for hunting by hand.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
