"""CSV injection (issue 49, red team 3): File ▸ Export CSV of the graph panel wrote node names
from the file as they are, so ``=cmd|' /C calc'!A0`` was a formula in a spreadsheet. Every cell
of every CSV the app writes goes through one guard (``views.export.csv_cell``); numbers stay
numbers."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from tapescope.views import export

HOSTILE = ["=cmd|' /C calc'!A0", '+HYPERLINK("x")', "-2+3+cmd|' /C calc'!A0", "@SUM(A1)",
           "\t=1+1", "\r=1+1"]


def _node(i: int, name: str, op: str = "param"):
    return SimpleNamespace(id=i, op=op, name=name, shape=(2, 3), dtype="float64",
                           inputs=[i - 1] if i else [])


def _read(path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def test_the_graph_panels_csv_guards_names_from_the_file(tmp_path):
    model = SimpleNamespace(nodes=[_node(i, n) for i, n in enumerate([*HOSTILE, "attn/q"])])
    out = tmp_path / "nodes.csv"
    assert export.write_csv(str(out), *export.graph_table(model)) == len(HOSTILE) + 1
    rows = _read(out)
    names = [r[2] for r in rows[1:]]
    assert names == ["'" + n for n in HOSTILE] + ["attn/q"]
    assert all(r[0].isdigit() for r in rows[1:])  # the ids stay numbers


@pytest.mark.parametrize("cell", ["-1.5", "+3", "-0", "-inf", "1e-3", "-2.5E+10", "nan", "12"])
def test_numbers_stay_numbers(cell):
    assert export.csv_cell(cell) == cell


def test_every_table_written_is_guarded_headers_too(tmp_path):
    # a panel's own csv_table() (Training's series) or any other table: the one writer guards
    out = tmp_path / "t.csv"
    export.write_csv(str(out), ["step", "=loss"], [[1, -1.5], [2, "=cmd|' /C calc'!A0"],
                                                   [3, None]])
    assert _read(out) == [["step", "'=loss"], ["1", "-1.5"], ["2", "'=cmd|' /C calc'!A0"],
                          ["3", ""]]
    # guarding twice changes nothing (a model table's cells are guarded as they are read)
    assert export.csv_cell(export.csv_cell("=x")) == "'=x"
