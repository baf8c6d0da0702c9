"""The checkpointer keeps DESIGN.md §3's step order and §4's invariants."""

import random
import threading

import pytest

from pagestore import diskio
from pagestore.checkpoint import Checkpointer, CheckpointerError
from pagestore.checkpoint.format import END, START, marker_name, parse_name
from pagestore.checkpoint.markers import read_marker, scan
from pagestore.checkpoint.recovery_file import read_recovery_file
from tests.support.checkpoint_fakes import FakePageSource, FakeWal, FileSink, RecordingFS, make_page

PS = 4096
N = 120


def make_store(fs=None, n=N, seed=0, cow_capacity=1 << 30):
    fs = fs or diskio.SimFS()
    fs.makedirs("/db")
    rng = random.Random(seed)
    pages = {i: make_page(i, PS, rng) for i in range(n)}
    sink = FileSink(fs, "/db/pages.dat", PS)
    for i, p in pages.items():
        sink.file.pwrite(p, i * PS)
    sink.sync()
    fs.fsync_dir("/db")
    return fs, FakePageSource(PS, pages, cow_capacity=cow_capacity), sink, FakeWal(), rng


def dirty(src, rng, ids, version):
    for i in ids:
        src.put(i, make_page(i, PS, rng, version))


@pytest.fixture
def store():
    fs, src, sink, wal, rng = make_store()
    cps = []

    def start(**kw):
        kw.setdefault("interval", None)
        cp = Checkpointer(fs, "/db", src, sink, wal, **kw)
        cps.append(cp)
        return cp
    yield fs, src, sink, wal, rng, start
    for cp in cps:
        cp.close(final_checkpoint=False)


def test_durable_steps_happen_in_protocol_order():
    sim, src, sink, wal, rng = make_store()
    fs = RecordingFS(sim)
    sink.file = fs.open("/db/pages.dat")
    dirty(src, rng, range(0, N, 2), 1)
    cp = Checkpointer(fs, "/db", src, sink, wal, threads=3, chunk_pages=4, interval=None)
    cp.checkpoint()
    cp.close(final_checkpoint=False)
    log = fs.log

    def idx(pred):
        return [i for i, e in enumerate(log) if pred(e)]

    rec_fsyncs = idx(lambda e: e[0] == "fsync" and "RECOVERY" in e[1])
    rec_writes = idx(lambda e: e[0] == "pwrite" and "RECOVERY" in e[1])
    dir_syncs = idx(lambda e: e == ("fsync_dir", "/db/cp"))
    start = idx(lambda e: e == ("rename", "/db/cp/" + marker_name(1, START)))[0]
    end = idx(lambda e: e == ("rename", "/db/cp/" + marker_name(1, END)))[0]
    page_writes = idx(lambda e: e[0] == "pwrite" and e[1] == "/db/pages.dat")
    page_sync = idx(lambda e: e[0] == "fsync" and e[1] == "/db/pages.dat")[0]
    assert len(rec_fsyncs) == 3
    for f in rec_fsyncs:   # each file's writes precede its own fsync
        assert max(i for i in rec_writes if log[i][1] == log[f][1]) < f
    # invariant 2: files fsynced, then cp/ fsynced, then START renamed in
    assert max(rec_fsyncs) < min(d for d in dir_syncs if d > max(rec_fsyncs)) < start
    # invariant 1: no page written in place before START (and its dir fsync)
    assert min(d for d in dir_syncs if d > start) < min(page_writes)
    assert max(page_writes) < page_sync < end
    points = [e[1] for e in log if e[0] == "crash_point"]
    assert points.index("checkpoint.after_lock") < points.index("checkpoint.after_wal_fsync") \
        < points.index("checkpoint.after_recovery_fsync") < points.index("checkpoint.after_start_marker") \
        < points.index("checkpoint.before_page_fsync") < points.index("checkpoint.after_page_fsync") \
        < points.index("checkpoint.after_end_marker") < points.index("checkpoint.after_wal_trim")


def test_start_marker_and_recovery_files_survive_power_loss_before_first_page_write(store):
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, range(N), 1)
    seen, once = [], threading.Lock()

    def check(page_ids):
        if not once.acquire(blocking=False):   # first write of any writer thread only
            return
        after = fs.snapshot().clone()
        after.crash(random.Random(1), "drop")
        cp = scan(after, "/db/cp")
        seen.append((cp.interrupted, sorted(cp.recovery.get(1, {}))))
    sink.on_write = check
    start(threads=2, chunk_pages=64).checkpoint()     # two chunks at least: both writers write
    assert seen == [(1, [0, 1])]


