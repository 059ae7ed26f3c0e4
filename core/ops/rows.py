"""The row forms' old address: they are ``core.optable.rows`` since issue 24 (beside the op
table, outside ``core.ops``). This name stays for code written against it, the same objects;
new code imports ``core.optable.rows``."""

from tapescope.core.optable.rows import *  # noqa: F403
