"""Rebuilding page images from WAL page records (recovery_data="wal", legacy).

In legacy mode (Ignite before IEP-113, PostgreSQL full-page writes) the
first modification of a page after a checkpoint begins logs the page's full
image (PAGE_SNAPSHOT); later modifications until the next checkpoint log the
byte ranges they changed (PAGE_DELTA). The pages of checkpoint N are exactly
the pages dirtied between checkpoint N-1's CHECKPOINT record and N's, so their
images at N's pointer are rebuilt by applying, in log order, every page record
from N-1's pointer (START's prev_wal_lsn) up to N's (START's wal_lsn).
Payload layouts are in checkpoint/pagerecords.py.

The C core guarantees that every page of checkpoint N has a PAGE_SNAPSHOT in
that range: a page changed without page records (built before the WAL
existed, changed by replay, page 0's meta fields) is logged whole by
ckpt_begin before the CHECKPOINT record. The range may also hold records of
an earlier incarnation of page memory (a crashed process's operations that
never committed, after its last checkpoint began): the reset record a core
logs before its first page record (checkpoint/pagerecords.py) makes the
rebuild forget them.

The rebuilt image is the checkpoint image but for the two fields ckpt_copy
stamps: the checkpoint_id field of the common page header
(checkpoint/page_header.py) is set here, and the CRC is stamped by the
caller's seal_page.

A delta for a page with no snapshot earlier in the range means the log does
not hold what this mode promises; rebuilding would be a guess, so it raises.
Images are held in memory until the range ends (a later delta may change
any of them), which bounds legacy-mode recovery by the checkpoint's size.
"""

from __future__ import annotations

from typing import Iterable, Optional, Protocol

from pagestore.checkpoint.page_header import stamp_checkpoint_id
from pagestore.checkpoint.pagerecords import (CHECKPOINT, PAGE_DELTA, PAGE_SNAPSHOT, PageRecordsInvalid,
                                    apply_page_delta, checkpoint_id_of, decode_page_snapshot, is_reset)

__all__ = ["PageRecordsInvalid", "PageRecord", "rebuild_from_wal"]


class PageRecord(Protocol):
    """A WAL record as the rebuild reads it (`wal.Record` is one)."""

    type: int
    payload: bytes
    lsn: Optional[int]            # None: records of a source that does not know LSNs


def rebuild_from_wal(records: Iterable[PageRecord], from_lsn: int, to_lsn: int, checkpoint_id: int,
                     page_size: int) -> dict:
    """{page_id: bytearray image} as of `to_lsn`, from records starting at `from_lsn`.

    Stops at the first record at or past `to_lsn` when records carry an `lsn`
    (a CHECKPOINT record of the same id earlier in the range was logged by
    a crashed process that never wrote its START, and is passed over);
    records whose `lsn` is None stop at the CHECKPOINT record of `checkpoint_id`.
    Logical records are skipped (they are replayed afterwards); a reset
    record drops every image rebuilt so far.
    """
    images: dict[int, bytearray] = {}
    for rec in records:
        lsn = rec.lsn
        if lsn is not None:
            if lsn < from_lsn:
                continue
            if lsn >= to_lsn:
                break
        elif rec.type == CHECKPOINT and checkpoint_id_of(rec.payload) == checkpoint_id:
            break
        if rec.type == PAGE_SNAPSHOT:
            pid, image = decode_page_snapshot(rec.payload, page_size)
            images[pid] = bytearray(image)
        elif rec.type == PAGE_DELTA:
            if is_reset(rec.payload):
                images.clear()
            else:
                apply_page_delta(images, rec.payload, page_size)
    for image in images.values():
        stamp_checkpoint_id(image, checkpoint_id)
    return images
