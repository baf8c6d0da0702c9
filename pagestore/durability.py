"""`DurableWrites`: the part of `Database` that makes writes durable: `sync()`,
and the commit of a durable put or delete.

A durable put or delete (fsync mode, or `sync=True`) is one call into C
where the log allows it (wal/commit.py `WaitedWrites`): the core's write,
then its group commit's wait with the GIL released, returning once the
record is durable. A thread lets the GIL go once per durable write instead
of twice, and with many threads each extra release is a trip through the
queue for the GIL. What the wait did not settle in C (a round this thread
must lead in Python, a failure) goes on in the WAL (`WaitedWrites.finish`).
Elsewhere (`sync=True` on a log that acknowledges in Python, or while a
crash point is armed) `Database.put` takes its two steps, the second of
which is `_sync_to`.

The rules are those of every write (pagestore/database.py): a write that
raised a store error leaves no trace (the core's undo log and
`ps_wal_fence`; a KeyboardInterrupt in the wait is not one: the write stays
applied and logged, docs/wal.md), a failure
of the log moves the store to FAILED naming the file, a write refused for
room (`Retry`) is retried after the checkpointer made some, then committed
in two steps.
"""

from __future__ import annotations

from . import _native

__all__ = ["DurableWrites"]


class DurableWrites:
    """Mixed into `Database`: its durable writes' commit (see the module docstring)."""

    __slots__ = ()

    def sync(self) -> None:
        """Make every write that has returned durable (one group-commit round)."""
        self._check_writable("sync")
        try:
            self._on_engine(lambda engine: engine.wal.flush())   # again after a compact()'s swap
        except Exception as e:  # noqa: BLE001 - typed, and the log's failure noted
            self._raise_failed(e, "sync")

    def _waited_write(self, write, args: tuple, flags: int, sync: bool, operation: str) -> bool:
        """`write(*args, flags, ticket)` (`WaitedWrites.put` / `.delete`): the write
        and its wait in one C call. Returns False for a delete of an absent
        key, else True once the write is durable; raises as `put` does."""
        w = self._waited
        t = w.ticket()
        lsn = -1
        try:
            try:
                try:
                    rc = write(*args, flags, t)
                    if rc < 0:
                        return False
                    if rc:                # not settled in C: a round to lead, a failure
                        lsn = t.lsn
                        w.finish(rc, lsn, t, sync)
                finally:
                    # an interrupt (Ctrl-C) between C granting this thread a
                    # round and `finish` taking it on: report the round, or
                    # every other commit waits for it forever
                    if t.granted:
                        w.release(t)
            except _native.Retry as r:    # nothing written: make room, then the two steps
                core_write = self._core_put if operation == "put" else self._core_delete
                lsn = self._retry(r, core_write, *args)
                if lsn < 0:
                    return False
                if sync:
                    self._sync_to(lsn)
                else:
                    self._wal_commit(lsn)
        except Exception as e:  # noqa: BLE001 - typed, and the log's failure noted
            if self._swapped(e):
                return getattr(self, operation)(*args, sync=sync) is not False
            self._raise_failed(e, operation, lsn)
        if self._signals.throttle_hint:
            self._throttle.check()
        return True

    def _sync_to(self, lsn: int) -> None:
        """The second step of a `sync=True` write taken in two: the crash point
        between the steps, then a group commit up to `lsn` (on the new WAL when
        compact() swapped the engine meanwhile: the old one's close made the
        write durable, and the new log's durable end is past it)."""
        self._on_engine(self._flush_to, lsn)

    def _flush_to(self, engine, lsn: int) -> None:
        wal = engine.wal
        if lsn > wal.durable_lsn:
            self.fs.crash_point("wal.sync_write_logged")
            wal.flush(lsn)