def test_wal_flushed_to_the_checkpoint_record_before_start(store):
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, [1, 2, 3], 1)
    st = start().checkpoint()
    assert wal.flushed == [st["wal_lsn"]]
    assert read_marker(fs, "/db/cp", 1, START).wal_lsn == st["wal_lsn"]


def test_pool_writes_one_recovery_file_per_thread_covering_each_page_once(store):
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, range(N), 1)
    arrived, seen = threading.Barrier(3, timeout=60), set()

    def every_worker_takes_a_chunk(ids):
        # each worker holds its first chunk until all three hold one (24 chunks
        # in a shared queue): a late-scheduled worker still gets its share
        if threading.get_ident() not in seen:
            seen.add(threading.get_ident())
            arrived.wait()
    src.on_copy = every_worker_takes_a_chunk
    st = start(threads=3, chunk_pages=5).checkpoint()
    files = scan(fs, "/db/cp").recovery_paths(1)
    assert sorted(files) == [0, 1, 2] and st["recovery_files"] == 3
    seen = []
    for w, path in files.items():
        got = list(read_recovery_file(fs, path, checkpoint_id=1, writer=w, page_size=PS))
        assert got, f"writer {w} wrote nothing"
        seen += got
    assert sorted(p for p, _ in seen) == list(range(N))
    assert all(img == bytes(src.pages[p]) for p, img in seen)


def test_page_modified_during_checkpoint_is_written_as_of_begin(store):
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, range(10), 1)
    at_begin = src.images_after(1)                # the first checkpoint's id, stamped as the core does
    at_begin = {i: at_begin[i] for i in range(10)}

    def meddle(ids):
        src.on_copy = None
        dirty(src, rng, range(10), 2)           # copy-on-write kicks in
    src.on_copy = meddle
    start(threads=1, chunk_pages=2).checkpoint()
    on_disk = sink.read_all(10)
    assert on_disk == at_begin
    assert src.dirty == set(range(10))         # the new versions wait for the next checkpoint


def test_copy_on_write_pages_go_first_when_the_buffer_is_nearly_full(store):
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, range(N), 1)
    src.cow_capacity = 6
    hot = [100, 110, 119]

    def meddle(ids):
        if ids and ids[0] == 0 and src.in_checkpoint and not src.cow:
            dirty(src, rng, hot + [1, 2], 3)
    sink.on_write = meddle
    st = start(threads=1, chunk_pages=4, copy_first_fraction=0.5).checkpoint()
    assert st["priority_chunks"] >= 1
    first_chunk_after = sink.writes[4:9]
    assert set(hot) <= set(first_chunk_after)


