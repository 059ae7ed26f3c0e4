"""Suite-wide settings: Hypothesis runs the same examples on every run unless asked otherwise.

Profile "ci" (the default): ``derandomize=True`` draws examples from a seed derived from each test,
and ``database=None`` means nothing replayed from ``.hypothesis/`` eats a test's budget, so a
property test either finds a planted bug on every run or on none (docs/testing.md). Tests keep
their own ``max_examples``. ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples (and
remembers failures in ``.hypothesis/``), for hunting by hand.
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import settings

# ---- Qt without a display ------------------------------------------------------------------
# A test that makes a QApplication in its own process (tests/capture's GUI test) took Qt's xcb
# platform on a machine with no display and no QT_QPA_PLATFORM (the README's command run by
# hand there), and Qt's fatal "could not connect to display" aborted the whole pytest process.
# Such a machine gets the offscreen platform, set here before anything imports Qt (tests/app
# and tests/views set it always); a display that is there, or a platform asked for, is kept.
if not (os.environ.get("DISPLAY", "").strip() or os.environ.get("WAYLAND_DISPLAY", "").strip()
        or os.environ.get("QT_QPA_PLATFORM", "").strip()):
    os.environ["QT_QPA_PLATFORM"] = "offscreen"

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ---- one bytecode cache for the subprocesses the suite starts ------------------------------
# Hundreds of tests run `python -m tapescope.app.cli ...` (the CLI contract, the GUI, workers).
# Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines), each of those interpreters
# compiled every project module it imports from source again. Instead the children write their
# bytecode under one PYTHONPYCACHEPREFIX (never the tree, which is what the variable asks for)
# and the next child reads it back. Only the children: a prefix also hides site-packages' own
# bytecode (torch cold: ~7 CPU s), so it is set in each test process once it runs (an xdist
# worker, or the one process of -n 0) and never in the xdist controller, whose environment the
# workers inherit. It is set at configure time, before collection, so the environments test
# modules build at import (tests/capture's ENV) carry it too.
# The cache lives in pytest's own per-user folder (/tmp/pytest-of-USER, made 0o700 by pytest)
# and outlives the run: the first children of a run (several at once under xdist) no longer
# compile torch, dynamo, PySide6 cold each run; each .pyc is checked against its source's
# mtime and size, as in any __pycache__. With --basetemp it is the session's own folder.
def _bytecode_dir(config) -> str:
    session = config._tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent  # the session folder, above each worker's own
    user = session.parent
    if user.name.startswith("pytest-of-") and session.name.startswith("pytest-"):
        return str(user / "tapescope-pycache")
    return str(session / "pycache")


_SET_BYTECODE = False


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin's own configure
def pytest_configure(config):
    global _SET_BYTECODE
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # bytecode goes where the user wants it already
    controller = not hasattr(config, "workerinput") and getattr(config.option, "tx", None) \
        and getattr(config.option, "dist", "no") != "no"
    if controller or not hasattr(config, "_tmp_path_factory"):
        return  # the xdist controller: its workers must start with site-packages' bytecode
    os.environ["PYTHONPYCACHEPREFIX"] = _bytecode_dir(config)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    _SET_BYTECODE = True


def pytest_unconfigure(config):
    global _SET_BYTECODE
    if _SET_BYTECODE:
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        del os.environ["PYTHONPYCACHEPREFIX"]
        _SET_BYTECODE = False


# ---- a module's generator, drawn per test ----------------------------------------------------
# A module-level ``rng = np.random.default_rng(SEED)`` gives a test data that depend on which of
# the module's tests ran before it in the same process, and xdist deals tests out differently
# each run: twice a test failed in full runs only (a 4-lane sum that one draw left equal to the
# plain sum, test_explain_blocked; a halving tree that gave an online softmax's bits,
# test_explain_orders), each correct for the data its seat in the order gave it. Each test
# here gets the module's generator afresh, seeded by the module's seed and its own name, so its
# data are the same alone, in its file, or on any worker.
_MODULE_GENERATORS = ("rng", "RNG")
_module_seeds: dict = {}  # (module, name) -> the seed the module wrote


@pytest.fixture(autouse=True)
def _module_generator_per_test(request):
    import zlib

    import numpy as np

    module = request.module
    for name in _MODULE_GENERATORS:
        gen = getattr(module, name, None)
        if isinstance(gen, np.random.Generator):
            seed = _module_seeds.setdefault((module.__name__, name),
                                            gen.bit_generator.seed_seq.entropy)
            setattr(module, name, np.random.default_rng(
                [*np.atleast_1d(seed).tolist(), zlib.crc32(request.node.name.encode())]))
    yield


# ---- the collected suite out of the cycle collector's way ------------------------------------
# A test process holds every collected module, parameter and library object (~400,000 after
# collecting the suite here), and a full collection walks them all: 0.3 s per gc.collect(), which
# each Qt test runs at its end (below: ~190 of them) and Python's own oldest-generation passes
# run whenever allocations pile up. Frozen once collection is done (gc.freeze: moved to a
# generation no collection visits), they stay alive as they would anyway, and a collection
# walks only what the tests made since: the Qt tests' widgets still die with their test.
def _freeze_survivors() -> None:
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_finish(session):
    import gc

    _freeze_survivors()
    gc.callbacks.append(_count_full_collections)


# What the tests import and keep after that (torch's operator tables on first use, a module's
# fixtures, Qt's and pyqtgraph's classes) is walked again by every full collection: measured
# in a full run, a worker's full collections grew to ~0.9 s each, a quarter of the suite's CPU
# time. So a test during which a full collection ran ends with one more, after its fixtures
# are gone, and what survives that is frozen too. (Inside a test nothing is frozen: a test
# that frees a cycle by gc.collect() sees it freed. What a frozen object later drops into
# cyclic garbage stays until the process ends: a test process's own leftovers.)
_full_collections = [0, 0]  # collections seen, the count at the last freeze


def _count_full_collections(phase: str, info: dict) -> None:
    if phase == "stop" and info["generation"] == 2:
        _full_collections[0] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield
    # (after the whole protocol: pytest lets go of the test's fixture values, item.funcargs,
    # only after its teardown; frozen at teardown, a window a fixture handed the test lived
    # on, its parentless menus and pyqtgraph items with it: 1,100 widgets a window test, and
    # every later style change walked them all. A Qt test's cycles die here, as below.)
    if "qtbot" in getattr(item, "fixturenames", ()):
        _qt_garbage_now()
    if _full_collections[0] != _full_collections[1]:
        _freeze_survivors()
        _full_collections[1] = _full_collections[0]


# ---- every path the native code dispatches to ----------------------------------------------
# core/native builds with -march=native, so a CPU runs one path and a test suite tests one
# (issue 49: the Intel machine's AVX-512 build failed a test our AMD machines passed). A test
# that asks for ``native_isa`` runs once per path this CPU can run (core.native.isa:
# avx512, avx2, c) and once more as gcc tunes the AVX-512 path for the other vendor's CPUs:
# the nearest this machine gets to the code -march=native builds there.
def _native_paths() -> list[tuple[str, str]]:
    from tapescope.core.native import isa

    can = isa.runnable()
    paths = [(name, "native") for name in can]
    if "avx512" in can:
        try:
            with open("/proc/cpuinfo") as f:
                amd = "AuthenticAMD" in f.read(4096)
        except OSError:
            amd = True
        paths.insert(1, ("avx512", "intel" if amd else "amd"))
    return paths or [("native", "native")]


@pytest.fixture(params=_native_paths(),
                ids=lambda p: p[0] if p[1] == "native" else f"{p[0]}-{p[1]}-tuned")
def native_isa(request):
    """The native code of one path (and gcc tuning) for the test, the process's own after."""
    from tapescope.core import native

    name, tune = request.param
    if name == "native":
        yield request.param
        return
    with native.use_isa(name, tune):
        # a path that does not build would skip every test as "no compiler": fail instead
        # (the plain-C path once timed out in gcc, unnoticed)
        if shutil.which(os.environ.get("CC", "gcc")) and not os.environ.get(
                "TAPESCOPE_NO_NATIVE") and native.library() is None:
            pytest.fail(f"the native code does not build for the {name} path ({tune} tuning)")
        yield request.param


