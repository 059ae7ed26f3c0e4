"""The numbers docs/testing.md states, printed by one command (issue 48).

    python -m tests.stats                      # every table, as Markdown (~1 min: the node tests)
    python -m tests.stats --doc docs/testing.md          # and put them on the page
    python -m tests.stats --doc docs/testing.md --only folders,properties   # just those
    python -m tests.stats --record suite       # run the default suite, record its time
    python -m tests.stats --record plants      # run tests/mutation/plants.py, record its time

The tables, each from where its numbers live:

- **settings**: pyproject.toml's pytest workers and per-test timeout, tests/conftest.py's
  Hypothesis profile;
- **tests per folder**: an AST walk of ``tests/**/test_*.py``, those git tracks (test functions,
  parametrized, Hypothesis properties, marked ``slow``), no import, no collection;
- **property tests**: every ``@given`` test with its ``max_examples``, ``deadline`` and
  ``@example`` count, from the same walk;
- **ONNX node tests**: ONNX's node tests through our executor (``core.onnx.conformance``) and
  through the tape import (``core.onnx.tape_conformance``), run now;
- **recorded long runs**: what takes minutes to hours (the suite's wall time, mutation scores,
  the plants' check, one-off measurements), from ``tests/numbers.json``, each with the command,
  the machine and the date that produced it. ``--record`` re-measures the first two kinds and
  rewrites their entry; a mutation score is entered from mutmut's ``stats.json`` and the
  survivors read by hand (the score itself is computed here: killed / (run - equivalent)).

tests/test_testing_numbers.py regenerates every table but the node tests' and fails when the
page differs; the node tests' rows are checked where the suite runs them already
(tests/core/onnx/test_tape_conformance.py, tests/core/onnx/test_conformance.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
RECORDED = TESTS / "numbers.json"
BEGIN, END = "<!-- tests.stats: begin -->", "<!-- tests.stats: end -->"
SECTIONS = ("settings", "folders", "properties", "node", "recorded")


# ---- the AST walk -------------------------------------------------------------------------

def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _marks(decorators: list[ast.expr]) -> set[str]:
    """The last part of each decorator's dotted name (``parametrize``, ``given``, ``slow``)."""
    return {_dotted(d).rsplit(".", 1)[-1] for d in decorators}


def _module_slow(tree: ast.Module) -> bool:
    for st in tree.body:
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                              for t in st.targets):
            return any(_dotted(n).endswith("mark.slow") for n in ast.walk(st.value)
                       if isinstance(n, (ast.Attribute, ast.Call)))
    return False


def _kw(call: ast.Call, name: str, consts: dict[str, str]) -> str:
    """A keyword's value as written, a module-level constant's name replaced by its value."""
    for k in call.keywords:
        if k.arg == name:
            text = ast.unparse(k.value)
            return consts.get(text, text)
    return "default"


def _constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: ast.unparse(st.value) for st in tree.body if isinstance(st, ast.Assign)
            for t in st.targets if isinstance(t, ast.Name)}


def _test_files(root: Path) -> list[Path]:
    """``root/**/test_*.py``: those git tracks where ``root`` is in a checkout (the page is the
    repository's, not of what someone is writing beside it), else every one on disk."""
    p = subprocess.run(["git", "ls-files", "-z", "--", "*test_*.py"], cwd=root,
                       capture_output=True)
    if p.returncode == 0 and p.stdout:
        tracked = [root / os.fsdecode(f) for f in p.stdout.split(b"\0") if f]
        return sorted(f for f in tracked if f.name.startswith("test_") and f.is_file())
    return sorted(root.rglob("test_*.py"))


def test_functions(root: Path = TESTS) -> list[dict]:
    """Every test function of ``root/**/test_*.py``: its file, name and what decorates it."""
    out = []
    for path in _test_files(root):
        rel = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        slow_module = _module_slow(tree)
        consts = _constants(tree)
        named = {t.id: st.value for st in tree.body if isinstance(st, ast.Assign)
                 and isinstance(st.value, ast.Call)
                 and _dotted(st.value).rsplit(".", 1)[-1] == "settings"
                 for t in st.targets if isinstance(t, ast.Name)}
        defs = [(None, f) for f in tree.body]
        defs += [(c.name, f) for c in tree.body if isinstance(c, ast.ClassDef)
                 and c.name.startswith("Test") for f in c.body]
        for cls, f in defs:
            if not (isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and f.name.startswith("test")):
                continue
            marks = _marks(f.decorator_list)
            entry = {"file": rel, "name": f"{cls}::{f.name}" if cls else f.name,
                     "parametrized": "parametrize" in marks, "property": "given" in marks,
                     "slow": slow_module or "slow" in marks}
            if entry["property"]:
                # @settings(...) written on the test, or a module-level name bound to one
                st = [d for d in f.decorator_list if isinstance(d, ast.Call)
                      and _dotted(d).rsplit(".", 1)[-1] == "settings"]
                st += [named[d.id] for d in f.decorator_list
                       if isinstance(d, ast.Name) and d.id in named]
                entry["max_examples"] = _kw(st[0], "max_examples", consts) if st else "default"
                entry["deadline"] = _kw(st[0], "deadline", consts) if st else "default"
                entry["examples"] = sum(_dotted(d).rsplit(".", 1)[-1] == "example"
                                        for d in f.decorator_list)
            out.append(entry)
    return out


