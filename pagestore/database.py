"""The facade: `open`, `Database` — what an application calls.

A write is one call into the C core, which changes the pages and appends
the logical WAL record under its tree lock, then one call into the WAL for
the mode's durability (nothing for log_only on a mapped segment), then one
look at the throttling hint the core keeps. A durable write (fsync mode, or
`sync=True`) joins its group commit in the same C call as the write
(wal/commit.py `WaitedWrites`), so it lets the GIL go once.
Everything slow — page misses, segment switches, checkpoints, recovery — is
off that path, behind the `Engine` (pagestore/engine.py) a `Database` holds:
opening and crash recovery are recovery/opening.py's sequence, the
checkpointer's page source is pagestore/page_source.py, and none of their
hooks is reachable from a `Database`.

A store's life is one `State`: OPENING until recovery has ended with a
checkpoint, OPEN, then CLOSING and CLOSED after `close()`, ABANDONED after a
simulated kill (tests), FORKED in a child process that inherited it. A write
whose log record could not be written or synced moves it to FAILED: reads
go on, every write raises that error (`failure`), `close()` releases
everything without a checkpoint, and a reopen recovers what is durable
(docs/errors.md). Errors of the layers below become `pagestore.errors`
types at this boundary, in pagestore/faults.py.
"""

from __future__ import annotations

import enum
import gc
import os
import sys
import threading
import weakref

from pagestore import diskio

from . import _native
from . import faults
from .config import Config, make_config
from .backup import BackupMixin
from .compaction import CompactMixin
from .durability import DurableWrites
from .engine import Engine
from .errors import ClosedError, ConfigError, Error, ReadOnlyError
from .keys import as_key, as_value, bounds
from .mapping import MappingMixin, pairs_of
from .openmode import open_engine
from .ordered import OrderedReads
from .reporting import CheckpointReports
from .snapshot import Snapshot, scan_snapshot, snapshot_stats
from .transaction import Transaction

__all__ = ["open", "Database", "State", "ConfigError", "engine_of", "route_commits", "commit_failed"]

_ABSENT = object()
_SLOW = _native.SLOW     # the C read path could not answer: take the ordinary one


class State(enum.Enum):
    """Where a `Database` is in its life; only OPEN accepts operations."""

    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    ABANDONED = "abandoned"    # dropped as a killed process would (tests)
    FAILED = "failed"          # the log failed: reads only, until closed and reopened
    CHECKPOINT_FAILED = "checkpoint_failed"   # a background checkpoint failed: the next write says so
    FORKED = "forked"          # inherited by a forked child: not its store
    READ_ONLY = "read_only"    # opened read_only=True: reads only, no file written
    PAUSED = "paused"          # compact() is swapping the page file: calls wait


_OPEN = State.OPEN
_READABLE = (State.FAILED, State.READ_ONLY, State.CHECKPOINT_FAILED)   # reads go on; writes check
_GETTER_STATES = (State.OPEN,) + _READABLE     # where `get` answers in C
_CLOSABLE = (_OPEN, State.FAILED, State.READ_ONLY, State.CHECKPOINT_FAILED)


def open(path, *, fs=None, create=True, read_only=False, **options) -> "Database":  # noqa: A001
    """Open (or create) the store in directory `path`.

    `create=False`: open an existing store only (StoreNotFoundError otherwise);
    `read_only=True`: reads only, no file written (docs/options.md, open modes).
    A directory holding anything but a store is refused (NotAStoreError).
    `fs` is the diskio FileSystem to use; tests pass the crash simulator.
    Every other keyword is an option of `Config` (see docs/options.md).
    """
    archive = options.get("wal_archive")
    if isinstance(archive, (str, bytes, os.PathLike)):   # named long after open too, as the store's files are
        options["wal_archive"] = store_path(archive, absolute=fs is None, what="wal_archive",
                                            option="wal_archive")
    cfg = make_config(**options)
    path = store_path(path, absolute=fs is None)
    _wait_dropped_close(path)
    return Database(path, cfg, fs or diskio.PosixFS(), create=create, read_only=read_only)


