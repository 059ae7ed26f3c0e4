"""No import cycles among our modules (core, gpu, views, app), built from the source with ast.

Module-level imports (what runs at import time) must form a DAG. Imports inside functions are
lazy, but a cycle through one still couples two modules both ways: the whole graph, lazy imports
included, must be a DAG too, but for the cycles listed below, which may only disappear (a new
one fails, and so does a listed one that is gone: take it off the list). No module imports names
from its own package's ``__init__`` (a re-export): it imports the sibling that defines them.
"""

from __future__ import annotations

import networkx as nx
import pytest

from tests.helpers.import_graph import (
    ROOT,
    graph,
    module_imports,
    modules,
)

# the graphs parse every module of the tree (~3 s, cached per process): one xdist worker runs
# this module's tests, so the parse is paid once, not once per worker they land on
pytestmark = pytest.mark.xdist_group("import-graph")

# lazy (function-level) cycles left, each as its sorted member list: none (the Run protocol,
# issue 24 item 2, removed app.remote <-> app.runs; core.onnx's ring went with
# core/onnx/gradient.py).
# With the set empty the test asserts no cycle at all; a new one fails it.
KNOWN_LAZY_CYCLES: set[tuple[str, ...]] = set()


def test_module_level_imports_form_a_dag():
    g = graph(lazy=False)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_cycle_but_the_known_lazy_ones():
    found = {tuple(sorted(c)) for c in nx.simple_cycles(graph(lazy=True))}
    new = found - KNOWN_LAZY_CYCLES
    assert not new, "new import cycles (through function-level imports):\n" + "\n".join(
        " <-> ".join(c) for c in sorted(new))
    gone = KNOWN_LAZY_CYCLES - found
    assert not gone, "cycles gone, take them off KNOWN_LAZY_CYCLES:\n" + "\n".join(
        " <-> ".join(c) for c in sorted(gone))


# cycles that close only through a package's __init__ (importing a submodule runs it), each as
# its sorted member list; they may only disappear. None left: the op table (core.optable) left
# core.ops, whose __init__ (the op wrappers) imports core.tape, which looks ops up in the table;
# the Workload base (core.workload) left core.workloads, whose get() loads core.onnx.workload,
# which subclasses it. With the set empty the test asserts no such cycle at all.
KNOWN_INIT_CYCLES: set[tuple[str, ...]] = set()


def test_no_cycle_through_a_package_init_but_the_known_ones():
    found = {tuple(sorted(c)) for c in nx.simple_cycles(graph(lazy=True, inits=True))}
    found -= KNOWN_LAZY_CYCLES
    new, gone = found - KNOWN_INIT_CYCLES, KNOWN_INIT_CYCLES - found
    assert not new, "new import cycles (through a package __init__):\n" + "\n".join(
        " <-> ".join(c) for c in sorted(new))
    assert not gone, "cycles gone, take them off KNOWN_INIT_CYCLES:\n" + "\n".join(
        " <-> ".join(c) for c in sorted(gone))


def test_no_module_imports_its_own_package_init():
    """`from tapescope.core import Tape` inside core/ reads a re-export of core/__init__, which
    imports
    half of core: a cycle waiting for its first import-order change. Import core.tape."""
    g = graph(lazy=True)
    bad = sorted(f"{a} imports {b}" for a, b in g.edges if a.startswith(b + "."))
    assert not bad, "\n".join(bad)


def test_the_graph_sees_our_imports():
    def e(g: nx.DiGraph, a: str, b: str) -> bool:
        return g.has_edge(f"tapescope.{a}", f"tapescope.{b}")

    g = graph(lazy=False)
    assert e(g, "gpu.program", "core.tape") and e(g, "core.ops", "core.tape")
    assert not e(g, "core.tape", "core.ops") and not e(g, "gpu.program", "gpu.fusion")
    lazy = graph(lazy=True)  # a function-level import, and a package's re-export as its own
    assert e(lazy, "app.runs", "app.step_history") and not e(g, "app.runs", "app.step_history")
    assert e(lazy, "core.onnx", "core.onnx.gradient") and e(g, "core.gradcheck", "core.ops")
    inits = graph(lazy=False, inits=True)  # core.tape imports core.optable.registry
    assert e(inits, "core.tape", "core.optable") and not e(g, "core.tape", "core.optable")
    assert e(inits, "core.ops.nn", "core.optable") and not e(inits, "core.tape", "core.ops")
    assert not e(inits, "core.ops.nn", "core.ops") and not e(inits, "core.tape", "core")


def test_a_re_export_is_an_edge_to_the_package(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from tapescope.core import Tape, ops\n")
    mods = modules()
    assert module_imports("tapescope.core.onnx.m", src, mods, lazy=True) == {"tapescope.core",
                                                                        "tapescope.core.ops"}
    assert module_imports("tapescope.core.onnx.m", src, mods, lazy=False) == set()


def test_the_old_addresses_of_the_moved_modules_name_the_same_objects():
    """core.ops.registry / core.ops.rows / core.workloads.base moved (core.optable,
    core.workload); code written against the old names gets the very same objects, and no
    module of ours still imports them."""
    import tapescope.core.ops.registry as old_registry
    import tapescope.core.ops.rows as old_rows
    import tapescope.core.optable.registry as registry
    import tapescope.core.optable.rows as rows
    import tapescope.core.workload as workload
    import tapescope.core.workloads.base as old_base

    assert old_registry.REGISTRY is registry.REGISTRY and old_registry.OpDef is registry.OpDef
    assert old_registry.grad_inputs is registry.grad_inputs
    assert old_rows.RowForm is rows.RowForm and old_rows.fill is rows.fill
    assert old_base.Workload is workload.Workload
    g = graph(lazy=True)
    old = {"tapescope.core.ops.registry", "tapescope.core.ops.rows",
           "tapescope.core.workloads.base"}
    users = sorted(f"{a} imports {b}" for a, b in g.edges if b in old)
    assert not users, "\n".join(users)


def test_the_worker_protocols_two_ends_do_not_import_each_other():
    """app.remote_server (the worker) never loads the client, the client never the server,
    even lazily; and the worker command, as it starts serving, has loaded no client code (a
    live session's --worker reaches the client only when it opens a remote pair)."""
    import os
    import subprocess
    import sys

    g = graph(lazy=True)
    server, client = nx.descendants(g, "tapescope.app.remote_server"), nx.descendants(g,
                                                                                      "tapescope.app.remote_client")
    assert "tapescope.app.remote_protocol" in server and "tapescope.app.remote_protocol" in client
    assert "tapescope.app.remote_client" not in server and "tapescope.app.remote" not in server
    assert "tapescope.app.remote_server" not in client and "tapescope.app.remote" not in client
    code = ("import sys, argparse; from tapescope.app.commands import worker;"
            " p = argparse.ArgumentParser(); worker.add_timeout_flags(p);"
            " import tapescope.app.live_worker, tapescope.app.remote_server;"
            " print(sorted(m for m in sys.modules if m.startswith('tapescope.app.remote')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["['tapescope.app.remote_protocol',",
                                  "'tapescope.app.remote_server']"]
