"""Durability modes: group commit, power loss in fsync mode, background flushes, log_only."""

import os
import random
import sys
import threading
import time

import pytest

from pagestore.diskio import PosixFS, SimFS, SimulatedCrash
from pagestore.diskio.simfile import SimFile

sys.path.insert(0, os.path.dirname(__file__))
from rounds import WRITER, hold_full_rounds  # noqa: E402
from wal_testkit import SMALL, Harness, kv, open_fresh  # noqa: E402


def run_threads(h, nthreads, per_thread, value=b"v" * 100, acked=None, lock=None):
    """Each thread: append a put under the 'tree lock', then commit it. Returns commits done."""
    lock = lock or threading.Lock()
    done = [0] * nthreads

    def worker(t):
        try:
            for i in range(per_thread):
                key = b"t%02d-%05d" % (t, i)
                with lock:
                    _lsn, end = h.writer.put(key, value)
                h.wal.commit(end)
                done[t] += 1
                if acked is not None:
                    acked.append((key, value))
        except SimulatedCrash:
            return

    threads = [threading.Thread(target=worker, args=(t,), name=f"{WRITER}{t}") for t in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done)


@pytest.mark.parametrize("write_path", ["pwrite", "mmap"])
@pytest.mark.parametrize("max_syncs, factor, biggest", [(1, 5, 8), (2, 3, 8), (4, 2, 4)])
def test_group_commit_16_threads_cost_far_fewer_fsyncs_than_commits(monkeypatch, max_syncs, factor, biggest,
                                                                   write_path):
    h = open_fresh(SimFS(), mode="fsync", segment_size=1 << 20, max_syncs=max_syncs, write_path=write_path)
    # each sync waits until the other writers sleep in the gate: how many a
    # round then carries is the gate's doing, whatever the machine's speed
    held = hold_full_rounds(monkeypatch, h.wal, delay=0.001)
    commits = run_threads(h, 16, 40)
    st = h.wal.stats()
    h.wal.close()
    assert commits == 640
    assert not held["gave_up"], "writers never all slept in the gate"
    assert st["wal_fsyncs"] * factor < commits, st
    assert st["wal_group_size_max"] >= biggest and st["wal_group_size_mean"] >= factor, st


_REAL_SIM_FSYNC = SimFile.fsync


def _staggered_commits(monkeypatch, linger_cap):
    """16 writers that each hold the GIL ~60 us between commits (a caller's own work),
    so released threads come back one by one, as they do in a real application."""
    import pagestore.wal.log as wal_log
    monkeypatch.setattr(wal_log, "_MAX_LINGER", linger_cap)
    real = _REAL_SIM_FSYNC

    def slow_fsync(self):
        time.sleep(0.0005)
        real(self)

    monkeypatch.setattr(SimFile, "fsync", slow_fsync)
    h = open_fresh(SimFS(), mode="fsync", segment_size=1 << 20, max_syncs=1)
    lock = threading.Lock()

    def worker(t):
        for i in range(40):
            deadline = time.perf_counter() + 0.00006
            while time.perf_counter() < deadline:   # pure Python: holds the GIL
                pass
            with lock:
                _lsn, end = h.writer.put(b"s%02d-%05d" % (t, i), b"v" * 100)
            h.wal.commit(end)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    st = h.wal.stats()
    h.wal.close()
    return st


def test_group_commit_leader_lingers_until_released_writers_return(monkeypatch):
    st = _staggered_commits(monkeypatch, 0.002)
    no_linger = _staggered_commits(monkeypatch, 0.0)
    # with the linger a round carries more of the 16 writers; without it the first
    # writer back syncs alone and groups collapse (the reason for the linger). How
    # many a round carries depends on the machine's scheduling; the ratio does not.
    assert st["wal_group_size_mean"] >= 1.3 * no_linger["wal_group_size_mean"], (st, no_linger)
    assert st["wal_linger_seconds"] > 0 and no_linger["wal_linger_seconds"] == 0, (st, no_linger)


def test_one_writer_never_lingers(monkeypatch):
    import pagestore.wal.log as wal_log
    monkeypatch.setattr(wal_log, "_MAX_LINGER", 1.0)   # a linger would show as seconds
    h = open_fresh(SimFS(), mode="fsync", segment_size=1 << 20)
    t0 = time.perf_counter()
    for i in range(50):
        h.put(b"k%03d" % i, b"v")
    st = h.wal.stats()
    h.wal.close()
    assert st["wal_linger_seconds"] == 0 and time.perf_counter() - t0 < 5, st
    assert st["wal_group_size_max"] == 1


@pytest.mark.parametrize("write_path", ["pwrite", "mmap"])
def test_group_commit_on_the_real_disk_shares_fdatasyncs(tmp_path, write_path):
    h = open_fresh(PosixFS(), dirpath=str(tmp_path / "wal"), mode="fsync", segment_size=1 << 20, max_syncs=1,
                   write_path=write_path)
    commits = run_threads(h, 16, 60)
    st = h.wal.stats()
    h.wal.close()
    assert st["wal_fsyncs"] * 4 < commits, st


