"""Rebuilding page images from WAL page records (recovery_data="wal", legacy).

In legacy mode (Ignite before IEP-113, PostgreSQL full-page writes) the
first modification of a page after a checkpoint begins logs the page's full
image (PAGE_SNAPSHOT); later modifications until the next checkpoint log the
byte ranges they changed (PAGE_DELTA). The pages of checkpoint N are exactly
the pages dirtied between checkpoint N-1's CHECKPOINT record and N's, so their
images at N's pointer are rebuilt by applying, in log order, every page record
from N-1's pointer (START's prev_wal_lsn) up to N's (START's wal_lsn).
Payload layouts are in checkpoint/pagerecords.py.

A delta for a page with no snapshot earlier in the range means the log does
not hold what this mode promises; rebuilding would be a guess, so it raises.
Images are held in memory until the range ends (a later delta may change
any of them), which bounds legacy-mode recovery by the checkpoint's size.
"""

from __future__ import annotations

from checkpoint.pagerecords import (CHECKPOINT, PAGE_DELTA, PAGE_SNAPSHOT, PageRecordsInvalid,
                                    apply_page_delta, checkpoint_id_of, decode_page_snapshot)

__all__ = ["PageRecordsInvalid", "rebuild_from_wal"]


def rebuild_from_wal(records, from_lsn: int, to_lsn: int, checkpoint_id: int, page_size: int) -> dict:
    """{page_id: bytearray image} as of `to_lsn`, from records starting at `from_lsn`.

    Stops at the first record at or past `to_lsn` (when records carry
    `lsn`), or at the CHECKPOINT record of `checkpoint_id`, whichever comes
    first; logical records are skipped (they are replayed afterwards).
    """
    images: dict[int, bytearray] = {}
    for rec in records:
        lsn = getattr(rec, "lsn", None)
        if lsn is not None:
            if lsn < from_lsn:
                continue
            if lsn >= to_lsn:
                break
        if rec.type == CHECKPOINT and checkpoint_id_of(rec.payload) == checkpoint_id:
            break
        if rec.type == PAGE_SNAPSHOT:
            pid, image = decode_page_snapshot(rec.payload, page_size)
            images[pid] = bytearray(image)
        elif rec.type == PAGE_DELTA:
            apply_page_delta(images, rec.payload, page_size)
    return images
