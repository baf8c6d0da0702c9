"""db.compact() / `python -m pagestore compact`: free space handed back, online, crash-safe."""

import os
import random
import subprocess
import sys
import threading

import pytest

import pagestore
from pagestore.cipher import Cipher
from pagestore.diskio import SimFS, SimulatedCrash
from pagestore.verify import verify

SMALL = dict(memory_size=64 << 20)


def disk_blocks(root) -> int:
    """Bytes of disk blocks of every file under `root` (st_blocks, not apparent size)."""
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, files in os.walk(root) for f in files)


def fill_then_delete_90_percent(db, n):
    for i in range(0, n, 2000):
        db.put_many((b"k%08d" % j, b"v%08d" % j + b"." * 92) for j in range(i, min(i + 2000, n)))
    for i in range(n):
        if i % 10:
            db.delete(b"k%08d" % i)
    return {b"k%08d" % i: b"v%08d" % i + b"." * 92 for i in range(0, n, 10)}


def test_compact_after_deleting_90_percent_of_200000_keys_halves_the_disk_blocks(tmp_path):
    path = tmp_path / "s"
    db = pagestore.open(path, **SMALL)
    left = fill_then_delete_90_percent(db, 200_000)
    db.checkpoint()
    before = disk_blocks(path)
    st = db.stats()
    assert st["disk_bytes"] == before
    info = db.compact()
    after = disk_blocks(path)
    assert after <= 0.5 * before, f"{before:,} -> {after:,} bytes of blocks"
    assert info["disk_bytes_before"] == before
    assert db.stats()["page_file_bytes"] < st["page_file_bytes"] / 5
    assert dict(db.scan()) == left
    assert all(db[k] == v for k, v in left.items())
    db.close()
    with pagestore.open(path, **SMALL) as db:
        assert dict(db.scan()) == left
    assert subprocess.run([sys.executable, "-m", "pagestore", "verify", str(path)],
                          capture_output=True, timeout=120).returncode == 0


def test_compact_runs_while_writers_write_and_loses_none_of_their_acknowledged_writes(tmp_path):
    path = tmp_path / "s"
    db = pagestore.open(path, **SMALL)
    left = fill_then_delete_90_percent(db, 20_000)
    acked, errors, stop = {}, [], threading.Event()

    def writer(w):
        i = 0
        try:
            while not stop.is_set() or i < 200:
                k, v = b"w%d-%06d" % (w, i), b"%d" % i
                db.put(k, v)
                acked[k] = v
                if i % 5 == 4:
                    assert db.get(b"w%d-%06d" % (w, i - 2)) == b"%d" % (i - 2)
                i += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    info = db.compact()
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert info["paused_seconds"] < info["seconds"]
    want = {**left, **acked}
    assert dict(db.scan()) == want
    db.close()
    with pagestore.open(path, **SMALL) as db:
        assert dict(db.scan()) == want


