"""The house style is checked with the tests: ruff over the whole tree (config in pyproject), and
the tests' own rule: no test module imports another."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    cmd = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    r = subprocess.run([*cmd, "check", "--output-format=concise", "."], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]


# modules of one test folder that other folders may import besides tests/helpers: the model zoo
# (docs/models.md and benchmarks/ name it by its path) and tests/stats.py (a tool, not a test)
SHARED_OUTSIDE_HELPERS = {"tests.models.zoo", "tests.stats"}


def _test_imports(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import of a ``tests.*`` module in ``path``, at any depth (a
    function's import counts: it runs the other module all the same); ``from pkg import mod``
    names the module ``pkg.mod`` when ``mod`` is one."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = rel[:-1] if rel[-1] != "__init__" else rel
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[:len(package) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            for a in node.names:
                sub = f"{base}.{a.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").is_file() or \
                    (ROOT / Path(*sub.split("."))).is_dir()
                out.append((node.lineno, sub if is_module else base))
    return sorted({(line, m) for line, m in out if m == "tests" or m.startswith("tests.")})


def _folder(module: str) -> str:
    """tests.app.test_x -> tests.app; tests.test_lint -> tests (a module's test folder)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else "tests"


def test_no_test_module_imports_another_and_shared_helpers_live_in_tests_helpers():
    """A test module never imports another test module (``test_*.py``) or a ``conftest.py``: what
    two test files share lives in tests/helpers/ under a public name (conftest fixtures reach
    their tests as fixtures). A module of one test folder is imported from another folder only
    through tests/helpers (or the two named in SHARED_OUTSIDE_HELPERS)."""
    files = sorted((ROOT / "tests").rglob("*.py"))
    assert len(files) > 200, "the walk found the tests"  # not vacuous: the tree is here
    bad = []
    for path in files:
        me = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for line, mod in _test_imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            last = mod.rsplit(".", 1)[-1]
            if last.startswith("test_") or last == "conftest":
                bad.append(f"{where} imports the test module {mod}: move what it needs to "
                           "tests/helpers/")
            elif (_folder(mod) != _folder(me) and not mod.startswith("tests.helpers")
                  and mod not in SHARED_OUTSIDE_HELPERS and mod not in ("tests", "tests.helpers")):
                bad.append(f"{where} imports {mod} from another test folder: move it to "
                           "tests/helpers/")
    assert not bad, "\n".join(bad)


def test_the_import_rule_sees_each_way_of_naming_a_test_module():
    """The walk resolves absolute, relative, package and in-function imports to the module."""
    text = ("from tests.app.test_live import BRANCHES\n"
            "from . import test_time_travel\n"
            "from .conftest import READY_MS\n"
            "import tests.core.test_tape\n"
            "import numpy\n"
            "def f():\n    from tests.helpers import fs_faults\n")
    got = [m for _, m in _test_imports(ROOT / "tests" / "app" / "probe.py", text)]
    assert got == ["tests.app.test_live", "tests.app.test_time_travel", "tests.app.conftest",
                   "tests.core.test_tape", "tests.helpers.fs_faults"]  # in line order


def test_the_mutation_table_names_files_and_tests_that_exist():
    """[tool.tapescope.mutation] (tests/mutation/run.sh) points at modules and test files that
    exist, and at test functions they define: a renamed test file fails here, not in a run."""
    import tomllib

    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["tapescope"]["mutation"]
    assert len(table) >= 8
    bad = []
    for module, args in table.items():
        if not (ROOT / module).is_file():
            bad.append(f"{module}: no such module")
        for arg in args:
            target = arg.removeprefix("--deselect=")
            if not target.startswith("tests/"):
                continue  # -k/-m and their expressions
            path, _, test = target.partition("::")
            if not (ROOT / path).is_file():
                bad.append(f"{module}: {path}: no such test file")
            elif test and f"def {test.split('[')[0]}(" not in (ROOT / path).read_text():
                bad.append(f"{module}: {target}: no such test")
    assert not bad, "\n".join(bad)
