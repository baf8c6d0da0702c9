"""The C read path (pagestore._fastget, GIL held) answers exactly as the
ordinary cffi path does, serves what is in memory itself, hands everything
else back, never deadlocks with writers that call into Python, and leaks
neither references nor memory."""

import gc
import inspect
import os
import random
import subprocess
import sys
import tracemalloc
import weakref
from unittest import mock

import pytest

import pagestore
from pagestore import _native
from pagestore.database import engine_of

D = object()     # a default no value can equal


def ordinary(db, key, default=D):
    """The cffi path alone: what Database.get answered before the C read path."""
    v = engine_of(db).core.get(bytes(key))
    return default if v is None else v


def fill(db, rng, n, sizes):
    items = {}
    for _ in range(n):
        items[rng.randbytes(rng.randrange(1, 48))] = rng.randbytes(rng.choice(sizes))
    pairs = list(items.items())
    for i in range(0, len(pairs), 500):
        db.put_many(pairs[i:i + 500])
    return items


@pytest.fixture()
def roomy(tmp_path):
    db = pagestore.open(tmp_path / "s", memory_size=64 << 20, checkpoint_interval=3600)
    yield db
    db.close()


def test_fast_path_answers_as_the_ordinary_path_on_a_random_tree_with_deletes(roomy):
    rng = random.Random(11)
    core = engine_of(roomy).core
    # inline values, values around the C side's 2 KiB stack copy, and
    # overflow values (larger than a leaf holds)
    sizes = [0, 1, 100, 2047, 2048, 2049, core.max_inline, core.max_inline + 1, 9000, 70000]
    items = fill(roomy, rng, 3000, sizes)
    gone = rng.sample(sorted(items), 600)
    for k in gone:
        roomy.delete(k)
        del items[k]
    missing = [rng.randbytes(rng.randrange(1, 48)) for _ in range(300)]
    keys = list(items) + gone + missing
    rng.shuffle(keys)
    reader = _native.reader(core)
    served = 0
    for k in keys:
        want = ordinary(roomy, k)
        assert want == items.get(k, D)
        got = reader.get(k, D)
        served += got is not _native.SLOW
        assert got is _native.SLOW or got == want
        assert roomy.get(k, D) == want
        assert (k in roomy) == (want is not D)
        if want is D:
            with pytest.raises(KeyError):
                roomy[k]
        else:
            assert roomy[k] == want
    assert served == len(keys)          # every page is in memory: all served in C
    assert roomy.get_many(keys, D) == [ordinary(roomy, k) for k in keys]
    assert roomy.get_many(iter(keys[:50])) == [items.get(k) for k in keys[:50]]


def test_keys_over_the_size_limits_are_absent_or_refused_as_before(tmp_path):
    # 1 KiB pages: the longest key a put takes is shorter than the format's limit
    roomy = pagestore.open(tmp_path / "s", page_size=1024)
    core = engine_of(roomy).core
    assert core.max_key < _native.MAX_KEY
    roomy.put(b"k", b"v")
    over_max = b"x" * (core.max_key + 1)        # longer than any stored key: absent
    assert _native.reader(core).get(over_max, D) is D
    assert roomy.get(over_max) is None and over_max not in roomy
    huge = b"x" * (_native.MAX_KEY + 1)         # over the format's limit: the ordinary error
    assert _native.reader(core).get(huge, D) is _native.SLOW
    with pytest.raises(pagestore.Error) as want:
        core.get(huge)
    with pytest.raises(type(want.value)):
        roomy.get(huge)
    with pytest.raises(type(want.value)):
        roomy.get_many([b"k", huge])
    roomy.close()


def test_bytes_like_keys_take_the_ordinary_path_and_others_are_refused(roomy):
    roomy.put(b"abc", b"1")
    reader = _native.reader(engine_of(roomy).core)
    assert reader.get(bytearray(b"abc"), D) is _native.SLOW
    assert roomy.get(bytearray(b"abc")) == b"1" and roomy[memoryview(b"abc")] == b"1"
    assert roomy.get_many([b"abc", bytearray(b"abc"), memoryview(b"zz")]) == [b"1", b"1", None]
    for bad in ("abc", 5, None):
        with pytest.raises(TypeError):
            roomy.get(bad)
        with pytest.raises(TypeError):
            roomy.get_many([b"abc", bad])


def test_pages_not_in_memory_are_handed_back_and_loaded_by_the_ordinary_path(tmp_path):
    db = pagestore.open(tmp_path / "s", memory_size=4 << 20, checkpoint_interval=3600)
    try:
        rng = random.Random(5)
        items = fill(db, rng, 12000, [300, 900])      # ~7 MiB of values in 4 MiB of pages
        db.checkpoint()
        reader = _native.reader(engine_of(db).core)
        keys = list(items)
        rng.shuffle(keys)
        slow = sum(reader.get(k, D) is _native.SLOW for k in keys[:3000])
        assert slow > 0                                # misses came back, not loaded
        loads = engine_of(db).signals.page_loads
        assert [db.get(k) for k in keys] == [items[k] for k in keys]
        assert db.get_many(keys) == [items[k] for k in keys]
        assert engine_of(db).signals.page_loads > loads        # the ordinary path loaded them
    finally:
        db.close()


