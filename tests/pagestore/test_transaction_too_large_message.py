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
