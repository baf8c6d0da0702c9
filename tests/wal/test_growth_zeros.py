"""fsync mode in a store's first (sparse) segment: the grower writes zeros
ahead of the writer, so the writer's fdatasyncs flush only its records and
not the allocation of the blocks it wrote, and no zero ever lands on a
record (wal/growth.py `_zero_ahead`, `Segments.publish` waits on it).

The conditions are waited for, never assumed after a fixed time.
"""

import os
import threading
import time
import warnings

import pagestore
from pagestore.database import engine_of
from pagestore.wal import WalRecoveryWarning

SEGMENT = 16 << 20
AHEAD = 4 << 20          # wal/growth.py _ZERO_AHEAD


def _live0(db):
    return engine_of(db).wal._segs.live[0]


def _written(db) -> int:
    return engine_of(db).signals.wal_end_lsn


def test_fsync_writer_in_a_sparse_segment_has_zeros_written_ahead_of_it(tmp_path):
    path = str(tmp_path / "s")
    db = pagestore.open(path, wal_mode="fsync", wal_segment_size=SEGMENT)
    v = os.urandom(4000)
    i = 0
    while _written(db) < (2 << 20):
        db.put(b"k%06d" % i, v)
        i += 1
    live = _live0(db)
    deadline = time.monotonic() + 120
    while live.zeroed < _written(db) + AHEAD and time.monotonic() < deadline:
        db.put(b"k%06d" % i, v)          # the grower looks while the log moves
        i += 1
    assert live.zeroed >= _written(db) + AHEAD - (1 << 20), (live.zeroed, _written(db))
    st = os.stat(os.path.join(path, "wal", "seg-00000000.wal"))
    assert st.st_blocks * 512 >= live.zeroed      # zeros written are blocks on disk
    db.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", WalRecoveryWarning)
        with pagestore.open(path, wal_segment_size=SEGMENT) as again:
            assert len(again) == i
            assert again.get(b"k%06d" % (i - 1)) == v


def test_zeros_ahead_never_land_on_records_of_concurrent_durable_writers(tmp_path):
    path = str(tmp_path / "s")
    db = pagestore.open(path, wal_mode="fsync", wal_segment_size=SEGMENT)
    done = {}

    def writer(t):
        n = 0
        while _written(db) < 12 << 20:
            db.put(b"t%d-%07d" % (t, n), bytes([65 + t]) * (n * 37 % 3000 + 1))
            n += 1
        done[t] = n

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert _live0(db).zeroed > (1 << 20)          # the grower did write zeros meanwhile
    db.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", WalRecoveryWarning)
        with pagestore.open(path, wal_segment_size=SEGMENT) as again:
            for t, n in done.items():
                for k in range(n):
                    assert again.get(b"t%d-%07d" % (t, k)) == bytes([65 + t]) * (k * 37 % 3000 + 1)


def test_a_three_key_fsync_store_stays_within_4_mib_while_zeros_go_ahead(tmp_path):
    """Zeros ahead follow the load (at most twice the writer's offset): a
    store of a few keys keeps the small footprint in fsync mode too."""
    path = tmp_path / "s"
    with pagestore.open(path, wal_mode="fsync") as db:
        for i in range(3):
            db[b"k%d" % i] = b"v"
        segs = engine_of(db).wal._segs
        segs._zero_ahead(segs.live[0], 0)     # what the grower does when it looks
        assert segs.live[0].zeroed <= 1 << 20
    total = sum(os.stat(os.path.join(r, n)).st_blocks * 512 for r, _d, ns in os.walk(path) for n in ns)
    assert total <= 4 << 20, total
