"""The crash simulator, and tests of the injector itself (DESIGN.md §5)."""

import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagestore.diskio import DiskIOError, LockedError, NotFoundError, SimFS, SimulatedCrash

OLD = bytes([0xAA]) * 8192
NEW = bytes([0x55]) * 8192


def synced_file(sim, path="/d/f", data=OLD):
    sim.makedirs("/d")
    f = sim.open(path, create=True)
    f.pwrite(data, 0)
    f.fsync()
    sim.fsync_dir("/d")
    return f


def read_all(sim, path="/d/f"):
    return sim.open(path).pread(1 << 20, 0)


@pytest.mark.parametrize("mode", ["keep", "drop", "random"])
def test_synced_data_survives_every_mode(mode):
    for seed in range(30):
        sim = SimFS()
        f = synced_file(sim)
        f.pwrite(NEW[:1000], 9000)  # unsynced, past the synced bytes
        report = sim.crash(seed, mode)
        assert read_all(sim)[:8192] == OLD, (seed, report)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["w", "w", "sync"]), st.integers(0, 6000),
                              st.integers(1, 3000), st.integers(0, 255)), max_size=12),
       seed=st.integers(0, 2**32), mode=st.sampled_from(["keep", "drop", "random"]))
def test_synced_bytes_not_rewritten_since_survive_any_crash(ops, seed, mode):
    sim = SimFS()
    f = sim.open("f", create=True)
    sim.fsync_dir(".")
    durable = bytearray()
    touched = set()  # byte offsets written since the last fsync
    current = bytearray()
    for kind, off, n, val in ops:
        if kind == "sync":
            f.fsync()
            durable, touched = bytearray(current), set()
        else:
            data = bytes([val]) * n
            f.pwrite(data, off)
            current.extend(bytes(max(0, off + n - len(current))))
            current[off:off + n] = data
            touched.update(range(off, off + n))
    sim.crash(seed, mode)
    after = read_all(sim, "f")
    for i, b in enumerate(durable):
        if i not in touched:
            assert after[i] == b, (i, mode)
    if mode == "keep":
        assert after == current
    if mode == "drop":
        assert after == durable


def test_unsynced_write_is_dropped_in_drop_mode_and_kept_in_keep_mode():
    sim = SimFS()
    f = synced_file(sim)
    f.pwrite(NEW, 0)
    assert read_all(sim) == NEW  # reads see the volatile view
    snap = sim.snapshot()
    dropped = snap.clone()
    report = dropped.crash(1, "drop")
    assert read_all(dropped) == OLD and report.dropped == 1 and report.kept == 0
    kept = snap.clone()
    report = kept.crash(1, "keep")
    assert read_all(kept) == NEW and report.kept == 1


def test_a_tear_really_changes_the_bytes_on_disk_in_whole_sectors():
    seen = 0
    for seed in range(40):
        sim = SimFS()
        f = synced_file(sim)
        f.pwrite(NEW, 0)
        report = sim.crash(seed, "random", outcomes=("torn",))
        if report.torn == 0:
            continue  # the 4 KiB split of a 2-sector write can still tear; 1 sector cannot
        seen += 1
        after = read_all(sim)
        assert after != OLD and after != NEW
        assert len(after) == len(OLD)
        for s in range(0, len(after), 512):
            sector = after[s:s + 512]
            assert sector in (OLD[s:s + 512], NEW[s:s + 512]), f"sector {s} is neither old nor new"
    assert seen >= 30


def test_garbage_damages_only_the_write_range_and_changes_bytes():
    for seed in range(20):
        sim = SimFS()
        f = synced_file(sim)
        f.pwrite(NEW[:2048], 1024)
        report = sim.crash(seed, "random", outcomes=("garbage",))
        assert report.garbage == 1
        after = read_all(sim)
        assert after[:1024] == OLD[:1024] and after[3072:] == OLD[3072:]
        assert after[1024:3072] != NEW[:2048]


def test_cut_keeps_a_strict_prefix_of_the_write():
    for seed in range(20):
        sim = SimFS()
        f = synced_file(sim)
        f.pwrite(NEW, 0)
        report = sim.crash(seed, "random", outcomes=("cut",))
        assert report.cut == 1
        after = read_all(sim)
        k = next(i for i in range(len(after)) if after[i] != NEW[i])
        assert 0 < k < len(NEW) and k % 512 == 0
        assert after[k:] == OLD[k:]


def test_random_mode_uses_every_outcome_and_is_deterministic_per_seed():
    totals = dict(kept=0, dropped=0, cut=0, torn=0, garbage=0)

    def run(seed):
        sim = SimFS()
        f = synced_file(sim)
        for i in range(10):
            f.pwrite(NEW[:4096], i * 4096)
        report = sim.crash(seed, "random")
        return report, read_all(sim)

    for seed in range(10):
        report, image = run(seed)
        assert run(seed)[1] == image
        for k in totals:
            totals[k] += getattr(report, k)
    assert all(v > 0 for v in totals.values()), totals


def test_unsynced_file_creation_vanishes_without_fsync_dir_and_survives_with_it():
    sim = SimFS()
    sim.makedirs("/d")
    f = sim.open("/d/new", create=True)
    f.pwrite(b"data", 0)
    f.fsync()  # the data is durable, the name is not
    snap = sim.snapshot()
    lost = snap.clone()
    report = lost.crash(0, "drop")
    assert not lost.exists("/d/new") and report.lost_paths == ["/d/new"]
    kept = snap.clone()
    kept.fsync_dir("/d")
    kept.crash(0, "drop")
    assert kept.exists("/d/new") and read_all(kept, "/d/new") == b"data"