def _folder(rel: str) -> str:
    parts = rel.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else "tests (top level)"


def folders_table(funcs: list[dict]) -> str:
    acc: dict[str, list] = defaultdict(lambda: [set(), 0, 0, 0, 0])
    for f in funcs:
        a = acc[_folder(f["file"])]
        a[0].add(f["file"])
        a[1] += 1
        a[2] += f["parametrized"]
        a[3] += f["property"]
        a[4] += f["slow"]
    lines = ["| folder | files | test functions | parametrized | Hypothesis properties | "
             "marked `slow` |", "|---|---:|---:|---:|---:|---:|"]
    tot = [0] * 5
    for k in sorted(acc):
        a = acc[k]
        row = [len(a[0]), *a[1:]]
        tot = [x + y for x, y in zip(tot, row, strict=True)]
        lines.append(f"| `{k}` | " + " | ".join(map(str, row)) + " |")
    lines.append("| **all** | " + " | ".join(f"**{x}**" for x in tot) + " |")
    return "\n".join(lines)


def properties_table(funcs: list[dict]) -> str:
    lines = ["| property test | `max_examples` | `deadline` | `@example`s |", "|---|---:|---|---:|"]
    for f in funcs:
        if f["property"]:
            lines.append(f"| `{f['file'][len('tests/'):]}::{f['name']}` | "
                         f"{_cell(f['max_examples'])} | {_cell(f['deadline'])} | "
                         f"{f['examples']} |")
    return "\n".join(lines)


def settings_table() -> str:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    addopts = cfg.get("addopts", [])
    workers = addopts[addopts.index("-n") + 1] if "-n" in addopts else "1"
    marker = addopts[addopts.index("-m") + 1] if "-m" in addopts else "(all)"
    conftest = (TESTS / "conftest.py").read_text()
    prof = re.search(r'register_profile\("ci", ([^)]*)\)', conftest)
    return "\n".join([
        "| setting | value | where |", "|---|---|---|",
        f"| default selection | `-m \"{marker}\"` | pyproject.toml `addopts` |",
        f"| worker processes | {workers} (`-n {workers}`, `--dist "
        f"{addopts[addopts.index('--dist') + 1] if '--dist' in addopts else 'load'}`) "
        "| pyproject.toml `addopts` |",
        f"| per-test timeout | {cfg.get('timeout', 'none')} s (pytest-timeout) "
        "| pyproject.toml `timeout` |",
        f"| Hypothesis profile `ci` | `{prof.group(1) if prof else '?'}` | tests/conftest.py |",
    ])


# ---- the ONNX node tests ------------------------------------------------------------------

#: the node tests' rows: label -> which run gives it ("executor" or "tape")
NODE_ROWS = {
    "node tests in the installed onnx": "executor",
    "passed through our executor (reference mode)": "executor",
    "with a floating input": "tape",
    "imported onto the tape": "tape",
    "refused at import, saying why": "tape",
    "an op on the data path without a tape form": "tape",
    "failed at import (a bug)": "tape",
    "tape forward within the suite's tolerance": "tape",
    "tape forward bit-identical to the executor": "tape",
    "tape gradient checked": "tape",
    "tape gradient agrees with finite differences": "tape",
}
_NODE_FROM = {"executor": "tapescope.core.onnx.conformance",
              "tape": "tapescope.core.onnx.tape_conformance"}


