"""A store whose recovery files are lz4 at an acceleration (a level below 0)
restores exactly from them after a crash in the page phase: the records the
C framing writes at that acceleration are read by the existing readers."""


import pytest

from pagestore import _native
from tests.support.crash import restored_after_a_kill_in_page_phase

OPTS = dict(memory_size=64 << 20, checkpoint_interval=3600, checkpoint_wal_size=1 << 30,
            checkpoint_dirty_fraction=0.95, wal_mode="fsync", recovery_compression="lz4",
            recovery_compression_level=-1)


def _values(rng, n):
    """Values half made of a repeated run (the bench's 50 % compressible values)."""
    out = []
    for _ in range(n):
        run = rng.randbytes(30)
        out.append(run + run)
    return out


def test_a_store_with_lz4_at_an_acceleration_restores_exactly_after_a_crash_in_the_page_phase():
    if not _native.lz4_available():
        pytest.skip("no liblz4.so.1 on this machine: the acceleration is applied by the C framing only")
    db, rng, keys, _model = restored_after_a_kill_in_page_phase(OPTS, _values, seed=8)
    try:
        db.verify()
        db.put_many(zip(keys, _values(rng, len(keys))))
        db.checkpoint()
        last = db.stats()["last_checkpoint"]
        # lz4 really compressed: the records are well under skip_garbage's ~2,800 B a page
        assert last["compression"] == "lz4" and last["recovery_bytes"] < 2200 * last["pages"]
    finally:
        db.close()
