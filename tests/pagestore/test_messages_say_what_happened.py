"""Error messages say what happened: a refused read-only open, a commit whose
snapshot was dropped, a full disk under the WAL's NEWEST file."""

import errno

import pytest

import pagestore
from pagestore import faults

SMALL = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def test_a_read_only_open_refused_because_a_writer_has_the_store_says_it_is_refused_not_that_it_waits(tmp_path):
    with pagestore.open(tmp_path / "s", **SMALL):
        with pytest.raises(pagestore.StoreLockedError) as e:
            pagestore.open(tmp_path / "s", read_only=True)
    text = str(e.value)
    assert "wait" not in text and "refused" in text and str(tmp_path / "s") in text


def _drop_oldest_snapshot(db) -> None:
    """Write other keys until the store drops its oldest snapshot at the snapshot_memory bound."""
    before = db.stats()["snapshots_too_old"]
    for i in range(100_000):
        db[b"fill%06d" % i] = b"x" * 100
        if db.stats()["snapshots_too_old"] > before:
            return
    pytest.fail("100,000 writes of 100 B never passed a 4 KiB snapshot_memory")


def test_a_commit_whose_snapshot_was_dropped_says_so_and_applies_nothing(tmp_path):
    with pagestore.open(tmp_path / "s", snapshot_memory=4096, **SMALL) as db:
        db[b"acct"] = b"100"
        txn = db.transaction()
        assert txn[b"acct"] == b"100"
        _drop_oldest_snapshot(db)              # no write touches b"acct": nothing it read changed
        txn[b"other"] = b"1"
        with pytest.raises(pagestore.ConflictError) as e:
            txn.commit()
        assert "dropped" in str(e.value) and "snapshot_memory" in str(e.value)
        assert "another commit changed" not in str(e.value)
        assert db.get(b"other") is None


def test_a_commit_with_a_real_conflict_still_says_another_commit_changed_what_it_read(tmp_path):
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        db[b"acct"] = b"100"
        txn = db.transaction()
        assert txn[b"acct"] == b"100"
        db[b"acct"] = b"50"
        txn[b"acct"] = b"101"
        with pytest.raises(pagestore.ConflictError, match="another commit changed"):
            txn.commit()
        assert db[b"acct"] == b"50"


def test_a_full_disk_under_the_wal_newest_file_names_that_file_not_a_segment(tmp_path):
    path = str(tmp_path / "s" / "wal" / "NEWEST.tmp")
    err = faults.translate(OSError(errno.ENOSPC, "No space left on device", path), "put")
    assert isinstance(err, pagestore.DiskFullError) and err.path == path
    assert str(err).startswith(f"put: the WAL's NEWEST file {path}: [Errno 28]"), str(err)
    seg = str(tmp_path / "s" / "wal" / "seg-00000001.wal")
    assert "the WAL segment" in str(faults.translate(OSError(errno.ENOSPC, "full", seg), "put"))
