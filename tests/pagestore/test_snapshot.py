"""Snapshots see the store as of their creation, whatever comes after; their
memory is bounded; every plain scan reads one."""

from __future__ import annotations

import pytest

import pagestore
from pagestore import SnapshotTooOldError

OPTS = dict(memory_size=16 << 20, wal_segment_size=4 << 20, checkpoint_interval=3600)


@pytest.fixture
def db(tmp_path):
    d = pagestore.open(tmp_path / "s", **OPTS)
    yield d
    d.close()


def fill(db, n=200):
    db.put_many((b"k%04d" % i, b"v%d" % i) for i in range(n))
    return {b"k%04d" % i: b"v%d" % i for i in range(n)}


def test_a_snapshot_keeps_its_values_across_commits_and_a_checkpoint(db):
    before = fill(db)
    with db.snapshot() as snap:
        db[b"k0001"] = b"changed"
        del db[b"k0002"]
        db[b"k0001a"] = b"inserted"
        db.put_many((b"k%04d" % i, b"x" * 5000) for i in range(10, 60))   # overflow values
        with db.transaction() as txn:
            txn[b"k0100"] = b"txn"
            del txn[b"k0101"]
        db.checkpoint()
        db[b"k0003"] = b"after the checkpoint"
        assert dict(snap.scan()) == before
        assert snap[b"k0001"] == b"v1" and snap[b"k0002"] == b"v2"
        assert b"k0001a" not in snap and snap.get(b"k0001a") is None
        assert snap[b"k0010"] == b"v10" and snap[b"k0101"] == b"v101"
        assert len(snap) == len(before)
        assert list(snap.scan(reverse=True)) == sorted(before.items(), reverse=True)
        assert list(snap.scan(b"k0005", b"k0012")) == [(b"k%04d" % i, b"v%d" % i) for i in range(5, 12)]
        assert [k for k, _ in snap.scan(prefix=b"k000")] == [b"k%04d" % i for i in range(10)]
    assert db[b"k0001"] == b"changed" and len(db) == 199


def test_a_value_rewritten_many_times_reads_as_it_was(db):
    db[b"k"] = b"0"
    snaps = []
    for i in range(1, 6):
        snaps.append(db.snapshot())
        db[b"k"] = b"%d" % i
    assert [s[b"k"] for s in snaps] == [b"0", b"1", b"2", b"3", b"4"]
    snaps[2].release()
    assert [s[b"k"] for s in snaps[:2] + snaps[3:]] == [b"0", b"1", b"3", b"4"]
    for s in snaps:
        s.release()
    assert db.stats()["snapshot_bytes"] == 0


def test_a_released_snapshot_refuses_reads_and_frees_its_memory(db):
    fill(db, 10)
    snap = db.snapshot()
    db[b"k0000"] = b"new"
    assert db.stats()["snapshots_open"] == 1 and db.stats()["snapshot_bytes"] > 0
    snap.release()
    snap.release()                                   # idempotent
    with pytest.raises(pagestore.ClosedError):
        snap.get(b"k0000")
    st = db.stats()
    assert st["snapshots_open"] == 0 and st["snapshot_bytes"] == 0


def test_a_dropped_snapshot_is_released_when_collected(db):
    fill(db, 10)
    db.snapshot()                                    # never released by the caller
    import gc
    gc.collect()
    assert db.stats()["snapshots_open"] == 0


def test_a_plain_scan_reads_the_store_as_of_its_first_item(db):
    fill(db, 3000)                                   # more than one scan batch
    it = db.scan()
    first = next(it)
    db[b"k0001"] = b"changed behind"
    db[b"k2999"] = b"changed ahead"
    db[b"k2000a"] = b"inserted ahead"
    del db[b"k1500"]
    rest = dict([first, *it])
    assert rest[b"k0001"] == b"v1" and rest[b"k2999"] == b"v2999"
    assert b"k2000a" not in rest and rest[b"k1500"] == b"v1500" and len(rest) == 3000
    assert db.stats()["snapshots_open"] == 0         # released at the end of the iteration


def test_a_plain_scan_dropped_half_way_releases_its_snapshot(db):
    fill(db, 3000)
    it = db.scan()
    next(it)
    assert db.stats()["snapshots_open"] == 1
    del it
    import gc
    gc.collect()
    assert db.stats()["snapshots_open"] == 0


