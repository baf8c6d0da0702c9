"""Transactions: serializable, by validating what they read at commit.

A transaction keeps its writes in Python until it commits, and reads through
a snapshot (pagestore/snapshot.py) taken at its first read, with its own
writes laid over it: its reads are repeatable, and it never sees another
transaction's half. It records each key it read from the snapshot and each
range it scanned (the whole range asked for, even if the caller stopped
early). Commit is one C call: under the tree write lock it checks that no
commit since the snapshot wrote a recorded key or a key inside a recorded
range, then applies the writes as one batch, logged with one txid and a
COMMIT record (a crash keeps all or none of them). If something did change,
the call applies nothing and `ConflictError` is raised: what the transaction
read is then no longer the store's state, and its writes may rest on it.
Passing the check means what it read is still the state at its commit, so
the transaction behaves as if it ran alone at that instant (serializable;
docs/transactions.md).

A transaction that only writes takes no snapshot and cannot conflict; one
that only reads conflicts with nothing either (it is serialized at its
snapshot). A snapshot dropped at the `snapshot_memory` bound makes the
transaction's next read, or its commit, raise ConflictError: retry it. So
does a snapshot taken before compact() replaced the store's files; a
transaction that read nothing commits on the new files (the store's rule
for calls meeting the swap, pagestore/compaction.py).

Threads may share a transaction: a write that returned is in the commit, and
one that comes at or after the commit raises ClosedError (a lock orders them;
without it a put racing commit() could return and be dropped).

A write the store could never hold (a key or value too large) is refused at
`put` or `delete` with the error `Database.put` raises, not at commit: the
transaction goes on without it.
"""

from __future__ import annotations

import struct
import threading

from . import _native
from . import faults
from .errors import ClosedError, ConflictError, SnapshotTooOldError
from .keys import KEY_FLOOR, PAIR_FLOOR, WriteLimits, as_key, as_value, bounds
from .snapshot import Snapshot

__all__ = ["Transaction", "run_transaction"]

_DELETED = object()
_READ_KEY = struct.Struct("<BI")       # kind 1, key length; then the key
_READ_RANGE = struct.Struct("<BBII")   # kind 2, flags (1 lo, 2 hi), lo length, hi length; lo, hi


