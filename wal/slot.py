"""A WAL slot file as found on disk, and a segment handed to the writer.

A slot is a file `<wal dir>/seg-NNNNNNNN.wal` (diskio/layout.py) of
`segment_size` bytes; the segment header inside (wal/format.py) says which
`seq` it holds. `read_slot` reads what a slot is from its first bytes;
`LiveSegment` is one handed to the writer (wal/segments.py).
"""

from __future__ import annotations

from .format import BLOCK, SEG_HDR_LEN, decode_segment_header

__all__ = ["LiveSegment", "SegmentSizeMismatch", "Slot", "read_slot"]


class SegmentSizeMismatch(ValueError):
    """A segment file of another segment_size than the one the store was opened with."""


class Slot:
    """One slot file as found on disk: its number, path, size and header."""

    __slots__ = ("number", "path", "size", "header", "blank")

    def __init__(self, number: int, path: str, size: int, header, blank: bool = True):
        self.number = number
        self.path = path
        self.size = size
        self.header = header  # SegmentHeader or None (fresh, torn or foreign)
        self.blank = blank    # header and first record block all zero (never written)

    @property
    def seq(self):
        """The segment the slot holds, per its header; None for a slot without a valid header."""
        return None if self.header is None else self.header.seq

    def __repr__(self) -> str:
        return f"Slot({self.path}, seq={self.seq}, size={self.size})"


def read_slot(open_file, path: str, number: int) -> Slot:
    """The Slot of a slot file from its first bytes; `open_file(path)` gives a diskio File."""
    f = open_file(path)
    try:
        size = f.size()
        raw = f.pread(min(size, SEG_HDR_LEN), 0)
        # Blank means never written, so free to reuse as a fresh segment. A
        # zeroed header alone is not that: records after it mean the header
        # was damaged, and the slot is damage to report and set aside, not a
        # slot whose records may be overwritten unreported.
        blank = not any(raw) and (size <= BLOCK or not any(f.pread(min(size - BLOCK, BLOCK), BLOCK)))
    finally:
        f.close()
    return Slot(number, path, size, decode_segment_header(raw), blank)


class LiveSegment:
    """A segment handed to the writer: its slot, buffer, mapping (mmap path) and file."""

    __slots__ = ("slot", "mapping", "buffer", "file", "busy", "doomed", "sealer", "filled",
                 "zeroed", "zeroing_from")

    def __init__(self, slot: Slot, mapping, buffer, file, sealer=None):
        self.slot = slot
        self.mapping = mapping  # diskio Mapping (mmap path) or None (pwrite path)
        self.buffer = buffer    # what the encoder writes into; None once released
        self.file = file
        self.busy = 0         # syncs running on `file`
        self.doomed = False   # trimmed while busy: the last sync closes it
        self.sealer = sealer  # RecordSealer (sealer="python"), set at the first publish
        self.filled = 0       # bytes [0, filled) of the file are allocated (sizing)
        # pwrite path: the grower has no zeros left to write below `zeroed`,
        # and is writing some from `zeroing_from` on (wal/growth.py)
        self.zeroed = 0
        self.zeroing_from = float("inf")
