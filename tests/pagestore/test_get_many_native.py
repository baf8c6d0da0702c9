"""Database.get_many through one C call per batch: the same answers as get,
whatever the values' sizes, page misses, batch lengths and key types."""

import os
import random

import pytest

import pagestore


@pytest.fixture()
def store(tmp_path):
    db = pagestore.open(tmp_path, memory_size=16 << 20, page_size=4096)
    yield db
    db.close()


def test_get_many_answers_as_get_does_across_misses_big_values_and_batches(store):
    rng = random.Random(3)
    items = {os.urandom(rng.randrange(1, 40)): os.urandom(rng.choice([0, 1, 90, 3000, 20000]))
             for _ in range(6000)}
    items[b"huge"] = b"h" * (2 << 20)            # more than one call's value buffer
    pairs = list(items.items())
    for i in range(0, len(pairs), 200):
        store.put_many(pairs[i:i + 200])
    store.checkpoint()                          # 16 MiB of page memory for ~33 MiB: pages get evicted
    keys = [k for k, _ in pairs] + [b"absent-%d" % i for i in range(50)]
    rng.shuffle(keys)
    keys = keys + keys[:1500]                   # more than one batch of the C call
    assert store.get_many(keys) == [store.get(k) for k in keys]
    assert store.get_many(keys, b"-") == [store.get(k, b"-") for k in keys]
    assert store.stats()["page_loads"] > 0


def test_get_many_takes_bytes_like_keys_and_refuses_others(store):
    store.put(b"abc", b"1")
    assert store.get_many([bytearray(b"abc"), memoryview(b"abc"), b"zz"]) == [b"1", b"1", None]
    with pytest.raises(TypeError):
        store.get_many(["abc"])


def test_get_many_on_a_closed_store_raises_closed_error(tmp_path):
    db = pagestore.open(tmp_path)
    db.put(b"k", b"v")
    db.close()
    with pytest.raises(pagestore.ClosedError):
        db.get_many([b"k"])


def test_a_key_longer_than_any_stored_is_absent_or_refused_as_get_does(store):
    store.put(b"k", b"v")
    long_key = b"x" * 2000
    try:
        expect = store.get(long_key)
    except pagestore.Error as e:
        with pytest.raises(type(e)):
            store.get_many([b"k", long_key])
    else:
        assert store.get_many([b"k", long_key]) == [b"v", expect]
