"""The report's HTML and JSON are one pair (issue 49, red team 3): one pair id in both, the JSON
renamed first and the HTML last; a failed rename leaves the old pair, a kill between the renames
leaves a pair that ``read_report`` refuses (never read as one report), and what the killed
writer left behind is removed by the next write."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tapescope.app.cli import main
from tapescope.core import atomic

ROOT = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def old_pair(qapp, tmp_path, capsys):
    """A real report pair (mlp, 1 step), and its data to write again."""
    out = tmp_path / "r.html"
    assert main(["report", "--workload", "mlp", "--device", "host", "--steps", "1",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    return out, out.read_bytes(), out.with_suffix(".json").read_bytes()


def _no_pictures(monkeypatch):
    import tapescope.app.qt.report_render as render

    monkeypatch.setattr(render, "render_dag", lambda data: b"png")
    monkeypatch.setattr(render, "render_training", lambda data: b"png")


def test_a_written_pair_reads_back_as_one_report(old_pair):
    from tapescope.app.report_html import read_report

    out, html, js = old_pair
    data = read_report(out)
    assert data["pair"] == json.loads(js)["pair"] and len(data["pair"]) == 16
    assert f'content="{data["pair"]}"'.encode() in html


def test_a_failed_second_rename_keeps_the_old_pair_and_no_temporaries(old_pair, monkeypatch):
    from tapescope.app.report_html import read_report, write_report

    out, html, js = old_pair
    _no_pictures(monkeypatch)
    real, calls = os.replace, []

    def replace(a, b):
        calls.append(Path(b).name)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(a, b)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError, match="r.html: Input/output error"):
        write_report(json.loads(js), out)
    assert calls[:2] == ["r.json", "r.html"]  # the JSON first, the HTML last
    assert out.read_bytes() == html and out.with_suffix(".json").read_bytes() == js
    assert read_report(out)["pair"] == json.loads(js)["pair"]
    assert _leftovers(out.parent) == []


KILLED_BETWEEN_RENAMES = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import tapescope.app.qt.report_render as render
    from tapescope.app.report_html import write_report
    from tapescope.core import atomic
    render.render_dag = render.render_training = lambda data: b"png"
    out = Path(sys.argv[1])
    real, calls = os.replace, []
    def replace(a, b):
        calls.append(b)
        if len(calls) == 2:
            os._exit(137)  # killed: no cleanup, no rollback
        return real(a, b)
    atomic.os.replace = replace
    write_report(json.loads(out.with_suffix(".json").read_text()), out)
""")


def test_a_kill_between_the_renames_is_never_read_as_one_report(old_pair, monkeypatch):
    from tapescope.app.report_html import read_report, write_report

    out, html, js = old_pair
    r = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 137, r.stderr[-2000:]
    # the kill left the new JSON beside the old HTML, and temporaries: each file is whole,
    # and the pair ids tell that they are not one report
    assert out.read_bytes() == html
    new = json.loads(out.with_suffix(".json").read_text())
    assert new["pair"] != json.loads(js)["pair"]
    assert _leftovers(out.parent)
    with pytest.raises(ValueError, match="r.html and r.json are not one report"):
        read_report(out)
    # the next write, an hour later, leaves a matched pair and nothing of the killed writer's
    _no_pictures(monkeypatch)
    later = atomic.time.time() + 3601
    monkeypatch.setattr(atomic.time, "time", lambda: later)
    write_report(new, out)
    assert read_report(out)["pair"] != new["pair"]
    assert _leftovers(out.parent) == []


def test_stale_temporaries_of_a_live_writer_or_other_files_are_kept(tmp_path):
    keep = [".r.html.0123456789ab.tmp", ".r.htmlx.0123456789ab.tmp", "r.html.tmp",
            ".r.html.0123456789abc.tmp", ".other.0123456789ab.tmp"]
    for name in keep:
        (tmp_path / name).write_text("x")
    assert atomic.remove_stale_temporaries(tmp_path / "r.html") == 0  # fresh: a live writer's
    assert atomic.remove_stale_temporaries(tmp_path / "r.html", older_than=-1) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep[1:])
