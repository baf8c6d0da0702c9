"""Opening a store: DESIGN.md §3's recovery table, step by step.

`open_store` is the whole sequence from a locked directory to a store whose
page file matches one complete checkpoint and whose page memory holds every
acknowledged operation:

  1. markers (cp/) decide what to restore (recovery/restore.py's table):
     nothing; the pages of an interrupted checkpoint from its recovery
     files; or, in "wal" mode, from the WAL's page records since the
     checkpoint before it, read through `wal.LogHistory` (nothing is cut
     before the logical replay has decided where the log ends);
  2. a page file that lost the pages of a completed checkpoint is refused;
     an existing one must say it is ours, with our page size (checked after
     the restore: a crash in the first checkpoint's step 5 can leave a torn
     page 0 that only the restore makes whole);
  3. the C core reads the meta page (or formats a new store);
  4. the logical WAL is replayed from the pointer step 1 returned,
     committed units only; `Wal.recover` cuts the torn tail aside;
  5. the WAL's write position goes to the C encoder;
  6. the checkpointer is made, and if anything was restored or replayed (or
     the store is new) a checkpoint completes before the store is handed
     out, so a crash right after recovery has a consistent start again.

The store's page file and page memory come in as a `RecoveringStore`
(recovery/contracts.py); errors of this layer (RecoveryError and its
subclasses, wal.SegmentMissing, wal.SegmentSizeMismatch) go up for the store
to translate into its own.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field

from pagestore import wal as _wal
from pagestore.diskio import layout
from pagestore.wal.reader import committed_raw

from .contracts import RecoveringStore
from .restore import RecoveryError, recover

__all__ = ["PRELOAD_RECORDS_PER_PAGE", "REPLAY_BATCH_BYTES", "PagesLost", "Opened", "open_store", "replay"]

# Replay reads the whole page file into page memory first (one sequential
# read, no per-miss callback) only once the records to replay reach this many
# per page on disk. r random records touch about P * (1 - e^(-r/P)) of P
# pages, and page memory's first touch (a page fault per fresh page, slow in
# a VM) costs as much as a miss's read, so loading every page pays only when
# most of them will be touched: at r = P, 63 %. Below that, misses load just
# the pages replay needs.
PRELOAD_RECORDS_PER_PAGE = 1.0
# Raw records handed to the core per call: large enough that the call's fixed
# cost vanishes, small enough not to double the memory of a long replay.
REPLAY_BATCH_BYTES = 4 << 20


class PagesLost(RecoveryError):
    """The page file is empty or missing although a checkpoint completed."""


class MarkersLost(RecoveryError):
    """The page file was written by a checkpoint cp/ has no marker of (cp/ or
    its files removed): the WAL it would replay from is unknown."""


@dataclass
class Opened:
    """What `open_store` hands back: the running checkpointer and the figures."""

    checkpointer: object
    report: dict = field(default_factory=dict)     # Database.recovery


def open_store(fs, path: str, store: RecoveringStore, *, cipher, wal_options: dict,
               make_checkpointer, clock=time.perf_counter) -> Opened:
    """Recover the store in `path` and return it running (steps 1-6 above).

    `wal_options` are `wal.Wal`'s keywords; `make_checkpointer(wal,
    first_checkpoint_id, replay_from_lsn)` builds and starts the store's
    checkpointer (the store keeps it, to close it even when this sequence
    fails later).
    `cipher` opens encrypted recovery records and WAL segments.
    """
    t0 = clock()
    wal_dir = posixpath.join(path, layout.WAL_DIR)
    segment_size = wal_options["segment_size"]

    # 1. markers -> restore from recovery files, or from WAL page records
    history = _wal.LogHistory(fs, wal_dir, segment_size, cipher=cipher)
    try:
        rec = recover(fs, path, store, page_size=store.page_size, wal_records=history.records,
                      seal_page=store.seal_page, cipher=cipher,
                      parse_records=store.parse_recovery_records)
    except RecoveryError as e:
        if e.path is not None or history.report is None:
            raise
        # A "wal"-mode restore read the WAL's page records: name where that
        # read stopped on damage, else the WAL itself.
        where, offset, reason = history.damage()
        detail = f"{where} offset {offset}: {reason}" if offset is not None else where
        raise RecoveryError(f"{e} (the WAL's page records: {detail})", where) from e

    # 2. the page file
    if rec.checkpoint_id and store.is_new():
        # A completed checkpoint wrote and fsynced its pages before END: an
        # empty or missing page file lost them. Opening it as a new store
        # would drop every key, and its first checkpoint would make the loss
        # look consistent.
        raise PagesLost(f"{store.pages_path} is empty or missing, but checkpoint "
                        f"{rec.checkpoint_id} completed: its pages are lost", store.pages_path)
    new_store = store.is_new()
    if not new_store:
        store.check_header()
        # The reverse: pages in place from a checkpoint cp/ knows nothing of.
        # Replaying from the older pointer the markers left would drop every
        # key that checkpoint made durable and the WAL trimmed since.
        written_by = store.checkpoint_of_page_file()
        if written_by > rec.checkpoint_id:
            cpdir = posixpath.join(path, layout.CP_DIR)
            raise MarkersLost(f"{cpdir} has no marker of checkpoint {written_by}, which wrote "
                              f"{store.pages_path} (were files of {cpdir} removed?): opening would "
                              "lose acknowledged writes", cpdir)

    # 3. the core reads the meta page
    if new_store:
        store.format_new()
    else:
        store.open_existing()

    # 4. replay the logical WAL from the pointer of step 1
    wal = _wal.Wal(fs, wal_dir, **wal_options)
    store.use_wal(wal)
    t_replay = clock()
    replayed = replay(store, wal.recover(rec.replay_from_lsn))
    t_replay = clock() - t_replay

    # 5. the encoder writes on from where the replay stopped
    store.attach_wal()
    wal_report = wal.recovery_report
    report = {"action": rec.action, "pages_restored": rec.pages_restored,
              "records_replayed": replayed,
              "wal_damage": list(wal_report.damage) if wal_report else [],
              "wal_gaps": list(wal_report.gaps) if wal_report else [],
              # a crash's unfinished records after the end of the log, cut aside (no damage)
              "wal_tail_bytes": wal_report.tail_bytes if wal_report else 0,
              "wal_tail_file": wal_report.tail_file if wal_report else None,
              "restore_seconds": rec.seconds, "replay_seconds": t_replay,
              "seconds": clock() - t0}

    # 6. the checkpoint that ends recovery
    ckpt = make_checkpointer(wal, rec.checkpoint_id + 1, rec.replay_from_lsn)
    if rec.pages_restored or replayed or new_store:
        ckpt.checkpoint(wait=True, reason="recovery")
    report["seconds"] = clock() - t0
    return Opened(ckpt, report)


def replay(store: RecoveringStore, records) -> int:
    """Apply the committed logical records of `records` (a `Wal.recover`); returns how many.

    The C scanner is sent into the reader (`wal.reader.committed_raw`): runs
    of simple records come in bulk, the Python reader reads everything else
    and decides where the log stops. Batches of raw records go to
    `store.apply_log`. Once the records to replay reach
    PRELOAD_RECORDS_PER_PAGE per page on disk (most pages would miss), the
    page file is first read sequentially into free page memory
    (`store.preload`) instead of one miss per page.
    """
    count = pending = size = 0
    batch: list = []
    preload = True

    def flush() -> None:
        nonlocal count, pending, size, batch, preload
        if preload and count + pending >= PRELOAD_RECORDS_PER_PAGE * store.page_count():
            preload = False
            store.preload()
        count += store.apply_log(batch[0] if len(batch) == 1 else b"".join(batch))
        batch, size, pending = [], 0, 0

    for raw, n in committed_raw(records, store.wal_scanner):
        if size + len(raw) > REPLAY_BATCH_BYTES and batch:
            flush()
        batch.append(raw)
        size += len(raw)
        pending += n
    if batch:
        flush()
    return count