# ---- Qt objects die here, not in a later test ---------------------------------------------
# pytest-qt closes a test's widgets and calls deleteLater, but processEvents does not run
# deferred deletes: they waited for the next test that spins an event loop, and the garbage
# collector freed their Python cycles whenever it liked, also during another test's painting
# or layout (a segfault in a later test's event processing, seen in full runs; the xdist worker
# died and the run then waited forever). Every test that used qtbot ends by running its
# deferred deletes and collecting its cycles, so what it made is gone before the next starts.
# Until then the widgets the test gave qtbot are held here: qtbot keeps only weak references,
# and a window whose Python side sits in a cycle (its signals' bound methods) could be freed
# by a collection that ran inside one of its own children's event handlers, in pytest-qt's
# processEvents after the test body returned: Qt then went on with a deleted receiver
# ("Internal C++ object (Overview) already deleted" in minimap's event(), then a segfault;
# one in ~13 runs of tests/views, reproduced by collecting inside Overview.event).
@pytest.fixture(autouse=True)
def _qt_objects_die_with_their_test(request):
    held: list = []
    if "qtbot" in request.fixturenames:
        bot = request.getfixturevalue("qtbot")
        register = bot.addWidget

        def register_and_hold(widget, *args, **kwargs):
            held.append(widget)
            return register(widget, *args, **kwargs)

        bot.addWidget = bot.add_widget = register_and_hold
    yield
    if "qtbot" in request.fixturenames:
        held.clear()
        _qt_garbage_now()


def _qt_garbage_now() -> None:
    """Run the deferred deletes (what qtbot closed is deleted by C++ here) and collect the
    Python cycles, between tests, where no event handler is running."""
    import gc
    import sys

    widgets = sys.modules.get("PySide6.QtWidgets")
    app = widgets.QApplication.instance() if widgets else None
    if app is None:
        return
    from PySide6.QtCore import QEvent

    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
