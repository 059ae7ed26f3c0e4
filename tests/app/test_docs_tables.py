"""Docs tables that restate what a command prints are checked against the command (issue 30
item 5): the launches per episode of docs/fusion.md and docs/benchmarks.md are what
``tapescope fuse`` prints. (The kernel audit table: tests/gpu/test_nvrtc.py; the ONNX coverage
page: tests/core/onnx/test_conformance.py.)"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("mlp", "transformer")


def _table(doc: str, heading: str) -> list[list[str]]:
    """The rows (cells) of the first table after ``heading``."""
    text = doc[doc.index(heading):]
    start = text.index("\n|")
    block = text[start + 1:text.index("\n\n", start)]
    return [[c.strip() for c in ln.strip().strip("|").split("|")]
            for ln in block.splitlines()[2:]]


@pytest.fixture(scope="module")
def printed() -> dict[str, dict[str, tuple[int, int]]]:
    """Per workload, what `tapescope fuse --workload W` prints under "launches": {row: (unfused,
    fused)}. The same episode and plan as the command (its _episode), captured on a device
    that parses the kernels without compiling them (the counts do not depend on a build)."""
    from tapescope import gpu
    from tapescope.app.commands.fuse import _episode
    from tapescope.gpu import fusion
    from tapescope.gpu.kernel_template import source_only_device

    out = {}
    for w in WORKLOADS:
        args = argparse.Namespace(tape=None, workload=w, dtype="float64", math="refmath")
        tape, loss, _ = _episode(args)
        text = fusion.plan(gpu.capture(source_only_device(), tape, loss)).describe()
        rows = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
            r"^\s+(forward|backward|optimizer|episode)\s+(\d+)\s+(\d+)$", text, re.M)}
        assert set(rows) == {"forward", "backward", "optimizer", "episode"}, text
        out[w] = rows
    return out


def _regenerate(printed) -> str:
    return ("regenerate from `tapescope fuse --workload W --device host` (its launches "
            "table): " + "; ".join(f"{w} {r['episode'][0]} -> {r['episode'][1]} (fwd "
                                   f"{r['forward'][1]}, bwd {r['backward'][1]}, Adam "
                                   f"{r['optimizer'][1]})" for w, r in printed.items()))


def test_fusion_md_launches_are_what_fuse_prints(printed):
    doc = (ROOT / "docs" / "fusion.md").read_text()
    rows = _table(doc, "## Launches per episode")
    got = {r[0].split()[0]: (r[1], r[2]) for r in rows}
    assert set(got) == set(WORKLOADS), rows
    for w, r in printed.items():
        unfused, fused = got[w]
        assert int(unfused) == r["episode"][0], _regenerate(printed)
        assert int(fused.split()[0]) == r["episode"][1], _regenerate(printed)
        parts = re.search(r"\(fwd (\d+), bwd (\d+), Adam (\d+)\)", fused)
        if parts:  # the split, where the doc gives one
            assert tuple(map(int, parts.groups())) == (
                r["forward"][1], r["backward"][1], r["optimizer"][1]), _regenerate(printed)


def test_benchmarks_md_fusion_launches_are_what_fuse_prints(printed):
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    rows = _table(doc, "## Fusion on the host backend")
    assert rows
    for r in rows:
        w = r[0].split()[0]
        assert w in printed, r
        m = re.fullmatch(r"(\d+) → (\d+)", r[1])
        assert m, r
        want = printed[w]["episode"]
        # the batch size changes the rows, not the launches
        assert (int(m.group(1)), int(m.group(2))) == want, f"{r[0]}: {_regenerate(printed)}"