def store_path(path, *, absolute: bool = True, what: str = "the store's path", option: str = "path") -> str:
    """`path` (str, bytes or path-like) as a str, and as an absolute path on
    the real file system: a store's files are opened by name long after
    `open` (every new WAL segment, marker and recovery file), so a relative
    path would follow a later `os.chdir` into another directory -- and another
    store. An empty path is refused (`ConfigError` naming `option`) rather
    than read as ".". `backup` takes its destination by the same rule.
    """
    name = os.fsdecode(os.fspath(path))
    if not name:
        raise ConfigError(f"{what} is empty: name its directory", option)
    return os.path.abspath(name) if absolute else name


# The cyclic collector runs finalizers in whatever thread allocates, in the
# middle of anything: in a store's own checkpointer, or holding a lock (a
# file system's, a caller's) the final checkpoint needs. A store dropped
# there is closed by a thread of its own; dropped anywhere else, at once.
_collecting = False


def _note_collection(phase: str, _info: dict) -> None:
    global _collecting
    _collecting = phase == "start"


gc.callbacks.append(_note_collection)


# path -> the thread closing a store dropped there: an open of that path in
# this process waits for it, as it would have found the store closed had the
# close run inline.
_dropped_closes: "dict[str, threading.Thread]" = {}
_dropped_lock = threading.Lock()


def _close_dropped(db: "Database") -> None:
    """Close a store that was dropped without close() (`Database.__del__`)."""
    if _collecting and not sys.is_finalizing():
        t = threading.Thread(target=_close_dropped_now, args=(db,), name="pagestore-close")
        with _dropped_lock:
            _dropped_closes[db.path] = t
        try:
            t.start()
            return
        except RuntimeError:      # no new thread at interpreter shutdown
            pass
    _close_dropped_now(db)


def _close_dropped_now(db: "Database") -> None:
    try:
        db.close()
    except Exception:  # noqa: BLE001 - nobody is left to raise it to
        pass
    finally:
        with _dropped_lock:
            if _dropped_closes.get(db.path) is threading.current_thread():
                del _dropped_closes[db.path]


def _wait_dropped_close(path: str) -> None:
    """Before an open of `path`: the close of a store dropped there, if one is running."""
    with _dropped_lock:
        t = _dropped_closes.get(path)
    if t is not None and t is not threading.current_thread():
        t.join()


def _packed_puts(items) -> tuple:
    """(the packed puts of `items`, how many): the count tells the throttle how
    many pages the batch may change (Throttle.before_batch)."""
    if hasattr(items, "__len__"):
        return _native.pack_puts(pairs_of(items), as_key, as_value), len(items)
    counted = [0]

    def count(pairs):
        for pair in pairs:
            counted[0] += 1
            yield pair
    packed = _native.pack_puts(count(pairs_of(items)), as_key, as_value)
    return packed, counted[0]


def engine_of(db: "Database") -> Engine:
    """The parts behind `db` (core, WAL, checkpointer, ...), for tests and tools."""
    return db._engine


def route_commits(db: "Database", commit) -> None:
    """From now on `db`'s writes hand their end LSN to `commit(lsn)` instead of
    the WAL's commit, each in two steps (the write, then `commit`); kept when
    compact() swaps the engine. pagestore.aio completes its loop's writes
    from its syncer; `commit` must pass every other write on to
    `engine_of(db).wal.commit`, or it returns before its mode's promise."""
    db._commit_route = db._wal_commit = commit
    db._waited = None


def commit_failed(db: "Database", exc: BaseException) -> None:
    """A commit run for `db`'s writes outside its calls (pagestore.aio's
    syncer) failed with `exc`: the store takes it as a failed write of its
    own would be taken (the log's failure: FAILED, writes refused, reads go
    on). The caller raises the error to its writes."""
    try:
        db._raise_failed(exc, "sync")
    except BaseException:  # noqa: BLE001 - `exc` itself, or its typed form: the caller's to raise
        pass


# Open stores, for the fork hook: a forked child inherits the parent's store
# (its WAL is a shared mapping of the same file), and a write from the child
# would land in the parent's log under the parent's LSNs, so after a crash of
# the parent its acknowledged writes were gone and the child's were there.
_OPEN_STORES: "weakref.WeakSet[Database]" = weakref.WeakSet()