@pytest.mark.parametrize("write_path", ["pwrite", "mmap"])
@pytest.mark.parametrize("nthreads", [1, 4])
def test_fsync_mode_loses_nothing_acknowledged_on_power_loss(nthreads, write_path):
    for seed in range(60):
        rng = random.Random(seed * 7 + nthreads)
        fs = SimFS()
        h = open_fresh(fs, mode="fsync", write_path=write_path)
        assert h.wal.stats()["wal_write_path"] == write_path
        for k in range(rng.randrange(0, 40)):     # some history that is already durable
            h.put(b"pre%03d" % k, b"p" * rng.randrange(1, 3000))
        acked = []
        if seed % 2:
            fs.arm_io(rng.randrange(1, 150))
        else:   # dies with a published, unsynced range pending: the device tears it
            fs.arm("wal.before_fsync", rng.randrange(1, 40))
        run_threads(h, nthreads, 60, value=b"w" * rng.randrange(1, 4000), acked=acked)
        h.wal.abandon()
        fs.crash(seed, "random")
        got = Harness(fs, mode="fsync").recover(0)
        keys = [k for k, _v in kv(got)]
        assert set(acked) <= set(kv(got)), f"seed {seed}: acknowledged puts lost"
        assert len(keys) == len(set(keys))
        assert all(v in (b"w" * len(v), b"p" * len(v)) for _k, v in kv(got))


def test_log_only_on_the_simulator_survives_a_process_kill():
    fs = SimFS()
    h = open_fresh(fs, mode="log_only")
    written = [(b"k%03d" % i, b"v" * (i * 97 % 5000)) for i in range(200)]
    for k, v in written:
        h.put(k, v)
    h.wal.abandon()
    fs.crash(1, "keep")                              # kill -9: the OS keeps what it was handed
    assert kv(Harness(fs).recover(0)) == written


def test_log_only_flush_makes_everything_durable():
    fs = SimFS()
    h = open_fresh(fs, mode="log_only")
    written = [(b"k%03d" % i, b"v" * 300) for i in range(100)]
    for k, v in written:
        h.put(k, v)
    assert h.wal.flush() == h.writer.end_lsn
    h.wal.abandon()
    fs.crash(2, "drop")
    assert kv(Harness(fs).recover(0)) == written


def test_log_only_commit_on_posix_costs_next_to_nothing(tmp_path):
    h = open_fresh(PosixFS(), dirpath=str(tmp_path / "wal"), mode="log_only", segment_size=1 << 20)
    commit = h.wal.commit
    t0 = time.thread_time()     # CPU time: a preempted test is not a slow commit
    for i in range(200_000):
        commit(i)
    per_call = (time.thread_time() - t0) / 200_000
    h.wal.close()
    assert per_call < 1e-6, per_call


def test_background_mode_flushes_within_the_interval(monkeypatch):
    import pagestore.wal.log as wal_log
    waits = []

    class RecordingEvent(threading.Event):
        def wait(self, timeout=None):
            if threading.current_thread().name == "wal-flusher":
                waits.append(timeout)
            return super().wait(timeout)

    # the flusher's pause is the wait on its stop event: its timeout is the interval
    monkeypatch.setattr(wal_log.threading, "Event", RecordingEvent)
    fs = SimFS()
    interval = 0.05
    h = open_fresh(fs, mode="background", flush_interval=interval)
    written = []
    for i in range(60):
        written.append((b"k%03d" % i, b"b" * 500))
        h.put(*written[-1])
    # a generous cap, not the interval: a starved flusher thread is late, not wrong
    deadline = time.monotonic() + 30
    while h.wal.durable_lsn < h.writer.end_lsn and time.monotonic() < deadline:
        time.sleep(interval / 10)
    assert h.wal.durable_lsn == h.writer.end_lsn
    assert waits and set(waits) == {interval}, waits
    assert h.wal.stats()["wal_fsyncs"] >= 1
    h.wal.abandon()
    fs.crash(3, "drop")                              # power loss: only flushed data survives
    assert kv(Harness(fs).recover(0)) == written


def test_stats_count_bytes_and_groups():
    fs = SimFS()
    h = open_fresh(fs, mode="fsync", segment_size=SMALL)
    for i in range(10):
        h.put(b"k%d" % i, b"v" * 100)
    st = h.wal.stats()
    h.wal.close()
    fresh_start = h.wal.recovery_report.fresh_seq * SMALL   # the segment header block counts
    assert st["wal_bytes_written"] == h.writer.end_lsn - fresh_start == 4096 + 24 + 10 * (17 + 16 + 2 + 100)
    assert st["wal_group_commits"] == 10 and st["wal_fsyncs"] >= 10
    assert st["wal_group_size_max"] == 1
