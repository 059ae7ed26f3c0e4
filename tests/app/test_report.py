"""Parity reports: one self-contained HTML file with every section, and its JSON sidecar."""

from __future__ import annotations

import argparse
import base64
import json
import re
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from tapescope.app.cli import main
from tapescope.app.commands import report
from tapescope.app.report_html import SECTIONS
from tapescope.app.runs import SessionConfig

BRANCHES = str(Path(__file__).parent / "data" / "branches.py")


def args(tmp_path, **kw) -> argparse.Namespace:
    base = dict(workload="mlp", device="host", fuse=False, math="refmath", dtype="float64",
                compare="cpu-device", steps=3, seed=0, out=str(tmp_path / "r.html"))
    base.update(kw)
    return argparse.Namespace(**base)


def check_self_contained(html: str) -> list[QImage]:
    """Every section present, nothing fetched from anywhere, images decodable PNGs."""
    for sec in SECTIONS:
        assert f"<section id={sec}>" in html, sec
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", html, re.I)
    assert "<style>" in html and "<link" not in html.lower()
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(imgs) == 2  # the DAG and the plots
    out = []
    for b in imgs:
        img = QImage.fromData(base64.b64decode(b), "PNG")
        assert not img.isNull() and img.width() > 300 and img.height() > 300
        out.append(img)
    return out


def test_cli_report_of_an_exact_run(qapp, tmp_path, capsys):
    assert report.run(args(tmp_path)) == 0
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    check_self_contained(html)
    data = json.loads((tmp_path / "r.json").read_text(), parse_constant=pytest.fail)
    assert data["verdict"]["exact"] and data["verdict"]["steps"] == 3
    assert data["verdict"]["nan_bits_differ"] == 0 and "(equal under the NaN policy)" in html
    assert data["first_divergence"] is None
    assert len(data["steps"]) == 3 and all(s["exact"] for s in data["steps"])
    assert html.count("<tr><td class=n>") + html.count("<tr class=diff><td class=n>") == len(
        data["nodes"])
    assert data["environment"]["host_flags"].startswith("-O2 -ffp-contract=off")
    assert "bit-identical" in html and data["environment"]["numpy"] in html


def test_cli_report_of_platform_math_names_the_first_divergence(qapp, tmp_path):
    rc = report.run(args(tmp_path, workload=BRANCHES, math="platform", steps=2))
    assert rc == 1
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    check_self_contained(html)
    data = json.loads((tmp_path / "r.json").read_text())
    f = data["first_divergence"]
    assert f["step"] == 1 and f["op"] == "exp" and f["which"] == "value"
    assert {r["op"] for r in f["roots"]} == {"exp", "tanh"}
    assert f"node <b>#{f['node']} exp</b>" in html
    assert "class=diff" in html and "differs:" in html


def cli_err(capsys, *argv: str) -> tuple[int, str]:
    """``tapescope report ARGV`` in-process: (exit code, stderr)."""
    rc = main(["report", "--device", "host", *argv])
    return rc, capsys.readouterr().err


def test_cli_report_bad_input(qapp, tmp_path, capsys):
    out = ["--out", str(tmp_path / "r.html")]
    rc, err = cli_err(capsys, "--out", str(tmp_path / "r.txt"))
    assert rc == 2 and "must end in .html" in err and err.count("\n") == 1
    rc, err = cli_err(capsys, "--workload", "nosuch", *out)
    assert rc == 2 and "unknown workload 'nosuch'" in err and err.count("\n") == 1
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nraise ImportError('no such module frobnicate')\n")
    rc, err = cli_err(capsys, "--workload", str(bad), *out)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("tapescope report: ") and "frobnicate" in err
    assert f"{bad} line 2" in err  # where: the user's file and line
    rc, err = cli_err(capsys, "--workload", str(bad), *out, "--debug")
    assert rc == 2 and "Traceback" in err and err.splitlines()[-1].startswith("tapescope report")
    assert not (tmp_path / "r.html").exists()


