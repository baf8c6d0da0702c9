"""`checkpoint_spread`: a store's timed checkpoints pace their page writes;
the checkpoints a caller asks for do not (checkpoint/pacing.py)."""

import time

import pagestore

SMALL = dict(memory_size=16 << 20, wal_segment_size=4 << 20)


def test_a_timed_checkpoint_of_a_store_is_spread_and_loses_nothing(tmp_path):
    with pagestore.open(tmp_path / "s", checkpoint_interval=0.5, checkpoint_spread=1.0, **SMALL) as db:
        db.put_many((b"%08d" % i, b"v" * 100) for i in range(20_000))
        end = time.monotonic() + 30
        while True:
            last = db.stats()["last_checkpoint"]
            if last and last["reason"] == "interval" and last["pages"] > 0:
                break
            assert time.monotonic() < end, "no timed checkpoint"
            time.sleep(0.05)
        assert abs(last["paced_until"] - 0.5) < 1e-6
        assert last["page_write_seconds"] >= 0.2, last
        explicit = db.checkpoint()
        assert explicit["paced_until"] is None
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        assert len(db) == 20_000 and db[b"%08d" % 19_999] == b"v" * 100
