"""What a backend needs to know of each kernel beyond its signature, stated by the code that
wrote it: whether its threads may run as lanes, whether it has a barrier, whether it declares
__shared__ memory.

The generators (gpu.rowtable's row kernels, gpu.fusion's fused kernels and optimizer) know what
they wrote and say so; the hand-written kernel templates (gpu/kernels/*.cu) declare theirs in
gpu.source (``TEMPLATE_FACTS``). ``Device.compile(source, facts)`` takes them per kernel name:
the host backend builds its launchers from them (a lane kernel runs runs of a block's threads in
one vectorised call, a barrier kernel's threads run as fibers), the cuda backend needs none. A
kernel the facts do not name (your --kernel file, a test's source) runs one thread after
another (fibers where its body calls __syncthreads): only a generator's word makes lanes, never
the text. tests/gpu/test_kernel_facts.py holds every declaration to the text with an
independent C analyser (tests/gpu/lane_analyser.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["KernelFacts", "LANES", "PLAIN", "BARRIER", "Facts", "merge_facts"]


@dataclass(frozen=True)
class KernelFacts:
    """One kernel's schedule facts.

    ``lanes``: every way its body tells threads apart is a lane loop of host_prelude.h
    (TS_GRID_STRIDE, TS_BLOCK_STRIDE), it has no return, break or goto (each would end the
    other lanes' work too), and no lane loop carries a variable from one iteration to the next:
    running a run of threads in one call gives each thread its own operations (docs/devices.md,
    "Lane kernels").
    ``barrier``: it calls __syncthreads(). ``shared``: it declares __shared__ memory. A lane
    kernel has neither (ValueError): lanes share no block state.
    """

    lanes: bool = False
    barrier: bool = False
    shared: bool = False

    def __post_init__(self) -> None:
        if self.lanes and (self.barrier or self.shared):
            raise ValueError("a lane kernel has no barrier and no __shared__ memory")


LANES = KernelFacts(lanes=True)
PLAIN = KernelFacts()  # its threads one after another
BARRIER = KernelFacts(barrier=True)

#: kernel name -> its facts
Facts = Mapping[str, KernelFacts]


def merge_facts(parts: Iterable[Facts]) -> dict[str, KernelFacts]:
    """One table from several; a name stated twice is a generator bug (ValueError)."""
    out: dict[str, KernelFacts] = {}
    for part in parts:
        for name, f in part.items():
            if name in out:
                raise ValueError(f"kernel facts: {name} stated twice")
            out[name] = f
    return out
