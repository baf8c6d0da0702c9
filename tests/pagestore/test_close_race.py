"""Closing a store while other calls are in flight or about to enter the C core:
each such call raises ClosedError; none touches freed memory (no crash), and
what was written before the close is there on reopen.

Each case runs in a child process, so a crash fails its own test only."""

import subprocess
import sys
import textwrap

import pytest

import pagestore
from pagestore.database import engine_of

_PRELUDE = """
import sys, threading, pagestore
path = sys.argv[1]
OPTS = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
db = pagestore.open(path, **OPTS)
for i in range(2000):
    db.put(b"k%05d" % i, b"v%05d" % i)

class ClosingKey(bytearray):
    # converted to bytes after the store's "closed" check and before the C call:
    # the close lands exactly in that window
    def __bytes__(self):
        db.close()
        return bytes(bytearray(self))
"""

_CASES = {
    "put": "db.put(ClosingKey(b'new'), b'x')",
    "get": "db.get(ClosingKey(b'k00001'))",
    "delete": "db.delete(ClosingKey(b'k00001'))",
    "put_many": "db.put_many([(ClosingKey(b'new'), b'x')])",
    "transaction": "tx = db.transaction()\ntx.put(ClosingKey(b'new'), b'x')\ntx.commit()",
}


def _run(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = _PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script, str(tmp_path / "s")], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("op", sorted(_CASES))
def test_a_call_whose_store_closes_before_it_reaches_the_core_raises_closed_error(tmp_path, op):
    body = f"""
try:
{textwrap.indent(_CASES[op], '    ')}
    print("no error")
except pagestore.ClosedError as e:
    print("ClosedError")
db2 = pagestore.open(path, **OPTS)
print(len(db2), db2.get(b"k01999"))
db2.close()
"""
    r = _run(tmp_path, body)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.split("\n")
    assert lines[0] == "ClosedError", r.stdout
    assert lines[1] == "2000 b'v01999'"


def test_threads_writing_and_reading_while_the_store_closes_get_closed_error_only(tmp_path):
    body = """
errors, done, progress = [], [], [0] * 4
def work(n):
    i = 0
    try:
        while True:
            db.put(b"t%d-%d" % (n, i), b"x" * 50)
            db.get(b"k%05d" % (i % 2000))
            i += 1
            progress[n] = i
    except pagestore.ClosedError:
        done.append(i)
    except BaseException as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
for t in threads: t.start()
import time
# close while every thread is in its loop, however slowly the machine runs them
deadline = time.monotonic() + 60
while min(progress) < 50 and time.monotonic() < deadline:
    time.sleep(0.01)
db.close()
for t in threads: t.join()
print(errors, len(done), min(progress) >= 50)
db2 = pagestore.open(path, **OPTS)
print(db2.get(b"k01999"))
db2.close()
"""
    r = _run(tmp_path, body)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["[] 4 True", "b'v01999'"], r.stdout


def test_closed_and_abandoned_stores_free_their_cores(tmp_path):
    # nothing global may hold on to a core (its callback handle leads back to the
    # store): an abandoned store's page memory would never be freed
    import gc
    import weakref
    cores = []
    for i in range(4):
        db = pagestore.open(tmp_path / f"s{i}", memory_size=8 << 20, wal_segment_size=1 << 20)
        for j in range(500):
            db.put(b"k%05d" % j, b"v" * 100)
        cores.append(weakref.ref(engine_of(db).core))
        if i % 2:
            db._abandon()
        else:
            db.close()
        del db
    gc.collect()
    assert [c() for c in cores] == [None] * 4


def test_len_and_checkpoint_racing_close_raise_closed_error_only(tmp_path):
    body = """
import collections
bad = collections.Counter()
db.close()
for rnd in range(12):
    db = pagestore.open(path, **dict(OPTS, checkpoint_interval=0.05))
    def loop(f):
        while True:
            try:
                f()
            except pagestore.ClosedError:
                return
            except Exception as e:
                bad[f"{type(e).__name__}: {e}"] += 1
                return
    ths = [threading.Thread(target=loop, args=(f,)) for f in
           (lambda: len(db), lambda: len(db), db.checkpoint, db.checkpoint, db.checkpoint_state,
            lambda: db.put(b"x", b"y"))]
    for t in ths: t.start()
    import time; time.sleep(0.05)
    db.close()
    for t in ths: t.join()
print(dict(bad))
"""
    r = _run(tmp_path, body)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "{}", r.stdout


def test_checkpoint_state_after_close_is_closed_error(tmp_path):
    db = pagestore.open(tmp_path / "s", memory_size=8 << 20)
    assert db.checkpoint_state()[0] is False
    db.close()
    with pytest.raises(pagestore.ClosedError):
        db.checkpoint_state()


def test_verify_under_memory_pressure_waits_for_room_instead_of_leaking_retry(tmp_path):
    import random
    import threading
    import time
    db = pagestore.open(tmp_path / "s", memory_size=64 * 4096)
    stop, errors, ok = [], [], [0]

    def writer(seed):
        r = random.Random(seed)
        while not stop:
            db.put(b"%d_%06d" % (seed, r.randrange(100000)), b"v" * 200)

    ths = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    for t in ths:
        t.start()
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 1.5:
            try:
                db.verify()
                ok[0] += 1
            except Exception as e:  # noqa: BLE001 - collected for the assertion
                errors.append(f"{type(e).__module__}.{type(e).__name__}: {e}")
    finally:
        stop.append(1)
        for t in ths:
            t.join()
        db.close()
    assert errors == [] and ok[0] > 0, (ok, errors[:3])


def test_a_store_dropped_inside_the_collector_is_closed_without_waiting_there():
    # The collector runs a dropped store's finalizer in whatever thread it
    # interrupts. Here that thread holds the file system's lock, which the
    # store's final checkpoint needs: a close waiting inline would never end.
    import gc
    import threading
    from pagestore.diskio import SimFS
    opts = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)
    sim = SimFS()
    gc.disable()                          # the cycle is collected below, under the lock, not before
    try:
        db = pagestore.open("/s", fs=sim, **opts)
        db.put_many((b"k%05d" % i, b"v" * 100) for i in range(500))
        cycle = [db]
        cycle.append(cycle)
        del db, cycle
        collected = threading.Event()

        def collect_holding_the_fs_lock():
            with sim._lock:
                gc.collect()
            collected.set()
        threading.Thread(target=collect_holding_the_fs_lock, daemon=True).start()
        assert collected.wait(60), "the collector waited for the dropped store's close"
    finally:
        gc.enable()
    # closed by a thread of its own; an open of its path in this process waits
    # for that close, as it found the store closed when the close ran inline
    with pagestore.open("/s", fs=sim, **opts) as db2:
        assert len(db2) == 500