def _disown_in_child() -> None:
    """After fork, in the child: every inherited store is closed to it, with no
    I/O and no lock (a parent thread may have held one at the fork)."""
    for db in list(_OPEN_STORES):
        db._state = State.FORKED
        db._engine.shut()           # in a child: marks the C core closed, nothing else


os.register_at_fork(after_in_child=_disown_in_child)


class Database(MappingMixin, OrderedReads, BackupMixin, CompactMixin, CheckpointReports, DurableWrites):
    """An open store. Thread-safe: any number of threads may call it at once."""

    def __init__(self, path: str, config: Config, fs, *, create: bool = True, read_only: bool = False):
        self.path, self.config, self.fs = path, config, fs
        self._state, self._commit_route = State.OPENING, None
        try:   # recovers; on failure holds nothing
            engine = open_engine(path, config, fs, create=create, read_only=read_only)
        except Exception as e:  # noqa: BLE001 - typed
            self._state = State.CLOSED
            faults.reraise(e, "open")
        self._bind(engine)
        self._owner_pid = os.getpid()
        self._failure: Error | None = None
        self._state = State.READ_ONLY if read_only else _OPEN
        _OPEN_STORES.add(self)

    def _bind(self, engine) -> None:
        """Use `engine` from now on (at open, and after compact() swapped it)."""
        self._engine, self.recovery = engine, engine.recovery
        # The hot paths' collaborators, bound once.
        core = engine.core
        self._signals, self._throttle, self._retry = engine.signals, engine.throttle, engine.retry
        self._core_put, self._core_get, self._core_delete = core.put, core.get, core.delete
        self._core_batch, self._core_scan = core.apply_batch, core.scan_batch
        reader = _native.reader(core)     # gets of pages in memory, GIL held (_native/fastget.py)
        # a miss is loaded in C too, without the GIL (only errors come back SLOW)
        self._fast_get, self._fast_get_many = reader.get_or_load, reader.get_many
        self._reader = reader             # what `get` (a C method) reads at every call
        self._wal_commit = self._commit_route or engine.wal.commit
        # durable writes: the write and its commit's wait in one C call
        waited = getattr(engine, "waited_writes", None)     # a read-only engine has none
        self._waited = None if self._commit_route or waited is None else waited()
        self._watch_checkpoints(engine)

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            if self._state in _READABLE:
                return                        # reads go on; writes call _check_writable
            if self._state is State.PAUSED:
                return self._wait_resumed()
            if self._state is State.FORKED:
                raise ClosedError(f"store {self.path} belongs to process {self._owner_pid}, which "
                                  "opened it; a forked child must not use it (open the store in the "
                                  "child once that process has closed it)")
            raise ClosedError(f"store {self.path} is closed")

    def _check_writable(self, operation: str) -> None:
        if self._state is State.FAILED:
            raise faults.refusal(self._failure, operation)
        if self._state is State.READ_ONLY:
            raise ReadOnlyError(f"{self.path} was opened read_only: {operation} refused", self.path, operation)
        if self._state is State.CHECKPOINT_FAILED:
            raise self._report_checkpoint(operation)
        self._check_open()

    def _swapped(self, exc: Exception) -> bool:
        """`exc` came from a core compact() replaced meanwhile: run the call again."""
        return isinstance(exc, ClosedError) and self._swapped_core()

    def _raise_failed(self, exc: Exception, operation: str, lsn: int = -1):
        """Raise `exc` as a `pagestore.Error`; when it came from the log, enter FAILED.
        `lsn`: the end of the write's record, if it got one."""
        wal = self._engine.wal
        cause = wal.failure if wal is not None else None
        if cause is not None and self._state in (_OPEN, State.CHECKPOINT_FAILED):
            self._failure, self._state = faults.translate(cause, operation), State.FAILED
        faults.reraise(exc, operation, wal, lsn, self._failure)

    @property
    def state(self) -> State:
        """Where the store is in its life (`State`)."""
        return self._state

    @property
    def failure(self) -> Error | None:
        """The write error that put the store in the FAILED state (None: healthy)."""
        return self._failure

    # -- single operations -----------------------------------------------------
    def put(self, key, value, sync: bool = False) -> None:
        """Store `value` under `key` (both bytes-like); `sync`: durable on return
        in every WAL mode (fsync mode's puts always are)."""
        if self._state is not _OPEN:
            self._check_writable("put")
        if type(key) is not bytes:
            key = as_key(key)
        if type(value) is not bytes:
            value = as_value(value)
        w = self._waited
        if w is not None and (sync or w.always) and (flags := w.flags(sync)):
            self._waited_write(w.put, (key, value), flags, sync, "put")    # one C call
            return
        lsn = -1
        try:
            try:
                lsn = self._core_put(key, value)
            except _native.Retry as r:
                lsn = self._retry(r, self._core_put, key, value)
            if sync:                      # not published first: a failed sync leaves no trace
                self._sync_to(lsn)
            else:
                self._wal_commit(lsn)
        except Exception as e:  # noqa: BLE001 - typed, and the log's failure noted
            if self._swapped(e):
                return self.put(key, value, sync)
            self._raise_failed(e, "put", lsn)
        if self._signals.throttle_hint:
            self._throttle.check()

    def get(self, key, default=None):
        """The value under `key`, or `default`."""
        if self._state is not _OPEN:
            self._check_open()
        v = self._fast_get(key, default)     # never raises: SLOW on any error
        if v is not _SLOW:
            return v
        if type(key) is not bytes:
            key = as_key(key)
        try:
            try:
                v = self._core_get(key)
            except _native.Retry as r:
                # A miss with every page dirty or in the checkpoint: no slot to
                # read into until the checkpointer cleans some.
                v = self._retry(r, self._core_get, key, read=True)
        except ClosedError as e:        # also a swap while it waited for room
            if self._swapped(e):
                return self.get(key, default)
            raise
        return default if v is None else v

    # the same `get`, served in C while the store is open (or reads go on): a
    # method descriptor over the store's current reader, no Python frame per
    # call; the function above answers everything else (_native/fastget.py)
    get = _native.get_method(get, _GETTER_STATES)

    def delete(self, key, sync: bool = False) -> bool:
        """Remove `key`; True if it was there. `sync` as for `put`."""
        self._check_writable("delete")
        key = as_key(key)
        w = self._waited
        if w is not None and (sync or w.always) and (flags := w.flags(sync)):
            return self._waited_write(w.delete, (key,), flags, sync, "delete")   # one C call
        lsn = -1
        try:
            try:
                lsn = self._core_delete(key)
            except _native.Retry as r:
                lsn = self._retry(r, self._core_delete, key)
            if lsn < 0:
                return False
            if sync:
                self._sync_to(lsn)
            else:
                self._wal_commit(lsn)
        except Exception as e:  # noqa: BLE001 - typed, and the log's failure noted
            if self._swapped(e):
                return self.delete(key, sync)
            self._raise_failed(e, "delete", lsn)
        if self._signals.throttle_hint:
            self._throttle.check()
        return True

    def put_many(self, items) -> None:
        """Put every pair of `items` (a mapping or (key, value) pairs) as one atomic batch."""
        self._check_writable("put_many")
        self._apply_packed(*_packed_puts(items))

    def _apply_packed(self, packed: bytes, writes: int) -> None:
        # `writes`: how many; each may change a page (Throttle.before_batch)
        if not packed:
            return
        lsn = -1
        try:
            if self._signals.throttle_hint:
                self._throttle.before_batch(writes)
            try:
                lsn = self._core_batch(packed)
            except _native.Retry as r:
                lsn = self._retry(r, self._core_batch, packed)
            self._wal_commit(lsn)
        except Exception as e:  # noqa: BLE001 - typed, and the log's failure noted
            if self._swapped(e):
                return self._apply_packed(packed, writes)
            self._raise_failed(e, "put_many", lsn)
        if self._signals.throttle_hint:
            self._throttle.check()

    # -- dict surface ----------------------------------------------------------
    def __getitem__(self, key):
        v = self._fast_get(key, _ABSENT) if self._state is _OPEN else _SLOW
        if v is _SLOW:
            v = self.get(key, _ABSENT)
        if v is _ABSENT:
            raise KeyError(key)
        return v

    def __setitem__(self, key, value):
        self.put(key, value)

    def __delitem__(self, key):
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key) -> bool:
        v = self._fast_get(key, _ABSENT) if self._state is _OPEN else _SLOW
        return (self.get(key, _ABSENT) if v is _SLOW else v) is not _ABSENT

    def __len__(self) -> int:
        return self._on_engine(lambda engine: engine.core.count())

    # -- scans -------------------------------------------------------------------
    def scan(self, start=None, stop=None, *, prefix=None, reverse=False):
        """(key, value) pairs in key order within [start, stop), optionally by prefix,
        as of its first item (a snapshot, docs/transactions.md)."""
        self._check_open()
        lo, hi = bounds(start, stop, prefix)
        return scan_snapshot(lambda: self._on_engine(self._scan_on, lo, hi, reverse))

    # -- transactions, checkpoints, stats --------------------------------------
    def transaction(self) -> Transaction:
        """A serializable transaction: writes buffered, applied atomically at commit,
        or ConflictError when what it read changed meanwhile (docs/transactions.md)."""
        self._check_writable("transaction") if self._state is State.READ_ONLY else self._check_open()
        return Transaction(self._on_engine, self._held, self._check_open, self._check_writable,
                           lambda: self._commit_route)

    def snapshot(self) -> Snapshot:
        """A read-only view of the store as of now (pagestore/snapshot.py)."""
        return self._on_engine(lambda engine: Snapshot(engine, self._held(engine)))

    def checkpoint(self) -> dict:
        """Run a checkpoint now and wait for it; returns its figures."""
        if self._state is not _OPEN or self._engine.checkpointer is None:   # close() drops it
            self._check_writable("checkpoint")    # waits out a compact()'s pause
        try:
            return self._on_engine(lambda engine: engine.checkpointer.checkpoint(wait=True, reason="user"))
        except Exception as e:  # noqa: BLE001 - typed
            self._raise_failed(e, "checkpoint")

    def verify(self) -> dict:
        """Walk every page: checksums, order, links, free space. Raises CorruptionError."""
        def walk(engine):
            try:
                return engine.core.verify()
            except _native.Retry as r:    # page memory full: wait for room, as a read does
                return engine.retry(r, engine.core.verify, read=True)
        return self._on_engine(walk)

    def checkpoint_state(self) -> tuple:
        """(a checkpoint is running, checkpoints completed): two reads without a
        lock, cheap enough to call every few operations (stats() takes the WAL's
        and the checkpointer's locks, which writers contend for)."""
        ckpt = self._engine.checkpointer     # close() and compact() drop it after leaving OPEN
        if self._state is not _OPEN or ckpt is None:
            return self._on_engine(lambda engine: engine.checkpointer.running_and_done())
        return ckpt.running_and_done()

    def stats(self) -> dict:
        """Counters of the core, WAL, checkpointer, throttle and the last recovery, and
        the space on disk: `disk_bytes`, `live_bytes`, `free_pages` (pagestore/compaction.py)."""
        figures = self._on_engine(lambda engine: {**engine.stats(), **snapshot_stats(engine.core)})
        return {**figures, **self._space()}

    # -- closing -----------------------------------------------------------------
    def close(self) -> None:
        """Checkpoint everything, stop the threads, release the directory (FAILED:
        release only; what the log could not take is not acknowledged)."""
        if self._state is State.PAUSED:
            self._wait_resumed()
        if self._state not in _CLOSABLE:
            return
        final = self._state is _OPEN or self._state is State.CHECKPOINT_FAILED
        self._state = State.CLOSING
        _OPEN_STORES.discard(self)
        try:
            self._engine.close(final_checkpoint=final)
        except Exception as e:  # noqa: BLE001 - typed; everything is released regardless
            self._raise_failed(e, "close")
        finally:
            self._state = State.CLOSED

    def _abandon(self) -> None:
        """Drop the store as a killed process would: stop threads, no I/O (tests)."""
        self._state = State.ABANDONED
        _OPEN_STORES.discard(self)
        self._engine.abandon()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if self.__dict__.get("_state") in (_OPEN, State.CHECKPOINT_FAILED):
            _close_dropped(self)
