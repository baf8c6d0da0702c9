"""The checkpointer's page source and framing fast path, over the C core.

`CorePageSource` implements `checkpoint.PageSource` and `CoreFraming`
implements `checkpoint.RecoveryFraming`; the store hands both to its
`Checkpointer` and keeps them to itself, so no checkpoint hook is reachable
from a `Database` (a `begin` from user code would have broken every later
checkpoint). The calls and their threads are listed in checkpoint/contracts.py;
what each C call locks is in pagestore/csrc/ps_api.h.
"""

from __future__ import annotations

from . import _native

__all__ = ["CoreSnapshot", "CorePageSource", "CoreFraming"]


class CoreSnapshot:
    """A `checkpoint.Snapshot`: the page ids the core flagged, the CHECKPOINT
    record's LSN, and the tree-lock hold measured in C."""
    __slots__ = ("page_ids", "wal_lsn", "lock_seconds")

    def __init__(self, page_ids, wal_lsn: int, lock_seconds: float):
        self.page_ids, self.wal_lsn, self.lock_seconds = page_ids, wal_lsn, lock_seconds


class CorePageSource:
    """The C core as a `checkpoint.PageSource`.

    `begin_lsn` is the replay pointer of the checkpoint that began last (the
    one recovery starts from before any began): the WAL-size trigger measures
    the log written since.
    """

    def __init__(self, core, page_size: int, begin_lsn: int = 0):
        self._core = core
        self._signals = core.signals
        self.page_size = page_size
        self.begin_lsn = begin_lsn

    def begin(self, checkpoint_id: int) -> CoreSnapshot:
        """Snapshot and flag the dirty pages and log CHECKPOINT, under the tree write lock."""
        ids, lsn = self._core.ckpt_begin(checkpoint_id)
        self.begin_lsn = lsn
        # The hold measured in C, inside the lock: a Python timer would add the
        # wait for the lock and for the GIL afterwards.
        return CoreSnapshot(ids, lsn, self._signals.ckpt_lock_ns / 1e9)

    def copy_pages(self, page_ids, out) -> None:
        """Checkpoint images (COW copy or live page), CRC stamped, into `out`."""
        self._core.ckpt_copy(page_ids, out)

    def release(self, page_ids) -> None:
        """The pages are on disk: drop their copies and flags."""
        self._core.ckpt_release(page_ids)

    def finish(self) -> None:
        """The checkpoint is over."""
        self._core.ckpt_end()

    def pages_with_copy(self):
        """In-checkpoint pages holding a copy-on-write copy."""
        return self._core.ckpt_pages_with_copy()

    def checkpoint_buffer(self) -> tuple:
        """(used, capacity, peak) of the checkpoint buffer, read without a lock."""
        s = self._signals
        return s.cow_used, s.cow_capacity, s.cow_peak


class CoreFraming:
    """Recovery-file framing in C, without the GIL (checkpoint/recovery_file.py):
    whole records for the codecs `frame_records.codecs` names, the bulk around
    the compressor for the rest, and copy + frame in one pass."""

    frame_records = staticmethod(_native.frame_recovery_records)
    compact_pages = staticmethod(_native.compact_pages)
    frame_heads = staticmethod(_native.frame_record_heads)

    def __init__(self, core):
        self._core = core

    def copy_frame(self, page_ids, codec: int, out) -> tuple:
        """`copy_pages` + `frame_records` in one C pass: (bytes, gap fallbacks)."""
        return self._core.ckpt_copy_frame(page_ids, codec, out)
