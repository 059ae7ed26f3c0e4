"""core.atomic: every file tapescope writes is whole or not there; the old one survives."""

from __future__ import annotations

import errno
import os
import threading

import numpy as np
import pytest

from tapescope.core import Tape, atomic, tapefile
from tapescope.core.atomic import check_writable, write_all, write_atomic
from tests.helpers.fs_faults import full_disk, read_only


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_full_disk_keeps_the_old_file_and_names_it(tmp_path, monkeypatch):
    p = tmp_path / "p.json"
    write_atomic(p, '{"good": true}')
    full_disk(monkeypatch, after=100)
    with pytest.raises(OSError, match=f"cannot write {p}: No space left on device "
                                      r"\(the old file is unchanged\)") as e:
        write_atomic(p, "x" * 100_000)
    assert e.value.errno == errno.ENOSPC
    assert p.read_text() == '{"good": true}' and leftovers(tmp_path) == []


def test_a_writer_that_fails_half_way_leaves_nothing(tmp_path):
    def half(f):
        f.write(b"half")
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="new.bin: Input/output error"):
        write_atomic(tmp_path / "new.bin", half)
    assert list(tmp_path.iterdir()) == []


def test_a_pair_is_replaced_both_or_neither(tmp_path, monkeypatch):
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    write_all([(html, "<html>old</html>"), (js, "{}")])
    full_disk(monkeypatch, after=len("<html>new</html>") + 5)  # the second runs out
    with pytest.raises(OSError, match="r.json"):
        write_all([(html, "<html>new</html>"), (js, '{"new": ' + "1" * 1000 + "}")])
    assert html.read_text() == "<html>old</html>" and js.read_text() == "{}"
    monkeypatch.undo()
    # the second rename fails: the first is put back
    real, calls = os.replace, []

    def replace(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(a, b)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OSError, match="r.json: Input/output error"):
        write_all([(html, "<html>new</html>"), (js, '{"new": 1}')])
    assert html.read_text() == "<html>old</html>" and js.read_text() == "{}"
    assert leftovers(tmp_path) == []


def test_a_symlink_planted_at_the_temporary_is_never_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out.tape"
    # the old fixed temporary name, and the first random name the writer will draw
    (tmp_path / "out.tape.partial").symlink_to(victim)
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.tape.aaaaaaaaaaaa.tmp").symlink_to(victim)
    t = Tape()
    t.param(np.arange(3.0), name="w")
    tapefile.save(t, out)
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    assert tapefile.load(out)[0].value(0).tolist() == [0.0, 1.0, 2.0]


def test_two_saves_to_one_path_never_share_a_temporary(tmp_path):
    out = tmp_path / "t.tape"
    tapes = []
    for k in range(4):
        t = Tape()
        t.param(np.full(20_000, float(k)), name="w")
        tapes.append(t)
    errors = []

    def save(t):
        try:
            for _ in range(5):
                tapefile.save(t, out)
        except Exception as e:  # noqa: BLE001 — collected, asserted below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(t,)) for t in tapes]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert errors == []
    back = tapefile.load(out)[0].value(0)  # one save's file whole, never a mix
    assert len(set(back.tolist())) == 1
    assert leftovers(tmp_path) == []


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umask(tmp_path):
    p = tmp_path / "a"
    p.write_text("old")
    os.chmod(p, 0o640)
    write_atomic(p, "new")
    assert p.stat().st_mode & 0o777 == 0o640
    q = write_atomic(tmp_path / "b", b"x", mode=0o600)
    assert q.stat().st_mode & 0o777 == 0o600


def test_check_writable_creates_no_folder_and_leaves_nothing(tmp_path, monkeypatch):
    missing = tmp_path / "no" / "such" / "r.html"
    with pytest.raises(OSError, match=r"cannot write --out .*r.html: the folder .*such does "
                                      "not exist"):
        check_writable(missing, "--out")
    assert not (tmp_path / "no").exists()
    with pytest.raises(OSError, match="it is a folder"):
        check_writable(tmp_path, "--json")
    assert check_writable(tmp_path / "ok.json") == tmp_path / "ok.json"
    assert list(tmp_path.iterdir()) == []
    read_only(monkeypatch)  # as root, chmod would not stop us: the refusal is faked
    with pytest.raises(OSError, match="cannot write --out .*r.html: Read-only file system"):
        check_writable(tmp_path / "r.html", "--out")


def test_build_atomic_leaves_nothing_when_the_builder_fails_and_keeps_the_old_file(tmp_path):
    from tapescope.core.atomic import build_atomic

    art = tmp_path / "k.so"
    art.write_bytes(b"old")

    def compiler_dies(out):
        out.write_bytes(b"half an object")
        raise RuntimeError("gcc: internal compiler error")

    with pytest.raises(RuntimeError, match="internal compiler error"):
        build_atomic(art, compiler_dies)
    assert art.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["k.so"]
    build_atomic(art, lambda out: out.write_bytes(b"new"), mode=0o600)
    assert art.read_bytes() == b"new" and art.stat().st_mode & 0o777 == 0o600


