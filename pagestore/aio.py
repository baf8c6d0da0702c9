"""`pagestore.aio`: the store from asyncio, with durable writes at the device's pace.

    import pagestore.aio
    async with pagestore.aio.open("data/", wal_mode="fsync") as db:
        await db.put(b"k", b"v")            # returns once its group is on disk
        v = await db.get(b"k")
        async with db.transaction() as tx:
            tx.put(b"a", b"1")
        async for k, v in db.scan(prefix=b"a"):
            ...

A write runs on the event loop's thread (one C call, microseconds) and is
in the log when the call returns; a durable write (fsync mode, or
`sync=True`) then waits for its group: one syncer thread per store leads a
group-commit round over everything written so far, and tells the loop once
per round, which completes every write the round covered. No thread per
waiting write; hundreds of writes in flight share one fdatasync. The
syncer's rounds go through the WAL's group commit, so threads writing with
`pagestore.open` semantics elsewhere share them too.

Where the WAL does its rounds in C (fsync mode on posix files, no crash
point armed), the syncer runs in C too (csrc/gcsyncer.c, `ps_gc_syncer`): it
never takes the GIL, so a busy loop cannot hold it up; it adds 1 to an
eventfd the loop watches (`add_reader`) after each round. Elsewhere it is
a Python thread telling the loop with `call_soon_threadsafe`.

Cancelling a write's await does not undo it: the write was applied when the
call was made and becomes durable with its group; the store stays as
consistent as after any completed write. `close()` waits for the writes in
flight to be durable; one whose group fails (or arrives after close began)
raises `ClosedError` or the I/O error, never hangs.

A write that must wait for room (page memory full of dirty pages, or the
throttle slowing writers down during a checkpoint) waits on the loop's
thread, as a write to a saturated store waits in any thread.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading

from pagestore.wal.gate import RoundFailed

from . import database as _database
from .errors import ClosedError

__all__ = ["open", "AsyncDatabase", "AsyncTransaction"]

_SCAN_YIELD = 256      # items an async scan hands out between yields to the loop


def open(path, **options) -> "_Opening":  # noqa: A001 - the public name
    """Open (or create) the store at `path` for asyncio: `async with open(...) as db`
    or `db = await open(...)`. Options as `pagestore.open`; opening and recovery
    run in a worker thread, off the loop."""
    return _Opening(_database.store_path(path), options)


class _Opening:
    """The awaitable / async context manager `open` returns."""

    def __init__(self, path: str, options: dict):
        self._path, self._options, self._db = path, options, None

    async def _open(self) -> "AsyncDatabase":
        loop = asyncio.get_running_loop()
        db = await loop.run_in_executor(None, lambda: _database.open(self._path, **self._options))
        return AsyncDatabase(db, loop)

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self) -> "AsyncDatabase":
        self._db = await self._open()
        return self._db

    async def __aexit__(self, *exc):
        await self._db.close()
        return False


class AsyncDatabase:
    """An open store used from one asyncio event loop (see the module docstring)."""

    def __init__(self, db, loop: asyncio.AbstractEventLoop):
        self._db, self._loop = db, loop
        engine = _database.engine_of(db)
        self._wal, self._fs = engine.wal, db.fs
        self._fsync = engine.wal.mode == "fsync"
        self._pending: collections.deque = collections.deque()   # (lsn, future), lsn ascending
        self._closing = False
        self._error: BaseException | None = None
        self._lsn = 0
        self._rounds = self._completed = 0   # syncer rounds told to the loop; writes they completed
        # The facade's writes call its commit hook with their end LSN; on this
        # loop nothing may block in it, so it only notes the LSN and the
        # syncer makes it durable.
        _database.route_commits(db, self._note)
        self._db_put = db.put
        # a Future made by its type, not by a call of the loop's Python method
        self._future = asyncio.Future if type(loop.create_future()) is asyncio.Future \
            else (lambda loop: loop.create_future())
        self._wake = threading.Event()
        self._gate = engine.wal.syncer_gate()   # None: the syncer runs in Python
        self._efd = -1
        target = self._sync_loop
        if self._gate is not None and loop_can_watch(loop):
            self._efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._gate.syncer_stop(False)
            self._idle = self._gate.syncer_idle_cell()
            loop.add_reader(self._efd, self._on_durable)
            target = self._c_sync_loop
        self._syncer = threading.Thread(target=target, name="pagestore-aio-syncer", daemon=True)
        self._syncer.start()

    def _note(self, lsn: int) -> None:
        self._lsn = lsn

    # -- durability --------------------------------------------------------------
    def _after_write(self, sync, result=None, logged: bool = True) -> asyncio.Future:
        fut = self._future(loop=self._loop)
        if (self._fsync or sync) and (logged or self._lsn > self._wal.durable_lsn):
            # (nothing logged and all before it durable: no round would come
            # to complete it -- a delete of a missing key, a sync() with
            # nothing new; a write that logged is completed by the round that
            # covers it, which wakes the loop after it)
            self._pending.append((self._lsn, fut, result))
            if self._efd >= 0:
                if self._idle[0]:          # read after the write (see ps_gc_kick)
                    self._gate.kick()
            elif not self._wake.is_set():
                self._wake.set()
        else:
            fut.set_result(result)
        return fut

    def _c_sync_loop(self) -> None:
        """The syncer in C: rounds and eventfd writes without the GIL; back in
        Python only for a round C cannot do alone, a failure, or the stop."""
        gate, wal, efd = self._gate, self._wal, self._efd
        ticket = gate.ticket()
        while True:
            try:
                what = gate.syncer(efd, 0.2, ticket)
                if what == "stopped":
                    return
                if what == "lead":
                    wal.lead_round(ticket)
                    os.eventfd_write(efd, 1)
            except RoundFailed as failed:
                self._loop.call_soon_threadsafe(self._fail, wal.round_failed(failed))
                return
            except BaseException as exc:    # noqa: BLE001 - handed to the writes waiting
                self._loop.call_soon_threadsafe(self._fail, exc)
                return

    def _on_durable(self) -> None:
        """The loop's reader of the eventfd: one call per wake-up, whatever
        number of rounds it counts."""
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        # (in fsync mode the core reads the acknowledged end from the gate's
        # durable cell itself: nothing to tell it here)
        self._complete(self._gate.durable)
        # runs after the tasks the completions woke (queued behind them): their
        # next writes are made, so the syncer's next round may start
        self._loop.call_soon(self._gate.go)

    def _sync_loop(self) -> None:
        """The syncer: one group-commit round per wake-up, one loop wake-up per round."""
        wal, wake, call = self._wal, self._wake, self._loop.call_soon_threadsafe
        while True:
            wake.wait()
            wake.clear()
            # Read before the round: every write came before close() began,
            # so a round started after it covers them all.
            stop = self._closing
            try:
                durable = wal.flush()
                self._fs.crash_point("aio.group_durable")
            except BaseException as exc:    # noqa: BLE001 - handed to the writes waiting
                call(self._fail, exc)
                return
            call(self._complete, durable)
            if stop:
                return

    def _complete(self, durable: int) -> None:
        pending = self._pending
        n = 0
        while pending and pending[0][0] <= durable:
            _lsn, fut, result = pending.popleft()
            n += 1
            if not fut.done():              # a cancelled await: the write stands regardless
                fut.set_result(result)
        self._rounds += 1
        self._completed += n

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        while self._pending:
            _lsn, fut, _r = self._pending.popleft()
            if not fut.done():
                fut.set_exception(exc)

    def _check(self) -> None:
        if self._closing:
            raise ClosedError(f"store {self._db.path} is closing")
        if self._error is not None:
            raise ClosedError(f"store {self._db.path}: its WAL sync failed: {self._error}")

    def _write(self, call, *args, sync):
        try:
            self._check()
            before = self._lsn
            result = call(*args)
        except BaseException as exc:        # noqa: BLE001 - raised from the await
            return self._failed(exc)
        return self._after_write(sync, result, self._lsn != before)

    def _failed(self, exc: BaseException) -> asyncio.Future:
        fut = self._loop.create_future()
        fut.set_exception(exc)
        return fut

    # -- operations --------------------------------------------------------------
    def put(self, key, value, *, sync: bool = False) -> asyncio.Future:
        """Await to store `value` under `key`; durable when it completes in fsync
        mode or with `sync=True`."""
        # `_write` inlined: the loop's hot path pays each Python call once per put
        if self._closing or self._error is not None:
            return self._write(self._db_put, key, value, sync=sync)     # raises ClosedError
        try:
            self._db_put(key, value)
        except BaseException as exc:        # noqa: BLE001 - raised from the await
            return self._failed(exc)
        return self._after_write(sync)

    def delete(self, key, *, sync: bool = False) -> asyncio.Future:
        """Await to remove `key`; True if it was there (durable as for `put`)."""
        return self._write(self._db.delete, key, sync=sync)

    def put_many(self, items, *, sync: bool = False) -> asyncio.Future:
        """Await to put every (key, value) pair as one atomic batch."""
        return self._write(self._db.put_many, items, sync=sync)

    async def get(self, key, default=None):
        """The value under `key`, or `default`."""
        self._check()
        return self._db.get(key, default)

    async def get_many(self, keys, default=None) -> list:
        """The values under `keys`, in order (`default` where absent)."""
        self._check()
        return self._db.get_many(keys, default)

    async def sync(self) -> None:
        """Await until every write made so far is durable."""
        self._check()
        await self._after_write(True, logged=False)

    async def scan(self, start=None, stop=None, *, prefix=None, reverse=False):
        """(key, value) pairs in key order, as `Database.scan`, yielding to the loop
        every few hundred items."""
        self._check()
        n = 0
        for item in self._db.scan(start, stop, prefix=prefix, reverse=reverse):
            yield item
            n += 1
            if n == _SCAN_YIELD:
                n = 0
                await asyncio.sleep(0)

    def transaction(self) -> "AsyncTransaction":
        """`async with db.transaction() as tx:` -- writes buffered, applied atomically
        when the block ends, awaited until durable as a put is."""
        self._check()
        return AsyncTransaction(self)

    def stats(self) -> dict:
        """The store's counters (`Database.stats`), plus the syncer's wake-ups of
        the loop (`aio_rounds`), the durable writes each completed on average,
        and where the syncer runs (`aio_syncer`: "c" or "python")."""
        st = self._db.stats()
        st["aio_rounds"] = self._rounds
        st["aio_group_size_mean"] = self._completed / self._rounds if self._rounds else 0.0
        st["aio_syncer"] = "c" if self._efd >= 0 else "python"
        return st

    @property
    def database(self):
        """The underlying `Database` (its blocking calls must not run on the loop)."""
        return self._db

    # -- closing -----------------------------------------------------------------
    async def close(self) -> None:
        """Let the writes in flight become durable, then checkpoint and close
        (in a worker thread); later calls raise ClosedError."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        if self._efd >= 0:
            self._gate.syncer_stop(True)
        loop = self._loop
        await loop.run_in_executor(None, self._syncer.join)
        await asyncio.sleep(0)              # the syncer's last completion, queued before it ended
        if self._efd >= 0:
            loop.remove_reader(self._efd)
            if self._error is None:
                self._complete(self._gate.durable)
            os.close(self._efd)
            self._efd = -1
        if self._pending:
            self._fail(ClosedError(f"store {self._db.path} closed before the write was durable"))
        await loop.run_in_executor(None, self._db.close)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False


