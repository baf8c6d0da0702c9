"""A write that raised leaves no trace in memory either: after the log fails,
get() sees exactly the acknowledged writes (the core undoes the rest and
refuses later writes), and nothing is acknowledged after the store saw the
error."""

import errno
import threading

import pytest

import pagestore
from pagestore.diskio import SimFS

OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600,
            checkpoint_threads=1, checkpoint_buffer_size=64 * 4096)


def _txn(db, items):
    with db.transaction() as tx:
        for k, v in items.items():
            tx.put(k, v) if v is not None else tx.delete(k)


# (what the write does, the keys it changes and their values if it applied)
WRITES = {
    "put-over": (lambda db: db.put(b"a", b"new"), {b"a": b"new"}),
    "put-new": (lambda db: db.put(b"fresh", b"new"), {b"fresh": b"new"}),
    "delete": (lambda db: db.delete(b"b"), {b"b": None}),
    "put_many": (lambda db: db.put_many({b"a": b"n1", b"c": b"n2", b"d": b"n3"}),
                 {b"a": b"n1", b"c": b"n2", b"d": b"n3"}),
    "transaction": (lambda db: _txn(db, {b"a": b"t1", b"b": None, b"e": b"t2"}),
                    {b"a": b"t1", b"b": None, b"e": b"t2"}),
}
BEFORE = {b"a": b"old", b"b": b"there", b"c": b"c0"}


def _store(mode: str):
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, wal_mode=mode, **OPTS)
    db.put_many(BEFORE)
    db.put(b"filler", b"x" * 3000)
    db.sync()
    return sim, db


def _state(db, keys) -> dict:
    return {k: db.get(k) for k in keys}


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
@pytest.mark.parametrize("what", sorted(WRITES))
def test_a_write_that_raised_is_not_visible_to_reads_nor_after_reopen(mode, what):
    write, changes = WRITES[what]
    keys = sorted(set(BEFORE) | set(changes))
    # the first I/O of the write is the log's (handing the record to the OS on
    # the simulator): fail it once, so the log can blank what it wrote
    sim, db = _store(mode)
    want = _state(db, keys)
    sim.arm_fault(1, errno.EIO)
    with pytest.raises(pagestore.DiskIOError) as info:
        write(db)
    assert not info.value.in_doubt
    with pytest.raises(pagestore.DiskIOError, match="refused"):
        db.put(b"a", b"later")              # the store takes no write after the failure
    assert db.state is pagestore.database.State.FAILED
    assert _state(db, keys) == want, "the write that raised is visible in memory"
    assert len(db) == len(BEFORE) + 1
    assert [k for k, _ in db.scan()] == sorted([k for k, v in want.items() if v is not None] + [b"filler"])
    db.close()
    sim.clear_fault()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode=mode, **OPTS) as db:
        assert _state(db, keys) == want


def test_concurrent_writers_at_a_failed_fsync_leave_exactly_what_was_acknowledged():
    sim, db = _store("fsync")
    acked: dict = {}
    errors: list = []
    armed = threading.Event()

    def writer(t: int) -> None:
        for i in range(400):
            k = b"t%d-%d" % (t, i % 7)
            v = b"%d-%d" % (t, i)
            if i == 20 and t == 0:
                sim.arm_fault(1, errno.EIO)
                armed.set()
            try:
                db.put(k, v)
            except pagestore.Error as e:
                errors.append(e)
                return
            acked[k] = v

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert armed.is_set() and errors, "the fault never reached a writer"
    assert all(isinstance(e, pagestore.DiskIOError) for e in errors)
    assert not any(e.in_doubt for e in errors)
    keys = {b"t%d-%d" % (t, j) for t in range(4) for j in range(7)}
    assert {k: db.get(k) for k in keys} == {k: acked.get(k) for k in keys}
    db.close()
    sim.clear_fault()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert {k: db.get(k) for k in keys} == {k: acked.get(k) for k in keys}


def test_after_the_log_failed_no_write_reaches_the_core(tmp_path):
    # log_only on a real file system: a record is acknowledged once in the page
    # cache, so only a sync can fail; after it the core refuses every write,
    # also one that passed the store's state check before the failure was seen
    db = pagestore.open(str(tmp_path / "s"), wal_mode="log_only", **OPTS)
    db.put(b"a", b"old")
    engine = pagestore.database.engine_of(db)
    assert engine.wal.fence(None) > 0       # what a failed sync does first: the log's end then
    with pytest.raises(pagestore.Error, match="refused"):
        engine.core.put(b"a", b"late")      # straight to the core: refused there
    assert db.get(b"a") == b"old"
    db.close()


def test_a_writer_failing_while_the_first_failure_is_settled_waits_for_its_outcome():
    # The first failing thread fences the writers and blanks the records past
    # the acknowledged end; both decide whether another writer's record stays.
    # A writer that fails meanwhile must not judge "in doubt" from the values
    # before them (it raised a write as not applied that the fence then kept).
    from pagestore.database import engine_of
    sim, db = _store("log_only")
    wal = engine_of(db).wal
    entered, release = threading.Event(), threading.Event()
    real_fence = wal._fence_writers

    def slow_fence():
        entered.set()
        assert release.wait(60)
        real_fence()
    wal._fence_writers = slow_fence
    sim.arm_fault(1, errno.EIO, persistent=True)
    failing = threading.Thread(target=lambda: pytest.raises(pagestore.DiskIOError, db.put, b"a", b"new"))
    failing.start()
    assert entered.wait(60)
    end = wal._end_lsn()
    judged = []
    judge = threading.Thread(target=lambda: judged.append(wal.in_doubt(end)))
    judge.start()
    judge.join(0.5)
    early = list(judged)
    release.set()
    assert early == [], "judged before the failure was settled"
    judge.join(60)
    failing.join(60)
    assert judged == [wal.in_doubt(end)]
    db.close()