def test_rename_is_pending_until_fsync_dir():
    sim = SimFS()
    synced_file(sim, "/d/a", b"A")
    sim.fsync_dir("/d")
    sim.rename("/d/a", "/d/b")
    assert sim.listdir("/d") == ["b"]
    snap = sim.snapshot()
    undone = snap.clone()
    undone.crash(0, "drop")
    assert undone.listdir("/d") == ["a"] and read_all(undone, "/d/a") == b"A"
    done = snap.clone()
    done.fsync_dir("/d")
    done.crash(0, "drop")
    assert done.listdir("/d") == ["b"]
    outcomes = set()
    for seed in range(20):
        s = snap.clone()
        s.crash(seed, "random")
        outcomes.add(tuple(s.listdir("/d")))
    assert outcomes == {("a",), ("b",)}  # atomic: never both, never neither


def test_remove_is_pending_until_fsync_dir():
    sim = SimFS()
    synced_file(sim, "/d/a", b"A")
    sim.remove("/d/a")
    assert not sim.exists("/d/a")
    sim.crash(0, "drop")
    assert sim.exists("/d/a")


def test_write_atomic_leaves_old_or_new_never_a_mixture():
    sim = SimFS()
    synced_file(sim, "/d/m", OLD)
    base = sim.snapshot()
    probe = base.clone()
    start = probe.io_count
    probe.write_atomic("/d/m", NEW)
    total = probe.io_count - start
    assert total == 5  # create tmp, pwrite, fsync, rename, fsync_dir
    for n in range(1, total + 2):
        for seed in range(5):
            sim = base.clone()
            sim.arm_io(n)
            try:
                sim.write_atomic("/d/m", NEW)
                completed = True
            except SimulatedCrash:
                completed = False
            assert completed == (n > total)
            sim.crash(seed, "random")
            assert read_all(sim, "/d/m") in (OLD, NEW), (n, seed)
            if completed:
                assert read_all(sim, "/d/m") == NEW


def test_io_count_counts_each_mutating_operation_and_arm_io_stops_before_it():
    sim = SimFS()
    f = sim.open("f", create=True)  # 1
    f.pwrite(b"a", 0)  # 2
    f.pread(1, 0)
    sim.exists("f")
    f.fsync()  # 3
    assert sim.io_count == 3
    sim.arm_io(2)
    f.pwrite(b"b", 0)  # 4
    with pytest.raises(SimulatedCrash):
        f.pwrite(b"c", 0)  # would be 5: not performed
    assert sim.io_count == 4
    sim.crash(0, "keep")
    assert read_all(sim, "f") == b"b"


def test_unpublished_mapping_bytes_are_lost_even_by_a_process_kill():
    sim = SimFS()
    f = synced_file(sim, data=bytes(8192))
    m = sim.map("/d/f", 8192)
    m.buffer[0:4] = b"pub!"
    m.buffer[4096:4100] = b"priv"
    assert f.pread(4, 4096) == b"priv"  # visible: it is shared memory
    m.publish(0, 4)
    snap = sim.snapshot()
    killed = snap.clone()
    killed.crash(0, "keep")
    after = read_all(killed)
    assert after[:4] == b"pub!" and after[4096:4100] == bytes(4)
    m.sync(0, 4)
    sim.crash(0, "drop")
    assert read_all(sim)[:4] == b"pub!"


def test_handles_from_before_a_crash_are_stale():
    sim = SimFS()
    f = synced_file(sim)
    sim.crash(0, "drop")
    with pytest.raises(DiskIOError):
        f.pread(1, 0)


def test_snapshot_and_clone_are_independent():
    sim = SimFS()
    f = synced_file(sim)
    f.pwrite(NEW, 0)
    snap = sim.snapshot()
    a, b = snap.clone(), snap.clone()
    a.crash(0, "drop")
    b.crash(0, "keep")
    assert read_all(a) == OLD and read_all(b) == NEW and read_all(sim) == NEW
    sim.restore(snap)
    sim.crash(0, "keep")
    assert read_all(sim) == NEW


def test_namespace_errors_and_lock_exclusion():
    sim = SimFS()
    with pytest.raises(NotFoundError):
        sim.open("/nodir/x", create=True)
    with pytest.raises(NotFoundError):
        sim.open("missing")
    sim.makedirs("/d/e")
    assert sim.listdir("/d") == ["e"]
    lock = sim.lock("/d/LOCK")
    with pytest.raises(LockedError):
        sim.lock("/d/LOCK")
    lock.release()
    sim.lock("/d/LOCK")
    sim.crash(0, "keep")
    sim.lock("/d/LOCK")  # the crashed process's lock died with it


def test_direct_sim_enforces_alignment():
    sim = SimFS(direct=True)
    f = sim.open("f", create=True, direct=True)
    f.pwrite(bytes(4096), 4096)
    with pytest.raises(DiskIOError):
        f.pwrite(b"x", 3)


def test_concurrent_writers_do_not_corrupt_state():
    sim = SimFS()
    f = sim.open("f", create=True)

    def writer(k):
        for i in range(200):
            f.pwrite(bytes([k]) * 16, (k * 200 + i) * 16)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sim.io_count == 1 + 800
    data = read_all(sim, "f")
    for k in range(4):
        assert data[k * 3200:(k + 1) * 3200] == bytes([k]) * 3200
    rng = random.Random(5)
    sim.crash(rng, "keep")
    assert read_all(sim, "f") == data
