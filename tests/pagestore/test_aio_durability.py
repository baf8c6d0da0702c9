"""pagestore.aio and the store's promises: every write acknowledged keeps
its mode's durability whoever made it (the loop, a thread through
`database`), a failed WAL sync fails the store typed as in any thread, and
awaits that complete at once still let the loop run other work."""

import asyncio
import errno
import os

import pytest

import pagestore
import pagestore.aio
from pagestore.database import engine_of
from pagestore.diskio import SimFS

OPTS = dict(page_size=4096, memory_size=4 << 20, wal_segment_size=1 << 20, checkpoint_interval=3600)


def run(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def _thread_writes(db) -> list:
    """Writes through the blocking surface, each kind last in a run of its own
    (a durable write makes everything before it durable too)."""
    acked = []
    for i in range(20):
        db.put(b"t%02d" % i, b"v")
        acked.append(b"t%02d" % i)
    db.put_many([(b"m%02d" % i, b"v") for i in range(5)])
    acked += [b"m%02d" % i for i in range(5)]
    return acked


@pytest.mark.parametrize("mode, crash", [("fsync", "drop"), ("log_only", "keep")])
def test_a_write_through_database_keeps_its_modes_durability_under_aio(mode, crash):
    # fsync: durable when the call returns (power loss); log_only on a log
    # that publishes at commit (the simulator): in the OS (process kill)
    fs = SimFS()

    async def main():
        adb = await pagestore.aio.open("/s", fs=fs, wal_mode=mode, **OPTS)
        await adb.put(b"loop", b"v", sync=True)
        acked = await asyncio.get_running_loop().run_in_executor(None, _thread_writes, adb.database)
        adb.database.put(b"blocking-on-the-loop", b"v")     # a blocking call on the loop is one too
        adb.database._abandon()                             # the crash, now
        return acked + [b"blocking-on-the-loop"]

    acked = run(main())
    fs.crash(0, crash)
    with pagestore.open("/s", fs=fs, **OPTS) as db:
        lost = [k for k in acked if db.get(k) != b"v"]
    assert not lost, f"{mode}: {len(lost)} of {len(acked)} acknowledged writes lost"


def test_an_async_sync_makes_the_writes_of_threads_durable_too():
    fs = SimFS()

    async def main():
        adb = await pagestore.aio.open("/s", fs=fs, wal_mode="log_only", wal_flush_interval=3600, **OPTS)
        await adb.put(b"loop", b"v", sync=True)           # the loop's own writes: all durable
        acked = await asyncio.get_running_loop().run_in_executor(None, _thread_writes, adb.database)
        await asyncio.wait_for(adb.sync(), 60)
        adb.database._abandon()
        return acked

    acked = run(main())
    fs.crash(0, "drop")                                     # power loss
    with pagestore.open("/s", fs=fs, **OPTS) as db:
        lost = [k for k in acked if db.get(k) != b"v"]
    assert not lost, f"{len(lost)} of {len(acked)} writes made before sync() lost"


@pytest.mark.parametrize("mode", ["log_only", "background"])
@pytest.mark.parametrize("direct", [False, True])
def test_an_acknowledged_async_put_survives_a_process_kill_when_the_log_publishes(mode, direct):
    # the simulator (and wal_direct on posix) hands records to the OS at
    # commit: an await completed before that would be lost to a kill -9
    fs = SimFS()

    async def main():
        adb = await pagestore.aio.open("/s", fs=fs, wal_mode=mode, wal_direct=direct,
                                       wal_flush_interval=3600, **OPTS)
        acked = {}

        async def writer(t):
            for i in range(50):
                k = b"%02d-%03d" % (t, i)
                # every fifth durable (both kinds of wait in one queue), the
                # last ten not: nothing syncs them
                await asyncio.wait_for(adb.put(k, k, sync=i % 5 == 4 and i < 40), 60)
                acked[k] = k
        await asyncio.gather(*(writer(t) for t in range(8)))
        await asyncio.wait_for(adb.delete(b"missing"), 60)      # logs nothing: completes too
        adb.database._abandon()
        return acked

    acked = run(main())
    assert len(acked) == 400
    fs.crash(0, "keep")
    with pagestore.open("/s", fs=fs, **OPTS) as db:
        lost = [k for k, v in acked.items() if db.get(k) != v]
    assert not lost, f"{len(lost)} acknowledged puts lost to a process kill"


def test_a_failed_wal_sync_fails_the_store_typed_and_reads_go_on():
    fs = SimFS()     # the Python syncer: the store's WAL runs its rounds in Python here

    async def main():
        adb = await pagestore.aio.open("/s", fs=fs, wal_mode="fsync", **OPTS)
        await adb.put(b"before", b"1")
        fs.arm_fault(1, errno.EIO, persistent=True)
        res = await asyncio.wait_for(
            asyncio.gather(*(adb.put(b"w%02d" % t, b"v") for t in range(20)), return_exceptions=True), 60)
        errors = [r for r in res if isinstance(r, BaseException)]
        assert errors and all(isinstance(e, pagestore.DiskIOError) for e in errors), \
            [type(e) for e in errors]
        for e in errors:
            assert str(e).startswith("put: ") and "/s/wal" in str(e) and e.operation == "put", e
        assert adb.database.state is pagestore.State.FAILED
        assert await adb.get(b"before") == b"1"                    # reads go on
        with pytest.raises(pagestore.DiskIOError, match="refused"):
            await adb.put(b"later", b"1")
        with pytest.raises(pagestore.DiskIOError, match="refused"):
            await adb.sync()
        fs.clear_fault()
        await adb.close()

    run(main())
    with pagestore.open("/s", fs=fs, **OPTS) as db:
        assert db.get(b"before") == b"1"


def test_a_failed_round_of_the_c_syncer_fails_the_store_typed_and_reads_go_on(tmp_path):
    async def main():
        adb = await pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS)
        assert adb.stats()["aio_syncer"] == "c"
        await adb.put(b"before", b"1")
        live = engine_of(adb.database).wal._segs.live        # the segment the encoder writes
        seg = live[max(live)].file
        # its descriptor now reads only: the syncer's next pwrite in C fails with EBADF
        ro = os.open(seg.path, os.O_RDONLY)
        os.dup2(ro, seg.fileno())
        os.close(ro)
        res = await asyncio.wait_for(
            asyncio.gather(*(adb.put(b"w%02d" % t, b"v") for t in range(20)), return_exceptions=True), 60)
        errors = [r for r in res if isinstance(r, BaseException)]
        assert len(errors) == 20 and all(isinstance(e, pagestore.DiskIOError) for e in errors), res
        assert all(str(e).startswith("put: ") and os.path.basename(seg.path) in str(e) for e in errors), errors
        assert adb.database.state is pagestore.State.FAILED
        assert await adb.get(b"before") == b"1"
        with pytest.raises(pagestore.DiskIOError, match="refused"):
            await adb.put(b"later", b"1")
        await adb.close()

    run(main())