def test_previous_recovery_files_are_deleted_at_the_start_of_the_next_checkpoint(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    dirty(src, rng, range(20), 1)
    cp.checkpoint()
    assert scan(fs, "/db/cp").recovery.get(1), "checkpoint 1 left no recovery files"
    dirty(src, rng, range(5), 2)
    cp.checkpoint()
    assert sorted(scan(fs, "/db/cp").recovery) == [2]


def test_checkpoint_mode_trims_wal_to_this_checkpoints_pointer(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    lsns = []
    for v in (1, 2):
        dirty(src, rng, range(5), v)
        lsns.append(cp.checkpoint()["wal_lsn"])
    assert wal.trimmed == lsns


def test_wal_mode_writes_no_recovery_files_and_trims_to_the_previous_pointer(store):
    fs, src, sink, wal, rng, start = store
    cp = start(recovery_data="wal")
    lsns = []
    for v in (1, 2, 3):
        dirty(src, rng, range(5), v)
        lsns.append(cp.checkpoint()["wal_lsn"])
    assert scan(fs, "/db/cp").recovery == {}
    assert wal.trimmed == [0] + lsns[:-1]
    assert read_marker(fs, "/db/cp", 3, START).prev_wal_lsn == lsns[1]
    assert read_marker(fs, "/db/cp", 3, START).recovery_data == "wal"


def test_stats_keys_present_and_sensible(store):
    fs, src, sink, wal, rng, start = store
    cp = start(compression="skip_garbage")
    dirty(src, rng, range(40), 1)
    cp.checkpoint()
    s = cp.stats()
    assert {"recovery_bytes_written", "page_bytes_written", "checkpoints", "last_checkpoint"} <= set(s)
    last = s["last_checkpoint"]
    for key in ("pages", "recovery_bytes", "lock_seconds", "recovery_write_seconds", "page_write_seconds",
                "fsync_seconds", "total_seconds", "cow_peak", "checkpoint_id", "wal_lsn"):
        assert key in last, key
    assert s["checkpoints"] == 1 and last["pages"] == 40
    assert s["page_bytes_written"] == 40 * PS
    # skip_garbage really drops the zero gaps: well under a page per record
    assert 0 < s["recovery_bytes_written"] < 40 * PS
    assert last["total_seconds"] >= last["recovery_write_seconds"] >= 0
    assert last["total_seconds"] >= last["page_write_seconds"] >= 0
    assert last["gap_fallbacks"] == 0


def test_progress_counts_every_page_of_both_phases(store):
    fs, src, sink, wal, rng, start = store
    cp = start(chunk_pages=7)
    dirty(src, rng, range(50), 1)
    during = []
    sink.on_write = lambda ids: during.append(cp.progress())
    cp.checkpoint()
    assert during[0]["running"] and during[0]["recovery_pages_written"] == 50
    assert during[0]["checkpoint_pages"] == 50
    p = cp.progress()
    assert p == {"checkpoint_pages": 50, "recovery_pages_written": 50, "pages_written": 50, "running": False}


def test_interval_trigger_follows_the_injected_clock(store):
    fs, src, sink, wal, rng, start = store
    now = [1000.0]
    cp = start(interval=30.0, clock=lambda: now[0])
    dirty(src, rng, range(3), 1)
    threading.Event().wait(0.2)
    assert cp.stats()["checkpoints"] == 0
    now[0] += 31
    for _ in range(600):        # a generous cap: it returns as soon as the checkpoint shows
        if cp.stats()["checkpoints"]:
            break
        threading.Event().wait(0.1)
    assert cp.stats()["last_checkpoint"]["reason"] == "interval"


def test_request_runs_a_checkpoint_in_the_background(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    dirty(src, rng, range(3), 1)
    cp.request("dirty_pages")
    st = cp.checkpoint(reason="explicit")
    assert cp.stats()["checkpoints"] >= 1 and st["checkpoint_id"] >= 1


def test_close_runs_a_final_checkpoint(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    dirty(src, rng, range(3), 1)
    cp.close()
    assert scan(fs, "/db/cp").last_complete == 1
    assert cp.stats()["last_checkpoint"]["reason"] == "close"


def test_close_without_a_final_checkpoint_begins_none_for_a_pending_request(store):
    # Database._abandon (a killed process) closes the checkpointer this way: a
    # checkpoint begun by the close would log a CHECKPOINT record and write
    # pages and markers after the simulated kill.
    fs, src, sink, wal, rng, start = store
    cp = start()
    dirty(src, rng, range(3), 1)
    writing, go = threading.Event(), threading.Event()

    def hold(_ids):
        writing.set()
        assert go.wait(60)
    sink.on_write = hold
    cp.request("first")
    assert writing.wait(60)                       # checkpoint 1 is in its page phase
    dirty(src, rng, range(3), 2)
    answers = []

    def waiter():
        try:
            answers.append(cp.checkpoint(wait=True, reason="pending", timeout=60))
        except (CheckpointerError, TimeoutError) as e:
            answers.append(e)
    w = threading.Thread(target=waiter)
    w.start()
    for _ in range(6000):                         # until the waiter's request is pending
        if cp.pending():
            break
        threading.Event().wait(0.01)
    closer = threading.Thread(target=cp.close, kwargs=dict(final_checkpoint=False))
    closer.start()
    for _ in range(6000):                         # until the close has told the thread to stop
        if cp._stopping:
            break
        threading.Event().wait(0.01)
    go.set()
    closer.join(60)
    w.join(60)
    assert not closer.is_alive() and not w.is_alive()
    assert cp.stats()["checkpoints"] == 1 and len(wal.flushed) == 1, [h["reason"] for h in cp.stats()["checkpoint_history"]]
    assert scan(fs, "/db/cp").max_id == 1         # no marker or recovery file of a checkpoint 2
    assert len(answers) == 1 and isinstance(answers[0], CheckpointerError), answers
    assert "closed" in str(answers[0])


def test_refuses_to_start_over_an_interrupted_checkpoint(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    dirty(src, rng, range(3), 1)
    fs.arm("checkpoint.after_start_marker")
    with pytest.raises(diskio.SimulatedCrash):
        cp.checkpoint()
    fs.crash(random.Random(0), "keep")
    with pytest.raises(CheckpointerError, match="START marker and no END"):
        Checkpointer(fs, "/db", src, sink, wal, interval=None)


def test_ids_continue_after_restart_and_skip_orphaned_ids(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    dirty(src, rng, range(3), 1)
    cp.checkpoint()
    dirty(src, rng, range(3), 2)
    fs.arm("checkpoint.after_recovery_fsync")
    with pytest.raises(diskio.SimulatedCrash):
        cp.checkpoint()
    fs.crash(random.Random(0), "keep")
    assert 2 in scan(fs, "/db/cp").recovery
    sink.file = fs.open("/db/pages.dat")        # the restarted process reopens its files
    src.finish()
    cp2 = start()
    dirty(src, rng, range(3), 3)
    assert cp2.checkpoint()["checkpoint_id"] == 3


def test_old_markers_are_pruned_keeping_the_last_two(store):
    fs, src, sink, wal, rng, start = store
    cp = start()
    for v in range(1, 6):
        dirty(src, rng, [v], v)
        cp.checkpoint()
    ids = sorted({parse_name(n)[0] for n in fs.listdir("/db/cp") if parse_name(n)[1] != "RECOVERY"})
    assert ids == [4, 5]


def test_empty_checkpoint_writes_markers_but_no_recovery_files(store):
    fs, src, sink, wal, rng, start = store
    st = start().checkpoint()
    assert st["pages"] == 0 and st["recovery_files"] == 0
    assert scan(fs, "/db/cp").last_complete == 1


def test_without_autostart_nothing_runs_until_start(store):
    fs, src, sink, wal, rng, start = store
    cp = start(autostart=False)
    dirty(src, rng, range(3), 1)
    with pytest.raises(CheckpointerError, match="not started"):
        cp.checkpoint()
    cp.start()
    cp.start()                                   # idempotent
    assert cp.checkpoint()["pages"] == 3


def test_first_checkpoint_id_is_a_floor_for_new_ids(store):
    fs, src, sink, wal, rng, start = store
    assert start(first_checkpoint_id=7).checkpoint()["checkpoint_id"] == 7


class _WatchedIds(list):
    """Page ids whose first read after begin() records what the throttle sees then."""

    def __init__(self, ids, seen, cp_box):
        super().__init__(ids)
        self.seen, self.cp_box = seen, cp_box

    def __iter__(self):
        if not self.seen and self.cp_box:
            self.seen.append(self.cp_box[0].progress())
        return super().__iter__()


def test_the_throttle_sees_the_checkpoint_running_before_its_pages_are_sorted(store):
    # writers copy-on-write from the moment begin() returns: a checkpoint that was
    # not yet "running" for the throttle let a fast writer fill the buffer
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, range(0, N, 3), 1)
    seen, cp_box = [], []
    begin = src.begin

    def watched_begin(cid):
        snap = begin(cid)
        snap.page_ids = _WatchedIds(snap.page_ids, seen, cp_box)
        return snap

    src.begin = watched_begin
    cp = start(threads=2, chunk_pages=8)
    cp_box.append(cp)
    cp.checkpoint()
    assert seen and seen[0]["running"] and seen[0]["checkpoint_pages"] == len(range(0, N, 3))
    assert seen[0]["pages_written"] == 0 and seen[0]["recovery_pages_written"] == 0


def test_a_defect_in_the_failure_handling_breaks_the_checkpointer_and_wakes_its_waiters(store, monkeypatch):
    # the loop's own failure handling raising (an unknown phase, say) must
    # not end the thread with the caller asleep in checkpoint() for ever
    from pagestore.checkpoint import pool
    fs, src, sink, wal, rng, start = store
    dirty(src, rng, [1, 2, 3], 1)
    cp = start()
    real = pool.Progress.set_phase

    def set_phase(self, phase):
        if phase == "idle":
            raise ValueError("defect in the failure handling")
        real(self, phase)
    monkeypatch.setattr(pool.Progress, "set_phase", set_phase)
    monkeypatch.setattr(sink, "missing", lambda: "/db/pages.dat")      # the try fails first
    for _ in range(2):                               # and it stays broken: no silent hang
        with pytest.raises(Exception) as info:
            cp.checkpoint(timeout=30)
        assert not isinstance(info.value, TimeoutError), info.value