class Transaction:
    """Buffered writes applied atomically at commit, if what it read still holds.

    Made by `Database.transaction()`; use it as a context manager (commit on a
    clean exit, roll back on an exception). `commit()` raises ConflictError
    when another commit changed what it read: nothing was applied, run it
    again (`run_transaction` does so).
    """

    def __init__(self, on_engine, held, check_open, check_writable=None, route=None):
        # the store's rule for calls that meet compact()'s swap (`on_engine`
        # runs a call on its engine, again on the new one), and the check of a
        # snapshot taken on an engine (`held`: SnapshotTooOldError once replaced)
        self._on_engine, self._held, self._check_store = on_engine, held, check_open
        # the store's commit route, if one is set (`database.route_commits`:
        # pagestore.aio completes its loop's commits from its syncer, so an
        # awaited commit does not wait for its fdatasync on the loop)
        self._route = route
        # the store's check before a write: a failed background checkpoint is
        # reported to the next write, a commit included
        self._check_writable = check_writable
        self._writes: dict[bytes, object] = {}
        self._reads = bytearray()
        self._read_keys: set[bytes] = set()
        self._snap: Snapshot | None = None
        self._snap_engine = None              # the engine the snapshot was taken on
        self._served = False                  # a read has returned from the snapshot
        self._open = True
        self._lock = threading.Lock()
        self._limits: WriteLimits | None = None   # asked of the engine at the first large write

    def _write_limits(self) -> WriteLimits:
        """The largest write the store takes: fixed for its life (compact()
        keeps its page size, WAL segment size and encryption)."""
        if self._limits is None:
            self._limits = self._on_engine(lambda engine: WriteLimits(
                engine.core.max_key, engine.core.page_size, engine.config.wal_segment_size,
                engine.cipher is not None))
        return self._limits

    # -- reads ------------------------------------------------------------------
    def _snapshot(self) -> tuple:
        """(the snapshot, whether this call took it). A read that did not take
        it marks it read from before reading (`_served`), so `_renew` never
        replaces a snapshot another read may have returned a value of."""
        snap = self._snap
        if snap is None:
            with self._lock:
                self._check_open()
                if self._snap is None:
                    self._snap_engine, self._snap = self._on_engine(
                        lambda engine: (engine, Snapshot(engine, self._held(engine))))
                    return self._snap, True
                snap = self._snap
        self._served = True
        return snap, False

    def _read(self, key: bytes, default):
        """key's value (default if absent) as this transaction sees it; a read of
        the snapshot is recorded for the commit's check."""
        v = self._writes.get(key)
        if v is not None:
            return default if v is _DELETED else v
        snap, fresh = self._snapshot()
        if key not in self._read_keys:         # each key checked once at commit
            with self._lock:
                self._read_keys.add(key)
                self._reads += _READ_KEY.pack(1, len(key))
                self._reads += key
        try:
            v = snap.get(key, default)
        except SnapshotTooOldError as e:
            if fresh and self._renew(snap):
                return self._read(key, default)
            raise _ended(self._snap_engine) from e
        self._served = True
        return v

    def _renew(self, snap) -> bool:
        """`snap`, taken by the read that failed, ended before any other read
        used it because compact() replaced its engine: nothing was seen, so a
        snapshot taken now will do (True: read again)."""
        with self._lock:
            if self._snap is not snap:
                return True                   # another read renewed it
            if self._served or not self._snap_engine.core.closed:
                return False
            self._snap = None
        snap.release()
        return True

    def get(self, key, default=None):
        """The value under `key` as this transaction sees it, or `default`."""
        self._check_open()
        return self._read(as_key(key), default)

    def __getitem__(self, key):
        v = self.get(key, _DELETED)
        if v is _DELETED:
            raise KeyError(key)
        return v

    def __contains__(self, key) -> bool:
        return self.get(key, _DELETED) is not _DELETED

    def scan(self, start=None, stop=None, *, prefix=None, reverse=False):
        """The snapshot's pairs with this transaction's writes laid over them, in
        key order within [start, stop), optionally by prefix or reversed."""
        self._check_open()
        lo, hi = bounds(start, stop, prefix)
        snap, _ = self._snapshot()
        self._served = True                   # a scan's snapshot is never renewed
        with self._lock:
            self._reads += _READ_RANGE.pack(2, (lo is not None) | (hi is not None) << 1,
                                            len(lo or b""), len(hi or b""))
            self._reads += (lo or b"") + (hi or b"")
        return self._merged(snap.iterate(lo, hi, reverse), lo, hi, reverse)

    def __iter__(self):
        """The keys of this transaction's view, in order (its writes included)."""
        return (k for k, _ in self.scan())

    def __len__(self) -> int:
        """The number of keys in this transaction's view: a count over scan(),
        which records the whole key space as read."""
        return sum(1 for _ in self.scan())

    def _merged(self, base, lo, hi, reverse):
        writes = self._writes
        mine = sorted(k for k in writes if (lo is None or k >= lo) and (hi is None or k < hi))
        if reverse:
            mine.reverse()
        i = 0
        try:
            for k, v in base:
                while i < len(mine) and ((mine[i] > k) if reverse else (mine[i] < k)):
                    w = writes[mine[i]]
                    if w is not _DELETED:
                        yield mine[i], w
                    i += 1
                if i < len(mine) and mine[i] == k:
                    w = writes[k]
                    i += 1
                    if w is not _DELETED:
                        yield k, w
                    continue
                yield k, v
        except SnapshotTooOldError as e:
            raise _ended(self._snap_engine) from e
        for k in mine[i:]:
            w = writes[k]
            if w is not _DELETED:
                yield k, w

    # -- writes -----------------------------------------------------------------
    def put(self, key, value) -> None:
        """Buffer a write of `value` under `key`, applied at commit. A key or value
        too large for the store raises KeyTooLargeError or ValueTooLargeError
        here, as `Database.put` does, and the transaction goes on without it."""
        self._check_open()
        key, value = as_key(key), as_value(value)
        if len(key) > KEY_FLOOR or len(key) + len(value) > PAIR_FLOOR:
            self._write_limits().check_put(key, value)
        with self._lock:
            self._check_open()
            self._writes[key] = value

    def delete(self, key) -> bool:
        """Buffer a delete of `key`; True if the key is there as this transaction sees it.
        A key longer than any the store takes raises KeyTooLargeError here, as
        `Database.delete` does, and the transaction goes on without it."""
        self._check_open()
        key = as_key(key)
        if len(key) > KEY_FLOOR:
            self._write_limits().check_delete(key)
        existed = self._read(key, _DELETED) is not _DELETED
        with self._lock:
            self._check_open()
            self._writes[key] = _DELETED
        return existed

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        if not self.delete(key):
            raise KeyError(key)

    # -- ending -------------------------------------------------------------------
    def commit(self) -> None:
        """Apply the writes atomically if nothing this transaction read changed since
        its snapshot; else raise ConflictError and apply nothing. Ends it either way."""
        with self._lock:
            self._check_open()
            self._open = False
            ops = _native.pack_ops((2, k, b"") if v is _DELETED else (1, k, v)
                                   for k, v in self._writes.items())
            reads, snap = bytes(self._reads), self._snap
        try:
            if ops:
                if self._check_writable is not None:
                    self._check_writable("commit")
                self._commit_ops(ops, reads, snap)
        finally:
            if snap is not None:
                snap.release()

    def _commit_ops(self, ops: bytes, reads: bytes, snap) -> None:
        """Apply `ops` on the engine the reads were made on, checking them; with
        nothing read to check, on the store's engine (compact() may swap it)."""
        if snap is None or not reads:
            return self._on_engine(self._apply, ops, b"", None)
        engine = self._snap_engine
        try:
            self._apply(engine, ops, reads, snap)
        except ClosedError as e:              # the core refused it: nothing applied
            self._check_store()               # the store closed: its own ClosedError
            if engine.core.closed:            # compact() replaced the engine it read from
                raise _ended(engine) from e
            raise

    def _apply(self, engine, ops: bytes, reads: bytes, snap) -> None:
        # the WAL taken first: once the core applied the ops, the write stands
        # even if compact() closes this engine before its commit returns
        core, wal = engine.core, engine.wal
        if snap is None or not reads:
            fn, args = core.apply_batch, (ops,)
        else:
            fn, args = core.txn_commit, (snap.handle, reads, ops)
        lsn = -1
        try:
            if engine.signals.throttle_hint:
                engine.throttle.before_batch(len(self._writes))   # pages it may change
            try:
                lsn = fn(*args)
            except _native.Retry as r:
                lsn = engine.retry(r, fn, *args)
            commit = self._route() if self._route is not None else None
            (commit or wal.commit)(lsn)
        except ConflictError as e:
            if _dropped(core, snap):
                raise ConflictError("the transaction's snapshot was dropped at the 'snapshot_memory' "
                                    "bound, so what it read could not be checked; nothing was "
                                    "applied (run it again)") from e
            raise
        except Exception as e:  # noqa: BLE001 - a pagestore.Error (pagestore/faults.py)
            faults.reraise(e, "commit", wal, lsn)
        if engine.signals.throttle_hint:
            engine.throttle.check()

    def rollback(self) -> None:
        """End the transaction, applying nothing."""
        with self._lock:
            self._open = False
            self._writes.clear()
            snap = self._snap
        if snap is not None:
            snap.release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self._open:
            self.commit()
        else:
            self.rollback()
        return False

    def _check_open(self):
        if not self._open:
            raise ClosedError("transaction already committed or rolled back")
        self._check_store()