def node_values(executor_node: tuple[int, int] | None = None,
                tape: dict[str, int] | None = None) -> dict[str, int]:
    """The rows' numbers, those of the runs given: ``executor_node`` (passed, total) of
    ``conformance.summary(outcomes)["node"]``, ``tape`` ``tape_conformance.totals(outcomes)``
    of the same node tests through the tape import."""
    from tapescope.core.onnx import tape_conformance as tc

    out = {}
    if executor_node is not None:
        passed, total = executor_node
        out.update(zip(list(NODE_ROWS)[:2], (total, passed), strict=True))
    if tape is not None:
        out.update(zip(list(NODE_ROWS)[2:], (
            tape["node tests"] - tape.get(tc.NO_FLOAT, 0), tape.get(tc.IMPORTED, 0),
            tape.get(tc.REFUSED, 0), tape.get(tc.NO_TAPE_FORM, 0), tape.get(tc.FAILED, 0),
            tape.get("forward", 0), tape.get("exact", 0), tape.get("grad_checked", 0),
            tape.get("grad", 0)), strict=True))
    return out


def node_table(executor_node: tuple[int, int], tape: dict[str, int]) -> str:
    vals = node_values(executor_node, tape)
    lines = ["| ONNX node tests | count | from |", "|---|---:|---|"]
    lines += [f"| {k} | {vals[k]} | `{_NODE_FROM[w]}` |" for k, w in NODE_ROWS.items()]
    return "\n".join(lines)


def page_node_values(doc: str) -> dict[str, int]:
    """The node tests' rows as the page states them."""
    out = {}
    for ln in page_sections(doc)["node"].splitlines()[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        out[cells[0]] = int(cells[1])
    return out


def node_numbers() -> tuple[tuple[int, int], dict[str, int]]:
    from tapescope.core.onnx import tape_conformance as tc
    from tapescope.core.onnx.conformance import run_suite, summary

    return summary(run_suite(("node",)))["node"], tc.totals(tc.run_tape_suite())


# ---- the recorded long runs ---------------------------------------------------------------

def _cell(v) -> str:
    return "—" if v is None else str(v).replace("|", "\\|").replace("\n", " ")


def _score(m: dict) -> str:
    live = m["mutants"] - m["equivalent"]
    return f"**{100 * m['killed'] / live:.0f} %** ({m['killed']} / {live})" if live else "—"


def recorded_tables(rec: dict) -> str:
    out = ["#### The default suite", "",
           "| run | tests | wall | user CPU | command | machine | date |",
           "|---|---:|---:|---:|---|---|---|"]
    for r in rec["suite"]:
        out.append(f"| {_cell(r['run'])} | {_cell(r.get('tests'))} | {_cell(r.get('wall'))} | "
                   f"{_cell(r.get('user_cpu'))} | `{_cell(r['command'])}` | "
                   f"{_cell(r['machine'])} | {_cell(r['date'])} |")
    out += ["", "#### Mutation scores (mutmut, `tests/mutation/run.sh MODULE`)", "",
            "| module | run | mutants run | killed (timeouts) | equivalent | score "
            "(killed / non-equivalent) | machine | date |",
            "|---|---|---:|---:|---:|---|---|---|"]
    for m in rec["mutation"]:
        out.append(f"| `{m['module']}` | {_cell(m['run'])} | {m['mutants']} | {m['killed']} "
                   f"({m.get('timeouts', 0)}) | {m['equivalent']} | {_score(m)} | "
                   f"{_cell(m['machine'])} | {_cell(m['date'])} |")
    out += ["", "#### Mutation by hand, before the script", "",
            "| module | mutants | alive before | alive after | the new tests | date |",
            "|---|---|---:|---|---|---|"]
    for m in rec["mutation_by_hand"]:
        out.append(f"| `{m['module']}` | {_cell(m['mutants'])} | {_cell(m['alive_before'])} | "
                   f"{_cell(m['alive_after'])} | {_cell(m['tests'])} | {_cell(m['date'])} |")
    out += ["", "#### Other measurements", "",
            "| what | result | command | machine | date |", "|---|---|---|---|---|"]
    for r in rec["measurements"]:
        out.append(f"| {_cell(r['what'])} | {_cell(r['result'])} | `{_cell(r['command'])}` | "
                   f"{_cell(r['machine'])} | {_cell(r['date'])} |")
    return "\n".join(out)


def load_recorded() -> dict:
    return json.loads(RECORDED.read_text())


# ---- the page ------------------------------------------------------------------------------

def render(node: str | None = None, rec: dict | None = None) -> dict[str, str]:
    """Section name -> its Markdown (``node``: the node tests' table, computed if None)."""
    funcs = test_functions()
    if node is None:
        node = node_table(*node_numbers())
    return {
        "settings": settings_table(),
        "folders": folders_table(funcs),
        "properties": properties_table(funcs),
        "node": node,
        "recorded": recorded_tables(rec if rec is not None else load_recorded()),
    }


HEADINGS = {
    "settings": "### Settings",
    "folders": "### Tests per folder",
    "properties": "### Property tests (Hypothesis)",
    "node": "### ONNX node tests, executor and tape import",
    "recorded": "### Recorded long runs (command, machine, date)",
}


def block(sections: dict[str, str]) -> str:
    parts = [BEGIN, "<!-- generated by `python -m tests.stats --doc docs/testing.md` on "
                    "its own: do not edit by hand -->", ""]
    for k in SECTIONS:
        parts += [HEADINGS[k], "", sections[k], ""]
    parts.append(END)
    return "\n".join(parts)


def page_sections(doc: str) -> dict[str, str]:
    """The page's generated block, cut back into its sections."""
    i, j = doc.index(BEGIN), doc.index(END)
    text = doc[i:j]
    out = {}
    for k in SECTIONS:
        start = text.index(HEADINGS[k] + "\n") + len(HEADINGS[k]) + 1
        ends = [text.index(HEADINGS[o] + "\n") for o in SECTIONS if text.find(
            HEADINGS[o] + "\n") > start]
        out[k] = text[start:min(ends) if ends else len(text)].strip()
    return out


def write_doc(path: Path, sections: dict[str, str]) -> None:
    doc = path.read_text()
    i, j = doc.index(BEGIN), doc.index(END) + len(END)
    path.write_text(doc[:i] + block(sections) + doc[j:])


# ---- recording a long run -----------------------------------------------------------------

def machine() -> str:
    cpu = "?"
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()}, load {load:.1f} at the start"


