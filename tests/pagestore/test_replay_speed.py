"""WAL replay after a crash: correct, and its rate printed (not asserted).

A tree of ~10,000 pages whose pages are not in memory at open, then random
16-byte-key / 100-byte-value updates, deletes and transactions after a
checkpoint, then a crash (`_abandon`): the reopened store must hold exactly the
model, and `stats()["recovery"]` reports records_replayed / replay_seconds.
The full-size figure (100k pages, 300k records) is measured by the command
in docs/wal.md ("Replay").
"""

import random
import shutil

import pagestore

OPTS = dict(memory_size=256 << 20, checkpoint_interval=3600, checkpoint_wal_size=4 << 30,
            checkpoint_dirty_fraction=0.95, wal_segment_size=8 << 20)


def test_replay_after_a_crash_restores_the_model_and_prints_its_rate(tmp_path):
    rng = random.Random(11)
    path = tmp_path / "s"
    keys = [rng.randbytes(16) for _ in range(200_000)]
    model = {k: k * 6 + k[:4] for k in keys}
    db = pagestore.open(path, **OPTS)
    for i in range(0, len(keys), 50_000):
        db.put_many((k, model[k]) for k in keys[i:i + 50_000])
    db.checkpoint()
    pages = db.stats()["slots_used"]
    n = 0
    for i in range(40_000):
        k = keys[rng.randrange(len(keys))]
        if i % 50 == 7:
            db.delete(k) if k in model else None
            model.pop(k, None)
        elif i % 100 == 3:
            with db.transaction() as tx:
                for _ in range(3):
                    k2 = keys[rng.randrange(len(keys))]
                    model[k2] = rng.randbytes(100)
                    tx.put(k2, model[k2])
        else:
            model[k] = rng.randbytes(100)
            db.put(k, model[k])
        n += 1
    db._abandon()          # the process dies: its files are what a kill -9 leaves
    del db
    shutil.copytree(path, tmp_path / "crashed", ignore=shutil.ignore_patterns("LOCK"))

    db = pagestore.open(tmp_path / "crashed", **OPTS)
    try:
        rec = db.stats()["recovery"]
        assert rec["action"] == "replay" and not rec["wal_damage"] and not rec["wal_gaps"]
        assert rec["records_replayed"] >= n
        rate = rec["records_replayed"] / rec["replay_seconds"]
        print(f"\nreplay: {rec['records_replayed']} records over a tree of {pages} pages in "
              f"{rec['replay_seconds']:.3f} s = {rate:,.0f} records/s "
              f"(page misses during replay: {db.stats()['page_loads']})")
        assert len(db) == len(model)
        assert dict(db.items()) == model
        db.verify()
    finally:
        db.close()
