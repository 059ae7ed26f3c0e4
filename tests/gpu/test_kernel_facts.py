"""The kernel facts (gpu.kernel_facts) the code generators and the templates state are what the
text says: every kernel of every source tapescope compiles has its facts; the lane kernels are
exactly those the C analyser (tests/gpu/lane_analyser.py, which the host backend no longer
runs) finds lane-safe; a barrier is stated where the body calls __syncthreads, __shared__ where
it declares shared memory. And the analyser itself refuses what could tell threads apart.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tapescope.core import workloads
from tapescope.gpu import fusion
from tapescope.gpu import source as kernel_source
from tapescope.gpu.device import header_paths
from tapescope.gpu.host import HostDevice
from tapescope.gpu.host_launcher import launcher, launchers
from tapescope.gpu.kernel_facts import BARRIER, LANES, PLAIN, KernelFacts, merge_facts
from tapescope.gpu.kernel_template import source_only_device
from tapescope.gpu.signature import parse_kernels
from tests.gpu.lane_analyser import lane_kernels
from tests.helpers.lane_kernels import GUARD, SQRT_SRC, SRC, SRC_FACTS

_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\([^)]*\)\s*\{')


def _bodies(source: str) -> dict[str, str]:
    out = {}
    for m in _KERNEL_RE.finditer(source):
        depth = 0
        for i in range(m.end() - 1, len(source)):
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            if depth == 0:
                out[m.group(1)] = source[m.end():i]
                break
    return out


def _held_to_the_text(source: str, facts) -> None:
    kernels = set(parse_kernels(source))
    assert set(facts) == kernels, ("stated for no kernel", set(facts) - kernels,
                                   "kernels without facts", kernels - set(facts))
    assert {n for n, f in facts.items() if f.lanes} == lane_kernels(source)
    for name, body in _bodies(source).items():
        assert facts[name].barrier == ("__syncthreads" in body), name
        assert facts[name].shared == ("__shared__" in body), name


def _sources():
    """(label, source, facts) of everything tapescope compiles: the library in both math
    modes, the device diff, fused plans of two workloads in both dtypes."""
    for math in ("refmath", "platform"):
        yield f"library-{math}", kernel_source.library_source(math), kernel_source.library_facts()
    dd = kernel_source.template("diff")
    yield ("diff", kernel_source.instantiate(dd, np.float64) + "\n"
           + kernel_source.instantiate(dd, np.float32),
           merge_facts(kernel_source.instantiate_facts(kernel_source.template_facts("diff"), dt)
                       for dt in (np.float64, np.float32)))
    dev = source_only_device()
    for name in ("mlp", "transformer"):
        for dt in ("float64", "float32"):
            wl = workloads.get(name, dtype=dt)
            p = fusion.plan(fusion.capture(dev, wl.tape, wl.record(0), fuse=False))
            yield f"fused-{name}-{dt}", p.source, p.facts


@pytest.mark.parametrize("label, source, facts", list(_sources()), ids=lambda v: v
                         if isinstance(v, str) and len(v) < 40 else "")
def test_every_stated_fact_is_what_the_text_says(label, source, facts):
    _held_to_the_text(source, facts)


def test_the_tests_own_sources_state_their_facts_honestly():
    _held_to_the_text(SRC, SRC_FACTS)
    _held_to_the_text(SQRT_SRC, {"sqrts": LANES})


def test_fused_row_kernels_state_a_barrier_only_where_they_wrote_one():
    """A forward row kernel has one between each pair of nodes; the parameter-gradient,
    loss-tail and optimizer kernels none (a backward row kernel has one where two or more
    nodes push an activation gradient: held to its text above)."""
    wl = workloads.get("transformer")
    p = fusion.plan(fusion.capture(source_only_device(), wl.tape, wl.record(0), fuse=False))
    roles = {k.name: k.role for k in p.kernels}
    for s in p.segments:
        if s.kind == "row":
            assert p.facts[s.forward] == BARRIER
        for name in (s.params, *(() if s.kind == "row" else (s.forward, s.backward))):
            if name:
                assert p.facts[name] == PLAIN, roles[name]
    assert all(p.facts[k.name] == PLAIN for k in p.kernels if k.role == "optimizer")


def test_the_library_facts_come_from_the_templates_and_the_row_table():
    from tapescope.gpu import rowtable

    facts = kernel_source.library_facts()
    assert facts["adam_f64"] == facts["mm_f32"] == LANES
    assert facts["clip_norm_f64"] == facts["maxpool_fwd_f32"] == PLAIN
    row = rowtable.library_facts()
    assert row and all(f == LANES for n, f in row.items() if not n.endswith("_total_T"))
    assert [n for n, f in row.items() if f == PLAIN] == ["cross_entropy_total_T"]
    assert kernel_source.library_facts() is not kernel_source.library_facts()  # copies
    f32 = kernel_source.library_facts((np.float32,))  # as library_source's dtypes
    assert set(f32) == {n for n in facts if n.endswith("_f32")}


def test_facts_are_consistent_and_names_are_checked():
    with pytest.raises(ValueError, match="no barrier"):
        KernelFacts(lanes=True, barrier=True)
    with pytest.raises(ValueError, match="no barrier"):
        KernelFacts(lanes=True, shared=True)
    assert kernel_source.instantiate_facts({"k_T": LANES}, np.float32) == {"k_f32": LANES}
    with pytest.raises(ValueError, match="not a template name"):
        kernel_source.instantiate_facts({"k": LANES}, np.float64)
    with pytest.raises(ValueError, match="k_T stated twice"):
        merge_facts([{"k_T": LANES}, {"k_T": PLAIN}])


def test_the_launcher_passes_the_facts_to_the_grid_runner():
    sig = parse_kernels(SRC)["rowdot"]
    assert ", 0, 1, order, nthreads);" in launcher(sig, LANES)
    assert ", 1, 0, order, nthreads);" in launcher(sig, BARRIER)
    assert ", 0, 0, order, nthreads);" in launcher(sig, PLAIN)
    text = launchers(parse_kernels(SRC).values(), SRC_FACTS)
    assert text.count(", 0, 1, order") == 3 and text.count(", 0, 0, order") == 1
    # the cache key covers the launchers: the same source with other facts is another object
    dev = HostDevice("test")
    assert dev.compile(SRC).path != dev.compile(SRC, SRC_FACTS).path


# ---- the analyser the facts are held to --------------------------------------------------------

def _lanes_of(src: str) -> set[str]:
    return set(lane_kernels(src))


def test_a_kernel_that_can_tell_its_threads_apart_is_not_lanes():
    assert _lanes_of(SRC) == {"rowdot", "muladd", "racy"}
    body = "TS_GRID_STRIDE(i, n) { y[i] = 1.0; }"
    head = 'extern "C" __global__ void k(double* y, long long n) {'
    assert _lanes_of(GUARD + head + body + "}") == {"k"}
    for inside in ("if (n < 0) return;", "for (;;) break;", "__shared__ double s[4];",
                   "y[0] = threadIdx.x;", "__syncthreads();", "TID(y);"):
        src = GUARD + "#define TID(p) p[threadIdx.x] = 0\n" + head + inside + body + "}"
        assert _lanes_of(src) == set(), inside
    # a helper that reads threadIdx, a loop macro defined without its #ifndef, an #undef,
    # a header from outside the kernel directory: nothing runs as lanes
    helper = "__device__ long long tid() { return threadIdx.x; }\n"
    assert _lanes_of(GUARD + helper + head + body + "}") == set()
    unguarded = GUARD.replace("#ifndef TS_GRID_STRIDE\n", "").replace("#endif\n", "")
    assert _lanes_of(unguarded + head + body + "}") == set()
    assert _lanes_of(GUARD + "#undef TS_GRID_STRIDE\n" + head + body + "}") == set()
    assert _lanes_of('#include "/tmp/x.h"\n' + GUARD + head + body + "}") == set()
    assert _lanes_of('#include "refmath.cuh"\n' + GUARD + head + body + "}") == {"k"}


@pytest.mark.parametrize("body, lanes", [
    ("long long c = 0; TS_GRID_STRIDE(i, n) { y[i] = c++; }", False),
    ("double acc = 0.0; TS_GRID_STRIDE(i, n) acc = acc + y[i]; y[0] = acc;", False),
    ("double b[2]; TS_GRID_STRIDE(i, n) { b[0] = y[i]; y[i] = b[0]; }", False),
    ("TS_GRID_STRIDE(i, n) { n = n - 0; y[i] = 1.0; }", False),
    ("double a; TS_GRID_STRIDE(i, n) { set(&a); y[i] = a; }", False),
    ("dim3 d; TS_GRID_STRIDE(i, n) { d.x = 1; y[i] = d.x; }", False),
    ("long long c = 0; TS_GRID_STRIDE(i, n) if (i) y[i] = 1.0; else c++;", False),
    ("TS_GRID_STRIDE(i, n) { TS_GRID_STRIDE(j, n) y[j] = 1.0; }", False),
    ("long long c = 0; TS_GRID_STRIDE(i, n) { y[i] = (double)c; c += 1; }", False),
    ("double* p = y + 1; TS_GRID_STRIDE(i, n - 1) p[i] = 0.0;", True),
    ("TS_GRID_STRIDE(i, n) { double a = y[i]; a = a * 2.0; y[i] = a; }", True),
    ("TS_GRID_STRIDE(i, n) { double s = 0.0; for (long long k = 0; k < 3; ++k) s += y[k]; "
     "y[i] = s; }", True),
])
def test_a_lane_loop_that_carries_a_threads_state_is_not_lanes(body, lanes):
    """A variable that outlives one iteration is the thread's own: run as lanes, the threads
    would share it."""
    head = 'extern "C" __global__ void k(double* y, long long n) {'
    helper = "__device__ void set(double* a) { *a = 1.0; }\n"
    assert _lanes_of(GUARD + helper + head + body + "}") == ({"k"} if lanes else set())


def test_no_kernel_header_names_threadidx():
    """The analyser trusts the kernel headers (gpu.device.header_paths, core's refmath C
    included): only the prelude (which defines the thread indices and the lane loops) may name
    threadIdx."""
    heads = header_paths()
    assert {"host_prelude.h", "refmath.cuh", "intrinsics_host.h"} <= set(heads)
    for name, p in heads.items():
        if name != "host_prelude.h":
            assert "threadIdx" not in p.read_text(), name
