"""Recovery and page memory: the restore leaves the pages it writes back
resident (`Core.stash`), so the replay after it and the first reads do not
miss on them (Ignite restores recovery-file pages into page memory too); a
replay that dirties more pages than page memory holds is refused with a
ConfigError naming memory_size, and the store then opens with enough."""

import random

from pagestore.diskio import SimFS
from tests.support.crash import restored_after_a_kill_in_page_phase
import pagestore

OPTS = dict(memory_size=64 << 20, checkpoint_interval=3600, checkpoint_wal_size=1 << 30,
            checkpoint_dirty_fraction=0.95, wal_mode="fsync")


def test_pages_restored_from_recovery_files_stay_resident_after_open():
    db, _rng, _keys, _model = restored_after_a_kill_in_page_phase(
        OPTS, lambda rng, n: [rng.randbytes(60) for _ in range(n)], seed=4)
    try:
        rec = db.stats()["recovery"]
        # the leaves were all in the interrupted checkpoint; only pages it did
        # not hold (inner pages no split touched) may miss
        loads = db.stats()["page_loads"]
        assert loads < rec["pages_restored"] // 20, (loads, rec["pages_restored"])
        db.verify()
    finally:
        db.close()


def test_replay_that_outgrows_page_memory_is_a_config_error_and_loses_nothing():
    sim, rng = SimFS(), random.Random(5)
    keys = [rng.randbytes(16) for _ in range(30_000)]
    model = {k: bytes(100) for k in keys}
    db = pagestore.open("/s", fs=sim, **OPTS)
    db.put_many(model.items())
    db.checkpoint()
    for k in keys[:15_000]:
        model[k] = b"y" * 100
        db.put(k, model[k])
    db._abandon()
    sim.crash(random.Random(1), "keep")
    small = dict(OPTS, memory_size=256 << 10)
    try:
        pagestore.open("/s", fs=sim, **small)
        raise AssertionError("a 64-page memory replayed a WAL that dirties hundreds of pages")
    except pagestore.ConfigError as e:
        assert e.option == "memory_size" and "/s" in str(e)
    with pagestore.open("/s", fs=sim, **OPTS) as db:
        assert dict(db.items()) == model
        db.verify()
