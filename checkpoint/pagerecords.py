"""Payloads of the WAL page records of recovery_data="wal" (legacy mode).

docs/wal-format.md fixes the records' framing; this module fixes how a page
image and a page delta are packed into their payloads, with the same codecs
as recovery files, so the writer (the store, or tests) and the reader
(recovery/physical.py) share one definition:

    PAGE_SNAPSHOT  page_id u64, codec u8, len u32, image (len bytes)
    PAGE_DELTA     page_id u64, nranges u16, then per range: off u16, len u16, bytes

The snapshot's codec byte holds a codec id of checkpoint/compression.py in
its low 7 bits; bit 7 (0x80) says the image was stored without its free gap
(SKIP_GARBAGE implies it). The C encoder writes codec 0 (whole image) or
0x81 (skip_garbage, gap dropped); the general codecs come only from Python.

A PAGE_DELTA of page id RESET_PAGE_ID with no range is the reset record: the
C core logs it before its first page record after attaching to the WAL, and
a rebuild forgets every image it holds when it meets one (page records
before it describe an earlier incarnation of page memory, e.g. operations
of a crashed process that never committed).
"""

from __future__ import annotations

import struct

from .compression import SKIP_GARBAGE, PageCodec
from .format import GAP_SKIPPED

__all__ = ["CHECKPOINT", "PAGE_SNAPSHOT", "PAGE_DELTA", "SNAPSHOT_GAP_BIT", "RESET_PAGE_ID",
           "PageRecordsInvalid", "pack_page_snapshot", "pack_page_delta", "pack_reset",
           "is_reset", "decode_page_snapshot", "apply_page_delta", "checkpoint_id_of"]

# Record types of docs/wal-format.md.
CHECKPOINT, PAGE_SNAPSHOT, PAGE_DELTA = 4, 5, 6
SNAPSHOT_GAP_BIT = 0x80
RESET_PAGE_ID = (1 << 64) - 1

_SNAP = struct.Struct("<QBI")
_DELTA = struct.Struct("<QH")
_RANGE = struct.Struct("<HH")
_CKPT_ID = struct.Struct("<Q")


class PageRecordsInvalid(Exception):
    """WAL page records that cannot rebuild a page without guessing."""


def pack_page_snapshot(page_id: int, page, codec: PageCodec) -> bytes:
    """PAGE_SNAPSHOT payload for `page` compressed with `codec`."""
    cid, flags, data = codec.encode(page)
    byte = cid | (SNAPSHOT_GAP_BIT if flags & GAP_SKIPPED else 0)
    return _SNAP.pack(page_id, byte, len(data)) + data


def pack_page_delta(page_id: int, ranges) -> bytes:
    """PAGE_DELTA payload for [(offset, bytes), ...]."""
    parts = [_DELTA.pack(page_id, len(ranges))]
    for off, data in ranges:
        parts.append(_RANGE.pack(off, len(data)) + bytes(data))
    return b"".join(parts)


def pack_reset() -> bytes:
    """PAGE_DELTA payload of the reset record."""
    return _DELTA.pack(RESET_PAGE_ID, 0)


def is_reset(payload) -> bool:
    """True for the reset record's PAGE_DELTA payload (page id RESET_PAGE_ID, no range)."""
    return len(payload) == _DELTA.size and _DELTA.unpack_from(payload, 0) == (RESET_PAGE_ID, 0)


def checkpoint_id_of(payload) -> int | None:
    """The checkpoint id a CHECKPOINT record's payload starts with."""
    return _CKPT_ID.unpack_from(payload, 0)[0] if len(payload) >= _CKPT_ID.size else None


def decode_page_snapshot(payload, page_size: int) -> tuple[int, bytes]:
    """(page_id, image) of a PAGE_SNAPSHOT payload, decompressed; PageRecordsInvalid
    if malformed."""
    if len(payload) < _SNAP.size:
        raise PageRecordsInvalid(f"PAGE_SNAPSHOT payload of {len(payload)} bytes")
    pid, byte, n = _SNAP.unpack_from(payload, 0)
    if len(payload) != _SNAP.size + n:
        raise PageRecordsInvalid(f"PAGE_SNAPSHOT of page {pid}: length {n} but {len(payload) - _SNAP.size} bytes")
    codec = byte & ~SNAPSHOT_GAP_BIT
    flags = GAP_SKIPPED if (byte & SNAPSHOT_GAP_BIT or codec == SKIP_GARBAGE) else 0
    try:
        return pid, PageCodec.decode(codec, flags, payload[_SNAP.size:], page_size)
    except ValueError as exc:
        raise PageRecordsInvalid(f"PAGE_SNAPSHOT of page {pid}: {exc}") from None


def apply_page_delta(images: dict, payload, page_size: int) -> None:
    """Patch images[page_id] (a bytearray) with the delta's ranges."""
    if len(payload) < _DELTA.size:
        raise PageRecordsInvalid(f"PAGE_DELTA payload of {len(payload)} bytes")
    pid, nranges = _DELTA.unpack_from(payload, 0)
    page = images.get(pid)
    if page is None:
        raise PageRecordsInvalid(f"PAGE_DELTA for page {pid} without an earlier PAGE_SNAPSHOT in the range")
    pos = _DELTA.size
    for _ in range(nranges):
        if pos + _RANGE.size > len(payload):
            raise PageRecordsInvalid(f"PAGE_DELTA of page {pid} is short")
        off, n = _RANGE.unpack_from(payload, pos)
        pos += _RANGE.size
        if off + n > page_size or pos + n > len(payload):
            raise PageRecordsInvalid(f"PAGE_DELTA of page {pid}: range [{off}, {off + n}) out of bounds")
        page[off:off + n] = payload[pos:pos + n]
        pos += n
    if pos != len(payload):
        raise PageRecordsInvalid(f"PAGE_DELTA of page {pid}: {len(payload) - pos} trailing bytes")