@pytest.mark.parametrize("mode", ["log_only", "background"])
def test_awaits_completed_at_once_still_let_other_tasks_run(tmp_path, mode):
    # log_only on posix: a put is in the page cache when the call returns and
    # its await completes at once, as does a get; a task awaiting only those
    # must still let the loop run others (and Ctrl-C) now and then
    async def main():
        async with pagestore.aio.open(tmp_path, wal_mode=mode, **OPTS) as adb:
            ticks = 0
            done = False

            async def ticker():
                nonlocal ticks
                while not done:
                    ticks += 1
                    await asyncio.sleep(0)

            t = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            first = ticks
            for i in range(6400):
                await adb.put(b"k%05d" % i, b"v")
            after_puts = ticks
            for i in range(6400):
                await adb.get(b"k%05d" % i)
            after_gets = ticks
            done = True
            await t
            return after_puts - first, after_gets - after_puts

    during_puts, during_gets = run(main())
    # (one yield every few hundred: 25 each here; none before)
    assert during_puts >= 20 and during_gets >= 20, (during_puts, during_gets)


def test_an_awaited_transaction_commit_waits_for_its_fdatasync_off_the_loop(tmp_path):
    # fsync mode: the commit is applied on the loop and made durable by the
    # syncer, as a put is; the loop's thread never waits in the WAL's commit
    import threading

    async def main():
        adb = await pagestore.aio.open(tmp_path / "s", wal_mode="fsync", **OPTS)
        wal = engine_of(adb.database).wal
        commit, waited_in = wal.commit, []

        def recording_commit(lsn):
            waited_in.append(threading.get_ident())
            return commit(lsn)
        wal.commit = recording_commit
        try:
            for i in range(20):
                async with adb.transaction() as tx:
                    tx.put(b"k%02d" % i, b"v")
                st = adb.database.stats()              # durable when the await completed
                assert st["wal_durable_lsn"] >= st["wal_end_lsn"]
        finally:
            del wal.commit
        await adb.close()
        return waited_in, threading.get_ident()
    waited_in, loop_thread = run(main())
    assert loop_thread not in waited_in
    with pagestore.open(tmp_path / "s", create=False, **OPTS) as db:
        assert len(db) == 20
