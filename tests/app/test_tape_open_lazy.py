"""The window on a version-2 tape file: opened lazily (a block read only when a panel shows one
of its arrays), and a block whose digest fails when it is first shown is an error dialog, not
a traceback, with the window still usable."""

from __future__ import annotations

import json
import struct

import pytest

from tapescope.app.qt.main_window import MainWindow
from tapescope.core import tapefile
from tests.helpers.tapefile_v2 import chain

TRAILER = struct.Struct("<8sQQ32s")


@pytest.fixture
def win(qtbot, settings):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    return w


def chain_file(path, n: int = 30):
    """test_tapefile_v2's chain of n tanh(mul) steps, saved in many 1 KiB blocks."""
    t, loss = chain(n)
    tapefile.save(t, path, meta={"loss": loss}, block_bytes=1024)
    return t


def corrupt_block(path, which: int) -> int:
    """Flip the last byte of block ``which`` (the header and its checksum untouched): its id."""
    raw = bytearray(path.read_bytes())
    _, hoff, hlen, _ = TRAILER.unpack_from(raw, len(raw) - TRAILER.size)
    blocks = json.loads(raw[hoff:hoff + hlen])["blocks"]
    start, size, _ = blocks[which]
    raw[start + size - 1] ^= 1
    path.write_bytes(bytes(raw))
    return which % len(blocks)


def open_and_wait(qtbot, win, path) -> None:
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=20000):
        assert win.open_file(str(path))


def test_the_window_reads_only_the_blocks_it_shows(qtbot, win, tmp_path):
    t = chain_file(tmp_path / "c.tape")
    open_and_wait(qtbot, win, tmp_path / "c.tape")
    vals = win.session.tape._values
    assert vals.blocks_read <= 1  # the open (first gradient: "does it have any?")
    last = len(t) - 1
    win.select_node(last)
    assert win.selected == last
    got = win.session.details(last)
    assert got.value.tobytes() == t.value(last).tobytes()
    assert vals.blocks_read <= 3
    assert not win.session.nonfinite()  # from the file's lists: no block read for it
    assert vals.blocks_read <= 3


def test_a_block_failing_its_digest_when_shown_is_an_error_dialog(qtbot, win, tmp_path):
    path = tmp_path / "late.tape"
    t = chain_file(path)
    corrupt_block(path, -1)  # the loss's block: nothing at the open touches it
    open_and_wait(qtbot, win, path)
    win.select_node(1)  # an early block: fine
    assert win.last_error is None
    win.select_node(len(t) - 1)
    box = win.last_error
    assert box is not None and "SHA-256" in box.text() and str(path) in box.text()
    assert "\n" not in box.text()
    box.close()
    win.select_node(0)  # still usable: the good blocks still show
    assert win.session.details(0).value.tobytes() == t.value(0).tobytes()
    win.grab().save(str(tmp_path / "after.png"))
