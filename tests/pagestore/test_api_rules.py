"""Rules of the public API: typed errors, limits, persistence, corruption, threads."""

import os
import random
import subprocess
import sys
import threading

import pytest

import pagestore

SMALL = dict(memory_size=8 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


@pytest.fixture
def db(tmp_path):
    d = pagestore.open(tmp_path / "s", **SMALL)
    yield d
    d.close()


def test_str_keys_and_values_raise_type_error(db):
    with pytest.raises(TypeError):
        db.put("k", b"v")
    with pytest.raises(TypeError):
        db.put(b"k", "v")
    with pytest.raises(TypeError):
        db.get(1)
    assert db.get(b"k") is None


def test_bytes_like_keys_are_accepted(db):
    db.put(bytearray(b"k"), memoryview(b"v"))
    assert db[b"k"] == b"v"


@pytest.mark.parametrize("option,value", [
    ("page_size", 3000), ("page_size", 65536), ("memory_size", 1024), ("wal_mode", "sometimes"),
    ("recovery_data", "disk"), ("recovery_compression", "gzip"), ("throttling", "hard"),
    ("checkpoint_threads", 0), ("checkpoint_spread", 1.5), ("checkpoint_spread", -0.1),
    ("encryption_key", b"short"), ("no_such_option", 1),
    ("memory_size", 1 << 50), ("wal_segment_size", 1 << 44),
    ("recovery_compression_level", dict(recovery_compression="lz4", recovery_compression_level=22)),
    ("recovery_compression_level", dict(recovery_compression="snappy", recovery_compression_level=5)),
])
def test_bad_option_raises_value_error_naming_it(tmp_path, option, value):
    options = value if isinstance(value, dict) else {option: value}
    with pytest.raises(ValueError) as e:
        pagestore.open(tmp_path / "s", **options)
    assert option in str(e.value)
    assert isinstance(e.value, pagestore.ConfigError)
    assert not (tmp_path / "s").exists()


def test_key_and_value_limits_are_typed_and_lose_nothing(db):
    db.put(b"keep", b"1")
    with pytest.raises(pagestore.KeyTooLargeError):
        db.put(b"k" * 1025, b"v")
    with pytest.raises(pagestore.ValueTooLargeError):
        db.put(b"k", b"v" * ((16 << 20) + 1))
    db.put(b"k" * 1024, b"v")
    assert db[b"keep"] == b"1" and db[b"k" * 1024] == b"v"


def test_closed_store_raises(tmp_path):
    d = pagestore.open(tmp_path / "s", **SMALL)
    d.close()
    with pytest.raises(pagestore.ClosedError):
        d.get(b"k")
    with pytest.raises(pagestore.ClosedError):
        d.put(b"k", b"v")


def test_dict_surface(db):
    db[b"a"] = b"1"
    assert b"a" in db and b"b" not in db
    assert len(db) == 1
    del db[b"a"]
    with pytest.raises(KeyError):
        db[b"a"]
    with pytest.raises(KeyError):
        del db[b"a"]


def test_second_process_fails_at_once(tmp_path):
    path = tmp_path / "s"
    with pagestore.open(path, **SMALL):
        code = ("import pagestore,sys\n"
                "try:\n pagestore.open(sys.argv[1], memory_size=8<<20, wal_segment_size=1<<20)\n"
                "except pagestore.StoreLockedError: sys.exit(7)\n")
        r = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60,
                           cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert r.returncode == 7


def test_foreign_page_file_is_refused_by_name(tmp_path):
    path = tmp_path / "s"
    path.mkdir()
    (path / "pages.dat").write_bytes(b"not a store" * 1000)
    with pytest.raises(pagestore.CorruptionError) as e:
        pagestore.open(path, **SMALL)
    assert "pages.dat" in str(e.value)


def test_other_page_size_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "s"
    with pagestore.open(path, page_size=4096, **SMALL) as d:
        d.put(b"a", b"b")
    with pytest.raises(pagestore.ConfigError) as e:
        pagestore.open(path, page_size=8192, **SMALL)
    assert "pages.dat" in str(e.value) and "page_size" in str(e.value)


def test_flipped_byte_in_page_file_gives_corruption_error_never_data(tmp_path):
    path = tmp_path / "s"
    with pagestore.open(path, **SMALL) as d:
        d.put_many((b"%08d" % i, b"v" * 50) for i in range(5000))
    pages = path / "pages.dat"
    raw = bytearray(pages.read_bytes())
    # flip one byte in the middle of every data page but the meta page
    for off in range(4096 + 2000, len(raw), 4096):
        raw[off] ^= 0x5A
    pages.write_bytes(bytes(raw))
    with pytest.raises(pagestore.CorruptionError) as e:
        with pagestore.open(path, **SMALL) as d:
            for i in range(5000):
                assert d.get(b"%08d" % i) == b"v" * 50
    assert "pages.dat" in str(e.value)


def test_page_misses_on_posix_skip_the_python_callback_until_a_page_is_bad(tmp_path, monkeypatch):
    from pagestore.pagefile import PageFile
    path = tmp_path / "s"
    with pagestore.open(path, **SMALL) as d:
        d.put_many((b"%08d" % i, b"v" * 50) for i in range(5000))
    calls = []
    real = PageFile.read_page
    monkeypatch.setattr(PageFile, "read_page", lambda self, pid, buf: (calls.append(pid), real(self, pid, buf)))
    with pagestore.open(path, **SMALL) as d:
        for i in range(0, 5000, 7):
            assert d.get(b"%08d" % i) == b"v" * 50
        assert d.stats()["page_loads"] > 1 and calls == []     # the C core read them itself
    raw = bytearray((path / "pages.dat").read_bytes())
    raw[len(raw) - 4096 + 2000] ^= 0x5A                            # the last page goes bad
    (path / "pages.dat").write_bytes(bytes(raw))
    last = len(raw) // 4096 - 1
    with pytest.raises(pagestore.CorruptionError) as e:
        with pagestore.open(path, **SMALL) as d:
            for i in range(5000):
                d.get(b"%08d" % i)
    # the bad page went back through PageFile.read_page, which names the file
    assert last in calls and "pages.dat" in str(e.value)


def test_memory_smaller_than_data_replaces_clean_pages(tmp_path):
    path = tmp_path / "s"
    rng = random.Random(1)
    model = {}
    with pagestore.open(path, memory_size=1 << 20, wal_segment_size=1 << 20,
                        checkpoint_interval=3600) as d:
        for i in range(20000):
            k = rng.randbytes(8)
            model[k] = rng.randbytes(120)
            d.put(k, model[k])
        for k in rng.sample(sorted(model), 3000):
            assert d.get(k) == model[k]
        assert [k for k, _ in d.scan()] == sorted(model)
        st = d.stats()
        assert st["evictions"] > 0 and st["page_loads"] > 0


def test_one_million_keys_survive_reopen(tmp_path):
    path = tmp_path / "s"
    rng = random.Random(7)
    keys = [rng.randbytes(16) for _ in range(1_000_000)]
    with pagestore.open(path, memory_size=512 << 20) as d:
        d.put_many((k, k[:8] * 12) for k in keys)
    keys.sort()
    with pagestore.open(path, memory_size=512 << 20) as d:
        assert len(d) == len(set(keys))
        n = 0
        for (k, v), want in zip(d.scan(), sorted(set(keys))):
            assert k == want and v == k[:8] * 12
            n += 1
        assert n == len(set(keys))
        d.verify()


def test_threads_write_and_scan_at_once(db):
    errors = []

    def writer(t):
        try:
            for i in range(3000):
                db.put(b"t%d-%06d" % (t, i), b"x" * (i % 300))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def scanner():
        try:
            for _ in range(20):
                ks = [k for k, _ in db.scan()]
                assert ks == sorted(ks)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    threads += [threading.Thread(target=scanner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(db) == 12000
    for t in range(4):
        assert db.get(b"t%d-%06d" % (t, 2999)) == b"x" * (2999 % 300)
    db.verify()


def test_reopen_reuses_freed_pages(tmp_path):
    path = tmp_path / "s"
    with pagestore.open(path, **SMALL) as d:
        d.put_many((b"%06d" % i, b"v" * 500) for i in range(4000))
        for i in range(4000):
            d.delete(b"%06d" % i)
    size_after_delete = os.path.getsize(path / "pages.dat")
    with pagestore.open(path, **SMALL) as d:
        assert len(d) == 0
        d.put_many((b"%06d" % i, b"v" * 500) for i in range(4000))
    assert os.path.getsize(path / "pages.dat") <= size_after_delete * 1.1


def test_reads_wait_for_room_when_every_page_is_dirty(tmp_path):
    # Page memory of 64 slots, all dirty: a read that misses has nowhere to
    # load into until a checkpoint cleans pages; it must wait, not fail.
    path = tmp_path / "s"
    with pagestore.open(path, memory_size=64 * 4096, wal_segment_size=1 << 20,
                        checkpoint_interval=3600, checkpoint_buffer_size=16 * 4096) as d:
        for c in range(0, 3000, 100):          # batches that fit in page memory
            d.put_many((b"%06d" % i, b"v" * 200) for i in range(c, c + 100))
    with pagestore.open(path, memory_size=64 * 4096, wal_segment_size=1 << 20,
                        checkpoint_interval=3600, checkpoint_buffer_size=16 * 4096) as d:
        for i in range(0, 3000, 7):               # dirty as many pages as memory holds
            d.put(b"%06d" % i, b"w" * 200)
        for i in range(1, 3000, 7):               # reads of pages not in memory
            assert d.get(b"%06d" % i) == b"v" * 200
        assert sum(1 for _ in d.scan()) == 3000
        assert d.stats()["throttle_nomem_waits"] > 0     # the waiting path really ran


def test_checkpoint_state_agrees_with_stats(db):
    before = db.checkpoint_state()
    assert before == (False, db.stats()["checkpoints"])
    db.put(b"k", b"v")
    db.checkpoint()
    running, done = db.checkpoint_state()
    assert not running and done == before[1] + 1 == db.stats()["checkpoints"]


def test_any_object_with_the_buffer_protocol_is_a_bytes_like_key_or_value(db):
    import array
    db.put(array.array("B", b"ak"), array.array("B", b"av"))
    db.put_many([(array.array("B", b"bk"), array.array("i", [1]))])
    assert db[array.array("B", b"ak")] == b"av" and db[b"bk"] == b"\x01\x00\x00\x00"
    with db.transaction() as txn:
        assert txn.get(array.array("B", b"ak")) == b"av"
        txn.put(array.array("B", b"ck"), array.array("B", b"cv"))
    assert db[b"ck"] == b"cv"
    with pytest.raises(TypeError, match="bytes-like"):
        db.put(b"k", 1)


def test_a_key_longer_than_max_key_raises_key_too_large_on_every_read(db):
    long = b"k" * 1025
    reads = {
        "db.get": lambda: db.get(long),
        "snapshot.get": lambda: db.snapshot().get(long),
        "transaction.get": lambda: db.transaction().get(long),
        "key in transaction": lambda: long in db.transaction(),
        "transaction.delete": lambda: db.transaction().delete(long),
    }
    outcomes = {}
    for name, read in reads.items():
        try:
            outcomes[name] = f"returned {read()!r}"
        except pagestore.KeyTooLargeError as e:
            outcomes[name] = "KeyTooLargeError" if "1025" in str(e) else str(e)
    assert outcomes == dict.fromkeys(reads, "KeyTooLargeError")
