"""pagestore.aio: durable awaits at the group's pace, batched completions,
cancellation and close with writes in flight, and any asyncio loop."""

import asyncio
import random

import pytest

import pagestore
import pagestore.aio
from pagestore.diskio import SimFS, SimulatedCrash

OPTS = dict(page_size=4096, memory_size=4 << 20, wal_segment_size=1 << 20)


def run(coro, loop_factory=None):
    loop = (loop_factory or asyncio.new_event_loop)()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_the_async_surface_reads_its_writes(tmp_path):
    async def main():
        async with pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS) as db:
            await db.put(b"a", b"1")
            await db.put_many([(b"b", b"2"), (b"c", b"3")])
            assert await db.delete(b"c") is True and await db.delete(b"zz") is False
            async with db.transaction() as tx:
                tx.put(b"d", b"4")
                assert tx.get(b"d") == b"4"
            with pytest.raises(RuntimeError):
                async with db.transaction() as tx:
                    tx.put(b"e", b"5")
                    raise RuntimeError("rolled back")
            got = [kv async for kv in db.scan()]
            assert got == [(b"a", b"1"), (b"b", b"2"), (b"d", b"4")]
            assert await db.get(b"e") is None and await db.get_many([b"a", b"x"]) == [b"1", None]
    run(main())
    with pagestore.open(tmp_path, **OPTS) as db:
        assert dict(db.scan()) == {b"a": b"1", b"b": b"2", b"d": b"4"}


def test_completions_reach_the_loop_once_per_group_not_once_per_put(tmp_path):
    wakeups = []

    class CountingLoop(asyncio.SelectorEventLoop):
        # the Python syncer tells the loop through call_soon_threadsafe, the
        # C one through an eventfd the loop reads: count both
        def call_soon_threadsafe(self, *a, **kw):
            wakeups.append(1)
            return super().call_soon_threadsafe(*a, **kw)

        def add_reader(self, fd, callback, *args):
            def counted(*a):
                wakeups.append(1)
                return callback(*a)
            return super().add_reader(fd, counted, *args)

    async def main():
        async with pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS) as db:
            async def writer(t):
                for i in range(20):
                    await db.put(b"%03d-%03d" % (t, i), b"v" * 50)
            wakeups.clear()
            await asyncio.gather(*(writer(t) for t in range(64)))
            st = db.stats()
            return st["wal_group_commits"], st["aio_syncer"]

    rounds, syncer = run(main(), CountingLoop)
    assert syncer == "c"                                         # posix, fsync, nothing armed
    assert 0 < len(wakeups) and len(wakeups) * 8 < 64 * 20, (len(wakeups), rounds)   # a put per wake-up: 1280


def _crashing_run(seed, point):
    """Tasks write durably until the store crashes; returns (fs, acknowledged)."""
    fs = SimFS()
    acked = {}
    rng = random.Random(seed)

    async def main():
        db = await pagestore.aio.open("/s", fs=fs, wal_mode="fsync", **OPTS)
        fs.arm(point, rng.randrange(1, 25))

        async def writer(t):
            for i in range(40):
                k, v = b"%02d-%03d" % (t, i), b"x" * rng.randrange(1, 600)
                await db.put(k, v)
                acked[k] = v

        res = await asyncio.gather(*(writer(t) for t in range(32)), return_exceptions=True)
        assert any(isinstance(r, SimulatedCrash) for r in res)
        db.database._abandon()
    run(main())
    return fs, acked


@pytest.mark.parametrize("point", ["aio.group_durable", "wal.round_elected", "wal.before_fsync"])
def test_power_loss_keeps_every_acknowledged_async_put(point):
    for seed in range(4):
        fs, acked = _crashing_run(seed, point)
        fs.crash(seed, "random")
        with pagestore.open("/s", fs=fs, **OPTS) as db:
            got = dict(db.scan())
            db.verify()
        lost = [k for k, v in acked.items() if got.get(k) != v]
        assert not lost, f"seed {seed}, {point}: {len(lost)} acknowledged puts lost"


