"""Group-commit rounds written and synced in C (csrc/gcround.c, PS_GC_IO).

In fsync mode on posix files the elected leader pwrites and fdatasyncs its
round in C; a round C cannot do alone (two segments, zeros being written
ahead, a crash point armed) comes back to the WAL's Python path. These
check both sides of that line, the bytes C writes, and that after a failed
round nothing is acknowledged again."""

import errno
import os
import threading

import pytest

import pagestore
from pagestore import _native
from pagestore._native import ffi
from pagestore.database import State, engine_of
from pagestore.wal.format import encode_end
from pagestore.wal.gate import RoundFailed

OPTS = dict(page_size=4096, memory_size=8 << 20, wal_mode="fsync")
S = 1 << 20


def _gate(tmp_path, flags=os.O_RDWR):
    """A C gate over a fresh end-LSN cell, rounds in C on, segment 0 registered
    with a file of `flags` and a writable buffer. Returns (gate, cell, buf, path)."""
    path = str(tmp_path / "seg0")
    with open(path, "wb") as f:
        f.truncate(S)
    fd = os.open(path, flags)
    cell = ffi.new("uint64_t *")
    gate = _native.GroupCommit(cell, owner=cell)
    gate.io_enable(True, S)
    buf = bytearray(S)
    gate.io_segment(0, fd, buf)
    return gate, cell, buf, path


def _write(cell, buf, upto, byte):
    buf[cell[0]:upto] = bytes([byte]) * (upto - cell[0])
    cell[0] = upto


def test_a_round_in_c_writes_the_blocks_covering_it_and_returns_durable(tmp_path):
    gate, cell, buf, path = _gate(tmp_path)
    ticket = gate.ticket()
    _write(cell, buf, 100, 1)
    assert gate.wait(100, True, ticket, io=True) is False       # done in C: nothing for Python
    _write(cell, buf, 5000, 2)        # crosses a block: [100, 4096) and [4096, 8192)
    assert gate.wait(5000, True, ticket, io=True) is False
    assert gate.durable == 5000 and gate.published == 5000
    want = bytearray(buf[:8192])
    want[5000:5017] = encode_end(5000)     # the round's END, whatever the buffer holds there
    with open(path, "rb") as f:
        assert f.read(8192) == bytes(want)
    st = gate.stats()
    assert st["io_rounds"] == 2 and st["io_fsyncs"] == 2 and st["io_pwrites"] == 3
    assert st["io_pwrite_bytes"] == 4096 + (8192 - 100)   # from `published`, not its block


def test_without_io_or_for_an_unregistered_segment_the_round_is_pythons(tmp_path):
    gate, cell, buf, _ = _gate(tmp_path)
    ticket = gate.ticket()
    _write(cell, buf, 100, 1)
    assert gate.wait(100, False, ticket, io=False) is True       # the caller leads
    gate.done(ticket, True)
    cell[0] = S + 100                 # the round spans segments 0 and 1: not C's alone
    assert gate.wait(S + 100, False, ticket, io=True) is True
    gate.done(ticket, True)
    assert gate.stats()["io_rounds"] == 0


def test_a_segment_the_grower_is_zeroing_is_left_to_python(tmp_path):
    gate, cell, buf, _ = _gate(tmp_path)
    ticket = gate.ticket()
    gate.io_zeroing(0, True)
    _write(cell, buf, 100, 1)
    assert gate.wait(100, False, ticket, io=True) is True
    gate.done(ticket, True)
    gate.io_zeroing(0, False)
    _write(cell, buf, 200, 2)
    assert gate.wait(200, False, ticket, io=True) is False
    assert gate.stats()["io_rounds"] == 1


def test_after_a_failed_round_in_c_no_commit_is_acknowledged_even_when_the_disk_works(tmp_path):
    gate, cell, buf, path = _gate(tmp_path, os.O_RDONLY)       # pwrite: EBADF
    ticket = gate.ticket()
    _write(cell, buf, 100, 1)
    with pytest.raises(RoundFailed) as e:
        gate.wait(100, False, ticket, io=True)
    assert e.value.err == errno.EBADF and e.value.seq == 0 and e.value.acked == 0
    assert not e.value.during_sync and not ticket.granted
    # a good file now: a later fdatasync could succeed after the first lost the
    # bytes, so every commit not durable keeps failing, on either path
    gate.io_segment(0, os.open(path, os.O_RDWR), buf)
    gate.io_enable(True, S)
    for io in (True, False):
        with pytest.raises(RoundFailed):
            gate.wait(100, False, ticket, io=io)
    assert gate.durable == 0


def _threads_put(db, threads, each, value):
    def work(t):
        for i in range(each):
            db.put(b"%02d-%05d" % (t, i), value)
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {b"%02d-%05d" % (t, i) for t in range(threads) for i in range(each)}


def test_fsync_rounds_run_in_c_on_posix_and_every_commit_is_durable(tmp_path):
    with pagestore.open(tmp_path, wal_segment_size=S, **OPTS) as db:
        keys = _threads_put(db, 8, 400, b"v" * 1000)     # 3.2 MB of log: segment switches too
        st = db.stats()
    assert st["wal_rounds_in_c"] > 0
    # rounds across a segment switch went the Python way
    assert st["wal_rounds_in_c"] < st["wal_group_commits"]
    with pagestore.open(tmp_path, wal_segment_size=S, **OPTS) as db:
        assert all(db.get(k) == b"v" * 1000 for k in keys)


def test_an_armed_crash_point_sends_rounds_through_python(tmp_path):
    with pagestore.open(tmp_path, **OPTS) as db:
        db.put(b"a", b"1")
        in_c = db.stats()["wal_rounds_in_c"]
        db.fs.arm("wal.after_fsync", "raise", hit=10**9)     # never fires; passes are counted
        for i in range(20):
            db.put(b"k%02d" % i, b"v")
        assert db.stats()["wal_rounds_in_c"] == in_c
        assert db.fs.crash_point_hits["wal.after_fsync"] >= 20
        db.fs.disarm()
        db.put(b"z", b"1")
        assert db.stats()["wal_rounds_in_c"] == in_c + 1


def test_a_failed_pwrite_in_c_fails_the_store_naming_the_segment_and_keeps_what_was_durable(tmp_path):
    db = pagestore.open(tmp_path, **OPTS)
    for i in range(50):
        db.put(b"k%02d" % i, b"v")
    assert db.stats()["wal_rounds_in_c"] > 0
    live = engine_of(db).wal._segs.live          # the segment the encoder writes
    seg = live[max(live)].file
    # its descriptor now reads only: the next pwrite in C fails with EBADF
    ro = os.open(seg.path, os.O_RDONLY)
    os.dup2(ro, seg.fileno())
    os.close(ro)
    with pytest.raises(pagestore.Error) as e:
        db.put(b"late", b"x")
    assert os.path.basename(seg.path) in str(e.value)
    assert db.state is State.FAILED
    with pytest.raises(pagestore.Error):
        db.put(b"later", b"x")
    db.close()
    with pagestore.open(tmp_path, **OPTS) as db:
        assert all(db.get(b"k%02d" % i) == b"v" for i in range(50))
        assert db.get(b"late") is None and db.get(b"later") is None