def test_export_from_the_gui(qtbot, settings, tmp_path):
    from tapescope.app.qt.main_window import MainWindow

    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.show()
    try:
        assert win.live.start(SessionConfig(workload="mlp", device="host"), paused=True)
        for k in range(2):
            win.live.single_step()
            qtbot.waitUntil(lambda k=k: win.live.last is not None
                            and win.live.last.latest.step == k + 1, timeout=10000)
        out = tmp_path / "gui.html"
        assert win.live.export(str(out))
        check_self_contained(out.read_text(encoding="utf-8"))
        data = json.loads(out.with_suffix(".json").read_text())
        assert data["verdict"]["steps"] == 2 and data["verdict"]["exact"]
        assert [s["step"] for s in data["steps"]] == [1, 2]
    finally:
        win.live.close()


def test_cli_report_refuses_before_running_and_makes_no_folder(qapp, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert main(["report", "--device", "host", "--out", str(blocker / "r.html")]) == 2
    err = capsys.readouterr()
    assert "cannot write" in err.err and "step" not in err.out  # refused before any step ran
    assert err.err.count("\n") == 1
    # a folder the user did not make is not made for them (issue 26: report --out
    # /nonexistent/dir/r.html created that tree at the filesystem root)
    nested = tmp_path / "new" / "dir" / "r.html"
    assert main(["report", "--device", "host", "--out", str(nested)]) == 2
    err = capsys.readouterr()
    assert "the folder" in err.err and "does not exist" in err.err and err.out == ""
    assert not (tmp_path / "new").exists()
    (tmp_path / "new").mkdir()
    out = tmp_path / "new" / "r.html"
    assert report.run(args(tmp_path, out=str(out), steps=1)) == 0
    assert out.exists() and out.with_suffix(".json").exists()


def test_the_window_numbers_steps_from_1_like_the_cli(qtbot, win):
    # the status bar, the first divergence and the Inspector agree: the first step is step 1
    assert win.live.start(SessionConfig(workload=BRANCHES, device="host", math="platform"),
                          paused=True)
    qtbot.waitUntil(lambda: bool(win.live.info), timeout=15000)
    win.live.single_step()
    qtbot.waitUntil(lambda: win.live.last is not None and win.live.live.first is not None,
                    timeout=10000)
    assert win.live.last.latest.step == 1 and win.live.live.first["step"] == 1
    label = win.live.state_label.text()
    assert " · step 1 · first divergence: step 1 node #" in label, label
    node = int(win.live.live.first["node"])
    win.select_node(node)
    qtbot.waitUntil(lambda: win.live.shown is not None and win.live.shown.node == node,
                    timeout=10000)
    assert win.inspector.note.text().startswith("live · step 1 · "), win.inspector.note.text()


def test_parity_and_report_give_the_same_numbers_for_the_same_flags(qapp, tmp_path, capsys):
    # one episode loop, one meaning of --math (the candidate's; the reference is refmath)
    flags = ["--workload", BRANCHES, "--device", "host", "--steps", "2", "--math", "platform"]
    rc_p = main(["parity", *flags, "--json", str(tmp_path / "p.json")])
    rc_r = main(["report", *flags, "--out", str(tmp_path / "r.html")])
    capsys.readouterr()
    p = json.loads((tmp_path / "p.json").read_text())
    r = json.loads((tmp_path / "r.json").read_text())
    assert rc_p == rc_r == 1 and not p["exact"] and not r["verdict"]["exact"]
    assert r["reference"] == "CPU float64 refmath" and "platform" in r["candidate"]
    fp, fr = p["first_divergence"], r["first_divergence"]
    assert (fp["step"], fp["node"], fp["op"], fp["which"]) == (
        fr["step"], fr["node"], fr["op"], fr["which"]) == (1, fr["node"], "exp", "value")
    worst = {n["id"]: n for n in r["nodes"]}
    for n in p["nodes"]:
        for which in ("value", "grad"):
            if n[which] is not None and n["op"] != "param":  # parity adds the last update
                assert n[which]["n_diff"] == worst[n["id"]][which]["n_diff"], (n, which)
                assert n[which]["max_ulp"] == worst[n["id"]][which]["max_ulp"], (n, which)
