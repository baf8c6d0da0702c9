"""A transaction refuses a write the store cannot hold at the call, as the
store's own put and delete do, and goes on without it.

Before, tx.put buffered a key or value over the limits and the error came at
commit, where it threw away every other write of the transaction."""

import asyncio

import pytest

import pagestore
import pagestore.aio
from pagestore._native import MAX_KEY, MAX_VALUE

SMALL = dict(memory_size=8 << 20)


def refusal(call):
    """(type, message) of what `call` raises: the store's own answer to compare with."""
    with pytest.raises(pagestore.Error) as e:
        call()
    return type(e.value), str(e.value)


def max_key(db):
    """The longest key `db` takes, found by asking db.put (the limit depends on page size)."""
    n = MAX_KEY
    while True:
        try:
            db.put(b"m" * n, b"")
        except pagestore.KeyTooLargeError:
            n -= 1
            continue
        db.delete(b"m" * n)
        return n


@pytest.mark.parametrize("page_size", [1024, 4096])
def test_a_transaction_put_of_a_key_too_large_raises_at_the_call_as_db_put_does_and_the_rest_commits(
        tmp_path, page_size):
    with pagestore.open(tmp_path / "s", page_size=page_size, **SMALL) as db:
        limit = max_key(db)
        long = b"k" * (limit + 1)
        expected = refusal(lambda: db.put(long, b"v"))
        assert expected[0] is pagestore.KeyTooLargeError
        with db.transaction() as tx:
            tx.put(b"before", b"1")
            assert refusal(lambda: tx.put(long, b"v")) == expected
            tx.put(b"after", b"2")
            tx.put(b"k" * limit, b"3")        # the longest key the store takes is still taken
        assert dict(db.scan()) == {b"before": b"1", b"after": b"2", b"k" * limit: b"3"}


def test_a_transaction_put_of_a_value_too_large_raises_at_the_call_as_db_put_does_and_the_rest_commits(tmp_path):
    big = b"v" * (MAX_VALUE + 1)
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        expected = refusal(lambda: db.put(b"k", big))
        assert expected[0] is pagestore.ValueTooLargeError
        with db.transaction() as tx:
            assert refusal(lambda: tx.put(b"k", big)) == expected
            assert refusal(lambda: tx.put(b"k" * (MAX_KEY + 1), big)) == expected   # the value named first, as put does
            tx.put(b"k", b"small")
            assert tx.get(b"k") == b"small"
        assert db.get(b"k") == b"small"


def test_a_transaction_delete_of_a_key_longer_than_any_raises_at_the_call_as_db_delete_does_and_the_rest_commits(
        tmp_path):
    long = b"k" * (MAX_KEY + 1)
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        db.put(b"gone", b"1")
        expected = refusal(lambda: db.delete(long))
        assert expected[0] is pagestore.KeyTooLargeError
        with db.transaction() as tx:
            assert refusal(lambda: tx.delete(long)) == expected
            assert refusal(lambda: tx.put(long, b"v")) == expected
            assert refusal(lambda: tx.delete(long)) == expected    # the refused put is not in it
            assert tx.delete(b"gone") is True
        assert db.get(b"gone") is None


def test_a_refused_write_leaves_the_transaction_usable_for_a_commit_that_checks_its_reads(tmp_path):
    with pagestore.open(tmp_path / "s", **SMALL) as db:
        db.put(b"n", b"1")
        with db.transaction() as tx:
            n = int(tx.get(b"n"))
            with pytest.raises(pagestore.KeyTooLargeError):
                tx[b"k" * (MAX_KEY + 1)] = b"v"
            tx[b"n"] = b"%d" % (n + 1)
        assert db.get(b"n") == b"2"


def test_an_aio_transaction_put_of_a_key_too_large_raises_at_the_call_and_the_rest_commits(tmp_path):
    long = b"k" * (MAX_KEY + 1)

    async def main():
        async with pagestore.aio.open(tmp_path / "s", **SMALL) as adb:
            expected = refusal(lambda: adb.database.put(long, b"v"))
            async with adb.transaction() as tx:
                tx.put(b"a", b"1")
                assert refusal(lambda: tx.put(long, b"v")) == expected
                assert refusal(lambda: tx.put(b"b", b"v" * (MAX_VALUE + 1)))[0] is pagestore.ValueTooLargeError
                assert refusal(lambda: tx.delete(long)) == expected
                tx.put(b"b", b"2")
            return await adb.get(b"a"), await adb.get(b"b"), await adb.get(long[:MAX_KEY])

    assert asyncio.run(main()) == (b"1", b"2", None)


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_transaction_put_too_large_for_one_wal_segment_raises_at_the_call_exactly_where_db_put_does(
        tmp_path, encrypted):
    options = dict(SMALL, wal_segment_size=1 << 20, memory_size=16 << 20)
    if encrypted:
        options["encryption_key"] = bytes(range(32))
    with pagestore.open(tmp_path / "s", **options) as db:
        # the largest value db.put takes under this key, found by db.put itself
        lo, hi = 0, 1 << 20
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                db.put(b"k", b"v" * mid)
                lo = mid
            except pagestore.ValueTooLargeError:
                hi = mid
        expected = refusal(lambda: db.put(b"k", b"v" * hi))
        assert expected == (pagestore.ValueTooLargeError, "record too large for one WAL segment")
        with db.transaction() as tx:
            assert refusal(lambda: tx.put(b"k", b"v" * hi)) == expected
            tx.put(b"k", b"w" * lo)
        assert db.get(b"k") == b"w" * lo


def test_every_store_takes_a_write_under_the_floors_a_transaction_checks_without_asking_its_store():
    from pagestore import _native
    from pagestore.config import make_config
    from pagestore.keys import KEY_FLOOR, PAIR_FLOOR, WriteLimits
    # the smallest key limit: the smallest page with the largest page reserve the core takes
    ps = _native.MIN_PAGE_SIZE
    core = _native.Core(ps, 8 * ps, 0, page_reserve=ps // 4)
    try:
        assert core.max_key >= KEY_FLOOR
    finally:
        core.close()
    with pytest.raises(ValueError):
        _native.Core(ps, 8 * ps, 0, page_reserve=ps // 4 + 8)
    # the smallest record limit: the smallest WAL segment a store opens with, sealed
    smallest = 1 << 20
    make_config(wal_segment_size=smallest)
    with pytest.raises(pagestore.ConfigError):
        make_config(wal_segment_size=smallest - 4096)
    assert WriteLimits(KEY_FLOOR, ps, smallest, sealed=True).max_pair >= PAIR_FLOOR
