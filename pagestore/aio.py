"""`pagestore.aio`: the store from asyncio, with durable writes at the device's pace.

    import pagestore.aio
    async with pagestore.aio.open("data/", wal_mode="fsync") as db:
        await db.put(b"k", b"v")            # returns once its group is on disk
        v = await db.get(b"k")
        async with db.transaction() as tx:
            tx.put(b"a", b"1")
        async for k, v in db.scan(prefix=b"a"):
            ...

A write runs on the event loop's thread (one C call: microseconds for a
put, a batch's time for a batch) and is in the log when the call returns;
a durable write (fsync mode, or `sync=True`) then waits for its group: one
syncer thread per store leads a group-commit round over everything written
so far, and tells the loop once per round, which completes every write the
round covered. No thread per waiting write; hundreds of writes in flight
share one fdatasync. In log_only/background mode a write's await completes
once its record is in the OS: at once on a log mapped from the page cache,
else after the syncer's next publish round. Only this surface's writes on
the loop wait for the syncer: a write through `database` from a thread
commits as on a store opened with `pagestore.open`, sharing the same
rounds (`_note`).

Where the WAL does its rounds in C (fsync mode on posix files, no crash
point armed), the syncer runs in C too (csrc/gcsyncer.c, `ps_gc_syncer`): it
never takes the GIL, so a busy loop cannot hold it up; it adds 1 to an
eventfd the loop watches (`add_reader`) after each round. Elsewhere it is
a Python thread telling the loop with `call_soon_threadsafe`.

Cancelling a write's await does not undo it: the write was applied when the
call was made and becomes durable with its group; the store stays as
consistent as after any completed write. `close()` waits for the writes in
flight to be durable; one whose group fails (or arrives after close began)
raises `ClosedError` or the I/O error, typed, never hangs; a failed round
leaves the store FAILED as a failed write does in any thread.

A write that must wait for room (page memory full of dirty pages, or the
throttle slowing writers down during a checkpoint) waits on the loop's
thread, as a write to a saturated store waits in any thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
from asyncio import _get_running_loop as _running_loop   # None outside a loop

from . import compaction
from . import database as _database
from . import faults
from .errors import ClosedError, Error, ReadOnlyError
from .lifecycle import Lifecycle
from .syncer import Syncer, loop_can_watch

__all__ = ["open", "AsyncDatabase", "AsyncTransaction", "WrongLoopError"]

_SCAN_YIELD = 256      # items an async scan hands out between yields to the loop


class WrongLoopError(Error, RuntimeError):
    """An `AsyncDatabase` called from an event loop other than the one that
    opened it, or from no loop: nothing was done. Use it from its own loop
    (`close()` works from any), and `database` from threads."""


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
        opening = loop.run_in_executor(None, lambda: _database.open(self._path, **self._options))
        try:
            db = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # the worker thread goes on opening: whatever it opens is closed
            opening.add_done_callback(_close_opened)
            raise
        try:
            return AsyncDatabase(db, loop)
        except BaseException:
            try:                     # (a cancellation here leaves the close running in its thread)
                await loop.run_in_executor(None, db.close)
            except Exception:  # noqa: BLE001 - the construction's error is the one to raise
                pass
            raise

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self) -> "AsyncDatabase":
        self._db = await self._open()
        return self._db

    async def __aexit__(self, *exc):
        await self._db.close()
        return False


class AsyncDatabase(Syncer, Lifecycle):
    """An open store used from one asyncio event loop (see the module docstring)."""

    def __init__(self, db, loop: asyncio.AbstractEventLoop):
        self._db, self._loop = db, loop
        engine = _database.engine_of(db)
        self._wal, self._fs = engine.wal, db.fs
        self._fsync = engine.wal.mode == "fsync"
        # (lsn, future, result, operation, needs durable), lsn ascending
        self._pending: collections.deque = collections.deque()
        self._closing = False
        self._error: BaseException | None = None
        self._lsn = 0
        self._rounds = self._completed = 0   # syncer rounds told to the loop; writes they completed
        # log_only/background on a log that hands its records to the OS at
        # commit (wal_direct, a Python sealer, the simulator): a write
        # survives a process kill only once published, which the syncer does
        # for the loop's writes (a device write with O_DIRECT: not on the loop)
        self._publish = not self._fsync and not getattr(engine.wal, "shared_mapping", True)
        self._waits = self._fsync or self._publish    # a plain write's await waits for the syncer
        self._published = 0       # the loop's writes below this LSN are published (the syncer's word)
        self._durable_asks = 0    # durable waits queued so far: in publish mode, the syncer's cue
        self._quick = 0           # operations completed at once since the last yield to the loop
        self._tid = threading.get_ident()    # the loop's thread
        self._routing = False     # set while an operation of this surface calls the Database
        # The facade's writes call its commit hook with their end LSN: the
        # loop's own writes only note it there (nothing may block on the
        # loop; the syncer completes them), every other write commits as usual.
        _database.route_commits(db, self._note)
        self._db_put = db.put
        # a Future made by its type, not by a call of the loop's Python method
        self._future = asyncio.Future if type(loop.create_future()) is asyncio.Future \
            else (lambda loop: loop.create_future())
        self._wake = threading.Event()
        self._closer: concurrent.futures.Future | None = None     # set by the first close()
        self._syncer_lock = threading.Lock()     # close() and compact()'s swap: one moves the syncer
        self._loop_running = loop.is_running
        self._syncer = self._gate = None
        self._efd = -1
        if db.state is _database.State.READ_ONLY:
            return                          # nothing to make durable: no syncer
        self._gate = engine.wal.syncer_gate()   # None: the syncer runs in Python
        target = self._sync_loop
        if self._gate is not None and loop_can_watch(loop):
            self._efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._gate.syncer_stop(False)
            self._idle = self._gate.syncer_idle_cell()
            loop.add_reader(self._efd, self._on_durable)
            target = self._c_sync_loop
        self._syncer = threading.Thread(target=target, name="pagestore-aio-syncer", daemon=True)
        self._syncer.start()
        compaction.on_swap(db, self._on_swap)     # the syncer follows compact()'s swap

    def _check(self) -> None:
        # reads go on after a failed round, as in the FAILED state
        if self._closing:
            raise ClosedError(f"store {self._db.path} is closing")
        if _get_ident() != self._tid or not self._loop_running():
            self._check_loop()

    def _check_write(self, operation: str) -> None:
        self._check()
        if self._syncer is None:            # read_only=True (its Database refuses the others too)
            raise ReadOnlyError(f"{self._db.path} was opened read_only: {operation} refused",
                                self._db.path, operation)
        if self._error is not None:
            failure = self._db.failure
            if failure is not None:
                raise faults.refusal(failure, operation)
            raise ClosedError(f"{operation}: store {self._db.path} makes no write durable any more: "
                              f"{self._error}")

    def _write(self, call, *args, sync, operation):
        try:
            self._check_write(operation)
            before = self._lsn
            self._routing = True
            try:
                result = call(*args)
            finally:
                self._routing = False
        except BaseException as exc:        # noqa: BLE001 - raised from the await
            return self._failed(exc)
        return self._after_write(sync, result, self._lsn != before, operation)

    def _failed(self, exc: BaseException) -> asyncio.Future:
        loop = _running_loop()
        if loop is None:                    # called outside any loop: nothing to await
            raise exc
        fut = loop.create_future()          # (the store's loop, unless the error says otherwise)
        fut.set_exception(exc)
        return fut

    def _check_loop(self) -> None:
        """Raise WrongLoopError unless the call runs on the store's loop (the
        exact test, after the cheap one -- its thread, running -- failed)."""
        running = _running_loop()
        if running is self._loop:           # the same loop, now run by another thread
            self._tid = _get_ident()
            return
        where = "outside any event loop" if running is None else "on another event loop"
        if self._loop.is_closed():
            what = "that loop is closed: close() the store (from any loop) and open it again here"
        else:
            what = "use it there, or its `database` from other threads"
        raise WrongLoopError(f"store {self._db.path} belongs to the event loop it was opened on, "
                             f"and this call was made {where}: nothing was done; {what}")

    # -- operations --------------------------------------------------------------
    def put(self, key, value, *, sync: bool = False) -> asyncio.Future:
        """Await to store `value` under `key`; durable when it completes in fsync
        mode or with `sync=True`."""
        # `_write` inlined: the loop's hot path pays each Python call once per put
        if self._closing or self._error is not None or _get_ident() != self._tid \
                or not self._loop_running():
            return self._write(self._db_put, key, value, sync=sync, operation="put")   # raises
        self._routing = True
        try:
            self._db_put(key, value)
        except BaseException as exc:        # noqa: BLE001 - raised from the await
            self._routing = False
            return self._failed(exc)
        self._routing = False
        return self._after_write(sync)

    def delete(self, key, *, sync: bool = False) -> asyncio.Future:
        """Await to remove `key`; True if it was there (durable as for `put`)."""
        return self._write(self._db.delete, key, sync=sync, operation="delete")

    def put_many(self, items, *, sync: bool = False) -> asyncio.Future:
        """Await to put every (key, value) pair as one atomic batch."""
        return self._write(self._db.put_many, items, sync=sync, operation="put_many")

    async def get(self, key, default=None):
        """The value under `key`, or `default`."""
        self._check()
        v = self._db.get(key, default)
        if self._yield_due():
            await asyncio.sleep(0)
        return v

    async def get_many(self, keys, default=None) -> list:
        """The values under `keys`, in order (`default` where absent)."""
        self._check()
        vs = self._db.get_many(keys, default)
        if self._yield_due():
            await asyncio.sleep(0)
        return vs

    async def sync(self) -> None:
        """Await until every write made so far is durable (also those that
        threads made through `database`)."""
        self._check_write("sync")
        # the log's end: the writes of other threads too, which are not noted here
        end = _database.engine_of(self._db).signals.wal_end_lsn
        if end > self._lsn:
            self._lsn = end
        await self._after_write(True, logged=False, operation="sync")

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
        and where the syncer runs (`aio_syncer`: "c", "python", or None on a
        read-only store, which has none)."""
        st = self._db.stats()
        st["aio_rounds"] = self._rounds
        st["aio_group_size_mean"] = self._completed / self._rounds if self._rounds else 0.0
        st["aio_syncer"] = "c" if self._efd >= 0 else "python" if self._syncer is not None else None
        return st

    @property
    def database(self):
        """The underlying `Database` (its blocking calls must not run on the loop)."""
        return self._db

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False

_get_ident = threading.get_ident


def _close_opened(opening: asyncio.Future) -> None:
    """The done-callback of an open whose `aio.open()` was cancelled: close what it opened."""
    if not opening.cancelled() and opening.exception() is None:
        threading.Thread(target=opening.result().close, name="pagestore-close").start()


class AsyncTransaction:
    """A transaction of `AsyncDatabase`: buffered writes, one atomic commit."""

    def __init__(self, adb: AsyncDatabase):
        self._adb = adb
        self._tx = adb._db.transaction()

    def put(self, key, value) -> None:
        """Buffer a put (applied at commit); a key or value too large for the
        store raises here, as `Transaction.put` says."""
        self._tx.put(key, value)

    def delete(self, key) -> bool:
        """Buffer a delete; True if the key is there now (as the transaction sees it).
        A key too long for any store raises here, as `Transaction.delete` says."""
        return self._tx.delete(key)

    def get(self, key, default=None):
        """The value as the transaction sees it (its own writes first)."""
        return self._tx.get(key, default)

    async def commit(self, *, sync: bool = False) -> None:
        """Apply the writes atomically; completes when durable (fsync mode or sync)."""
        await self._adb._write(self._tx.commit, sync=sync, operation="commit")

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
