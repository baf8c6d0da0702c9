"""`Syncer`: the part of `pagestore.aio.AsyncDatabase` that completes the
loop's writes (docs/aio.md, "How a durable write waits").

A write made on the loop notes its end LSN (`_note`, the store's commit
hook: every other thread's write takes the WAL's own commit) and gets a
future (`_after_write`): done at once when its record is in the OS already
(log_only/background on a log mapped from the page cache; every
`QUICK_YIELD`-th such future is resolved one loop turn later, so a task
awaiting only those lets the loop run other work); else queued by LSN for
the syncer thread. The syncer runs one round per wake-up -- a group commit
(fsync mode, a `sync=True` write or `sync()` waiting) or, where the log
publishes at commit (`wal_direct`, a Python sealer, the simulator), a
publish -- and tells the loop once per round, which completes what the
round covered (`_complete`). In C (`_c_sync_loop`, csrc/gcsyncer.c) where
the WAL runs its rounds in C, else in Python (`_sync_loop`). A failed round
fails the store as a failed write in any thread does (`_fail`).
"""

from __future__ import annotations

import asyncio
import os
import threading

from pagestore.wal.gate import RoundFailed

from . import database as _database
from . import faults

__all__ = ["Syncer", "QUICK_YIELD", "loop_can_watch"]

# Operations completed at once (a get, a put in log_only mode) between two
# that yield to the loop: a task awaiting only such calls would otherwise
# never let another task, a callback or Ctrl-C run.
QUICK_YIELD = 256

_get_ident = threading.get_ident


class Syncer:
    """Mixed into `AsyncDatabase`: its writes' completion (see the module docstring)."""

    def _note(self, lsn: int) -> None:
        """The Database's commit hook. A write this surface makes on the loop
        only notes its end LSN here (its await waits for the syncer); any
        other -- a thread's, a blocking call of `database` on the loop --
        takes the WAL's own commit and returns as on a store opened with
        `pagestore.open` (durable in fsync mode, published in log_only)."""
        if self._routing and _get_ident() == self._tid:
            self._lsn = lsn
        else:
            _database.engine_of(self._db).wal.commit(lsn)

    def _yield_due(self) -> bool:
        """Count an operation completed at once; True for every `QUICK_YIELD`-th,
        which then lets the loop run once before its caller goes on."""
        self._quick += 1
        if self._quick < QUICK_YIELD:
            return False
        self._quick = 0
        return True

    def _after_write(self, sync, result=None, logged: bool = True, operation: str = "put") -> asyncio.Future:
        fut = self._future(loop=self._loop)
        if not (sync or self._waits):      # log_only/background, the log in the page cache: done
            if self._yield_due():          # pending for one loop turn: other tasks run
                self._loop.call_soon(_resolve, fut, result)
            else:
                fut.set_result(result)
            return fut
        # (nothing logged and all before it durable, or published: no round
        # would come to complete it -- a delete of a missing key, a sync()
        # with nothing new; a write that logged is completed by the round that
        # covers it, which wakes the loop after it)
        if self._fsync or sync:
            if not logged and self._lsn <= self._wal.durable_lsn:
                fut.set_result(result)
                return fut
            self._pending.append((self._lsn, fut, result, operation, True))
            if self._efd >= 0:
                if self._idle[0]:          # read after the write (see ps_gc_kick)
                    self._gate.kick()
                return fut
            self._durable_asks += 1        # before the wake: the syncer reads it after its clear
        else:
            if not logged and self._lsn <= self._published:
                fut.set_result(result)
                return fut
            self._pending.append((self._lsn, fut, result, operation, False))
        if not self._wake.is_set():
            self._wake.set()
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
                self._tell(self._fail, wal.round_failed(failed))
                return
            except BaseException as exc:    # noqa: BLE001 - handed to the writes waiting
                self._tell(self._fail, exc)
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
        """The syncer: one round per wake-up, one loop wake-up per round. A
        group-commit round (fsync mode, or a durable write or `sync()`
        waiting), else, in publish mode, a publish of the log to the OS."""
        wal, wake, seen = self._wal, self._wake, 0
        while True:
            wake.wait()
            wake.clear()
            if self._wal is not wal:
                return                      # compact() moved the store to a new WAL: its syncer takes over
            # Read before the round: every write came before close() began,
            # so a round started after it covers them all.
            stop = self._closing
            asks, end = self._durable_asks, self._lsn
            try:
                if self._fsync or asks != seen:
                    seen = asks
                    durable = published = wal.flush()
                    self._fs.crash_point("aio.group_durable")
                else:
                    wal.commit(end)         # the mode's commit: publishes (and acknowledges) to the end
                    durable, published = wal.durable_lsn, end
            except BaseException as exc:    # noqa: BLE001 - handed to the writes waiting
                self._tell(self._fail, exc)
                return
            if not self._tell(self._complete, durable, published) or stop:
                return

    def _tell(self, fn, *args) -> bool:
        """Have the loop call `fn(*args)`; False once the loop is closed (nobody
        is left to tell: the syncer ends quietly)."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            return False
        return True

    def _complete(self, durable: int, published: int = 0) -> None:
        """Complete the writes a round covered: durable ones up to `durable`,
        the others (publish mode) up to `published`."""
        published = max(published, durable)
        if published > self._published:
            self._published = published
        pending = self._pending
        n = 0
        while pending:
            lsn, fut, result, _op, needs_durable = pending[0]
            if lsn > (durable if needs_durable else published):
                break
            pending.popleft()
            n += 1
            if not fut.done():              # a cancelled await: the write stands regardless
                fut.set_result(result)
        self._rounds += 1
        self._completed += n

    def _fail(self, exc: BaseException) -> None:
        """A round failed: the store fails as after a failed write in any
        thread (docs/errors.md: FAILED, writes refused, reads go on), and
        each waiting write raises the typed error of its own operation."""
        self._error = exc
        wal = self._wal
        if isinstance(exc, Exception):
            _database.commit_failed(self._db, exc)      # FAILED when it came from the log
        while self._pending:
            lsn, fut, _r, operation, _d = self._pending.popleft()
            if not fut.done():
                err = faults.translate(exc, operation, wal, lsn)
                if err is not exc:
                    err.__cause__ = exc
                fut.set_exception(err)


def _resolve(fut: asyncio.Future, result) -> None:
    if not fut.done():                      # cancelled meanwhile
        fut.set_result(result)


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

