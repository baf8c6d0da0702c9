"""TransactionTooLargeError tells the fix: the pages the transaction needs, the
page memory and checkpoint buffer the store has, and a memory_size that fits."""

import os
import re

import pytest

import pagestore

MiB = 1 << 20


def _pairs(n):
    rnd = __import__("random").Random(7)
    return [(rnd.randbytes(16), b"v" * 100) for _ in range(n)]


def _too_large(path, pairs, **options):
    with pagestore.open(path, **options) as db:
        with pytest.raises(pagestore.TransactionTooLargeError) as info:
            db.put_many(pairs)
        stats = db.stats()
    return info.value, stats


def test_the_error_names_the_pages_needed_and_the_memory_and_buffer_the_store_has(tmp_path):
    err, stats = _too_large(tmp_path, _pairs(50_000), memory_size=2 * MiB)
    text = str(err)
    assert str(tmp_path) in text
    assert err.memory_pages == stats["slots_total"] == 512
    assert err.buffer_pages == stats["cow_capacity"]
    assert f"{err.memory_pages:,} pages (memory_size=2.0 MiB)" in text
    assert f"checkpoint buffer {err.buffer_pages:,} pages (checkpoint_buffer_size=0.5 MiB)" in text
    # the batch got part of the way: the estimate for all of it is larger than page memory
    assert err.pages_needed > err.memory_pages
    assert f"about {err.pages_needed:,} pages" in text
    assert re.search(r"of its 50,000 writes", text)


def test_the_memory_size_the_error_suggests_fits_the_transaction(tmp_path):
    pairs = _pairs(50_000)
    err, _ = _too_large(tmp_path / "small", pairs, memory_size=2 * MiB)
    suggested = float(re.search(r"memory_size of at least ([\d,.]+) MiB", str(err)).group(1).replace(",", ""))
    with pagestore.open(tmp_path / "big", memory_size=int(suggested * MiB) // 4096 * 4096) as db:
        db.put_many(pairs)
        assert len(db) == len({k for k, _ in pairs})


def test_a_single_put_too_large_names_what_it_needs(tmp_path):
    # a value spilling into more overflow pages than page memory holds
    with pagestore.open(tmp_path, memory_size=64 * 4096) as db:
        with pytest.raises(pagestore.TransactionTooLargeError) as info:
            db.put(b"big", os.urandom(4 * MiB))
    assert info.value.pages_needed > info.value.memory_pages == 64
    assert "it needs more than" in str(info.value)


def test_a_batch_refused_beside_other_writers_names_at_least_the_pages_it_proved_it_needs(tmp_path):
    # Another writer's dirty pages make the batch fail early, having changed
    # few pages; it is refused at once because the core proved it needs more
    # than page memory (Retry.need), and the error must say that figure, not
    # the few pages it had when it stopped.
    rnd = __import__("random").Random(1)
    keys = sorted(rnd.randbytes(16) for _ in range(50_000))
    other = sorted(b"\xff" + rnd.randbytes(15) for _ in range(6_000))
    with pagestore.open(tmp_path, memory_size=64 * MiB, page_size=16384) as db:
        for i in range(0, len(keys), 2_000):
            db.put_many((k, b"v" * 100) for k in keys[i:i + 2_000])
        db.put_many((k, b"v" * 20) for k in other)
    with pagestore.open(tmp_path, memory_size=4 * MiB, page_size=16384, checkpoint_interval=3600,
                        checkpoint_dirty_fraction=0.95) as db:
        for k in other[::3]:
            if db.stats()["dirty_pages"] >= 60:
                break
            db.put(k, b"o" * 20)
        with pytest.raises(pagestore.TransactionTooLargeError) as info:
            db.put_many([(b"hot", b"h" * 100)] * 300_000 + [(k, b"w" * 100) for k in keys])
    err = info.value
    proven = err.__cause__.need
    assert proven > err.memory_pages
    assert err.pages_needed == proven and f"at least {proven:,} pages at once" in str(err)
    want = float(re.search(r"memory_size of at least ([\d.]+) MiB", str(err)).group(1))
    assert want * MiB >= proven * 16384
