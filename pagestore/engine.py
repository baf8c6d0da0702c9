"""What runs behind a `Database`: the C core, page file, WAL, checkpointer, throttle.

`Engine` owns every resource of one open store, from the directory lock to
the checkpointer's threads, and the two ways they end: `close` (checkpoint
everything, stop, release) and `abandon` (stop as a killed process would:
no I/O). A failed open releases whatever it got through the same path.
Opening is recovery/opening.py's sequence, run against this object as a
`recovery.RecoveringStore` (pagestore/recovering.py).

Callbacks the C core makes run while it holds the tree lock (lock order in
docs/architecture.md): `PageFile.read_page` (`ps_py_read_page`) and
`_wal_segment` (`ps_py_wal_segment`). They may do file I/O and take the WAL's
segment lock or the checkpointer's condition (in that order: a request
takes only the condition), but must not call into the core or wait for a
checkpoint, which needs the tree lock to make progress.
"""

from __future__ import annotations

import os

from pagestore import checkpoint as _checkpoint
from pagestore import diskio
from pagestore.diskio import layout
from pagestore import recovery as _recovery
from pagestore import throttling
from pagestore import wal as _wal
from pagestore.wal import recseal as _wal_recseal

from . import _native
from .config import Config
from .errors import ClosedError, ConfigError, CorruptionError, EncryptionError, Error, StoreLockedError
from .page_source import CoreFraming, CorePageSource
from .pagefile import PageFile
from .recovering import RecoveringStoreMixin
from .shortfall import too_large
from .throttle import Throttle

__all__ = ["Engine", "make_core"]


def make_core(cfg: Config, cipher, pages: PageFile, wal_segment, wal_grow=None) -> _native.Core:
    """The C core for a store of options `cfg`: page memory and tree, reading
    missed pages through `pages`, taking WAL segments from `wal_segment(seq)`
    and their space from `wal_grow(seq, need)` (the core's callbacks)."""
    return _native.Core(
        page_size=cfg.page_size, memory_size=cfg.memory_size,
        checkpoint_buffer_size=cfg.cow_buffer_size,
        page_reserve=cipher.page_reserve if cipher else 0,
        read_page=pages.read_page, wal_segment=wal_segment, wal_grow=wal_grow,
        physical_wal=(cfg.recovery_data == "wal"),
        snapshot_codec=cfg.recovery_compression)


