"""pagestore.aio's life cycle: close() that cannot be half-done (cancelled,
overlapping, from another loop), read-only stores, the store bound to its
loop, and a failed construction that leaves nothing open."""

import asyncio
import errno
import gc
import threading

import pytest

import pagestore
import pagestore.aio
from pagestore import compaction
from pagestore.database import State
from pagestore.diskio import SimFS

OPTS = dict(page_size=4096, memory_size=4 << 20, wal_segment_size=1 << 20)


def reopens(path) -> bool:
    """The store is closed and unlocked: this process can open it again."""
    pagestore.open(path, **OPTS).close()
    return True


def syncers() -> set:
    return {t for t in threading.enumerate() if t.name == "pagestore-aio-syncer" and t.is_alive()}


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that ended a thread (a syncer that died with a traceback)."""
    seen = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_a_cancelled_close_still_closes_and_unlocks_the_store(tmp_path, mode):
    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode=mode, **OPTS)
        for i in range(200):
            await db.put(b"k%04d" % i, b"v" * 100)
        closing = asyncio.ensure_future(db.close())
        await asyncio.sleep(0)              # close() has begun
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        # the closing goes on without anyone awaiting it ...
        for _ in range(30_000):
            if db.database.state is State.CLOSED:
                break
            await asyncio.sleep(0.001)
        assert db.database.state is State.CLOSED
        # ... and a later close() reports that same closing
        await db.close()
        with pytest.raises(pagestore.ClosedError):
            await db.put(b"x", b"y")
    asyncio.run(main())
    assert reopens(tmp_path)
    with pagestore.open(tmp_path, **OPTS) as db:
        assert len(list(db.scan())) == 200


def test_a_second_close_waits_for_the_first_to_finish(tmp_path):
    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS)
        await db.put(b"a", b"b")
        first = asyncio.ensure_future(db.close())
        await asyncio.sleep(0)
        await db.close()                    # a shutdown handler while `async with` exits
        assert db.database.state is State.CLOSED
        assert reopens(tmp_path)
        await first
    asyncio.run(main())


def test_a_close_that_fails_raises_its_error_from_every_close_call(tmp_path, monkeypatch):
    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS)
        await db.put(b"a", b"1")
        real_close = db.database.close

        def failing_close():
            real_close()
            raise pagestore.DiskIOError("the final checkpoint failed", str(tmp_path), "close")
        monkeypatch.setattr(db.database, "close", failing_close)
        with pytest.raises(pagestore.DiskIOError):
            await db.close()
        with pytest.raises(pagestore.DiskIOError):
            await db.close()
    asyncio.run(main())


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_a_call_from_another_loop_raises_wrong_loop_and_applies_nothing(tmp_path, mode, thread_errors):
    others = syncers()

    async def first():
        db = await pagestore.aio.open(tmp_path, wal_mode=mode, **OPTS)
        await db.put(b"a", b"1")
        return db
    db = asyncio.run(first())               # its loop has ended; the store is open

    async def second():
        calls = [lambda: db.put(b"b", b"2"), lambda: db.put(b"b", b"2", sync=True),
                 lambda: db.delete(b"a"), lambda: db.put_many([(b"b", b"2")]),
                 lambda: db.get(b"a"), lambda: db.sync()]
        for call in calls:
            with pytest.raises(pagestore.Error, match="event loop it was opened on") as e:
                await call()
            assert isinstance(e.value, pagestore.aio.WrongLoopError)
        with pytest.raises(pagestore.aio.WrongLoopError):
            db.transaction()
        assert db.database.get(b"b") is None and db.database.get(b"a") == b"1"
        await db.close()                    # close() works from any loop
    asyncio.run(second())
    assert db.database.state is State.CLOSED
    assert reopens(tmp_path)
    assert syncers() <= others and not thread_errors   # its syncer ended quietly


def test_a_loop_in_another_thread_gets_wrong_loop_and_its_close_closes_the_store(tmp_path):
    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS)
        await db.put(b"a", b"1")
        outcome = {}

        def other_thread():
            async def use():
                try:
                    await db.put(b"x", b"1")
                except pagestore.Error as e:
                    outcome["put"] = e
                await db.close()            # handed to the store's own loop, which runs
            asyncio.run(use())
        t = threading.Thread(target=other_thread)
        t.start()
        await asyncio.get_running_loop().run_in_executor(None, t.join)
        assert isinstance(outcome["put"], pagestore.aio.WrongLoopError)
        assert db.database.state is State.CLOSED
        await db.close()
    asyncio.run(main())
    assert reopens(tmp_path)
    with pagestore.open(tmp_path, **OPTS) as db:
        assert db.get(b"x") is None and db.get(b"a") == b"1"


def test_a_read_only_open_reads_and_refuses_every_write_typed(tmp_path):
    with pagestore.open(tmp_path, **OPTS) as db:
        db.put_many([(b"a", b"1"), (b"b", b"2")])

    async def main():
        async with pagestore.aio.open(tmp_path, read_only=True, **OPTS) as db:
            assert await db.get(b"a") == b"1"
            assert await db.get_many([b"a", b"b", b"c"]) == [b"1", b"2", None]
            assert [kv async for kv in db.scan()] == [(b"a", b"1"), (b"b", b"2")]
            assert db.stats()["aio_syncer"] is None       # nothing to make durable
            for call in (lambda: db.put(b"c", b"3"), lambda: db.put(b"c", b"3", sync=True),
                         lambda: db.delete(b"a"), lambda: db.put_many([(b"c", b"3")]), db.sync):
                with pytest.raises(pagestore.ReadOnlyError):
                    await call()
            with pytest.raises(pagestore.ReadOnlyError):
                async with db.transaction() as tx:
                    tx.put(b"c", b"3")
        assert db.database.state is State.CLOSED
    asyncio.run(main())
    assert reopens(tmp_path)                # the shared lock went with the close


def test_a_failed_construction_leaves_no_store_open(tmp_path, monkeypatch):
    def broken(loop):
        raise RuntimeError("construction failed")
    # fails midway, after the AsyncDatabase hooked itself into its Database
    monkeypatch.setattr(pagestore.aio, "loop_can_watch", broken)
    gc.disable()        # closed by open() itself, not left to the cyclic collector
    try:
        async def main():
            with pytest.raises(RuntimeError, match="construction failed"):
                await pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS)
        asyncio.run(main())
        assert reopens(tmp_path)
    finally:
        gc.enable()


def _compact_under_writers(db_open_args, mode):
    """Durable awaits made before, during and after `database.compact()` all
    complete, and the ones after it are durable in the new log."""
    async def main():
        db = await pagestore.aio.open(*db_open_args[0], wal_mode=mode, **db_open_args[1])
        await db.put_many([(b"k%05d" % i, b"v" * 100) for i in range(5000)])
        for i in range(0, 5000, 2):
            await db.delete(b"k%05d" % i)
        loop = asyncio.get_running_loop()
        compacting = loop.run_in_executor(None, db.database.compact)
        during = [asyncio.ensure_future(db.put(b"d%05d" % i, b"1", sync=True)) for i in range(200)]
        await compacting
        # (a cap against a hang, not a timing assumption: they need a round each)
        await asyncio.wait_for(asyncio.gather(*during), 60)
        await asyncio.wait_for(db.put(b"after", b"1", sync=True), 60)
        await asyncio.wait_for(db.put(b"after2", b"2"), 60)
        await asyncio.wait_for(db.sync(), 60)
        st = db.database.stats()
        assert st["wal_durable_lsn"] >= st["wal_end_lsn"]      # durable in the new log
        await asyncio.wait_for(db.close(), 60)
    asyncio.run(main())


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_durable_awaits_complete_across_compact(tmp_path, mode):
    _compact_under_writers(((tmp_path,), dict(memory_size=32 << 20)), mode)
    with pagestore.open(tmp_path) as db:
        assert db.get(b"after") == b"1" and db.get(b"after2") == b"2"
        assert len([k for k, _ in db.scan(prefix=b"d")]) == 200
        assert len([k for k, _ in db.scan(prefix=b"k")]) == 2500


def test_durable_awaits_complete_across_compact_with_the_python_syncer():
    fs = SimFS()
    _compact_under_writers((("/s",), dict(fs=fs, **OPTS)), "fsync")
    with pagestore.open("/s", fs=fs, **OPTS) as db:
        assert db.get(b"after") == b"1" and len([k for k, _ in db.scan(prefix=b"d")]) == 200


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_an_await_still_pending_at_compacts_swap_completes(tmp_path, mode):
    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode=mode, memory_size=32 << 20)
        await db.put_many([(b"k%05d" % i, b"v" * 100) for i in range(2000)])
        swapped = threading.Event()

        def listener(engine):               # compact()'s hook, heard first by the test
            swapped.set()
            db._on_swap(engine)
        compaction.on_swap(db.database, listener)
        pending = db.put(b"before", b"1", sync=True)
        loop = asyncio.get_running_loop()
        compacting = loop.run_in_executor(None, db.database.compact)
        # the loop does not run until the swap: the await is still pending then
        assert swapped.wait(60)
        assert not pending.done()
        await asyncio.wait_for(pending, 60)
        await compacting
        await asyncio.wait_for(db.put(b"after", b"2", sync=True), 60)
        await db.close()
    asyncio.run(main())
    with pagestore.open(tmp_path) as db:
        assert db.get(b"before") == b"1" and db.get(b"after") == b"2"


def test_no_await_is_acknowledged_by_the_new_log_when_the_old_one_failed_at_compacts_swap(tmp_path):
    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode="fsync", memory_size=32 << 20)
        await db.put_many([(b"k%05d" % i, b"v" * 100) for i in range(2000)])
        swapped = threading.Event()

        def listener(engine):
            # as if the old log's last sync had failed while compact() closed it
            # (its failure recorded and settled, as wal/failure.py does)
            old = db._wal
            old._failure = OSError(errno.EIO, "Input/output error")
            old._settled.set()
            swapped.set()
            db._on_swap(engine)
        compaction.on_swap(db.database, listener)
        pending = db.put(b"before", b"1", sync=True)
        compacting = asyncio.get_running_loop().run_in_executor(None, db.database.compact)
        assert swapped.wait(60) and not pending.done()
        try:        # durable in the old log before it failed, or a typed error: never a hang
            await asyncio.wait_for(pending, 60)
        except pagestore.Error:
            pass
        await compacting
        # the store does not take the new log's word for writes the old one lost
        with pytest.raises(pagestore.Error):
            await asyncio.wait_for(db.put(b"after", b"2", sync=True), 60)
        await db.close()
    asyncio.run(main())
