"""compact() brings its copy up to date with the writes made while it copied in
pieces that fit the copy's page memory, so a busy store compacts like a quiet
one; a crash in the middle of that catch-up still loses no acknowledged write.

"Writes made while it copied" are made deterministically: the copy step
(`compaction.copy_pairs`) is wrapped to write first, after compact() took its
snapshot, as test_library_compact.py does for snapshot_memory."""

import random

import pytest

import pagestore
import pagestore.compaction as compaction
from pagestore.diskio import SimFS, SimulatedCrash

# 4 MiB of page memory (1,024 pages): the copy's 1 MiB batches in key order fit;
# 8,000 writes spread over a store of ~1,500 leaves do not fit in one batch
BUSY = dict(memory_size=4 << 20, wal_segment_size=4 << 20, checkpoint_interval=3600)


def _key(i):
    return b"k%07d" % i


def _writes_during_the_copy(monkeypatch, db, writes):
    """Make `writes(db)` run inside compact(), after its snapshot, before its copy
    (once: the store is paused for any later call)."""
    copy = compaction.copy_pairs
    done = []

    def write_then_copy(pairs, target):
        if not done:
            done.append(writes(db))
        return copy(pairs, target)
    monkeypatch.setattr(compaction, "copy_pairs", write_then_copy)


def test_writes_made_during_the_copy_that_outgrow_page_memory_are_caught_up_in_pieces(tmp_path, monkeypatch):
    db = pagestore.open(tmp_path / "s", **BUSY)
    try:
        want = {}
        for i in range(0, 40_000, 2000):
            batch = {_key(j): b"v" * 100 for j in range(i, i + 2000)}
            db.put_many(batch.items())
            want.update(batch)
        rnd = random.Random(1)
        changed = rnd.sample(range(40_000), 9000)

        def busy(db):
            for i in changed[:8000]:                 # rewritten, all over the key space
                db.put(_key(i), b"w%d" % i)
                want[_key(i)] = b"w%d" % i
            for i in changed[8000:]:                 # deleted
                db.delete(_key(i))
                del want[_key(i)]
            for i in range(40_000, 40_500):          # new
                db.put(_key(i), b"n")
                want[_key(i)] = b"n"
        _writes_during_the_copy(monkeypatch, db, busy)
        out = db.compact()
        assert out["changed_while_copying"] == 9500
        assert dict(db.scan()) == want
        assert db.verify()["keys"] == len(want)
    finally:
        db.close()
    with pagestore.open(tmp_path / "s", **BUSY) as db:
        assert dict(db.scan()) == want


def test_a_store_with_the_smallest_page_memory_can_be_backed_up_and_compacted(tmp_path):
    # 64 pages: a copy batch of 1 MiB would need four times as many
    small = dict(memory_size=64 * 4096)
    with pagestore.open(tmp_path / "s", **small) as db:
        for i in range(0, 20_000, 200):
            db.put_many((_key(j), b"v" * 100) for j in range(i, i + 200))
        out = db.backup(tmp_path / "bk")
        assert out["keys"] == 20_000
        db.compact()
        assert len(db) == 20_000
    with pagestore.open(tmp_path / "bk", **small) as copy:
        assert len(copy) == 20_000 and copy.verify()["keys"] == 20_000


def test_a_store_of_tiny_pairs_in_the_smallest_page_memory_can_be_backed_up_and_compacted(tmp_path):
    # a pair's cell header and slot outweigh a 2-byte key and an empty value:
    # batches charged only for key and value bytes did not fit 64 1 KiB pages
    small = dict(page_size=1024, memory_size=64 * 1024, wal_segment_size=1 << 20)
    keys = [i.to_bytes(2, "big") for i in range(60_000)]
    with pagestore.open(tmp_path / "s", **small) as db:
        for i in range(0, len(keys), 100):
            db.put_many((k, b"") for k in keys[i:i + 100])
        assert db.backup(tmp_path / "bk")["keys"] == 60_000
        db.compact()
        assert len(db) == 60_000
    with pagestore.open(tmp_path / "bk", **small) as copy:
        assert len(copy) == 60_000


# -- a crash while the copy catches up (the crash simulator) ------------------------------------
# 1 MiB of page memory: the catch-up below takes several pieces
SIM_OPTS = dict(memory_size=1 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
N = 3000


def _sim_store():
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, **SIM_OPTS)
    for i in range(0, N, 500):
        db.put_many((_key(j), b"v" * 100) for j in range(i, i + 500))
    db.checkpoint()
    return sim, db, {_key(i): b"v" * 100 for i in range(N)}


def _busy(left):
    def writes(db):
        for i in range(0, N, 7):                     # acknowledged durable: a power loss keeps them
            db.put(_key(i), b"w", sync=True)
            left[_key(i)] = b"w"
        db.delete(_key(1), sync=True)
        del left[_key(1)]
    return writes


def _crash_and_check(monkeypatch, arm, seed):
    sim, db, left = _sim_store()
    _writes_during_the_copy(monkeypatch, db, _busy(left))
    arm(sim)
    with pytest.raises(SimulatedCrash):
        db.compact()
    db._abandon()
    monkeypatch.undo()
    for mode, rng in (("keep", None), ("random", random.Random(seed))):
        after = sim.clone()
        after.crash(rng, mode)
        with pagestore.open("/s", fs=after, **SIM_OPTS) as db2:
            assert dict(db2.scan()) == left, mode
            db2.verify()


def test_a_catch_up_of_several_pieces_is_what_a_crash_can_interrupt(monkeypatch):
    sim, db, left = _sim_store()
    pieces = []
    apply = compaction._apply
    monkeypatch.setattr(compaction, "_apply", lambda target, piece: (pieces.append(len(piece)),
                                                                     apply(target, piece)))
    _writes_during_the_copy(monkeypatch, db, _busy(left))
    out = db.compact()
    assert out["changed_while_copying"] == len(range(0, N, 7)) + 1
    assert len(pieces) > 3 and sum(pieces) == out["changed_while_copying"]
    assert dict(db.scan()) == left
    db.close()


def test_a_crash_at_any_io_of_a_catch_up_in_pieces_loses_no_acknowledged_write(monkeypatch):
    # the I/Os from compact()'s call to the catch-up's start and end, in a run with no crash
    sim, db, left = _sim_store()
    marks = {}
    catch_up = compaction._catch_up

    def timed(source, target):
        marks["start"] = sim.io_count
        try:
            return catch_up(source, target)
        finally:
            marks["end"] = sim.io_count
    monkeypatch.setattr(compaction, "_catch_up", timed)
    _writes_during_the_copy(monkeypatch, db, _busy(left))
    base = sim.io_count
    db.compact()
    db.close()
    monkeypatch.undo()
    start, end = marks["start"] - base, marks["end"] - base
    assert end - start > 5
    # every I/O of the catch-up (its pieces' WAL), then of the copy's close that follows
    for n in list(range(start + 1, end + 1)) + list(range(end + 1, end + 40, 4)):
        _crash_and_check(monkeypatch, lambda s, n=n: s.arm_io(n), seed=n)
