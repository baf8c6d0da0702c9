"""The mapping surface users bring from py-lmdb, plyvel and rocksdict:
get_many, values, pop, update, setdefault, put_many of a mapping, a cursor
that seeks and walks both ways, and a transaction that iterates and counts
its own view."""

import threading

import pytest

import pagestore


@pytest.fixture
def db(tmp_path):
    with pagestore.open(tmp_path / "s") as d:
        yield d


def test_put_many_takes_a_mapping_as_one_batch(db):
    db.put_many({b"a": b"1", b"b": b"2"})
    db.put_many([(b"c", b"3")])
    assert dict(db.items()) == {b"a": b"1", b"b": b"2", b"c": b"3"}


def test_update_takes_a_mapping_or_pairs(db):
    db.update({b"a": b"1"})
    db.update([(b"b", b"2"), (bytearray(b"c"), memoryview(b"3"))])
    assert dict(db.items()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    with pytest.raises(TypeError, match="bytes-like"):
        db.update({"str": b"x"})
    assert b"str" not in db


def test_get_many_returns_values_in_the_order_asked_with_default_for_missing(db):
    db.update({b"a": b"1", b"c": b"3"})
    assert db.get_many([b"c", b"b", b"a"]) == [b"3", None, b"1"]
    assert db.get_many(iter([b"b"]), default=b"-") == [b"-"]


def test_values_come_in_key_order(db):
    db.update({b"b": b"2", b"a": b"1", b"c": b"3"})
    assert list(db.values()) == [b"1", b"2", b"3"]


def test_pop_removes_and_returns_the_value_or_the_default(db, tmp_path):
    db.update({b"a": b"1"})
    assert db.pop(b"a") == b"1"
    assert b"a" not in db
    assert db.pop(b"a", None) is None
    with pytest.raises(KeyError):
        db.pop(b"a")


def test_pop_is_durable_like_any_delete(tmp_path):
    with pagestore.open(tmp_path / "s") as d:
        d.update({b"a": b"1", b"b": b"2"})
        d.pop(b"a")
    with pagestore.open(tmp_path / "s") as d:
        assert dict(d.items()) == {b"b": b"2"}


def test_setdefault_stores_only_when_missing(db):
    assert db.setdefault(b"k", b"first") == b"first"
    assert db.setdefault(b"k", b"second") == b"first"
    assert db[b"k"] == b"first"


def test_concurrent_pops_of_one_key_return_it_once(db):
    # Each pop is a transaction: two pops cannot both return the value.
    for round_ in range(20):
        db[b"k"] = b"v%d" % round_
        got, gate = [], threading.Barrier(4)

        def popper():
            gate.wait()
            got.append(db.pop(b"k", None))
        threads = [threading.Thread(target=popper) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got, key=lambda v: v is None) == [b"v%d" % round_, None, None, None]


def test_the_mapping_surface_refuses_a_closed_store(tmp_path):
    d = pagestore.open(tmp_path / "s")
    d.close()
    for call in (lambda: d.get_many([b"a"]), lambda: list(d.values()), lambda: d.update({b"a": b"1"}),
                 lambda: d.pop(b"a", None), lambda: d.setdefault(b"a", b"1"), d.cursor):
        with pytest.raises(pagestore.ClosedError):
            call()


# -- cursor ------------------------------------------------------------------------
def test_cursor_seeks_to_the_first_key_at_or_after_and_walks_both_ways(db):
    db.update({b"b": b"2", b"d": b"4", b"f": b"6"})
    c = db.cursor()
    assert not c.valid and c.key is None and c.item() is None
    assert c.seek(b"c") and c.item() == (b"d", b"4")
    assert c.next() and c.key == b"f"
    assert not c.next() and c.key is None          # off the end ...
    assert not c.next()                            # ... and it stays there
    assert c.prev() and c.key == b"f"              # back from the end: the last key
    assert c.prev() and c.prev() and c.key == b"b"
    assert not c.prev() and not c.valid
    assert c.next() and c.key == b"b"              # back from the start: the first key
    assert c.seek(b"d") and c.value == b"4"        # an exact key
    assert not c.seek(b"g")


def test_cursor_first_last_and_seek_before(db):
    db.update({b"b": b"2", b"d": b"4"})
    c = db.cursor()
    assert c.last() and c.key == b"d"
    assert c.first() and c.key == b"b"
    assert c.seek_before(b"d") and c.key == b"b"
    assert not c.seek_before(b"b")
    empty = db.cursor()
    db.delete(b"b"), db.delete(b"d")
    assert not empty.first() and not empty.last() and not empty.next()


def test_cursor_iterates_forward_from_its_position(db):
    keys = [b"k%04d" % i for i in range(3000)]    # several scan batches
    db.put_many((k, k) for k in keys)
    c = db.cursor()
    assert [k for k, _ in c] == keys
    c.seek(b"k2990")
    assert [k for k, _ in c] == keys[2990:]
    c.last()
    walked = [c.key]
    while c.prev():
        walked.append(c.key)
    assert walked == keys[::-1]


def test_a_cursor_walk_under_concurrent_writes_is_ordered_and_misses_no_stable_key(db):
    stable = [b"s%05d" % i for i in range(0, 4000, 2)]
    db.put_many((k, b"stable") for k in stable)
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            k = b"s%05d" % (2 * (i % 2000) + 1)   # odd keys come and go between the stable ones
            db[k] = b"churn"
            db.delete(k)
            i += 1
    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(3):
            c, seen = db.cursor(), []
            ok = c.first()
            while ok:
                seen.append(c.key)
                ok = c.next()
                if len(seen) % 500 == 0 and ok:       # turn around now and then
                    assert c.prev() and c.next()
            assert seen == sorted(set(seen))
            assert [k for k in seen if db.get(k) == b"stable"] == stable
    finally:
        stop.set()
        t.join()


# -- transaction view ----------------------------------------------------------------
def test_a_transaction_iterates_and_counts_its_own_view(db):
    db.update({b"a": b"1", b"b": b"2"})
    with db.transaction() as tx:
        tx[b"c"] = b"3"
        del tx[b"a"]
        assert list(tx) == [b"b", b"c"]
        assert len(tx) == 2
    assert list(db) == [b"b", b"c"]


def test_a_cursor_whose_snapshot_was_dropped_goes_on_from_its_key(tmp_path):
    with pagestore.open(tmp_path / "s", snapshot_memory=64 << 10) as d:
        keys = [b"k%05d" % i for i in range(20000)]   # more than one scan batch
        d.put_many((k, b"old") for k in keys)
        c = d.cursor()
        assert c.first()
        for _ in range(3):
            d.put_many((k, b"new" * 20) for k in keys)  # outgrows the bound: the run's snapshot is dropped
        seen = [c.key]
        while c.next():
            seen.append(c.key)
        assert seen == keys
        assert c.seek(b"k19999") and c.value == b"new" * 20