def test_the_compact_command_shrinks_a_closed_store(tmp_path):
    path = tmp_path / "s"
    with pagestore.open(path, **SMALL) as db:
        left = fill_then_delete_90_percent(db, 30_000)
    pages_before = os.path.getsize(path / "pages.dat")
    r = subprocess.run([sys.executable, "-m", "pagestore", "compact", str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(path / "pages.dat") < pages_before / 4
    with pagestore.open(path, read_only=True, **SMALL) as db:
        assert dict(db.scan()) == left


def test_stats_show_disk_bytes_live_bytes_and_free_pages(tmp_path):
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        db.put_many((b"k%05d" % i, b"v" * 500) for i in range(5000))
        db.checkpoint()
        st = db.stats()
        assert st["disk_bytes"] == disk_blocks(tmp_path / "s")
        assert st["page_file_bytes"] == os.path.getsize(tmp_path / "s" / "pages.dat")
        assert 0 < st["live_bytes"] <= st["page_file_bytes"] and st["free_pages"] == 0
        # emptied pages go to the freelist: a long value's overflow pages
        db.put_many((b"big%d" % i, b"x" * 60_000) for i in range(20))
        db.checkpoint()
        for i in range(20):
            del db[b"big%d" % i]
        db.checkpoint()
        st2 = db.stats()
        assert st2["free_pages"] > 0
        assert st2["live_bytes"] + st2["free_pages"] * 4096 == st2["page_file_bytes"]


# -- crashes in the middle of compact (the crash simulator) -----------------------------------
SIM_OPTS = dict(memory_size=16 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def sim_store(n=3000):
    sim = SimFS()
    db = pagestore.open("/s", fs=sim, **SIM_OPTS)
    left = fill_then_delete_90_percent(db, n)
    db.put(b"acked-last", b"1", sync=True)   # durable: a power loss must keep all of it
    left[b"acked-last"] = b"1"
    return sim, db, left


def crash_compact_and_check(arm, seed):
    sim, db, left = sim_store()
    arm(sim)
    with pytest.raises(SimulatedCrash):
        db.compact()
    db._abandon()
    for mode, rng in (("keep", None), ("random", random.Random(seed))):
        after = sim.clone()
        after.crash(rng, mode)
        with pagestore.open("/s", fs=after, **SIM_OPTS) as db2:
            assert dict(db2.scan()) == left, mode
            db2.verify()
            db2.put(b"more", b"1")
            db2.compact()                    # a later compaction clears what was left
            assert dict(db2.scan()) == {**left, b"more": b"1"}


@pytest.mark.parametrize("point", ["compact.copy_durable", "compact.page_file_renamed"])
def test_a_crash_at_a_compaction_crash_point_loses_no_acknowledged_write(point):
    crash_compact_and_check(lambda sim: sim.arm(point), seed=len(point))


def test_a_crash_at_any_io_of_compact_loses_no_acknowledged_write():
    probe, db, _ = sim_store()
    start = probe.io_count
    db.compact()
    span = probe.io_count - start
    db.close()
    assert span > 20
    for n in sorted({1, 2, span // 3, span // 2, 2 * span // 3, span - 1, span} | set(range(5, span, max(1, span // 12)))):
        crash_compact_and_check(lambda sim, n=n: sim.arm_io(n), seed=n)


RACES = {
    "_core_put": lambda db: db.put(b"raced", b"1"),
    "_core_delete": lambda db: db.delete(b"k00000010"),
    "_core_batch": lambda db: db.put_many([(b"raced", b"1")]),
}


@pytest.mark.parametrize("hook", sorted(RACES))
def test_a_write_that_reached_the_old_core_as_compact_swapped_it_runs_again_on_the_new_one(tmp_path, hook):
    db = pagestore.open(tmp_path / "s", **SMALL)
    left = fill_then_delete_90_percent(db, 5000)
    old = getattr(db, hook)

    def late(*args):
        # this call passed the store's checks and holds the old core's function
        # when compact() swaps the store underneath it
        db.compact()
        return old(*args)
    setattr(db, hook, late)
    RACES[hook](db)
    if hook == "_core_delete":
        del left[b"k00000010"]
    else:
        left[b"raced"] = b"1"
    assert dict(db.scan()) == left
    db.close()
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        assert dict(db.scan()) == left


@pytest.mark.parametrize("key", [None, b"k" * 32])
def test_a_copy_that_checkpointed_more_often_than_the_store_still_opens_after_compact(tmp_path, key):
    # written with a large page memory: few checkpoints in the store's cp/;
    # compacted with a small one: the copy checkpoints many times, and its
    # meta page must not name a checkpoint the store's cp/ never had
    path = str(tmp_path / "s")
    enc = {} if key is None else {"encryption_key": key}
    with pagestore.open(path, memory_size=256 << 20, checkpoint_interval=3600, **enc) as db:
        for i in range(0, 24000, 1000):
            db.put_many({b"k%06d" % j: b"v" * 1000 for j in range(i, i + 1000)})
    with pagestore.open(path, memory_size=4 << 20, checkpoint_interval=3600, **enc) as db:
        db.compact()
    with pagestore.open(path, memory_size=4 << 20, **enc) as db:
        assert len(db) == 24000 and db[b"k023999"] == b"v" * 1000
    assert verify(path, cipher=None if key is None else Cipher.from_option(key))["ok"]


def test_a_checkpoint_that_reached_the_old_checkpointer_as_compact_swapped_it_runs_on_the_new_one(tmp_path):
    db = pagestore.open(tmp_path / "s", **SMALL)
    left = fill_then_delete_90_percent(db, 5000)
    ckpt = db._engine.checkpointer
    old = ckpt.checkpoint

    def late(*args, **kw):
        ckpt.checkpoint = old         # once (the old engine's close checkpoints too)
        db.compact()
        return old(*args, **kw)
    ckpt.checkpoint = late
    done = []
    t = threading.Thread(target=lambda: done.append(db.checkpoint()), daemon=True)
    t.start()
    t.join(120)                       # the old checkpointer's wait never ended
    assert done and done[0]["pages"] >= 0
    db.put(b"after", b"1")
    left[b"after"] = b"1"
    db.close()
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        assert dict(db.scan()) == left


def interrupt_in_step_1(db, monkeypatch):
    def copy_then_interrupt(pairs, target):
        raise KeyboardInterrupt
    monkeypatch.setattr("pagestore.compaction.copy_pairs", copy_then_interrupt)


def interrupt_in_step_2(db, monkeypatch):
    close = db._close_engine

    def close_then_interrupt():
        close()
        raise KeyboardInterrupt      # the copy is open: not yet brought up to date
    db._close_engine = close_then_interrupt


@pytest.mark.parametrize("interrupt", [interrupt_in_step_1, interrupt_in_step_2])
def test_a_compaction_stopped_by_an_interrupt_leaves_no_thread_of_its_copy_and_no_lock(tmp_path, interrupt,
                                                                                       monkeypatch):
    path = tmp_path / "s"
    db = pagestore.open(path, **SMALL)
    left = fill_then_delete_90_percent(db, 3000)
    interrupt(db, monkeypatch)
    before = set(threading.enumerate())
    stopped = None
    try:
        db.compact()
    except KeyboardInterrupt as e:
        stopped = e      # its traceback keeps compact()'s frame alive, and a copy left open with it
    assert stopped is not None
    assert db.state is pagestore.State.OPEN           # Ctrl-C stops the compaction, not the store
    db.put(b"after-interrupt", b"1")
    left[b"after-interrupt"] = b"1"
    db.close()                            # the store's own threads end: only a copy's could be left
    started = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert started == [], f"the copy's threads still run: {started}"
    monkeypatch.undo()
    if (path / "compact.tmp").exists():
        with pagestore.open(path / "compact.tmp", create=False, **SMALL):
            pass                          # its LOCK was let go (StoreLockedError otherwise)
    with pagestore.open(path, **SMALL) as db:
        assert dict(db.scan()) == left
        db.compact()                      # and the next compaction clears what was left
        assert not (path / "compact.tmp").exists() and dict(db.scan()) == left


@pytest.mark.parametrize("operation", ["compact", "backup"])
def test_writes_that_outgrow_snapshot_memory_during_a_copy_fail_it_naming_the_option_and_leave_no_trace(
        tmp_path, operation, monkeypatch):
    import pagestore.backup as backup_module
    import pagestore.compaction as compaction_module
    db = pagestore.open(tmp_path / "s", snapshot_memory=4096, **SMALL)
    db.put_many((b"k%05d" % i, b"a" * 400) for i in range(2000))
    module = compaction_module if operation == "compact" else backup_module
    copy = module.copy_pairs

    def overwrite_then_copy(pairs, target):
        for i in range(200):             # ~80 KB of before-images for the copy's snapshot
            db.put(b"k%05d" % i, b"b" * 400)
        return copy(pairs, target)
    monkeypatch.setattr(module, "copy_pairs", overwrite_then_copy)
    with pytest.raises(pagestore.SnapshotTooOldError, match="snapshot_memory") as e:
        db.compact() if operation == "compact" else db.backup(tmp_path / "bk")
    assert str(tmp_path / "s") in str(e.value) and operation in str(e.value)
    assert db.state is pagestore.State.OPEN
    assert not (tmp_path / "s" / "compact.tmp").exists() and not (tmp_path / "bk").exists()
    monkeypatch.undo()
    db.close()
