"""Transactions are serializable: concurrent histories checked for anomalies.

Each workload runs real threads against one store and checks its history the
way a serializability checker would: a counter that must count every
committed increment (lost updates), write skew on a shared invariant, bank
transfers whose total every reader must see, and a list-append workload whose
dependency graph (Elle's inference: write-write from the final lists'
order, write-read from what each read saw, read-write from the next append
it missed) must have no cycle.
"""

from __future__ import annotations

import collections
import random
import sys
import threading
import time

import pytest

import pagestore
from pagestore import ConflictError

OPTS = dict(memory_size=16 << 20, wal_segment_size=4 << 20, checkpoint_interval=3600)


@pytest.fixture
def db(tmp_path):
    # Threads switch every 5 ms by default, long enough for one thread to run
    # dozens of transactions alone; switching often makes them interleave.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    d = pagestore.open(tmp_path / "s", **OPTS)
    try:
        yield d
    finally:
        d.close()
        sys.setswitchinterval(old)


def retrying(db, fn):
    """Run fn(txn) in a transaction until it commits; returns (result, conflicts)."""
    conflicts = 0
    while True:
        try:
            with db.transaction() as txn:
                result = fn(txn)
            return result, conflicts
        except ConflictError:
            conflicts += 1


def run_threads(n, target):
    errors = []

    def guard(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=guard, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


# -- lost updates ---------------------------------------------------------------

def test_concurrent_counter_increments_are_never_lost(db):
    db[b"counter"] = b"0"
    conflicts = collections.Counter()

    def incr(txn):
        txn[b"counter"] = b"%d" % (int(txn[b"counter"]) + 1)

    def worker(i):
        for _ in range(400):
            conflicts[i] += retrying(db, incr)[1]

    run_threads(8, worker)
    assert db[b"counter"] == b"3200"


def test_a_conflicting_commit_applies_none_of_its_writes(db):
    db[b"a"] = b"1"
    txn = db.transaction()
    assert txn[b"a"] == b"1"
    txn[b"a"] = b"2"
    txn[b"other"] = b"x"
    db[b"a"] = b"9"                       # a commit after txn read a
    with pytest.raises(ConflictError):
        txn.commit()
    assert db[b"a"] == b"9" and b"other" not in db
    with pytest.raises(pagestore.ClosedError):
        txn.put(b"a", b"3")               # ended by the failed commit


def test_conflict_error_is_a_pagestore_error():
    assert issubclass(ConflictError, pagestore.Error)


# -- write skew --------------------------------------------------------------------

def skew_round(db, i, interleave):
    """Two transactions each check x + y >= 200 and withdraw 200 from one of them."""
    x, y = b"x%d" % i, b"y%d" % i
    db.put_many([(x, b"100"), (y, b"100")])
    t1, t2 = db.transaction(), db.transaction()
    outcomes = []
    for txn, key in ((t1, x), (t2, y)):
        if int(txn[x]) + int(txn[y]) >= 200:
            txn[key] = b"%d" % (int(txn[key]) - 200)
    for txn in interleave(t1, t2):
        try:
            txn.commit()
            outcomes.append("ok")
        except ConflictError:
            outcomes.append("conflict")
    return int(db[x]) + int(db[y]), outcomes


def test_write_skew_never_breaks_the_invariant(db):
    broken = 0
    for i in range(200):
        total, outcomes = skew_round(db, i, lambda a, b: (a, b) if i % 2 else (b, a))
        broken += total < 0
        assert outcomes == ["ok", "conflict"]
    assert broken == 0


def test_write_skew_with_threads_never_breaks_the_invariant(db):
    broken = 0
    for i in range(100):
        x, y = b"tx%d" % i, b"ty%d" % i
        db.put_many([(x, b"100"), (y, b"100")])
        both_read = threading.Barrier(2)

        def withdraw(t):
            key = (x, y)[t]
            try:
                with db.transaction() as txn:
                    ok = int(txn[x]) + int(txn[y]) >= 200
                    both_read.wait()
                    if ok:
                        txn[key] = b"%d" % (int(txn[key]) - 200)
            except ConflictError:
                pass

        run_threads(2, withdraw)
        broken += int(db[x]) + int(db[y]) < 0
    assert broken == 0


# -- what a transaction reads ----------------------------------------------------------

def test_reads_inside_a_transaction_are_repeatable(db):
    db[b"k"] = b"old"
    db[b"r1"] = b"1"
    with db.transaction() as txn:
        assert txn[b"k"] == b"old"
        before = list(txn.scan(prefix=b"r"))
        db[b"k"] = b"new"
        db[b"r2"] = b"2"
        assert txn[b"k"] == b"old"
        assert list(txn.scan(prefix=b"r")) == before
        assert b"r2" not in txn
        assert txn.get(b"r2") is None
        txn.rollback()


def test_a_transaction_sees_its_own_writes_over_its_snapshot(db):
    db.put_many([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    txn = db.transaction()
    assert txn[b"a"] == b"1"
    db[b"b"] = b"changed"
    txn[b"bb"] = b"mine"
    del txn[b"c"]
    assert list(txn.scan()) == [(b"a", b"1"), (b"b", b"2"), (b"bb", b"mine")]
    assert list(txn.scan(reverse=True)) == [(b"bb", b"mine"), (b"b", b"2"), (b"a", b"1")]
    txn.rollback()


def test_a_key_inserted_into_a_scanned_range_is_a_conflict(db):
    db[b"item/1"] = b"x"
    txn = db.transaction()
    n = len(list(txn.scan(prefix=b"item/")))
    txn[b"count"] = b"%d" % n
    db[b"item/2"] = b"y"                  # a phantom in the range txn scanned
    with pytest.raises(ConflictError):
        txn.commit()
    assert b"count" not in db


def test_writes_outside_what_was_read_do_not_conflict(db):
    db.put_many([(b"a", b"1"), (b"b", b"1")])
    txn = db.transaction()
    txn[b"a2"] = b"%d" % (int(txn[b"a"]) + 1)
    list(txn.scan(b"a", b"a~"))
    db[b"b"] = b"2"                       # outside every key and range txn read
    txn.commit()
    assert db[b"a2"] == b"2"


def test_write_only_and_read_only_transactions_never_conflict(db):
    db[b"k"] = b"0"
    blind = db.transaction()
    blind[b"k"] = b"blind"
    reader = db.transaction()
    seen = reader[b"k"]
    db[b"k"] = b"1"
    blind.commit()                         # read nothing: nothing to invalidate
    reader.commit()                        # wrote nothing: serialized at its snapshot
    assert seen == b"0" and db[b"k"] == b"blind"
    assert db.stats()["snapshots_open"] == 0


# -- bank transfers: every reader sees the total ---------------------------------------

ACCOUNTS = [b"acct/%02d" % i for i in range(64)]


def bank_run(db, seconds, readers, transfers=200, reads=20):
    """At least `seconds`, and until `transfers` transfers committed and each
    reader summed `reads` times beside them (a loaded machine may need longer)."""
    db.put_many((a, b"100") for a in ACCOUNTS)
    total = 100 * len(ACCOUNTS)
    start = time.monotonic()
    sums = collections.defaultdict(list)
    moved = [0] * 4

    def running():
        spent = time.monotonic() - start
        enough = sum(moved) >= transfers and all(len(sums[kind]) >= reads for kind in readers)
        return spent < seconds or (spent < 120 and not enough)

    def transfer(txn, rng):
        a, b = rng.sample(ACCOUNTS, 2)
        amount = rng.randint(1, 30)
        va, vb = int(txn[a]), int(txn[b])
        if va >= amount:
            txn[a], txn[b] = b"%d" % (va - amount), b"%d" % (vb + amount)

    def read_sum(kind):
        if kind == "snapshot":
            with db.snapshot() as snap:
                return sum(int(v) for _, v in snap.scan(prefix=b"acct/"))
        if kind == "plain_scan":
            return sum(int(v) for _, v in db.scan(prefix=b"acct/"))
        with db.transaction() as txn:
            return sum(int(v) for _, v in txn.scan(prefix=b"acct/"))

    def worker(i):
        rng = random.Random(i)
        if i < 4:
            while running():
                retrying(db, lambda txn: transfer(txn, rng))
                moved[i] += 1
        else:
            kind = readers[i - 4]
            while running():
                sums[kind].append(read_sum(kind))

    run_threads(4 + len(readers), worker)
    return total, sums


@pytest.mark.parametrize("reader", ["snapshot", "plain_scan", "transaction"])
def test_every_reader_sees_the_bank_total_during_transfers(db, reader):
    total, sums = bank_run(db, 1.0, [reader])
    assert len(sums[reader]) >= 20
    wrong = [s for s in sums[reader] if s != total]
    assert not wrong, f"{reader}: {len(wrong)} of {len(sums[reader])} sums differ from {total}"
    assert sum(int(db[a]) for a in ACCOUNTS) == total


# -- list-append, checked for dependency cycles --------------------------------------------

LIST_KEYS = [b"list/%d" % i for i in range(5)]


def list_append_history(db, threads, per_thread, seed=0):
    """Committed transactions of random reads and appends to comma-separated
    lists; each records what it read (before its own appends) and appended."""
    history, lock = [], threading.Lock()

    def attempt(txn, rng, tag):
        reads, appends = {}, collections.defaultdict(list)
        for j in range(rng.randint(1, 4)):
            k = rng.choice(LIST_KEYS)
            raw = txn.get(k, b"")
            seen = raw.split(b",") if raw else []
            if k not in appends:
                reads.setdefault(k, tuple(seen))
            if rng.random() < 0.5:
                x = b"%s.%d" % (tag, j)
                txn[k] = b",".join(seen + [x])
                appends[k].append(x)
        return reads, dict(appends)

    def worker(t):
        rng = random.Random(seed * 100 + t)
        for n in range(per_thread):
            reads, appends = retrying(db, lambda txn: attempt(txn, rng, b"%d-%d" % (t, n)))[0]
            with lock:
                history.append((reads, appends))

    run_threads(threads, worker)
    final = {k: (db[k].split(b",") if db.get(k) else []) for k in LIST_KEYS}
    return history, final


def dependency_cycle(history, final):
    """A cycle of ww/wr/rw edges between committed transactions, or None.
    Raises AssertionError for a lost or duplicated append, or a read that is
    not a prefix of its key's final list (both anomalies by themselves)."""
    writer = {}
    for i, (_, appends) in enumerate(history):
        for k, xs in appends.items():
            for x in xs:
                writer[(k, x)] = i
    for k, lst in final.items():
        assert len(lst) == len(set(lst)), f"{k!r}: an append applied twice"
    missing = [kx for kx in writer if kx[1] not in final[kx[0]]]
    assert not missing, f"{len(missing)} committed appends lost, e.g. {missing[0]}"
    edges = collections.defaultdict(set)
    for k, lst in final.items():
        for a, b in zip(lst, lst[1:]):
            edges[writer[(k, a)]].add(writer[(k, b)])
    for i, (reads, _) in enumerate(history):
        for k, seen in reads.items():
            lst = final[k]
            assert list(seen) == lst[:len(seen)], f"txn {i} read {seen} of {k!r}, not a prefix"
            if seen:
                edges[writer[(k, seen[-1])]].add(i)          # wr: it read that append
            if len(seen) < len(lst):
                edges[i].add(writer[(k, lst[len(seen)])])    # rw: it missed the next one
    color = {}
    for root in range(len(history)):
        if root in color:
            continue
        stack = [(root, iter(edges[root] - {root}))]
        color[root] = 1
        path = [root]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
            elif color.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in color:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(edges[nxt] - {nxt})))
    return None


def test_list_append_histories_have_no_dependency_cycle(db):
    history, final = list_append_history(db, threads=4, per_thread=120)
    assert len(history) == 480
    assert dependency_cycle(history, final) is None


def test_the_cycle_checker_finds_a_write_skew_cycle():
    # t0 read a=[] and appended to b; t1 read b=[] and appended to a: each
    # missed the other's append (rw both ways), which no serial order allows.
    history = [({b"a": ()}, {b"b": [b"x"]}), ({b"b": ()}, {b"a": [b"y"]})]
    final = {b"a": [b"y"], b"b": [b"x"]}
    assert dependency_cycle(history, final) in ([0, 1, 0], [1, 0, 1])


def test_the_cycle_checker_reports_a_lost_append():
    history = [({b"a": ()}, {b"a": [b"x"]}), ({b"a": ()}, {b"a": [b"y"]})]
    with pytest.raises(AssertionError, match="lost"):
        dependency_cycle(history, {b"a": [b"y"]})