def loop_can_watch(loop) -> bool:
    """Whether `loop` can watch a file descriptor (`add_reader`: selector
    loops and uvloop; not the Windows proactor) and eventfd exists."""
    if not hasattr(os, "eventfd"):
        return False
    try:
        loop.add_reader
    except AttributeError:
        return False
    return not type(loop).__name__.startswith("Proactor")


class AsyncTransaction:
    """A transaction of `AsyncDatabase`: buffered writes, one atomic commit."""

    def __init__(self, adb: AsyncDatabase):
        self._adb = adb
        self._tx = adb._db.transaction()

    def put(self, key, value) -> None:
        """Buffer a put (applied at commit)."""
        self._tx.put(key, value)

    def delete(self, key) -> bool:
        """Buffer a delete; True if the key is there now (as the transaction sees it)."""
        return self._tx.delete(key)

    def get(self, key, default=None):
        """The value as the transaction sees it (its own writes first)."""
        return self._tx.get(key, default)

    async def commit(self, *, sync: bool = False) -> None:
        """Apply the writes atomically; completes when durable (fsync mode or sync)."""
        await self._adb._write(self._tx.commit, sync=sync)

    def rollback(self) -> None:
        """Drop the buffered writes."""
        self._tx.rollback()

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        if exc_type is None:
            await self.commit()
        else:
            self.rollback()
        return False
