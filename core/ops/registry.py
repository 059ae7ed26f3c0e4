"""The op table's old address: it is ``core.optable.registry`` since issue 24 (so that
``core.tape`` never runs ``core/ops/__init__``). This name stays for code written against it,
the same objects; new code imports ``core.optable.registry``."""

from tapescope.core.optable.registry import *  # noqa: F403
