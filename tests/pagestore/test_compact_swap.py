"""The rule for calls that meet compact()'s swap (pagestore/compaction.py):
a call made while it is paused waits and then runs on the new files; a call
that took the store's engine just before the swap runs again on the new one;
only a snapshot (a scan past its first item, a transaction's reads) taken
before the swap ends, with an error that names compact().

No timing: compact() is run from inside the call under test (the first time
the call touches the old engine), or held at the swap by a hook while another
thread's call waits for it.
"""

import threading

import pytest

import pagestore
from pagestore.database import engine_of
from pagestore.errors import ConflictError, SnapshotTooOldError
from pagestore.transaction import run_transaction

OPTS = dict(memory_size=32 << 20)
N = 2000


def value(i: int) -> bytes:
    return b"v%06d" % i + b"." * 100


@pytest.fixture
def db(tmp_path):
    store = pagestore.open(tmp_path / "s", **OPTS)
    store.put_many((b"k%06d" % i, value(i)) for i in range(N))
    yield store
    store.close()


class SwapOnFirstUse:
    """Stands for the store's engine: the first attribute the calling thread
    reads from it runs db.compact() to its end, then comes from the old (now
    closed) engine -- what a call that took the engine just before the swap
    meets."""

    def __init__(self, db):
        self.db, self.engine, self.fired = db, engine_of(db), False
        self.thread = threading.get_ident()

    def __getattr__(self, name):
        if not self.fired and threading.get_ident() == self.thread:
            self.fired = True
            self.db.compact()
        return getattr(self.engine, name)


def swap_on_first_use(db):
    proxy = SwapOnFirstUse(db)
    db._engine = proxy
    return lambda: proxy.fired


def swap_in_get_many(db):
    # get_many reads through the reader bound to the engine, not the engine
    fired, read = [], db._fast_get_many

    def late(*args):
        if not fired:
            fired.append(1)
            db.compact()
        return read(*args)
    db._fast_get_many = late
    return lambda: bool(fired)


def pop_then_put_back(db):
    v = db.pop(b"k000007")
    db.put(b"k000007", v)
    return v


CALLS = {
    "len": (lambda db: len(db), lambda db: N),
    "stats": (lambda db: db.stats()["live_bytes"] > 0, lambda db: True),
    "checkpoint_state": (lambda db: isinstance(db.checkpoint_state(), tuple), lambda db: True),
    "verify": (lambda db: isinstance(db.verify(), dict), lambda db: True),
    "snapshot": (lambda db: db.snapshot().get(b"k000003"), lambda db: value(3)),
    "scan": (lambda db: len(list(db.scan(prefix=b"k0001"))), lambda db: 100),
    "cursor": (lambda db: db.cursor().seek(b"k000010"), lambda db: True),
    "transaction get": (lambda db: db.transaction().get(b"k000005"), lambda db: value(5)),
    "transaction commit": (lambda db: run_transaction(db, lambda tx: tx.put(b"t", tx.get(b"k000001"))),
                           lambda db: None),
    "pop": (pop_then_put_back, lambda db: value(7)),
    "setdefault": (lambda db: db.setdefault(b"new", b"1"), lambda db: b"1"),
    "checkpoint": (lambda db: db.checkpoint()["pages"] >= 0, lambda db: True),
    "sync": (lambda db: db.sync(), lambda db: None),
}


@pytest.mark.parametrize("name", sorted(CALLS) + ["get_many"])
def test_every_public_call_that_took_the_engine_as_compact_swapped_it_runs_again_on_the_new_one(db, name):
    if name == "get_many":
        fired = swap_in_get_many(db)
        got, want = db.get_many([b"k000001", b"k001999", b"nope"]), [value(1), value(1999), None]
    else:
        fired = swap_on_first_use(db)
        call, expect = CALLS[name]
        got = call(db)
        want = got if expect is None else expect(db)
    assert fired(), "the call never reached the engine: the race was not staged"
    assert got == want
    assert not isinstance(engine_of(db), SwapOnFirstUse)        # compact() bound the new engine
    assert db.get(b"k000000") == value(0) and len(db) == N + (name in ("transaction commit", "setdefault"))


# -- calls made while compact() is held at its swap ------------------------------------

