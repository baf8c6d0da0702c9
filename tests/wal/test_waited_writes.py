"""A durable write and its commit's wait in one call into C (ps_gc_put,
ps_gc_delete; wal/commit.py `WaitedWrites`).

In fsync mode every put and delete, and in the other modes a write with
`sync=True`, is written and waited for in the same C call: the GIL is let
go once per durable write. These check that such a write takes no second
step through the WAL's commit or flush, that it is on disk when it returns
(a power loss right after keeps it) also when its round must be led in
Python (the simulator's files), and that with a crash point armed a
`sync=True` write still passes "wal.sync_write_logged"."""

import pytest

import pagestore
from pagestore.database import engine_of
from pagestore.diskio import SimFS

OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def _second_step(*_a, **_k):
    raise AssertionError("a durable write went through the two-step way")


def test_a_durable_put_or_delete_in_fsync_mode_waits_inside_its_write_call(tmp_path, monkeypatch):
    with pagestore.open(tmp_path, wal_mode="fsync", **OPTS) as db:
        monkeypatch.setattr(db, "_wal_commit", _second_step)   # the WAL's commit: the old second call
        monkeypatch.setattr(engine_of(db).wal, "flush", _second_step)
        try:
            db.put(b"a", b"1")
            db.put(b"b", b"2", sync=True)
            assert db.delete(b"a") is True
            assert db.delete(b"absent") is False
        finally:
            monkeypatch.undo()                  # close() checkpoints through flush
    with pagestore.open(tmp_path, wal_mode="fsync", **OPTS) as db:
        assert db.get(b"a") is None and db.get(b"b") == b"2"


@pytest.mark.parametrize("mode", ["log_only", "background"])
def test_a_sync_write_in_a_buffered_mode_waits_inside_its_write_call(tmp_path, mode, monkeypatch):
    with pagestore.open(tmp_path, wal_mode=mode, **OPTS) as db:
        monkeypatch.setattr(engine_of(db).wal, "flush", _second_step)
        try:
            db.put(b"a", b"1", sync=True)
            db.put(b"b", b"2", sync=True)
            assert db.delete(b"a", sync=True) is True
            assert db.delete(b"absent", sync=True) is False
        finally:
            monkeypatch.undo()
    with pagestore.open(tmp_path, wal_mode=mode, **OPTS) as db:
        assert db.get(b"a") is None and db.get(b"b") == b"2"


def test_a_durable_write_led_in_python_is_on_disk_when_it_returns():
    sim = SimFS()          # no rounds in C on the simulator: every leader is handed its round
    db = pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS)
    assert engine_of(db).waited_writes() is not None
    for i in range(40):
        db.put(b"k%02d" % i, b"v%d" % i)
    assert db.delete(b"k07") is True
    db._abandon()
    sim.crash(3, "drop")   # power loss: only what was synced is left
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert [db.get(b"k%02d" % i) for i in range(40)] == \
            [None if i == 7 else b"v%d" % i for i in range(40)]


def test_a_sync_write_passes_its_crash_point_while_one_is_armed(tmp_path):
    with pagestore.open(tmp_path, wal_mode="log_only", **OPTS) as db:
        assert engine_of(db).waited_writes() is not None
        db.fs.arm("wal.after_fsync", "raise", hit=10**9)   # never fires; armed, so passes are counted
        db.put(b"a", b"1", sync=True)
        db.delete(b"a", sync=True)
        assert db.fs.crash_point_hits.get("wal.sync_write_logged", 0) == 2
        db.fs.disarm()