class Engine(RecoveringStoreMixin):
    """The open store's parts. Made only by `Database`; reached by tests and
    tools through `pagestore.database.engine_of(db)`, never from user code."""

    def __init__(self, path: str, config: Config, fs):
        self.path, self.config, self.fs = path, config, fs
        self.lock = self.cipher = self.pages = self.core = self.signals = None
        self.wal = self.checkpointer = self.throttle = self.source = None
        self.recovery: dict = {}
        fs.makedirs(path)
        try:
            self.lock = fs.lock(os.path.join(path, layout.LOCK))
        except diskio.LockedError as e:
            raise StoreLockedError(f"{path} is open in another process, or by a store of this process "
                                   "that was not closed") from e
        try:
            self._open()
        except _wal_recseal.NoKeyError as e:     # wal does not import pagestore's errors
            self.release()
            raise EncryptionError(str(e), e.path) from e
        except _wal_recseal.BlockSealedSegment as e:
            self.release()
            raise CorruptionError(str(e), e.path) from e
        except BaseException:
            self.release()
            raise

    def _open(self) -> None:
        cfg, fs = self.config, self.fs
        if cfg.encryption_key is not None:
            from .cipher import Cipher
            self.cipher = Cipher.from_option(cfg.encryption_key)
        self.pages = PageFile(fs, self.path, cfg.page_size, self.cipher)
        # The core exists before recovery so the restore can leave the pages it
        # writes back resident (Core.stash): the replay then finds them in memory.
        self.core = make_core(cfg, self.cipher, self.pages, self._wal_segment, self._wal_grow)
        self.signals = self.core.signals
        try:
            opened = _recovery.open_store(fs, self.path, self, cipher=self.cipher,
                                          wal_options=self._wal_options(),
                                          make_checkpointer=self._start_checkpointer)
        except (_recovery.RecoveryFileCorrupt, _recovery.MarkerCorrupt) as e:
            raise CorruptionError(str(e), e.path) from e
        except _recovery.RecoveryError as e:
            raise CorruptionError(str(e), e.path) from e
        except _recovery.PageRecordsInvalid as e:
            raise CorruptionError(f"{self.path}: the WAL's page records: {e}",
                                  os.path.join(self.path, layout.WAL_DIR)) from e
        except _wal.SegmentMissing as e:
            raise CorruptionError(str(e), e.path) from e
        except _wal.SegmentSizeMismatch as e:
            raise ConfigError(str(e), option="wal_segment_size") from e
        self.recovery = opened.report
        self.throttle = Throttle(self, throttling.make_policy(cfg.throttling))
        self._guard_log()

    def _guard_log(self) -> None:
        """Make a write that raised leave no trace in memory either.

        The core applies a write, then the log makes it durable (fsync mode)
        or hands it to the OS (a log that publishes with pwrite); that second
        step can fail. So there the core keeps every write's before-image
        until the log acknowledges it (the group commit's durable LSN, or what
        the WAL's commit and flush report), and when the log fails its `fence`
        undoes every write past the acknowledged end and refuses later ones.
        On a shared mapping a record is in the OS once written: nothing there
        to undo, only the refusal.
        """
        wal, core = self.wal, self.core
        wal.fence = core.fence
        self._acks_in_python = False
        if wal.mode != "fsync" and wal.shared_mapping:
            return
        # fsync mode: the acknowledged end is the group commit's durable LSN,
        # which the core reads itself (nothing added to the commit path)
        cell = wal.durable_cell() if wal.mode == "fsync" else None
        core.keep_unacknowledged(cell, owner=wal)
        if cell is not None:
            return
        acknowledge, commit, flush = core.acknowledge, wal.commit, wal.flush

        def commit_acknowledged(lsn: int) -> None:
            commit(lsn)
            acknowledge(lsn)

        def flush_acknowledged(lsn: int | None = None) -> int:
            durable = flush(lsn)
            acknowledge(durable)
            return durable

        wal.commit, wal.flush = commit_acknowledged, flush_acknowledged
        self._acks_in_python = True

    def waited_writes(self):
        """The core's puts and deletes that wait for their commit in the same C
        call (wal/commit.py `WaitedWrites`), or None: no WAL, or a log whose
        commit and flush also acknowledge in Python (`_guard_log`)."""
        wal = self.wal
        if wal is None or getattr(self, "_acks_in_python", True):
            return None
        return wal.waited_writes(self.core)

    def _wal_options(self) -> dict:
        cfg = self.config
        # An encrypted WAL is sealed record by record (wal/recseal.py): by the C
        # encoder when it can load libcrypto, else in Python, to the same bytes.
        sealer = "c" if _native.wal_seal_available() else "python"
        signals = self.signals
        return dict(mode=cfg.wal_mode, segment_size=cfg.wal_segment_size,
                    flush_interval=cfg.wal_flush_interval, direct=cfg.wal_direct,
                    end_lsn=lambda: signals.wal_end_lsn, cipher=self.cipher,
                    archive=cfg.wal_archive, archive_size=cfg.wal_archive_size,
                    sealer=sealer,
                    gate=_native.GroupCommit.for_core(self.core))

    def _start_checkpointer(self, wal, first_checkpoint_id: int, replay_from_lsn: int):
        """recovery.open_store's last step makes the checkpointer through this."""
        cfg = self.config
        self.source = CorePageSource(self.core, cfg.page_size, replay_from_lsn)
        self.checkpointer = _checkpoint.Checkpointer(
            self.fs, self.path, self.source, self.pages, wal,
            threads=cfg.checkpoint_threads, interval=cfg.checkpoint_interval,
            spread=cfg.checkpoint_spread,
            compression=cfg.recovery_compression,
            compression_level=cfg.recovery_compression_level,
            recovery_data=cfg.recovery_data, cipher=self.cipher,
            first_checkpoint_id=first_checkpoint_id, autostart=False,
            framing=CoreFraming(self.core))
        self.checkpointer.start()
        return self.checkpointer

    def _wal_grow(self, seq: int, need: int) -> int:
        """`ps_py_wal_grow`: bytes [0, need) of segment `seq` allocated (the WAL's
        `reserve`), under the tree write lock; raises when the disk is full."""
        return self.wal.reserve(seq, need)

    def _wal_segment(self, seq: int):
        """`ps_py_wal_segment`: the encoder's next segment, under the tree write lock.

        May: take the WAL's segment lock, create or reuse a segment file (I/O,
        when no spare segment is ready), post a checkpoint request (the
        checkpointer's condition, briefly). Must not: call the core, wait for a
        checkpoint. It runs once per segment, so it is also the WAL-size
        checkpoint trigger (as Ignite checks at rollover).
        """
        ckpt, source = self.checkpointer, self.source
        if ckpt is not None:
            since = seq * self.config.wal_segment_size - source.begin_lsn
            if since >= self.config.checkpoint_wal_size:
                ckpt.request("wal size")
        return self.wal.segment_for(seq)

    # -- making room for a write the core rolled back -------------------------------
    def retry(self, r, fn, *args, read: bool = False):
        """A write the core rolled back: make room, then try again (bounded);
        TransactionTooLargeError when it cannot fit.

        A write that ran out of page memory while every other page was clean
        and no checkpoint held any will never fit (no-steal: its own
        uncommitted pages cannot be written out), so it fails then instead
        of after a thousand rounds of waiting for checkpoints (~35 s for a
        200,000-pair batch in 16 MiB). "Clean" is read before the attempt
        and again after its rollback, so a page another writer dirtied in
        between keeps the retries going; in "wal" mode a rollback leaves the
        pages it logged dirty, so there the second such failure ends it.

        Beside other writers page memory is seldom all clean, so a write also
        fails at once when it has proven it needs more pages at once than
        page memory has slots (`Retry.need`, a lower bound the core takes
        from the pages it held and the leaves its remaining writes change:
        csrc/batchneed.c): no checkpoint can make that room.
        """
        roomy_failures = 0
        for _ in range(1000):
            if not read and self._never_fits(r):
                break
            self.throttle.make_room(r)
            roomy = self.all_clean()
            try:
                return fn(*args)
            except _native.Retry as again:
                r = again
                if r.code == _native.PS_E_NOMEM and roomy:
                    roomy_failures += 1
                    if roomy_failures >= 2 or self.all_clean():
                        break
        if read:
            raise Error(f"{self.path}: no page memory freed up to read into ({r})") from r
        # a single put too large for page memory is a transaction too large too
        raise too_large(self.path, self.signals, self.config, self.core.page_size, r) from r

    def _never_fits(self, r) -> bool:
        """The write rolled back as `r` needs more pages at once than page memory has."""
        return r.code == _native.PS_E_NOMEM and r.need > int(self.signals.slots_total)

    def all_clean(self) -> bool:
        """No dirty page and none held by a checkpoint: all of page memory is evictable."""
        s, ckpt = self.signals, self.checkpointer
        if ckpt is None:        # closed while a write waited: it was rolled back
            raise ClosedError("the store was closed while a write waited for room")
        return s.dirty_pages == 0 and s.ckpt_pages == 0 and not ckpt.progress()["running"]

    def stats(self) -> dict:
        """The core's, WAL's, checkpointer's and throttle's figures, and recovery's."""
        out = self.core.stats()
        out.update(self.wal.stats())
        out.update(self.checkpointer.stats())
        out["checkpoint_running"] = bool(self.checkpointer.progress()["running"])
        out.update(self.throttle.stats())
        out["recovery"] = dict(self.recovery)
        return out

    # -- the ends ---------------------------------------------------------------------
    def shut(self) -> None:
        """Refuse every core call from now on (in a forked child: nothing else)."""
        if self.core is not None:
            self.core.shut()

    def close(self, final_checkpoint: bool = True) -> None:
        """Checkpoint everything (unless the log failed or `final_checkpoint` is
        False), stop the threads, release the files and the lock."""
        try:
            # An operation that passed the store's "closed" check finishes now, and
            # one still to reach the core is refused: none can write to the WAL
            # the close below unmaps.
            self.core.shut()
            ckpt, self.checkpointer = self.checkpointer, None
            ckpt.close(final_checkpoint=final_checkpoint and self.wal.failure is None)
            self.core.close()         # before the WAL: it pins the segments the WAL unmaps
            wal, self.wal = self.wal, None
            wal.close()
        finally:
            self.release()

    def abandon(self) -> None:
        """Stop as a killed process would: threads stopped, no I/O, lock dropped (tests)."""
        ckpt, self.checkpointer = self.checkpointer, None
        wal, self.wal = self.wal, None
        for stop in (lambda: ckpt and ckpt.close(final_checkpoint=False),
                     lambda: wal and wal.abandon()):
            try:
                stop()
            except BaseException:  # noqa: BLE001 - the simulated machine is down
                pass
        self.pages = None         # a dead process's descriptors go with it, unflushed
        self.release()            # the core (kept, closed) and the lock

    def release(self) -> None:
        """Release what is still held (idempotent): after close, abandon or a failed open.

        The closed core stays: a call racing with close() reaches it and gets
        ClosedError from the C core instead of an AttributeError.
        """
        ckpt, self.checkpointer = self.checkpointer, None
        if ckpt is not None:
            ckpt.close(final_checkpoint=False)
        wal, core, pages, lock = self.wal, self.core, self.pages, self.lock
        self.wal = self.pages = self.lock = None
        ends = [obj.close for obj in (core, wal, pages) if obj is not None]   # core first: see close
        if lock is not None:
            ends.append(lock.release)
        for end in ends:
            try:
                end()
            except Exception:  # noqa: BLE001 - closing after a failure must not mask it
                pass