def test_a_reverse_plain_scan_reads_the_store_as_of_its_first_item(db):
    fill(db, 3000)
    it = db.scan(reverse=True)
    next(it)
    db[b"k0000"] = b"changed ahead"
    db[b"k0000a"] = b"inserted ahead"
    rest = dict(it)
    assert rest[b"k0000"] == b"v0" and b"k0000a" not in rest and len(rest) == 2999


def test_snapshot_memory_is_bounded_and_the_oldest_snapshot_goes_first(tmp_path):
    db = pagestore.open(tmp_path / "s", snapshot_memory=200_000, **OPTS)
    try:
        db[b"a"] = b"old"
        oldest = db.snapshot()
        for i in range(100):
            db[b"k%d" % i] = b"x" * 1000            # new keys: small "absent" entries
        newer = db.snapshot()
        for i in range(100):
            db[b"k%d" % i] = b"y" * 1000            # ~100 KB of before-images
        for i in range(100):
            db[b"k%d" % i] = b"z" * 1000            # ~200 KB: past the bound
        st = db.stats()
        assert st["snapshot_bytes"] <= 200_000
        assert st["snapshots_too_old"] >= 1
        with pytest.raises(SnapshotTooOldError):
            oldest.get(b"a")
        with pytest.raises(SnapshotTooOldError):
            list(oldest.scan())
        assert issubclass(SnapshotTooOldError, pagestore.Error)
        oldest.release()
        # writes went on all along; a new snapshot works
        with db.snapshot() as fresh:
            assert fresh[b"k5"] == b"z" * 1000
        newer.release()
        assert db.stats()["snapshot_bytes"] == 0
    finally:
        db.close()


def test_stats_show_open_snapshots_their_age_and_bytes(db):
    fill(db, 10)
    st = db.stats()
    assert (st["snapshots_open"], st["snapshot_bytes"], st["snapshot_oldest_age"]) == (0, 0, 0)
    with db.snapshot():
        db[b"k0000"] = b"a longer value than before"
        st = db.stats()
        assert st["snapshots_open"] == 1 and st["snapshot_bytes"] > len(b"k0000v0")
        assert st["snapshot_oldest_age"] > 0


def test_a_snapshot_of_a_closed_store_refuses_reads(tmp_path):
    db = pagestore.open(tmp_path / "s", **OPTS)
    fill(db, 10)
    snap = db.snapshot()
    db.close()
    with pytest.raises(pagestore.ClosedError):
        snap.get(b"k0000")
    snap.release()                                   # still fine after close


def test_many_snapshots_over_thousands_of_writes_read_as_their_models(db):
    """Enough writes to grow, rehash and compact the undo log many times over,
    with snapshots opened and released in random order."""
    import random
    rng = random.Random(5)
    keys = [b"key%05d" % i for i in range(1500)]
    model, open_snaps = {}, []
    for step in range(12_000):
        k = rng.choice(keys)
        r = rng.random()
        if r < 0.6:
            v = rng.randbytes(rng.choice([4, 40, 900]))
            db[k] = v
            model[k] = v
        elif r < 0.8:
            db.delete(k)
            model.pop(k, None)
        elif r < 0.85:
            items = {rng.choice(keys): b"b%d" % step for _ in range(20)}
            db.put_many(items)
            model.update(items)
        if step % 400 == 0:
            open_snaps.append((db.snapshot(), dict(model)))
        if len(open_snaps) > 6 or (open_snaps and rng.random() < 0.002):
            snap, seen = open_snaps.pop(rng.randrange(len(open_snaps)))
            assert dict(snap.scan()) == seen
            assert len(snap) == len(seen)
            snap.release()
        if step % 997 == 0:
            for snap, seen in open_snaps:
                probe = rng.sample(keys, 50)
                assert [snap.get(x) for x in probe] == [seen.get(x) for x in probe]
    for snap, seen in open_snaps:
        assert list(snap.scan(reverse=True)) == sorted(seen.items(), reverse=True)
        snap.release()
    assert dict(db.scan()) == model
    assert db.stats()["snapshot_undo_entries"] == 0


def test_a_snapshot_iterates_keys_items_and_values_as_of_its_creation(db):
    fill(db, 5)
    with db.snapshot() as snap:
        db[b"k0000"] = b"new"
        db[b"k9999"] = b"added"
        assert list(snap) == list(snap.keys()) == [b"k%04d" % i for i in range(5)]
        assert list(snap.values()) == [b"v%d" % i for i in range(5)]
        assert dict(snap.items()) == {b"k%04d" % i: b"v%d" % i for i in range(5)}
