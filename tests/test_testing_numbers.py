"""docs/testing.md's numbers are what ``python -m tests.stats`` prints (issue 48): the page
carries the command's tables between its markers, and every table but the node tests' (checked
where the suite runs them already: tests/core/onnx/test_tape_conformance.py and
test_conformance.py) is regenerated here, from an AST walk of the test files, pyproject.toml
and tests/numbers.json: milliseconds, no collection, no run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests import stats

DOC = stats.ROOT / "docs" / "testing.md"
REGENERATE = ("regenerate the page with `python -m tests.stats --doc docs/testing.md` (or only "
              "this table: `... --only SECTION`)")


@pytest.fixture(scope="module")
def page() -> dict[str, str]:
    return stats.page_sections(DOC.read_text())


@pytest.fixture(scope="module")
def now() -> dict[str, str]:
    return stats.render(node="(not computed here)")


@pytest.mark.parametrize("section", ["settings", "folders", "properties", "recorded"])
def test_the_pages_table_is_what_the_command_prints(page, now, section):
    if page[section] != now[section]:
        diff = [f"page: {a}\nnow:  {b}" for a, b in zip(page[section].splitlines(),
                                                         now[section].splitlines(),
                                                         strict=False) if a != b][:4]
        pytest.fail(f"docs/testing.md's {stats.HEADINGS[section]!r} is stale: {REGENERATE}. "
                    "First differences:\n" + "\n".join(diff or ["(the line count differs)"]))


def test_the_ast_walk_counts_what_pytest_collects(tmp_path):
    # the walk's counts stand for pytest's: collect a folder, all markers, and compare the
    # functions collected (a parametrized one once) with the walk's of the same files
    folder = "tests/core/onnx"  # (27 files; collecting the whole suite costs ~13 CPU s)
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                        "-p", "no:cacheprovider", "-m", "slow or not slow", folder],
                       cwd=stats.ROOT, capture_output=True, text=True, timeout=120)
    ids = [ln for ln in p.stdout.splitlines() if "::" in ln]
    collected = {re.sub(r"\[.*$", "", i) for i in ids}
    walked = {f"{f['file']}::{f['name']}" for f in stats.test_functions()
              if f["file"].startswith(folder + "/")}
    assert ids and collected == walked, (collected ^ walked)
    assert len(ids) > len(collected)  # and some are parametrized: the walk counts functions


def test_the_walk_sees_marks_properties_and_their_budgets(tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_x.py").write_text(
        "import pytest\nfrom hypothesis import example, given, settings, strategies as st\n"
        "N = 7\n"
        "@pytest.mark.slow\n@pytest.mark.parametrize('a', [1, 2])\ndef test_a(a): pass\n"
        "@given(st.integers())\n@example(1)\n@example(2)\n"
        "@settings(max_examples=N, deadline=500)\ndef test_b(x): pass\n"
        "class TestC:\n    def test_c(self): pass\n    def helper(self): pass\n"
        "S = settings(max_examples=3)\n"
        "@S\n@given(st.integers())\ndef test_e(x): pass\n"
        "def helper(): pass\n")
    (tmp_path / "tests" / "test_slow_module.py").write_text(
        "import pytest\npytestmark = [pytest.mark.slow]\ndef test_d(): pass\n")
    funcs = {f["name"]: f for f in stats.test_functions(tmp_path / "tests")}
    assert set(funcs) == {"test_a", "test_b", "TestC::test_c", "test_d", "test_e"}
    assert (funcs["test_e"]["max_examples"], funcs["test_e"]["deadline"]) == ("3", "default")
    assert funcs["test_a"]["slow"] and funcs["test_a"]["parametrized"]
    assert not funcs["test_b"]["slow"] and funcs["test_b"]["property"]
    assert (funcs["test_b"]["max_examples"], funcs["test_b"]["deadline"],
            funcs["test_b"]["examples"]) == ("7", "500", 2)
    assert funcs["test_d"]["slow"] and not funcs["TestC::test_c"]["slow"]
    table = stats.folders_table(list(funcs.values()))
    assert "| `tests/sub` | 1 | 4 | 1 | 2 | 1 |" in table
    assert "| **all** | **2** | **5** | **1** | **2** | **2** |" in table


def test_every_property_test_has_a_bounded_budget():
    # a Hypothesis test of the default run states its max_examples (the profile's 100 is
    # nobody's choice) and is not marked slow; the fuzzers of the tape file are the exception
    # named here, each with its reason in its own file
    unbounded = [f"{f['file']}::{f['name']}" for f in stats.test_functions()
                 if f["property"] and not f["slow"] and f["max_examples"] == "default"]
    assert set(unbounded) <= {
        "tests/core/test_tapefile_hostile.py::test_fuzz_byte_mutations_of_the_file",
        "tests/core/test_tapefile_hostile.py::test_fuzz_member_mutations_with_valid_zip_checksums",
        "tests/core/test_tapefile_hostile.py::test_fuzz_json_mutations_of_the_header"}, unbounded


def test_the_recorded_runs_are_whole_and_their_scores_computed():
    rec = stats.load_recorded()
    for m in rec["mutation"]:
        assert 0 <= m["equivalent"] <= m["mutants"] - m["killed"], m  # nothing counted twice
        assert m["timeouts"] <= m["killed"], m  # a timeout counts as killed
        assert m["date"] and m["machine"] and m["run"], m
    for r in rec["suite"] + rec["measurements"]:
        assert r["command"] and r["machine"] and r["date"], r
    fake = json.loads(json.dumps(rec))
    fake["mutation"] = [dict(rec["mutation"][0], mutants=10, killed=6, equivalent=2)]
    assert "**75 %** (6 / 8)" in stats.recorded_tables(fake)


def test_the_survivors_listed_are_the_recorded_equivalents():
    # each module's list of equivalent mutants opens with their number: the recorded count
    doc = DOC.read_text()
    rec = stats.load_recorded()
    latest = {}
    for m in rec["mutation"]:
        latest.setdefault(m["module"], m["equivalent"])  # the module's full run: its first row
    for module, n in latest.items():
        m = re.search(rf"^- `{re.escape(module)}` \((\d+)", doc, re.M)
        if m:
            assert int(m.group(1)) == n, (module, m.group(1), n)


def test_the_page_says_the_command_at_its_top():
    head = DOC.read_text()[:1500]
    assert "python -m tests.stats" in head


def test_doc_rewrites_only_the_block(tmp_path):
    p = tmp_path / "t.md"
    p.write_text(f"before 1\n{stats.BEGIN}\nold 2\n{stats.END}\nafter 3\n")
    secs = {k: f"<{k}>" for k in stats.SECTIONS}
    stats.write_doc(p, secs)
    text = p.read_text()
    assert text.startswith("before 1\n") and text.endswith("\nafter 3\n") and "old 2" not in text
    assert stats.page_sections(text) == secs


def test_the_node_rows_read_back_from_the_page():
    vals = stats.node_values((5, 9), {"node tests": 9, "no floating input": 2, "imported": 4,
                                      "refused": 1, "no tape form": 2, "forward": 4,
                                      "exact": 3, "grad_checked": 2, "grad": 2})
    secs = {k: "x" for k in stats.SECTIONS}
    secs["node"] = stats.node_table((5, 9), {"node tests": 9, "no floating input": 2,
                                             "imported": 4, "refused": 1, "no tape form": 2,
                                             "forward": 4, "exact": 3, "grad_checked": 2,
                                             "grad": 2})
    assert stats.page_node_values(stats.block(secs)) == vals
    assert vals["with a floating input"] == 7 and vals["failed at import (a bug)"] == 0



def test_record_suite_writes_its_entry_with_command_machine_and_date(tmp_path, monkeypatch):
    # --record suite runs the suite (not here: the pytest run is played back) and rewrites only
    # its own entry, the transcribed ones kept
    rec = tmp_path / "numbers.json"
    rec.write_text(json.dumps({"suite": [{"run": "old", "command": "c", "machine": "m",
                                          "date": "d"}], "measurements": []}))
    monkeypatch.setattr(stats, "RECORDED", rec)
    monkeypatch.setattr(stats, "ROOT", tmp_path)
    out = "....\n== 10 passed, 2 skipped, 1 xfailed in 9.0s ==\n"
    done = subprocess.CompletedProcess([], 0, out, "")
    monkeypatch.setattr(stats, "_timed", lambda cmd: (done, 612.4, 1100.6, "a machine"))
    monkeypatch.setattr(stats, "_commit", lambda: "abc1234")
    assert stats.record("suite") == 0
    assert stats.record("suite") == 0  # again: one recorded entry, replaced
    suite = json.loads(rec.read_text())["suite"]
    assert suite[0]["run"] == "old" and len(suite) == 2
    new = suite[1]
    assert (new["tests"], new["wall"], new["user_cpu"], new["machine"]) == (
        13, "612 s", "1101 s", "a machine")
    assert "abc1234" in new["run"] and re.fullmatch(r"\d{4}-\d\d-\d\d", new["date"])
    assert stats.record("nonsense") == 2
