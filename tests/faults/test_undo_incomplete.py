"""A write the store could not take back is reported in doubt.

When the log fails, the core's fence puts back the before-image of every
write past the acknowledged end. That undo changes pages too, and can meet a
full checkpoint buffer or a page it cannot read: it stops there, the writes
it did not reach stay visible in memory. Such a write must not raise as "not
applied" (docs/errors.md): its error says in_doubt, and after reopen either
outcome is allowed. The undo's failure is injected at the fence, the one
place the log hands the undo to the core: it refuses writes as the real one
does, then reports the checkpoint buffer full before taking anything back.
"""

import errno

import pytest

import pagestore
from pagestore import _native
from pagestore.database import engine_of
from pagestore.diskio import SimFS

OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600,
            checkpoint_threads=1, checkpoint_buffer_size=64 * 4096)
BEFORE = {b"a": b"old", b"b": b"there", b"c": b"c0"}


def _txn(db, items):
    with db.transaction() as tx:
        for k, v in items.items():
            tx.put(k, v) if v is not None else tx.delete(k)


# (what the write does, the values of the keys it changes if it applied)
WRITES = {
    "put": (lambda db: db.put(b"a", b"new"), {b"a": b"new"}),
    "delete": (lambda db: db.delete(b"b"), {b"b": None}),
    "put_many": (lambda db: db.put_many({b"a": b"n1", b"d": b"n2"}), {b"a": b"n1", b"d": b"n2"}),
    "transaction": (lambda db: _txn(db, {b"a": b"t1", b"b": None}), {b"a": b"t1", b"b": None}),
}


def _store_whose_undo_fails():
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS)
    db.put_many(BEFORE)
    db.sync()
    wal = engine_of(db).wal
    real_fence = wal.fence
    calls = []

    def fence(acked_end):
        calls.append(acked_end)
        real_fence(None)        # writes refused from here on, nothing taken back
        raise _native.Retry(_native.PS_E_CKPT_FULL, 7)

    wal.fence = fence
    return sim, db, calls


@pytest.mark.parametrize("what", sorted(WRITES))
def test_a_write_left_applied_by_a_failed_undo_raises_in_doubt(what):
    write, changes = WRITES[what]
    keys = sorted(set(BEFORE) | set(changes))
    sim, db, calls = _store_whose_undo_fails()
    before = {k: db.get(k) for k in keys}
    applied = {**before, **changes}
    sim.arm_fault(1, errno.EIO)                  # the write's record: the log fails
    with pytest.raises(pagestore.DiskIOError) as info:
        write(db)
    assert calls, "the log never fenced the writers"
    # the undo stopped before this write: it is visible, so it is in doubt
    assert {k: db.get(k) for k in keys} == applied
    assert info.value.in_doubt, f"raised as not applied, yet visible: {info.value}"
    assert "could not take the write back" in str(info.value)
    with pytest.raises(pagestore.DiskIOError, match="refused") as later:
        db.put(b"a", b"later")                   # refused: not applied, not in doubt
    assert not later.value.in_doubt
    assert db.get(b"a") != b"later"
    db.close()
    sim.clear_fault()
    sim.crash(mode="keep")
    with pagestore.open("/s", fs=sim, wal_mode="fsync", **OPTS) as db:
        assert {k: db.get(k) for k in keys} in (before, applied)
