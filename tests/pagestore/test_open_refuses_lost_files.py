"""Open refuses a store whose files lost what its checkpoint markers promise,
naming the file, instead of opening what is left (and making the loss look
consistent with its first checkpoint); and it names the file or the option for
a page file cut short or a WAL of another segment size."""

import os
import shutil

import pytest

import pagestore

OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def _store(path, n=1000, crash=False):
    db = pagestore.open(path, **OPTS)
    for i in range(n):
        db.put(b"k%05d" % i, b"v" * 50)
    db.checkpoint()
    for i in range(n, n + 500):
        db.put(b"k%05d" % i, b"w" * 50)
    if crash:
        db._abandon()         # as a kill -9 leaves it: the last 500 live in the WAL only
    else:
        db.close()


def _listing(path):
    return sorted((root, f, os.path.getsize(os.path.join(root, f)))
                  for root, _dirs, files in os.walk(path) for f in files)


@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_a_lost_page_file_after_a_checkpoint_is_reported_by_name_and_nothing_changes(tmp_path, how):
    path = tmp_path / "s"
    _store(path)
    pages = path / "pages.dat"
    if how == "truncated":
        os.truncate(pages, 0)
    else:
        os.remove(pages)
    before = [e for e in _listing(path) if e[1] not in ("pages.dat", "LOCK")]
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(path, **OPTS)
    assert e.value.path == str(pages) and "checkpoint" in str(e.value)
    assert [e for e in _listing(path) if e[1] not in ("pages.dat", "LOCK")] == before
    with pytest.raises(pagestore.CorruptionError):      # and again: nothing was "repaired"
        pagestore.open(path, **OPTS)


@pytest.mark.parametrize("crash", [False, True])
def test_a_lost_wal_under_the_replay_pointer_is_reported_by_name(tmp_path, crash):
    path = tmp_path / "s"
    _store(path, crash=crash)
    shutil.rmtree(path / "wal")
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(path, **OPTS)
    assert e.value.path == str(path / "wal") and "lsn" in str(e.value)


def test_the_same_stores_open_whole_when_nothing_is_lost(tmp_path):
    for crash in (False, True):
        path = tmp_path / f"s{crash}"
        _store(path, crash=crash)
        db = pagestore.open(path, **OPTS)
        try:
            assert len(db) == 1500 and db[b"k01499"] == b"w" * 50
        finally:
            db.close()


def test_a_page_file_cut_short_is_reported_by_name(tmp_path):
    path = tmp_path / "s"
    _store(path)
    os.truncate(path / "pages.dat", 8192)
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(path, **OPTS)
    assert e.value.path == str(path / "pages.dat")


def test_reopening_with_another_wal_segment_size_names_the_option(tmp_path):
    path = tmp_path / "s"
    _store(path)
    with pytest.raises(pagestore.ConfigError) as e:
        pagestore.open(path, **dict(OPTS, wal_segment_size=2 << 20))
    assert e.value.option == "wal_segment_size"
    db = pagestore.open(path, **OPTS)
    try:
        assert len(db) == 1500
    finally:
        db.close()
