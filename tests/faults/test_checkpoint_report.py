"""A checkpoint the store started by itself and that failed is reported to the
next write: that write raises the checkpoint's typed error once and is not
applied; the writes after it go on while the checkpointer retries."""

import errno
import time

import pytest

import pagestore
from pagestore.database import State
from pagestore.diskio import SimFS

OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_threads=1,
            checkpoint_buffer_size=64 * 4096, checkpoint_spread=0.0)
CAP = 60.0      # seconds: a generous cap for conditions the test waits for, never a sleep


def _until(cond, what: str):
    deadline = time.monotonic() + CAP
    while not cond():
        assert time.monotonic() < deadline, f"not within {CAP} s: {what}"
        time.sleep(0.01)


def _failing_timed_checkpoint(sim, db):
    """Dirty some pages, fail every I/O from now on, wait for a timed checkpoint to fail."""
    for i in range(300):
        db.put(b"k%04d" % i, b"v" * 200)
    db.sync()
    sim.arm_fault(1, errno.ENOSPC, persistent=True)
    _until(lambda: db.stats()["checkpoint_failures"] >= 1, "a timed checkpoint failed")
    sim.clear_fault()


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_the_next_write_after_a_failed_timed_checkpoint_raises_it_once_unapplied(mode):
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, wal_mode=mode, checkpoint_interval=0.05, **OPTS)
    _failing_timed_checkpoint(sim, db)
    assert db.state is State.CHECKPOINT_FAILED
    assert db.get(b"k0001") == b"v" * 200                 # reads never see it
    with pytest.raises(pagestore.DiskFullError) as info:
        db.put(b"new", b"value")
    err = info.value
    assert err.operation == "put" and err.path.startswith("/s/cp") and "not applied" in str(err)
    assert db.get(b"new") is None and db.state is State.OPEN
    db.put(b"new", b"value")                              # reported once: the next one goes on
    assert db.get(b"new") == b"value"
    _until(lambda: db.stats()["checkpoint_error"] is None, "the checkpointer's retry succeeded")
    db.close()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode=mode, **OPTS) as db:
        assert db[b"new"] == b"value" and len(db) == 301


def test_a_failed_checkpoint_the_caller_waited_for_is_not_reported_again():
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, wal_mode="fsync", checkpoint_interval=3600, **OPTS)
    for i in range(300):
        db.put(b"k%04d" % i, b"v" * 200)
    sim.arm_fault(1, errno.ENOSPC, persistent=True)
    with pytest.raises(pagestore.DiskFullError):
        db.checkpoint()
    sim.clear_fault()
    assert db.state is State.OPEN
    db.put(b"after", b"x")                                # the caller was told already
    db.close()


def test_close_reports_a_failed_timed_checkpoint_that_still_fails():
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, wal_mode="fsync", checkpoint_interval=0.05, **OPTS)
    for i in range(300):
        db.put(b"k%04d" % i, b"v" * 200)
    sim.arm_fault(1, errno.ENOSPC, persistent=True)
    _until(lambda: db.stats()["checkpoint_failures"] >= 1, "a timed checkpoint failed")
    with pytest.raises(pagestore.DiskFullError) as info:
        db.close()
    assert info.value.operation == "close"
    assert db.state is State.CLOSED
    sim.clear_fault()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert len(db) == 300


def test_a_failed_page_file_sync_fails_the_store_and_reopen_restores_the_checkpoint():
    # after a failed sync of the page file its pages may be gone from the page
    # cache: no retry (it would write END over them); the store refuses writes
    # and the reopen restores the checkpoint from its recovery files
    for n in range(1, 200):
        sim = SimFS()
        db = pagestore.open("/s", fs=sim, wal_mode="fsync", checkpoint_interval=3600, **OPTS)
        for i in range(300):
            db.put(b"k%04d" % i, b"v" * 200)
        sim.arm_fault(n, errno.EIO)
        try:
            db.checkpoint()
        except pagestore.DiskIOError as e:
            if e.path == "/s/pages.dat" and e.errno == errno.EIO and db.state is State.FAILED:
                break
        db.close()
    else:
        pytest.fail("no fault failed the page file's sync")
    assert db.stats()["checkpoint_error"] is not None
    with pytest.raises(pagestore.DiskIOError, match="refused") as info:
        db.put(b"after", b"x")
    assert info.value.path == "/s/pages.dat"
    assert db.get(b"k0299") == b"v" * 200                 # reads go on
    db.close()                                            # no final checkpoint
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert db.recovery["pages_restored"] > 0
        assert len(db) == 300 and db[b"k0150"] == b"v" * 200 and db.get(b"after") is None


def test_a_transaction_commit_after_a_failed_timed_checkpoint_raises_it_once_unapplied():
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, wal_mode="fsync", checkpoint_interval=0.05, **OPTS)
    _failing_timed_checkpoint(sim, db)
    assert db.state is State.CHECKPOINT_FAILED
    with pytest.raises(pagestore.DiskFullError) as info:
        with db.transaction() as tx:
            tx.put(b"new", b"value")
    assert info.value.operation == "commit" and info.value.path.startswith("/s/cp")
    assert db.get(b"new") is None and db.state is State.OPEN
    with db.transaction() as tx:                          # reported once: the next one goes on
        tx.put(b"new", b"value")
    assert db.get(b"new") == b"value"
    db.close()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert db[b"new"] == b"value" and len(db) == 301
