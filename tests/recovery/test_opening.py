"""recovery/opening.py: the legacy restore reads the WAL through wal.LogHistory,
which changes no file, while the replay's Wal.recover cuts the torn tail aside."""

import glob
import os

import pytest

import pagestore
from pagestore import diskio, wal

OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def _seg_seq(path):
    with open(path, "rb") as f:
        h = f.read(32)
    return int.from_bytes(h[24:32], "little") if h[:8] == b"PSWALSEG" else -1


def _files(d):
    return {p: open(p, "rb").read() for p in sorted(glob.glob(os.path.join(d, "*")))}


def _damaged_log(tmp_path):
    """A store killed after 6000 puts (three segments), its last segment's header block zeroed."""
    p = str(tmp_path / "s")
    db = pagestore.open(p, **OPTS)
    for i in range(6000):
        db.put(b"k%06d" % i, b"v" * 300)
    db._abandon()
    last = max(glob.glob(p + "/wal/seg-*.wal"), key=_seg_seq)
    with open(last, "r+b") as f:
        f.write(bytes(4096))
    return p, last


def test_reading_the_log_history_changes_no_file(tmp_path):
    p, last = _damaged_log(tmp_path)
    before = _files(p + "/wal")
    history = wal.LogHistory(diskio.PosixFS(), p + "/wal", OPTS["wal_segment_size"])
    records = list(history.records(0))
    assert len(records) > 1000 and all(r.lsn is not None for r in records)
    assert _files(p + "/wal") == before                  # nothing cut, renamed or written


def test_the_replay_cuts_the_same_log_where_the_history_read_left_it(tmp_path):
    # The control of the test above: reading through Wal.recover sets the
    # damaged segment aside, so "no file changed" can fail.
    p, last = _damaged_log(tmp_path)
    before = _files(p + "/wal")
    with pytest.warns(UserWarning):
        db = pagestore.open(p, **OPTS)
    try:
        assert _files(p + "/wal") != before
        assert glob.glob(last + ".tail-*")
    finally:
        db.close()