class NoticedWait:
    """compact()'s resume event, telling the test when a call starts waiting on it."""

    def __init__(self, event):
        self.event, self.waiting = event, threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return self.event.wait(timeout)

    def set(self):
        self.event.set()

    def is_set(self):
        return self.event.is_set()


def until_waiting_or_done(db, thread):
    """Until `thread` waits on compact()'s resume event, or has ended (an old
    bug's error instead of a wait); generous cap, no assumption of speed."""
    for _ in range(2400):
        if db._resume.waiting.wait(0.05) or not thread.is_alive():
            return
    raise AssertionError("the call neither waited for the swap nor ended")


def hold_at_swap(db):
    """compact() stops with the old engine closed (the store PAUSED) until released."""
    at_swap, release = threading.Event(), threading.Event()
    close = db._close_engine

    def held():
        close()
        db._resume = NoticedWait(db._resume)
        at_swap.set()
        assert release.wait(120)
    db._close_engine = held
    return at_swap, release


WAITING_CALLS = {
    "checkpoint_state": lambda db: isinstance(db.checkpoint_state(), tuple),
    "stats": lambda db: db.stats()["live_bytes"] > 0,
    "len": lambda db: len(db) == N,
    "get": lambda db: db.get(b"k000004") == value(4),
    "put": lambda db: db.put(b"p", b"1") is None and db.get(b"p") == b"1",
    "scan": lambda db: len(list(db.scan(prefix=b"k0002"))) == 100,
    "snapshot": lambda db: db.snapshot().get(b"k000006") == value(6),
    "pop": lambda db: db.pop(b"k000008") == value(8),
    "transaction": lambda db: run_transaction(db, lambda tx: tx.get(b"k000009")) == value(9),
    "checkpoint": lambda db: db.checkpoint()["pages"] >= 0,
}


@pytest.mark.parametrize("name", sorted(WAITING_CALLS))
def test_a_call_made_while_compact_is_at_its_swap_waits_for_it_and_runs_on_the_new_files(db, name):
    at_swap, release = hold_at_swap(db)
    compacted, results = [], []

    def compact():
        compacted.append(db.compact())

    def call():
        try:
            results.append(WAITING_CALLS[name](db))
        except Exception as e:  # noqa: BLE001 - reported below
            results.append(e)
    c = threading.Thread(target=compact)
    c.start()
    assert at_swap.wait(120)
    assert db.state is pagestore.State.PAUSED
    t = threading.Thread(target=call)
    t.start()
    until_waiting_or_done(db, t)
    release.set()
    c.join(120)
    t.join(120)
    assert compacted and results == [True]


# -- what was begun on the old engine -------------------------------------------------

def test_a_snapshot_taken_before_compact_raises_snapshot_too_old_naming_compact(db):
    snap = db.snapshot()
    assert snap.get(b"k000001") == value(1)
    db.compact()
    for read in (lambda: snap.get(b"k000001"), lambda: len(snap), lambda: list(snap.scan())):
        with pytest.raises(SnapshotTooOldError, match=r"compact\(\) replaced the store's files"):
            read()
    assert db.snapshot().get(b"k000001") == value(1)      # a new one works


def test_a_scan_past_its_first_item_when_compact_swaps_raises_snapshot_too_old(db):
    it = db.scan()
    assert next(it) == (b"k000000", value(0))
    db.compact()
    with pytest.raises(SnapshotTooOldError, match=r"compact\(\)"):
        for _ in it:           # the first batch was read before the swap; the next one is not
            pass


def test_a_cursor_walks_on_across_compact_without_repeating_or_skipping_a_key(db):
    c = db.cursor()
    seen = [c.key] if c.first() else []
    while len(seen) < N // 2 and c.next():
        seen.append(c.key)
    db.compact()
    while c.next():
        seen.append(c.key)
    assert seen == [b"k%06d" % i for i in range(N)]


def test_a_transaction_that_read_before_compact_conflicts_and_run_transaction_runs_it_again(db):
    tx = db.transaction()
    assert tx.get(b"k000001") == value(1)
    tx.put(b"k000001", b"changed")
    db.compact()
    with pytest.raises(ConflictError, match=r"compact\(\) replaced the store's files"):
        tx.commit()
    assert db.get(b"k000001") == value(1)
    runs = []

    def increment(tx):
        n = int(tx.get(b"counter", b"0"))
        if not runs:
            db.compact()       # the swap comes between this run's read and its commit
        runs.append(n)
        tx.put(b"counter", b"%d" % (n + 1))
    db.put(b"counter", b"41")
    run_transaction(db, increment)
    assert runs == [41, 41] and db.get(b"counter") == b"42"


