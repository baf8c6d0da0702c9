"""Crash recovery of the page files: DESIGN.md §3's table, decided from cp/.

    markers found                      action            replay from
    no markers                         "replay"          0
    last START has its END             "replay"          that START's wal_lsn
    recovery files newer than the      "ignore_recovery_files"
      last START, no START for them                      the last complete START's wal_lsn
    last START without END             "restore" (recovery files) or
                                       "restore_wal" (page records, legacy mode)
                                                         that START's wal_lsn
    a needed recovery file short,      RecoveryFileCorrupt naming the file: refuse to open
      bad CRC, bad header or missing

Restore writes every page of the interrupted checkpoint back through the
sink, syncs it, passes `recovery.after_restore`, then writes that
checkpoint's END marker. The END is truthful (the page files now hold
exactly the checkpoint's images), and it is what makes recovery idempotent
and safe to crash in any later spot:

* a crash before END leaves the same START-without-END state, and recovery
  restores the same verified images again;
* a crash after END finds a complete checkpoint and replays from its pointer;
* the caller's next checkpoint deletes this checkpoint's recovery files at
  its step 3, which is safe only because this checkpoint now has its END.

Recovery files of a checkpoint without START are left in place as evidence;
the next checkpoint deletes them.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field

from pagestore.checkpoint.format import END, START, Marker, RecoveryFileCorrupt, MarkerCorrupt
from pagestore.checkpoint.markers import cp_dir, read_marker, scan, write_marker
from pagestore.checkpoint.recovery_file import check_recovery_file_header, read_recovery_batches
from pagestore.diskio import layout

from .physical import rebuild_from_wal

__all__ = ["recover", "RecoveryResult", "RecoveryError", "RecoveryFileCorrupt", "MarkerCorrupt"]

_CHUNK_PAGES = 64


class RecoveryError(Exception):
    """Recovery cannot proceed without guessing (missing input, inconsistent page records).

    `path` names the file at fault when one is known (else None).
    """

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


@dataclass
class RecoveryResult:
    replay_from_lsn: int
    action: str                      # "replay", "ignore_recovery_files", "restore", "restore_wal"
    pages_restored: int
    seconds: float
    checkpoint_id: int               # the checkpoint the page files now match (0: none yet; ids start at 1)
    ignored_files: list[str] = field(default_factory=list)   # evidence kept in cp/


def recover(fs, dirpath: str, sink, *, page_size: int, wal_records=None, seal_page=None,
            cipher=None, parse_records=None, clock=time.monotonic) -> RecoveryResult:
    """Make the page files consistent with one checkpoint; say where WAL replay starts.

    `sink` has write_pages(page_ids, images) and sync(). `wal_records(lsn)`
    iterates WAL records (objects with `type`, `payload` and, optionally,
    `lsn`) from `lsn` on; it is needed only to repair a "wal"-mode
    checkpoint. `seal_page(buf, page_id, page_size)` stamps the page CRC into
    an image rebuilt from WAL records (recovery files hold stamped images).
    `cipher` (`open(sealed, context, path)`) opens encrypted recovery records.
    `parse_records` (the C core's `parse_recovery_records`) decodes plain
    recovery records in bulk; without it the Python decoder does all of them.
    The caller then replays the logical WAL from `replay_from_lsn` and
    completes a checkpoint.
    """
    t0 = clock()
    cpdir = cp_dir(dirpath)
    cp = scan(fs, cpdir)
    last = cp.last_start
    orphans = sorted(posixpath.join(cpdir, name) for cid, files in cp.recovery.items()
                     if last is None or cid > last for name in files.values())

    if cp.interrupted is None:
        if last is None:
            return RecoveryResult(0, "ignore_recovery_files" if orphans else "replay", 0,
                                  clock() - t0, 0, orphans)
        start = read_marker(fs, cpdir, last, START)
        end = read_marker(fs, cpdir, last, END)
        if end.wal_lsn != start.wal_lsn:
            raise MarkerCorrupt(posixpath.join(cpdir, layout.marker_name(last, "END")),
                                f"wal_lsn {end.wal_lsn} differs from START's {start.wal_lsn}")
        return RecoveryResult(start.wal_lsn, "ignore_recovery_files" if orphans else "replay", 0,
                              clock() - t0, last, orphans)

    start = read_marker(fs, cpdir, cp.interrupted, START)
    if start.recovery_data == "checkpoint":
        restored = _restore_from_files(fs, cp, start, sink, page_size, cipher, parse_records)
        action = "restore"
    else:
        if wal_records is None:
            raise RecoveryError(f"checkpoint {start.checkpoint_id} was interrupted in 'wal' mode: "
                                "its pages can only be rebuilt from WAL page records (pass wal_records)")
        images = rebuild_from_wal(wal_records(start.prev_wal_lsn), start.prev_wal_lsn, start.wal_lsn,
                                  start.checkpoint_id, page_size)
        if len(images) < start.pages:
            raise RecoveryError(f"WAL page records rebuild {len(images)} pages, checkpoint "
                                f"{start.checkpoint_id} wrote {start.pages}: refusing to open")
        restored = _write_images(sink, images, page_size, seal_page)
        action = "restore_wal"
    sink.sync()
    fs.crash_point("recovery.after_restore")
    write_marker(fs, cpdir, Marker(END, start.checkpoint_id, start.wal_lsn, start.pages,
                                   start.prev_wal_lsn, start.recovery_files, start.recovery_data))
    return RecoveryResult(start.wal_lsn, action, restored, clock() - t0, start.checkpoint_id, orphans)


def _restore_from_files(fs, cp, start: Marker, sink, page_size: int, cipher, parse_records) -> int:
    """Write back every page of the checkpoint's recovery files, each record verified."""
    cid = start.checkpoint_id
    files = cp.recovery_paths(cid)
    pattern = posixpath.join(cp.path, layout.recovery_file_name(cid, 0).replace("000.bin", "<writer>.bin"))
    for w in range(start.recovery_files):
        if w not in files:
            raise RecoveryFileCorrupt(posixpath.join(cp.path, layout.recovery_file_name(cid, w)),
                                      f"missing: START of checkpoint {cid} names {start.recovery_files} files")
    extra = [p for w, p in files.items() if w >= start.recovery_files]
    if extra:
        raise RecoveryFileCorrupt(extra[0], f"START of checkpoint {cid} names only {start.recovery_files} files")
    # Check every header before writing a single page, so a damaged file
    # found late does not leave a half-restored state behind needlessly.
    for w, path in files.items():
        check_recovery_file_header(fs, path, checkpoint_id=cid, writer=w, page_size=page_size)

    restored = 0
    for w, path in files.items():
        for ids, images in read_recovery_batches(fs, path, checkpoint_id=cid, writer=w, page_size=page_size,
                                                 cipher=cipher, parser=parse_records):
            sink.write_pages(ids, images)
            restored += len(ids)
    if restored != start.pages:
        raise RecoveryFileCorrupt(pattern, f"files hold {restored} pages, START of checkpoint {cid} "
                                           f"says {start.pages}")
    return restored


def _write_images(sink, images: dict, page_size: int, seal_page) -> int:
    ids = sorted(images)
    for i in range(0, len(ids), _CHUNK_PAGES):
        chunk = ids[i:i + _CHUNK_PAGES]
        buf = bytearray(len(chunk) * page_size)
        for j, pid in enumerate(chunk):
            view = memoryview(buf)[j * page_size:(j + 1) * page_size]
            view[:] = images[pid]
            if seal_page is not None:
                seal_page(view, pid, page_size)
        sink.write_pages(chunk, memoryview(buf))
    return len(ids)
