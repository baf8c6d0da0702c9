"""A Database is the user's surface only: no checkpoint or recovery hook on it,
one lifecycle state, and the parts behind it meet through their Protocols."""

import pytest

import pagestore
from pagestore import checkpoint, recovery, wal
from pagestore.database import State, engine_of

OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
HOOKS = ("begin", "finish", "release", "copy_pages", "copy_frame", "pages_with_copy",
         "checkpoint_buffer", "frame_records", "compact_pages", "frame_heads", "write_pages",
         "apply_log", "stash", "preload")


def test_no_checkpoint_hook_is_reachable_from_a_database(tmp_path):
    with pagestore.open(tmp_path, **OPTS) as db:
        assert [h for h in HOOKS if hasattr(db, h)] == []
        assert sorted(set(dir(db)) & set(HOOKS)) == []


def test_begin_from_user_code_cannot_break_later_checkpoints(tmp_path):
    # It used to be the checkpointer's hook: a user's db.begin(1) flagged every
    # dirty page for a checkpoint that never came, and after a put the reopened
    # store raised CorruptionError on reads.
    with pagestore.open(tmp_path, **OPTS) as db:
        db[b"a"] = b"1"
        with pytest.raises(AttributeError):
            db.begin(1)
        db[b"b"] = b"2"
        db.checkpoint()
    with pagestore.open(tmp_path, **OPTS) as db:
        assert (db[b"a"], db[b"b"]) == (b"1", b"2")
        assert db.verify()["keys"] == 2


def test_the_parts_behind_a_store_satisfy_the_layers_protocols(tmp_path):
    with pagestore.open(tmp_path, **OPTS) as db:
        parts = engine_of(db)
        assert isinstance(parts.source, checkpoint.PageSource)
        assert isinstance(parts.pages, checkpoint.PageSink)
        assert isinstance(parts.checkpointer.framing, checkpoint.RecoveryFraming)
        assert isinstance(parts.wal, wal.WalHandle)
        assert isinstance(parts.wal, wal.SegmentSource)
        assert isinstance(parts, recovery.RecoveringStore)


def test_a_store_lives_through_one_state(tmp_path):
    db = pagestore.open(tmp_path / "a", **OPTS)
    assert db.state is State.OPEN
    db.close()
    assert db.state is State.CLOSED
    db.close()                                   # a second close changes nothing
    assert db.state is State.CLOSED
    with pytest.raises(pagestore.ClosedError):
        db.put(b"k", b"v")
    db = pagestore.open(tmp_path / "b", **OPTS)
    db._abandon()
    assert db.state is State.ABANDONED
    with pytest.raises(pagestore.ClosedError):
        db.get(b"k")
    db.close()                                   # nothing left to close
    with pagestore.open(tmp_path / "b", **OPTS) as again:   # the lock went with it
        assert again.state is State.OPEN


def test_a_failed_open_holds_nothing(tmp_path):
    with pagestore.open(tmp_path, **OPTS) as db:
        db[b"k"] = b"v"
    with pytest.raises(pagestore.ConfigError):
        pagestore.open(tmp_path, **dict(OPTS, page_size=8192))
    with pagestore.open(tmp_path, **OPTS) as db:           # no lock left behind
        assert db[b"k"] == b"v"