def test_a_closed_store_is_refused_and_its_reader_hands_back(tmp_path):
    db = pagestore.open(tmp_path / "s")
    db.put(b"k", b"v")
    reader = _native.reader(engine_of(db).core)
    assert reader.get(b"k", D) == b"v"
    db.close()
    assert reader.get(b"k", D) is _native.SLOW                 # no page memory behind it
    assert reader.get_many([b"k"], D, lambda k, d: "fallback") == ["fallback"]
    for call in (lambda: db.get(b"k"), lambda: db[b"k"], lambda: b"k" in db,
                 lambda: db.get_many([b"k"])):
        with pytest.raises(pagestore.ClosedError):
            call()


def test_a_reader_refuses_a_table_of_another_build():
    from pagestore import _fastget
    from pagestore._native import ffi
    fake = ffi.new("uint32_t[16]", [0x50534647, 99, 64])    # right magic, wrong version
    core = ffi.new("char[8]")
    with pytest.raises(ImportError, match="rebuild"):
        _fastget.Reader(int(ffi.cast("uintptr_t", fake)), int(ffi.cast("uintptr_t", core)), core)
    with pytest.raises(RuntimeError):
        _fastget.Reader.__new__(_fastget.Reader).get(b"k", None)


# Run in a child process: a read path that waited for the tree lock while
# holding the GIL would hang (a writer holding the lock waits for the GIL in
# a callback), and a hung child fails its test instead of stopping the suite.
_BESIDE_WRITERS = """
import random, sys, threading
import pagestore
from pagestore.database import engine_of
path, encrypted = sys.argv[1], sys.argv[2] == "1"
key = {"encryption_key": bytes(range(32))} if encrypted else {}
db = pagestore.open(path, memory_size=4 << 20, checkpoint_interval=0.2,
                    wal_segment_size=1 << 20, **key)
keys = [b"key-%05d" % i for i in range(20000)]

def value(k, gen):
    return k + b"/%06d/" % gen + bytes([gen % 251]) * (200 + gen % 700)

def valid(k, v):
    if v is None:
        return True
    head, gen, tail = v.split(b"/", 2)
    g = int(gen)
    return head == k and tail == bytes([g % 251]) * (200 + g % 700)

for i in range(0, len(keys), 500):
    db.put_many([(k, value(k, 0)) for k in keys[i:i + 500]])
stop, errors = threading.Event(), []

def writer(seed):
    rng, gen = random.Random(seed), seed * 1_000_000
    try:
        while not stop.is_set():
            gen += 1
            k = rng.choice(keys)
            db.delete(k) if gen % 7 == 0 else db.put(k, value(k, gen))
    except Exception as e:
        errors.append(e)

def reader(seed):
    rng = random.Random(seed)
    try:
        while not stop.is_set():
            batch = rng.sample(keys, 100)
            got = db.get_many(batch) + [db.get(k) for k in batch[:20]]
            if not all(valid(k, v) for k, v in zip(batch + batch[:20], got)):
                errors.append(AssertionError("a value that no put wrote"))
    except Exception as e:
        errors.append(e)

threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)] + \\
          [threading.Thread(target=reader, args=(s,)) for s in (3, 4)]
for t in threads:
    t.start()
# Run at least 3 s and until writers have missed pages: how soon that happens
# depends on how the machine schedules the four threads.
threading.Event().wait(3.0)
for _ in range(1200):
    if engine_of(db).signals.page_loads > 0:
        break
    threading.Event().wait(0.1)
stop.set()
for t in threads:
    t.join()
assert not errors, errors[:3]
core = engine_of(db).core
assert [db.get(k) for k in keys] == [core.get(k) for k in keys]
assert db.get_many(keys) == [core.get(k) for k in keys]
assert engine_of(db).signals.page_loads > 0
db.close()
print("ok")
"""


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_gets_beside_writers_that_load_pages_neither_deadlock_nor_see_torn_values(tmp_path, encrypted):
    # Small page memory and 1 MiB WAL segments: writers miss pages and switch
    # segments, calling into Python under the tree write lock (an encrypted
    # store's page loads always do), while readers hold the GIL in the C path.
    try:
        done = subprocess.run([sys.executable, "-c", _BESIDE_WRITERS, str(tmp_path / "s"),
                               "1" if encrypted else "0"], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("readers and writers stopped moving: a deadlock")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_gets_hold_no_reference_they_do_not_return(roomy):
    roomy.put(b"here", b"v" * 50)
    roomy.put(b"big", b"b" * 5000)
    key_here, key_big, key_absent, key_ba = b"here", b"big", b"absent", bytearray(b"here")
    default = object()
    objs = (key_here, key_big, key_absent, key_ba, default)
    keys = [key_here, key_big, key_absent, key_ba]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(2000):
        roomy.get(key_here, default)
        roomy.get(key_big, default)
        roomy.get(key_absent, default)
        roomy.get(key_ba, default)
        key_absent in roomy
        roomy.get_many(keys, default)
    assert [sys.getrefcount(o) for o in objs] == before
    v = roomy.get(key_here)
    assert sys.getrefcount(v) == 2          # v and the argument: the store kept none
    got = roomy.get_many(keys, default)
    counts = [sys.getrefcount(got[i]) for i in range(2)]      # got's and the argument's
    assert counts == [2, 2]


def test_a_million_gets_leave_no_memory_behind(roomy):
    rng = random.Random(2)
    items = fill(roomy, rng, 2000, [10, 100, 3000, 9000])
    keys = list(items) + [b"absent-%d" % i for i in range(200)] + [bytearray(b"x")]

    def loop(times):
        for _ in range(times):
            for k in keys:
                roomy.get(k)
            roomy.get_many(keys)

    loop(2)                          # warm every cache and free list
    gc.collect()
    tracemalloc.start()
    try:
        first, _ = tracemalloc.get_traced_memory()
        loop(120)                    # ~270,000 gets and as many through get_many
        gc.collect()
        last, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert last - first < 64 << 10, f"{last - first} bytes still allocated"


def test_state_checks_come_first_in_a_forked_child(roomy):
    # The Python state check runs before the C path: a child that inherited
    # the store is refused even though the page memory is readable there.
    roomy.put(b"k", b"v")
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            roomy.get(b"k")
            code = 1
        except pagestore.ClosedError:
            code = 0
        except BaseException:  # noqa: BLE001 - any other outcome fails the test
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert roomy.get(b"k") == b"v"



def test_a_stores_get_is_one_c_call_that_answers_as_the_method_does(roomy):
    items = fill(roomy, random.Random(7), 2_000, (1, 90, 700))
    served = pagestore.Database.__dict__["get"]
    assert type(served) is _native.fastget._fastget.GetMethod
    get, method = roomy.get, served.__wrapped__.__get__(roomy)      # the Python get, uncached
    assert get.__self__ is roomy and get.__doc__ == method.__doc__
    assert str(inspect.signature(get)) == "(key, default=None)"
    for k in list(items)[:500] + [b"absent", b"x" * 1024]:
        assert get(k) == method(k) and get(k, D) == method(k, D) and get(k, default=D) == method(k, default=D)
        assert roomy.get(k, D) == method(k, D) and get(bytearray(k), D) == method(bytearray(k), D)
    for bad, error in ((b"x" * 2000, pagestore.KeyTooLargeError), ("text", TypeError)):
        for call in (get, method):
            with pytest.raises(error):
                call(bad)
    with pytest.raises(TypeError):
        get()


def test_a_store_dropped_without_close_is_closed_by_reference_counting_alone(tmp_path):
    # `get` holds no store and no store holds a `get`: dropping the last
    # reference closes the store at once, with the collector off, as before.
    gc.disable()
    try:
        db = pagestore.open(tmp_path / "s")
        db.put(b"k", b"v")
        assert db.get(b"k") == b"v"
        gone = weakref.ref(db)
        del db
        assert gone() is None
        with pagestore.open(tmp_path / "s") as again:       # its directory is free
            assert again.get(b"k") == b"v"
    finally:
        gc.enable()


def test_a_get_taken_from_a_store_keeps_it_open_as_a_bound_method_does(tmp_path):
    db = pagestore.open(tmp_path / "s")
    held, get = weakref.ref(db), db.get
    del db
    gc.collect()
    assert get(b"absent", b"d") == b"d" and held() is not None and held().state is pagestore.State.OPEN
    held().close()


def test_a_get_taken_before_compact_is_served_by_the_new_engines_reader(tmp_path):
    # `get` reads the store's reader at every call: after a swap it answers
    # from the new core itself instead of handing every key to the Python
    # get (which a get holding the old, closed reader would do).
    db = pagestore.open(tmp_path / "s")
    try:
        db.put_many([(b"k%05d" % i, b"v" * 50) for i in range(3_000)])
        handed = []

        def python_get(store, *args, **kwargs):
            handed.append(args)
            return pagestore.Database.get.__wrapped__(store, *args, **kwargs)

        get = _native.get_method(python_get, (pagestore.database.State.OPEN,)).__get__(db)
        assert get(b"k00001") == b"v" * 50 and handed == []
        db.delete(b"k00002")
        db.compact()
        db.put(b"after", b"new")
        assert [get(b"k00001"), get(b"k00002", D), get(b"after")] == [b"v" * 50, D, b"new"]
        assert handed == []
        db._state = pagestore.database.State.FORKED      # a state it does not answer in
        try:
            with pytest.raises(pagestore.ClosedError):
                get(b"k00001")
        finally:
            db._state = pagestore.database.State.OPEN
        assert handed == [(b"k00001",)]
    finally:
        db.close()


def test_patching_database_get_reaches_every_store(tmp_path):
    db = pagestore.open(tmp_path / "s")
    try:
        seen = []
        with mock.patch.object(pagestore.Database, "get", lambda self, key, default=None: seen.append(key)):
            db.get(b"k")
        assert seen == [b"k"] and db.get(b"k", D) is D
    finally:
        db.close()