def test_a_file_written_piece_by_piece_appears_whole_at_commit(tmp_path):
    from tapescope.core.atomic import AtomicFile

    p = tmp_path / "spool.bin"
    p.write_bytes(b"old")
    os.chmod(p, 0o640)
    f = AtomicFile(p)
    big = np.arange(1 << 15, dtype=np.float32)  # 128 KiB: written at once
    f.write(b"head")  # small pieces gathered
    f.write(big)
    f.write(memoryview(b"tail"))
    assert p.read_bytes() == b"old" and len(leftovers(tmp_path)) == 1  # nothing in place yet
    assert f.commit() == p
    assert p.read_bytes() == b"head" + big.tobytes() + b"tail"
    assert os.stat(p).st_mode & 0o777 == 0o640  # a replaced file keeps its mode
    assert leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="committed or discarded already"):
        f.commit()


def test_a_piece_by_piece_file_commits_to_a_sibling_name_only(tmp_path):
    from tapescope.core.atomic import AtomicFile

    f = AtomicFile(tmp_path / "run.capture")
    f.write(b"x")
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="is not in"):
        f.commit(tmp_path / "sub" / "run.capture")  # another folder: maybe another filesystem
    assert f.commit(tmp_path / "run.rank1.capture").read_bytes() == b"x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.rank1.capture", "sub"]


def test_a_full_disk_breaks_a_piece_by_piece_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    from tapescope.core.atomic import AtomicFile

    p = tmp_path / "run.capture"
    p.write_bytes(b"old")
    f = AtomicFile(p)
    full_disk(monkeypatch, after=100_000)
    with pytest.raises(OSError, match=f"cannot write {p}: No space left on device") as e:
        f.write(np.zeros(1 << 16, np.float32))  # 256 KiB: past the 100 KB the disk takes
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()  # the disk has room again: the file is still broken (a part is missing)
    with pytest.raises(OSError, match="No space left on device"):
        f.write(b"more")
    with pytest.raises(OSError, match="No space left on device"):
        f.commit()
    assert p.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_a_piece_by_piece_file_never_committed_is_removed(tmp_path):
    import gc

    from tapescope.core.atomic import AtomicFile

    f = AtomicFile(tmp_path / "a.capture")
    f.write(b"abc")
    f.discard()
    f.discard()  # idempotent
    g = AtomicFile(tmp_path / "b.capture")
    g.write(b"abc")
    assert len(leftovers(tmp_path)) == 1
    del g  # its writer went away without a commit (an exception, a script's exit)
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_a_piece_by_piece_file_sends_what_it_wrote_to_the_disk_as_it_goes(tmp_path, monkeypatch):
    """Every 8 MiB written, the writeback of that range is started (sync_file_range, where the
    platform has it): the commit's fsync then waits for the last few MiB only."""
    from tapescope.core.atomic import AtomicFile

    calls = []
    monkeypatch.setattr(atomic, "_sync_file_range",
                        lambda fd, off, n, flags: calls.append((off, n, flags)) or 0)
    f = AtomicFile(tmp_path / "big.capture")
    piece = np.arange(3 << 18, dtype=np.float32)  # 3 MiB
    for _ in range(10):
        f.write(piece)
    f.commit()
    assert calls == [(0, 9 << 20, 2), (9 << 20, 9 << 20, 2), (18 << 20, 9 << 20, 2)]
    assert (tmp_path / "big.capture").read_bytes() == piece.tobytes() * 10


def test_an_interrupted_piece_breaks_the_file(tmp_path, monkeypatch):
    """A KeyboardInterrupt inside a write (a part written, how much unknown): the file cannot be
    committed, even when the writer goes on; nothing is left."""
    from tapescope.core.atomic import AtomicFile

    f = AtomicFile(tmp_path / "run.capture")

    def interrupted(fd, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        f.write(np.zeros(1 << 16, np.float32))
    monkeypatch.undo()
    with pytest.raises(OSError, match="interrupted while writing"):
        f.commit()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_dropping_its_copy_leaves_the_parents_file(tmp_path):
    """A DataLoader's forked worker holds a copy of the writer: its end (or its discard) must
    not remove the temporary the parent is still writing."""
    import gc

    from tapescope.core.atomic import AtomicFile

    f = AtomicFile(tmp_path / "run.capture")
    f.write(b"parent's")
    pid = os.fork()
    if pid == 0:  # the child: cannot write or commit its copy; drops it; leaves at once
        code = 0
        try:
            for attempt in (lambda: f.write(b"child's"), f.commit):
                try:
                    attempt()
                    code = 3
                except (OSError, ValueError) as e:
                    code = code or (0 if "forked child" in str(e) else 4)
            f.discard()
            gc.collect()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(leftovers(tmp_path)) == 1
    f.write(b" bytes")
    assert f.commit().read_bytes() == b"parent's bytes"