def test_a_cancelled_put_either_committed_or_not_and_the_store_stays_whole(tmp_path):
    async def main():
        async with pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS) as db:
            tasks = [asyncio.ensure_future(db.put(b"k%04d" % i, b"v")) for i in range(400)]
            await asyncio.sleep(0)
            for t in tasks[::3]:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return [t.cancelled() for t in tasks]

    cancelled = run(main())
    assert any(cancelled)
    with pagestore.open(tmp_path, **OPTS) as db:
        db.verify()
        got = dict(db.scan())
    # each write was applied when made: a cancelled await did not undo it
    assert all(got.get(b"k%04d" % i) == b"v" for i in range(400))


def test_close_with_writes_in_flight_finishes_or_fails_them_typed(tmp_path):
    outcomes = []

    async def main():
        db = await pagestore.aio.open(tmp_path, wal_mode="fsync", **OPTS)

        async def writer(t):
            for i in range(1000):
                try:
                    await db.put(b"%02d-%04d" % (t, i), b"v")
                except pagestore.ClosedError:
                    outcomes.append("closed")
                    return
                outcomes.append((t, i))

        tasks = [asyncio.ensure_future(writer(t)) for t in range(16)]
        # close once some put is acknowledged, while the writers still go
        # (16 x 1,000 durable puts take far longer than the first group)
        deadline = asyncio.get_running_loop().time() + 60
        while not any(o != "closed" for o in outcomes):
            assert asyncio.get_running_loop().time() < deadline, "no put acknowledged in 60 s"
            await asyncio.sleep(0.001)
        await db.close()
        done, pending = await asyncio.wait(tasks, timeout=10)
        assert not pending
    run(main())
    assert "closed" in outcomes
    with pagestore.open(tmp_path, **OPTS) as db:
        got = dict(db.scan())
    acked = [b"%02d-%04d" % o for o in outcomes if o != "closed"]
    assert acked and all(k in got for k in acked)


def test_sync_true_is_durable_in_log_only_mode_on_both_surfaces():
    fs = SimFS()

    async def main():
        db = await pagestore.aio.open("/s", fs=fs, wal_mode="log_only", **OPTS)
        for i in range(20):
            await db.put(b"a%02d" % i, b"v", sync=True)
        await db.put(b"loose", b"v")            # not synced: power loss may take it
        db.database._abandon()
    run(main())
    fs.crash(3, "drop")
    with pagestore.open("/s", fs=fs, wal_mode="log_only", **OPTS) as db:
        assert all(db.get(b"a%02d" % i) == b"v" for i in range(20))
        db.put(b"b", b"1", sync=True)
        db.delete(b"a00", sync=True)
        db.put(b"c", b"1")
        db.sync()
        db._abandon()
    fs.crash(4, "drop")
    with pagestore.open("/s", fs=fs, **OPTS) as db:
        assert db.get(b"b") == b"1" and db.get(b"a00") is None and db.get(b"c") == b"1"


def test_power_loss_at_a_sync_write_keeps_the_synced_ones():
    for seed in range(6):
        fs = SimFS()
        db = pagestore.open("/s", fs=fs, wal_mode="background", wal_flush_interval=60, **OPTS)
        fs.arm("wal.sync_write_logged", random.Random(seed).randrange(1, 30))
        acked = []
        try:
            for i in range(40):
                db.put(b"k%02d" % i, b"v" * 100, sync=True)
                acked.append(b"k%02d" % i)
        except SimulatedCrash:
            db._abandon()
        fs.crash(seed, "random")
        with pagestore.open("/s", fs=fs, **OPTS) as db2:
            assert all(db2.get(k) == b"v" * 100 for k in acked), seed


@pytest.mark.parametrize("mode", ["fsync", "log_only"])
def test_an_await_with_nothing_new_to_make_durable_completes(tmp_path, mode):
    # a delete of a missing key logs nothing, nor does a sync() after a durable
    # put: no round comes, so the await must not wait for one (the cap only
    # turns a hang into a failure)
    async def main():
        # no timed checkpoint either: its record would bring a round
        async with pagestore.aio.open(tmp_path, wal_mode=mode, checkpoint_interval=3600, **OPTS) as db:
            await db.put(b"a", b"1", sync=True)
            assert await asyncio.wait_for(db.delete(b"missing", sync=True), 60) is False
            await asyncio.wait_for(db.sync(), 60)
            await asyncio.wait_for(db.sync(), 60)
            async with db.transaction():
                pass
            assert await db.get(b"a") == b"1"
    run(main())