def test_a_transaction_that_only_wrote_before_compact_commits_on_the_new_files(db):
    tx = db.transaction()
    tx.put(b"w", b"1")
    tx.delete(b"k000002")       # a delete reads the key: this one has a snapshot
    tx2 = db.transaction()
    tx2.put(b"w2", b"2")        # nothing read
    db.compact()
    with pytest.raises(ConflictError):
        tx.commit()
    tx2.commit()
    assert db.get(b"w") is None and db.get(b"k000002") == value(2) and db.get(b"w2") == b"2"


def test_a_transaction_whose_first_read_meets_the_swap_reads_from_a_snapshot_of_the_new_files(db):
    core = engine_of(db).core
    read = core.snap_get

    def late(*args):
        # the transaction's snapshot is taken on the old core; its first read comes after the swap
        core.snap_get = read
        db.compact()
        return read(*args)
    core.snap_get = late
    tx = db.transaction()
    assert tx.get(b"k000001") == value(1)
    assert engine_of(db).core is not core
    tx.put(b"k000001", b"x")
    tx.commit()                 # its reads are checked against the new snapshot: no conflict
    assert db.get(b"k000001") == b"x"


def test_a_swap_listener_hears_of_the_new_engine_before_the_paused_calls_go_on(db):
    from pagestore.compaction import on_swap
    heard = []
    on_swap(db, lambda engine: heard.append((engine, db.state)))
    db.compact()
    assert heard == [(engine_of(db), pagestore.State.PAUSED)]


def test_a_sync_put_whose_record_was_logged_before_the_swap_is_made_durable_after_it(db):
    # the put's two steps (its write, then its wait for the log) straddle the swap
    at_swap, release = hold_at_swap(db)
    applied, results = threading.Event(), []
    write = db._core_put

    def write_then_wait_for_the_swap(*args):
        lsn = write(*args)
        applied.set()
        assert at_swap.wait(120)
        return lsn
    db._core_put = write_then_wait_for_the_swap
    db._waited = None                     # the two-step path of a sync=True put

    def put():
        try:
            db.put(b"durable", b"1", sync=True)
            results.append(True)
        except Exception as e:  # noqa: BLE001 - reported below
            results.append(e)
    t = threading.Thread(target=put)
    t.start()
    assert applied.wait(120)
    c = threading.Thread(target=db.compact)
    c.start()
    assert at_swap.wait(120)
    until_waiting_or_done(db, t)
    release.set()
    c.join(120)
    t.join(120)
    assert results == [True] and db.get(b"durable") == b"1"


class NoticedLock:
    """The store's compact()/backup() lock, telling the test when a caller finds it taken."""

    def __init__(self):
        self.lock, self.contended = threading.Lock(), threading.Event()

    def __enter__(self):
        if not self.lock.acquire(blocking=False):
            self.contended.set()
            self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()
        return False


def test_a_backup_and_a_compaction_of_one_store_run_one_after_the_other(db, tmp_path, monkeypatch):
    lock = db.__dict__["_admin_lock"] = NoticedLock()
    copying, go, results = threading.Event(), threading.Event(), []
    copy = pagestore.backup.copy_pairs

    def held_copy(pairs, target):
        copying.set()                     # the backup's snapshot is taken, its copy not done
        assert go.wait(120)
        return copy(pairs, target)
    monkeypatch.setattr("pagestore.backup.copy_pairs", held_copy)

    def backup():
        try:
            results.append(db.backup(tmp_path / "bk")["keys"])
        except Exception as e:  # noqa: BLE001 - reported below
            results.append(e)
    b = threading.Thread(target=backup)
    b.start()
    assert copying.wait(120)
    c = threading.Thread(target=db.compact)
    c.start()
    for _ in range(2400):                 # the compaction waits for the backup, or (a bug) ends first
        if lock.contended.wait(0.05) or not c.is_alive():
            break
    go.set()
    b.join(120)
    c.join(120)
    assert results == [N]
    with pagestore.open(tmp_path / "bk", **OPTS) as copy_db:
        assert len(copy_db) == N
