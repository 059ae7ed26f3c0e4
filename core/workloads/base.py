"""The Workload base's old address: it is ``core.workload`` since issue 24 (so that
``core.onnx.workload`` never runs ``core/workloads/__init__``). This name stays for code
written against it; new code imports ``core.workload`` (or ``from core.workloads import
Workload``)."""

from tapescope.core.workload import *  # noqa: F403
