"""The sampler and row building against a fake store that reports checkpoint stats."""

import time

from bench.measure import measure
from bench.runner import build_rows
from bench.scenarios import resolve
from bench.stores import Store
from bench.workload import GeneratedWorkload


class FakeCheckpointingStore(Store):
    """A checkpoint runs during 0.3 s of every 0.6 s; 50 WAL bytes per put."""

    name = "pagestore"

    def __init__(self):
        self.t0 = time.monotonic()
        self.puts = 0

    def put(self, k, v):
        self.puts += 1

    def _done(self):
        return int((time.monotonic() - self.t0) / 0.6)

    def stats(self):
        done = self._done()
        hist = [dict(pages=100 + i, recovery_bytes=4096 * (100 + i), lock_ms=0.5, recovery_write_ms=100.0,
                     page_write_ms=150.0, fsync_ms=20.0, total_ms=300.0, cow_peak=7) for i in range(done)]
        running = (time.monotonic() - self.t0) % 0.6 >= 0.3
        return dict(wal_bytes_written=50 * self.puts, checkpoints=done, checkpoint_history=hist,
                    checkpoint_running=running, dirty_pages=42, throttle_parks=done * 2,
                    throttle_park_seconds=done * 0.001)


def test_rows_from_a_checkpointing_store():
    cfg = resolve(dict(store="pagestore", warmup=0.5, duration=2.5))
    store = FakeCheckpointingStore()
    raw = measure(store, GeneratedWorkload(cfg), cfg)
    r = build_rows(cfg, "rfake", 0, raw)
    s, cps, ts = r["summary"], r["checkpoints"], r["timeseries"]
    # the fake checkpoints on the wall clock: a window that runs late on a busy
    # machine holds more of them, never more than the fake has finished by now
    span = time.monotonic() - store.t0
    assert 3 <= len(cps) <= store._done() and s["checkpoints"] == len(cps)
    assert [c["pages"] for c in cps] == sorted(c["pages"] for c in cps)
    assert all(-0.5 <= c["t_start"] <= span for c in cps)
    assert all(c["recovery_bytes"] == 4096 * c["pages"] and c["total_ms"] == 300.0 for c in cps)
    assert any(t["checkpoint_running"] for t in ts)
    assert all(t["dirty_pages"] == 42 for t in ts)
    assert sum(t["parks"] for t in ts) == s["parks"] > 0
    assert 45 < s["wal_bytes_per_op"] < 55  # the stats delta over the window, per measured op
    assert r["extra"]["ops_in_ckpt"] > 0 and r["extra"]["ops_out_ckpt"] > 0


class ProbedStore(FakeCheckpointingStore):
    """The sampler's stats() and the writers' checkpoint_state() disagree on purpose:
    stats() says a checkpoint always runs; checkpoint_state() says one ran only while
    `window` is set."""

    window = False

    def stats(self):
        return dict(FakeCheckpointingStore.stats(self), checkpoint_running=True)

    def checkpoint_state(self):
        return self.window, 0


def test_writers_file_ops_by_their_own_checkpoint_reading_not_the_samplers():
    cfg = resolve(dict(store="pagestore", warmup=0.2, duration=0.6))
    store = ProbedStore()
    r = build_rows(cfg, "rprobe", 0, measure(store, GeneratedWorkload(cfg), cfg))
    assert r["extra"]["ops_in_ckpt"] == 0 and r["extra"]["ops_out_ckpt"] > 0

    store = ProbedStore()
    store.window = True
    r = build_rows(cfg, "rprobe", 0, measure(store, GeneratedWorkload(cfg), cfg))
    assert r["extra"]["ops_out_ckpt"] == 0 and r["extra"]["ops_in_ckpt"] > 0


class CountingStore(FakeCheckpointingStore):
    """No checkpoint is ever seen running, but the completed count moves on every
    read after the first: each chunk holds the end of a checkpoint."""

    reads = 0

    def checkpoint_state(self):
        self.reads += 1
        return False, self.reads


def test_a_chunk_within_which_a_checkpoint_ended_counts_as_inside():
    cfg = resolve(dict(store="pagestore", warmup=0.2, duration=0.6))
    r = build_rows(cfg, "rcount", 0, measure(CountingStore(), GeneratedWorkload(cfg), cfg))
    assert r["extra"]["ops_out_ckpt"] == 0 and r["extra"]["ops_in_ckpt"] > 0
