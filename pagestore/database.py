"""The facade: `open`, `Database` — Python orchestrating the C core.

A write is one call into the C core, which changes the pages and appends
the logical WAL record under its tree lock, then one call into the WAL for
the mode's durability (nothing for log_only on a mapped segment; a group
commit for fsync), then one look at the throttling hint the core keeps.
Everything slow — page misses, segment switches, checkpoints, recovery — is
off that path.

Opening a store (DESIGN.md §3, recovery table):
  1. lock the directory (a second process fails at once);
  2. `recovery.recover`: markers and recovery files decide what to restore;
  3. open the page file and check it is ours, with our page size;
  4. the C core reads the meta page; the WAL is replayed from the pointer
     recovery returned, committed units only, the torn tail cut aside;
  5. if anything was restored or replayed, a checkpoint completes before the
     store is handed out, so a crash right after recovery recovers again;
  6. the checkpointer thread starts.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

from pagestore import checkpoint as _checkpoint
from pagestore import diskio
from pagestore import recovery as _recovery
from pagestore import throttling
from pagestore import wal as _wal
from pagestore.wal import reader as _wal_reader
from pagestore.wal import recseal as _wal_recseal
from pagestore.wal import sealed as _wal_sealed
from pagestore.wal import segments as _wal_segments

from . import _native
from .errors import ClosedError, ConfigError, CorruptionError, EncryptionError, Error, StoreLockedError, \
    TransactionTooLargeError
from .config import Config, make_config
from .pagefile import PageFile
from .transaction import Transaction
from .throttle import Throttle

_ABSENT = object()

# Replay reads the whole page file into page memory first (one sequential
# read, no per-miss callback) only once the records to replay reach this many
# per page on disk. r random records touch about P * (1 - e^(-r/P)) of P
# pages, and page memory's first touch (a page fault per fresh page, slow in
# a VM) costs as much as a miss's read, so loading every page pays only when
# most of them will be touched: at r = P, 63 %. Below that, misses load just
# the pages replay needs.
PRELOAD_RECORDS_PER_PAGE = 1.0


def open(path, *, fs=None, **options) -> "Database":  # noqa: A001 - the public name
    """Open (or create) the store in directory `path`.

    `fs` is the diskio FileSystem to use; tests pass the crash simulator.
    Every other keyword is an option of `Config` (see docs/options.md).
    """
    cfg = make_config(**options)
    return Database(os.fspath(path), cfg, fs or diskio.PosixFS())


# Open stores, for the fork hook: a forked child inherits the parent's store
# (its WAL is a shared mapping of the same file), and a write from the child
# would land in the parent's log under the parent's LSNs, so after a crash of
# the parent its acknowledged writes were gone and the child's were there.
_OPEN_STORES: "weakref.WeakSet[Database]" = weakref.WeakSet()


def _disown_in_child() -> None:
    """After fork, in the child: every inherited store is closed to it, with no
    I/O and no lock (a parent thread may have held one at the fork)."""
    for db in list(_OPEN_STORES):
        db._closed = True
        db._forked_from = db._owner_pid
        core = db.__dict__.get("_core")
        if core is not None:
            core.shut()           # in a child: marks the C core closed, nothing else


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_in_child)


class _Snapshot:
    __slots__ = ("page_ids", "wal_lsn", "lock_seconds")

    def __init__(self, page_ids, wal_lsn, lock_seconds):
        self.page_ids, self.wal_lsn, self.lock_seconds = page_ids, wal_lsn, lock_seconds


class _RestoreSink:
    """Where recovery's restore writes pages: in place in the page file, and
    kept resident in the (not yet opened) core for the replay that follows."""
    __slots__ = ("_pages", "_core")

    def __init__(self, pages, core):
        self._pages, self._core = pages, core

    def write_pages(self, page_ids, images) -> None:
        self._pages.write_pages(page_ids, images)
        self._core.stash(page_ids, images)

    def sync(self) -> None:
        self._pages.sync()


class Database:
    """An open store. Thread-safe: any number of threads may call it at once."""

    def __init__(self, path: str, config: Config, fs):
        self.path, self.config, self.fs = path, config, fs
        self._closed = True
        fs.makedirs(path)
        try:
            self._lock = fs.lock(os.path.join(path, "LOCK"))
        except diskio.LockedError as e:
            raise StoreLockedError(f"{path} is open in another process, or by a store of this process "
                                   "that was not closed") from e
        try:
            self._open()
        except _wal_sealed.NoKeyError as e:     # wal does not import pagestore's errors
            self._teardown()
            raise EncryptionError(str(e), e.path) from e
        except BaseException:
            self._teardown()
            raise

    # -- opening ---------------------------------------------------------------
    def _open(self) -> None:
        cfg, fs = self.config, self.fs
        self._cipher = None
        if cfg.encryption_key is not None:
            from .cipher import Cipher
            self._cipher = Cipher.from_option(cfg.encryption_key)
        self._pages = PageFile(fs, self.path, cfg.page_size, self._cipher)
        t0 = time.perf_counter()
        # The core exists before recovery so the restore can leave the pages it
        # writes back resident (Core.stash): the replay then finds them in memory.
        self._core = _native.Core(
            page_size=cfg.page_size, memory_size=cfg.memory_size,
            checkpoint_buffer_size=cfg.cow_buffer_size,
            page_reserve=self._cipher.page_reserve if self._cipher else 0,
            read_page=self._pages.read_page, wal_segment=self._wal_segment,
            physical_wal=(cfg.recovery_data == "wal"),
            snapshot_codec=cfg.recovery_compression)
        wal_dir = os.path.join(self.path, "wal")
        try:
            rec = _recovery.recover(
                fs, self.path, _RestoreSink(self._pages, self._core), page_size=cfg.page_size,
                wal_records=lambda lsn: self._physical_records(wal_dir, lsn),
                seal_page=_native.seal_page, cipher=self._cipher,
                parse_records=_native.parse_recovery_records)
        except (_recovery.RecoveryFileCorrupt, _recovery.MarkerCorrupt) as e:
            raise CorruptionError(str(e), getattr(e, "path", None)) from e
        except _recovery.RecoveryError as e:
            path, msg = None, str(e)
            report = getattr(self, "_physical_report", None)
            if report is not None:
                # A 'wal' mode restore read the WAL's page records: name where
                # that read stopped on damage, else the WAL itself.
                hit = report.damage + report.gaps
                path = hit[0]["file"] if hit else wal_dir
                msg += f" (the WAL's page records: {path}" + \
                    (f" offset {hit[0]['offset']}: {hit[0]['reason']})" if hit else ")")
            raise CorruptionError(msg, path) from e
        except _wal_segments.SegmentSizeMismatch as e:    # "wal" mode's restore reads the WAL
            raise ConfigError(str(e), option="wal_segment_size") from e
        if rec.checkpoint_id and self._pages.is_new():
            # A completed checkpoint wrote and fsynced its pages before END:
            # an empty or missing page file lost them. Opening it as a new
            # store would drop every key, and its first checkpoint would make
            # the loss look consistent.
            raise CorruptionError(f"{self._pages.path} is empty or missing, but checkpoint "
                                  f"{rec.checkpoint_id} completed: its pages are lost", self._pages.path)
        # After recovery: a crash in the first checkpoint's step 5 can leave a
        # torn page 0 that only the restore makes whole again.
        if not self._pages.is_new():
            self._pages.check_header(_native.file_header_info)
        self._signals = self._core.signals
        fd = self._pages.direct_fd()
        if fd is not None:
            self._core.set_page_fd(fd)
        self._begin_lsn = rec.replay_from_lsn
        new_store = self._pages.is_new()
        if new_store:
            self._core.format_new()
        else:
            try:
                self._core.open_existing(self._pages.page_count_on_disk())
            except CorruptionError as e:
                if e.path is not None:
                    raise
                raise CorruptionError(f"{self._pages.path}: {e}", self._pages.path) from e
        self._wal = _wal.Wal(fs, wal_dir, mode=cfg.wal_mode,
                             segment_size=cfg.wal_segment_size,
                             flush_interval=cfg.wal_flush_interval, direct=cfg.wal_direct,
                             end_lsn=lambda: self._signals.wal_end_lsn,
                             cipher=self._cipher, archive=cfg.wal_archive,
                             archive_size=cfg.wal_archive_size, sealing=self._wal_sealing(cfg))
        t_replay = time.perf_counter()
        try:
            replayed = self._replay(rec.replay_from_lsn)
        except _wal.SegmentMissing as e:
            raise CorruptionError(str(e), e.path) from e
        except _wal_segments.SegmentSizeMismatch as e:
            raise ConfigError(str(e), option="wal_segment_size") from e
        t_replay = time.perf_counter() - t_replay
        if self._wal.sealing == "records":
            kid, key = self._cipher.encoder_key()
            self._core.wal_set_key(key, kid)
        self._core.wal_set_unmap(self._wal.shared_mapping)
        self._core.wal_attach(*self._wal.start())
        report = self._wal.recovery_report
        self.recovery = {"action": rec.action, "pages_restored": rec.pages_restored,
                         "records_replayed": replayed,
                         "wal_damage": list(report.damage) if report else [],
                         "wal_gaps": list(report.gaps) if report else [],
                         "restore_seconds": rec.seconds, "replay_seconds": t_replay,
                         "seconds": time.perf_counter() - t0}
        self._ckpt = _checkpoint.Checkpointer(
            fs, self.path, self, self._pages, self._wal,
            threads=cfg.checkpoint_threads, interval=cfg.checkpoint_interval,
            spread=cfg.checkpoint_spread,
            compression=cfg.recovery_compression,
            compression_level=cfg.recovery_compression_level,
            recovery_data=cfg.recovery_data, cipher=self._cipher,
            first_checkpoint_id=rec.checkpoint_id + 1, autostart=False)
        self._throttle = Throttle(self, throttling.make_policy(cfg.throttling))
        self._closed = False
        self._owner_pid = os.getpid()
        _OPEN_STORES.add(self)
        self._bind_hot_paths()
        self._ckpt.start()
        if rec.pages_restored or replayed or new_store:
            # Recovery ends with a complete checkpoint (DESIGN.md §3), so a
            # crash right after it has a consistent start again.
            self._ckpt.checkpoint(wait=True, reason="recovery")
        self.recovery["seconds"] = time.perf_counter() - t0

    def _wal_sealing(self, cfg) -> str:
        """How an encrypted WAL is sealed: each record by the C encoder when it can load
        libcrypto (wal/recseal.py), else whole blocks at publish (wal/sealed.py)."""
        if _native.wal_seal_available() and cfg.wal_segment_size <= _wal_recseal.MAX_SEGMENT:
            return "records"
        return "blocks"

    def _physical_records(self, wal_dir, lsn):
        """Legacy mode: the WAL's records from `lsn`, read without cutting anything
        (the logical replay that follows does the cutting)."""
        segs = _wal_segments.Segments(self.fs, wal_dir, self.config.wal_segment_size, cipher=self._cipher)
        try:
            segs.scan()
            self._physical_report = _wal.RecoveryReport(lsn)
            yield from _wal_reader.scan(segs, lsn, self._physical_report)
        finally:
            segs.close_readers()

    def _replay(self, from_lsn: int) -> int:
        """Apply committed logical records from `from_lsn`; returns how many.

        The WAL is read through `Wal.recover` with the C scanner sent in
        (`wal.reader.committed_raw`): runs of simple records come in bulk, the
        Python reader reads everything else and decides where the log stops.
        Batches of raw records go to `Core.apply_log`. Once the records to
        replay reach PRELOAD_RECORDS_PER_PAGE per page on disk (most pages
        would miss), the page file is first read sequentially in 8 MiB chunks into
        free page memory (`Core.preload`) instead of one read_page callback
        per miss; an encrypted page file is opened in bulk on the way (pages that
        do not authenticate are zeroed, so they fail the core's check and a miss
        reports them; without libcrypto it is left to the misses).
        """
        core, pages, sig = self._core, self._pages, self._signals
        apply, limit = core.apply_log, 4 << 20
        count = pending = size = 0
        batch = []
        preload = pages.cipher is None or pages.cipher.bulk

        def load_pages():
            f, ps = pages.file, pages.page_size
            step = (8 << 20) // ps
            mv = memoryview(bytearray(step * ps))
            total = pages.page_count_on_disk()
            for first in range(1, total, step):
                if sig.slots_used >= sig.slots_total:
                    break
                got = f.pread_into(mv[:min(step, total - first) * ps], first * ps) // ps
                if got <= 0:
                    break
                if pages.cipher is not None:
                    pages.cipher.open_pages(mv[:got * ps], first, pages.path, ps, skip_bad=True)
                core.preload(first, mv[:got * ps])

        def flush():
            nonlocal count, pending, size, batch, preload
            if preload and count + pending >= PRELOAD_RECORDS_PER_PAGE * pages.page_count_on_disk():
                preload = False
                load_pages()
            try:
                count += apply(batch[0] if len(batch) == 1 else b"".join(batch))
            except _native.Retry as r:
                if r.code != _native.PS_E_NOMEM:
                    raise
                # Nothing is written while replaying (no checkpoint can run before
                # the log's end is known), so every page the replay dirties must fit.
                # The batch was rolled back and the files are untouched: say so.
                raise ConfigError(
                    f"option 'memory_size': {self.config.memory_size:,} bytes "
                    f"({sig.slots_total:,} pages) cannot hold the pages that replaying "
                    f"the WAL of {self.path} dirties; open it once with a larger "
                    f"memory_size (the one it ran with before the crash should do), then close it",
                    option="memory_size") from None
            batch, size, pending = [], 0, 0

        for raw, n in _wal_reader.committed_raw(self._wal.recover(from_lsn), _native.wal_scan):
            if size + len(raw) > limit and batch:
                flush()
            batch.append(raw)
            size += len(raw)
            pending += n
        if batch:
            flush()
        return count

    def _wal_segment(self, seq: int):
        """The C core's next-segment callback; also the WAL-size checkpoint trigger
        (as Ignite checks at rollover), since it runs once per segment."""
        ckpt = self.__dict__.get("_ckpt")
        if ckpt is not None:
            # Only plain reads here: this runs inside the C core's tree lock.
            since = seq * self.config.wal_segment_size - self._begin_lsn
            if since >= self.config.checkpoint_wal_size:
                ckpt.request("wal size")
        return self._wal.segment_for(seq)

    def _bind_hot_paths(self) -> None:
        self._core_put = self._core.put
        self._core_get = self._core.get
        self._core_delete = self._core.delete
        self._wal_commit = self._wal.commit

    # -- argument checks -------------------------------------------------------
    @staticmethod
    def _key(key) -> bytes:
        if type(key) is bytes:
            return key
        if isinstance(key, (bytearray, memoryview)):
            return bytes(key)
        raise TypeError(f"keys are bytes-like, not {type(key).__name__}")

    @staticmethod
    def _value(value) -> bytes:
        if type(value) is bytes:
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise TypeError(f"values are bytes-like, not {type(value).__name__}")

    def _check_open(self):
        if self._closed:
            if getattr(self, "_forked_from", None) is not None:
                raise ClosedError(f"store {self.path} belongs to process {self._forked_from}, which "
                                  "opened it; a forked child must not use it (open the store in the "
                                  "child once that process has closed it)")
            raise ClosedError(f"store {self.path} is closed")

    # -- single operations -----------------------------------------------------
    def put(self, key, value) -> None:
        if self._closed:
            self._check_open()
        if type(key) is not bytes:
            key = self._key(key)
        if type(value) is not bytes:
            value = self._value(value)
        try:
            lsn = self._core_put(key, value)
        except _native.Retry as r:
            lsn = self._retry(r, self._core_put, key, value)
        self._wal_commit(lsn)
        if self._signals.throttle_hint:
            self._throttle.check()

    def get(self, key, default=None):
        if self._closed:
            self._check_open()
        if type(key) is not bytes:
            key = self._key(key)
        try:
            v = self._core_get(key)
        except _native.Retry as r:
            # A miss with every page dirty or in the checkpoint: no slot to
            # read into until the checkpointer cleans some.
            v = self._retry(r, self._core_get, key, read=True)
        return default if v is None else v

    def delete(self, key) -> bool:
        self._check_open()
        key = self._key(key)
        try:
            lsn = self._core_delete(key)
        except _native.Retry as r:
            lsn = self._retry(r, self._core_delete, key)
        if lsn < 0:
            return False
        self._wal_commit(lsn)
        if self._signals.throttle_hint:
            self._throttle.check()
        return True

    def put_many(self, items) -> None:
        """Put every (key, value) pair as one atomic batch (a bulk load)."""
        self._check_open()
        self._apply_packed(_native.pack_puts(items, self._key, self._value))

    def _apply_ops(self, ops) -> None:
        self._apply_packed(_native.pack_ops(
            (op, self._key(k), self._value(v)) for op, k, v in ops))

    def _apply_packed(self, packed: bytes) -> None:
        if not packed:
            return
        try:
            lsn = self._core.apply_batch(packed)
        except _native.Retry as r:
            lsn = self._retry(r, self._core.apply_batch, packed)
        self._wal_commit(lsn)
        if self._signals.throttle_hint:
            self._throttle.check()

    def _retry(self, r, fn, *args, read: bool = False):
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
        """
        roomy_failures = 0
        for _ in range(1000):
            self._throttle.make_room(r)
            roomy = self._all_clean()
            try:
                return fn(*args)
            except _native.Retry as again:
                r = again
                if r.code == _native.PS_E_NOMEM and roomy:
                    roomy_failures += 1
                    if roomy_failures >= 2 or self._all_clean():
                        break
        if read:
            raise Error(f"{self.path}: no page memory freed up to read into ({r})") from r
        # a single put too large for page memory is a transaction too large too
        raise TransactionTooLargeError(
            f"the transaction needs more page memory or checkpoint buffer than {self.path} has ({r})") from r

    def _all_clean(self) -> bool:
        """No dirty page and none held by a checkpoint: all of page memory is evictable."""
        s = self._signals
        return s.dirty_pages == 0 and s.ckpt_pages == 0 and not self._ckpt.progress()["running"]

    # -- dict surface ----------------------------------------------------------
    def __getitem__(self, key):
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
        return self.get(key, _ABSENT) is not _ABSENT

    def __len__(self) -> int:
        self._check_open()
        return self._core.count()

    # -- scans -------------------------------------------------------------------
    @staticmethod
    def _bounds(start, stop, prefix):
        lo = None if start is None else Database._key(start)
        hi = None if stop is None else Database._key(stop)
        if prefix is not None:
            prefix = Database._key(prefix)
            plo, phi = prefix, _prefix_end(prefix)
            lo = plo if lo is None or plo > lo else lo
            if phi is not None:
                hi = phi if hi is None or phi < hi else hi
        return lo, hi

    def scan(self, start=None, stop=None, *, prefix=None, reverse=False):
        """(key, value) pairs in key order within [start, stop), optionally by prefix."""
        self._check_open()
        lo, hi = self._bounds(start, stop, prefix)
        return self._scan(lo, hi, reverse)

    def _scan(self, lo, hi, reverse):
        scan_batch = self._core.scan_batch
        lo_incl, hi_incl = True, False
        step = 64 << 10
        while True:
            if self._closed:
                self._check_open()
            try:
                items = scan_batch(lo, lo_incl, hi, hi_incl, reverse, step)
            except _native.Retry as r:
                items = self._retry(r, scan_batch, lo, lo_incl, hi, hi_incl, reverse, step, read=True)
            if not items:
                return
            yield from items
            if reverse:
                hi, hi_incl = items[-1][0], False
            else:
                lo, lo_incl = items[-1][0], False
            step = min(step * 2, 1 << 20)

    def __iter__(self):
        return (k for k, _ in self.scan())

    def keys(self):
        return iter(self)

    def items(self):
        return self.scan()

    # -- transactions, checkpoints, stats --------------------------------------
    def transaction(self) -> Transaction:
        self._check_open()
        return Transaction(self)

    def checkpoint(self) -> dict:
        """Run a checkpoint now and wait for it; returns its figures."""
        self._check_open()
        try:
            return self._ckpt.checkpoint(wait=True, reason="user")
        except _checkpoint.CheckpointerError:
            self._check_open()        # closed meanwhile: ClosedError, as for any call
            raise

    def verify(self) -> dict:
        """Walk every page: checksums, order, links, free space. Raises CorruptionError."""
        self._check_open()
        try:
            return self._core.verify()
        except _native.Retry as r:    # page memory full: wait for room, as a read does
            return self._retry(r, self._core.verify, read=True)

    def checkpoint_state(self) -> tuple:
        """(a checkpoint is running, checkpoints completed): two reads without a
        lock, cheap enough to call every few operations (stats() takes the WAL's
        and the checkpointer's locks, which writers contend for)."""
        ckpt = self.__dict__.get("_ckpt")     # close() sets _closed, then drops _ckpt
        if self._closed or ckpt is None:
            self._check_open()
        return ckpt.running_and_done()

    def stats(self) -> dict:
        self._check_open()
        out = self._core.stats()
        out.update(self._wal.stats())
        out.update(self._ckpt.stats())
        out["checkpoint_running"] = bool(self._ckpt.progress()["running"])
        out.update(self._throttle.stats())
        out["recovery"] = dict(self.recovery)
        return out

    # -- the checkpointer's page source (docs/architecture.md) ---------------
    @property
    def page_size(self) -> int:
        return self.config.page_size

    def begin(self, checkpoint_id: int) -> _Snapshot:
        ids, lsn = self._core.ckpt_begin(checkpoint_id, b"")
        self._begin_lsn = lsn
        # The hold measured in C, inside the lock: a Python timer would add the
        # wait for the lock and for the GIL afterwards.
        return _Snapshot(ids, lsn, self._signals.ckpt_lock_ns / 1e9)

    def copy_pages(self, page_ids, out) -> None:
        self._core.ckpt_copy(page_ids, out)

    # Recovery-file framing in C, without the GIL (checkpoint/pool.py): whole
    # records for frame_records.codecs, the bulk around the compressor for the rest.
    frame_records = staticmethod(_native.frame_recovery_records)
    compact_pages = staticmethod(_native.compact_pages)
    frame_heads = staticmethod(_native.frame_record_heads)

    def copy_frame(self, page_ids, codec: int, out) -> tuple[int, int]:
        """copy_pages + frame_records in one C pass (checkpoint/pool.py prefers it)."""
        return self._core.ckpt_copy_frame(page_ids, codec, out)

    def release(self, page_ids) -> None:
        self._core.ckpt_release(page_ids)

    def finish(self) -> None:
        self._core.ckpt_end()

    def pages_with_copy(self):
        """In-checkpoint pages holding a copy-on-write copy: written first when the buffer fills."""
        return self._core.ckpt_pages_with_copy()

    def checkpoint_buffer(self):
        s = self._signals
        return s.cow_used, s.cow_capacity, s.cow_peak

    # -- closing -----------------------------------------------------------------
    def close(self) -> None:
        """Checkpoint everything, stop the threads, release the directory."""
        if self._closed:
            return
        self._closed = True
        _OPEN_STORES.discard(self)
        try:
            # An operation that passed its "closed" check before the line above
            # finishes now, and one still to reach the core is refused: none
            # can write to the WAL the close below unmaps.
            self._core.shut()
            self._ckpt.close(final_checkpoint=True)
            self._wal.close()
        finally:
            self._teardown()

    def _abandon(self) -> None:
        """Drop the store as a killed process would: stop threads, no I/O (tests)."""
        self._closed = True
        _OPEN_STORES.discard(self)
        ckpt, wal = self.__dict__.pop("_ckpt", None), self.__dict__.pop("_wal", None)
        for stop in (lambda: ckpt and ckpt.close(final_checkpoint=False),
                     lambda: wal and wal.abandon()):
            try:
                stop()
            except BaseException:  # noqa: BLE001 - the simulated machine is down
                pass
        # the core stays, as after close(): late calls get ClosedError from it,
        # and `_signals` points into it
        core = self.__dict__.get("_core")
        if core is not None:
            core.close()
        self.__dict__.pop("_pages", None)
        lock = self.__dict__.pop("_lock", None)
        if lock is not None:      # a dead process's flock goes with its descriptors
            lock.release()

    def _teardown(self) -> None:
        """Release what is still held, after a clean close or a failed open."""
        ckpt = self.__dict__.pop("_ckpt", None)
        if ckpt is not None:
            ckpt.close(final_checkpoint=False)
        for name in ("_wal", "_core", "_pages", "_lock"):
            # the closed core stays: a call racing with close() reaches it and
            # gets ClosedError from the C core instead of an AttributeError
            obj = self.__dict__.get(name) if name == "_core" else self.__dict__.pop(name, None)
            if obj is None:
                continue
            try:
                obj.release() if name == "_lock" else obj.close()
            except Exception:  # noqa: BLE001 - closing after a failure must not mask it
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


def _prefix_end(prefix: bytes):
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    b = bytearray(prefix)
    while b and b[-1] == 0xFF:
        b.pop()
    if not b:
        return None
    b[-1] += 1
    return bytes(b)


__all__ = ["open", "Database", "ConfigError"]