def _commit() -> str:
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                       text=True)
    return p.stdout.strip() or "?"


def _timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float, float, str]:
    m = machine()
    before = os.times()
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    wall = time.monotonic() - t0
    after = os.times()
    return p, wall, after.children_user - before.children_user, m


def record(kind: str) -> int:
    rec = load_recorded()
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    if kind == "suite":
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        p, wall, cpu, m = _timed(cmd)
        last = (p.stdout.strip().splitlines() or ["?"])[-1]
        n = sum(int(x) for x in re.findall(r"(\d+) (?:passed|failed|skipped|xfailed|xpassed|"
                                           r"errors?)", last))
        entry = {"run": f"default suite on `{_commit()}`: {last.strip('= ')}", "tests": n,
                 "wall": f"{wall:.0f} s", "user_cpu": f"{cpu:.0f} s",
                 "command": "python -m pytest -q", "machine": m, "date": today}
        rec["suite"] = [r for r in rec["suite"] if not r.get("by_record")] + [
            dict(entry, by_record=True)]
    elif kind == "plants":
        p, wall, cpu, m = _timed([sys.executable, "tests/mutation/plants.py"])
        ok = "every plant caught, every test passes unplanted" if p.returncode == 0 else \
            f"exit {p.returncode}: see its output"
        entry = {"what": "tests/mutation/plants.py, the six plants of issue 48",
                 "result": f"{ok}; {wall:.0f} s wall, {cpu:.0f} CPU s",
                 "command": "python tests/mutation/plants.py", "machine": m, "date": today,
                 "by_record": True}
        rec["measurements"] = [r for r in rec["measurements"]
                               if r.get("command") != entry["command"]] + [entry]
        print(p.stdout, end="")
    else:
        print(f"tests.stats: --record {kind}: not one of suite, plants", file=sys.stderr)
        return 2
    RECORDED.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    print(f"recorded in {RECORDED.relative_to(ROOT)}: {entry}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.stats", description=__doc__.splitlines()[0])
    ap.add_argument("--doc", type=Path, help="put the tables on this page (between its markers)")
    ap.add_argument("--record", choices=("suite", "plants"), help="measure again and record")
    ap.add_argument("--only", help="with --doc: regenerate only these sections (comma-separated: "
                    f"{', '.join(SECTIONS)}), the others kept as the page has them")
    args = ap.parse_args(argv)
    if args.record:
        return record(args.record)
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
    if only - set(SECTIONS) or (args.only and not args.doc):
        print(f"tests.stats: --only {args.only}: sections are {', '.join(SECTIONS)}, with --doc",
              file=sys.stderr)
        return 2
    kept = page_sections(args.doc.read_text()) if args.doc and only != set(SECTIONS) else {}
    sections = render(node=kept.get("node") if "node" not in only else None)
    sections.update({k: v for k, v in kept.items() if k not in only})
    if args.doc:
        write_doc(args.doc, sections)
    print(block(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
