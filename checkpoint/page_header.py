"""The common page header: the first 32 bytes of every page, one definition.

Every page of the page file (`pages.dat`, page `i` at offset `i * P`), every
image in a recovery file or a PAGE_SNAPSHOT WAL record starts with it. The C
core (pagestore/csrc/, docs/page-format.md) writes it; the Python code that
reads or stamps a field of it imports the offsets from here. All integers
are little-endian:

    off  size  field
      0     4  crc32c over the whole page (all P bytes) with this field as zero
      4     2  type: 1 meta, 2 leaf, 3 inner, 4 overflow, 5 freelist
      6     2  format = 1
      8     8  page_id
     16     8  checkpoint_id of the checkpoint that wrote this image
     24     2  free_lo  \\ the page's free gap [free_lo, free_hi): always all
     26     2  free_hi  /  zeros, so recovery-data codecs may drop it
     28     4  reserved = 0

Validity rule. A page image read for page id `n` is valid iff it is whole
(P bytes), its crc32c matches, and its page_id field equals `n`; anything
else is a failed read (DESIGN.md §4.5), never data. In page memory the crc
and checkpoint_id fields are not maintained; the core stamps both into the
copy a checkpoint writes, and recovery stamps them into an image it rebuilds
(`stamp_checkpoint_id`, then the core's seal_page for the crc).

This module sits in the checkpoint layer because that is the lowest layer
that reads the header (the skip_garbage codec reads the gap, recovery stamps
checkpoint_id); the facade and the tools import it from here.
"""

from __future__ import annotations

import struct

__all__ = [
    "HEADER", "HEADER_SIZE", "CRC_AT", "TYPE_AT", "FORMAT_AT", "PAGE_ID_AT", "CHECKPOINT_ID_AT",
    "FREE_LO_AT", "FREE_HI_AT", "META", "LEAF", "INNER", "OVERFLOW", "FREELIST", "TYPE_NAMES",
    "BODY_AT", "PAGE_SIZES", "page_id_of", "type_of", "checkpoint_id_of", "free_gap", "stamp_checkpoint_id",
]

# DO NOT CHANGE THESE VALUES: every page on disk is laid out this way.
HEADER = struct.Struct("<IHHQQHHI")   # crc, type, format, page_id, checkpoint_id, free_lo, free_hi, reserved
HEADER_SIZE = 32
assert HEADER.size == HEADER_SIZE

CRC_AT = 0
TYPE_AT = 4
FORMAT_AT = 6
PAGE_ID_AT = 8
CHECKPOINT_ID_AT = 16
FREE_LO_AT = 24
FREE_HI_AT = 26
BODY_AT = HEADER_SIZE                 # where each page type's own fields begin

PAGE_SIZES = (1024, 2048, 4096, 8192, 16384)   # P: a power of two, 1 KiB to 16 KiB

META, LEAF, INNER, OVERFLOW, FREELIST = 1, 2, 3, 4, 5
TYPE_NAMES = {META: "meta", LEAF: "leaf", INNER: "inner", OVERFLOW: "overflow", FREELIST: "freelist"}

_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")
_GAP = struct.Struct("<HH")


def page_id_of(page) -> int:
    """The page_id field (what the page says it is; compare with where it was read)."""
    return _U64.unpack_from(page, PAGE_ID_AT)[0]


def type_of(page) -> int:
    """The type field (META ... FREELIST for a page of ours)."""
    return _U16.unpack_from(page, TYPE_AT)[0]


def checkpoint_id_of(page) -> int:
    """The checkpoint_id field: the checkpoint that wrote this image."""
    return _U64.unpack_from(page, CHECKPOINT_ID_AT)[0]


def free_gap(page) -> tuple[int, int]:
    """(free_lo, free_hi) as the header states them; the caller judges plausibility."""
    return _GAP.unpack_from(page, FREE_LO_AT)


def stamp_checkpoint_id(image, checkpoint_id: int) -> None:
    """Write the checkpoint_id field of a writable image (its crc is then stale)."""
    _U64.pack_into(image, CHECKPOINT_ID_AT, checkpoint_id)