def _dropped(core, snap) -> bool:
    """Whether `snap` was dropped at the snapshot_memory bound. The core's commit
    answers a conflict for a dropped snapshot too (it cannot check the reads);
    asked after that answer: a snapshot live now was live at the commit (a drop
    is final), so its conflict was a real write."""
    try:
        core.snap_get(snap.handle, b"")
    except SnapshotTooOldError:
        return True
    except Exception:  # noqa: BLE001 - no answer: the commit's own error stands
        return False
    return False


def _ended(engine) -> ConflictError:
    """The ConflictError of a transaction whose snapshot (taken on `engine`) ended:
    compact() replaced the store's files, or the `snapshot_memory` bound dropped it."""
    why = ("compact() replaced the store's files after the transaction's snapshot was taken"
           if engine.core.closed else "the transaction's snapshot was dropped at the 'snapshot_memory' bound")
    return ConflictError(f"{why}; nothing was applied (run it again)")


def run_transaction(db, fn, *, attempts: int = 100):
    """Run `fn(txn)` in a transaction of `db` and commit, again on ConflictError,
    up to `attempts` times (the last conflict is raised); returns fn's result."""
    for attempt in range(attempts):
        txn = db.transaction()
        try:
            with txn:
                result = fn(txn)
            return result
        except ConflictError:
            if attempt == attempts - 1:
                raise
    raise ValueError("attempts must be at least 1")
