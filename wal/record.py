"""One WAL record: the `Record` a reader yields, and reading one from a segment buffer.

`read_record` applies the validity rule of wal/format.py to the record at
one offset of a segment buffer; `segment_records` walks a segment from its
first record to the first invalid one. wal/reader.py builds the recovery
scan on these, wal/stop.py judges where it stopped.
"""

from __future__ import annotations

import struct

from .format import (BLOCK, BLOCK_HDR_LEN, CHECKPOINT, COMMIT, DELETE, END, FIRST_RECORD, PUT, REC_HDR,
                     REC_HDR_LEN, ROLLBACK, TYPE_NAMES, crc32c, decode_block_header, payload_well_formed,
                     physical_end)

__all__ = ["RUN", "Record", "RecordRun", "read_record", "record_offset", "segment_records"]

RUN = 0   # the `type` of a RecordRun: not a record type of the format

_rec = struct.Struct(REC_HDR)
_q = struct.Struct("<Q")
_put = struct.Struct("<QII")
_del = struct.Struct("<QI")
_kv = struct.Struct("<II")


class Record:
    """One valid record. `raw` is its contiguous bytes (header included, block headers removed)."""

    __slots__ = ("lsn", "end_lsn", "type", "raw")

    def __init__(self, lsn: int, end_lsn: int, rtype: int, raw: bytes):
        self.lsn = lsn
        self.end_lsn = end_lsn
        self.type = rtype
        self.raw = raw

    @property
    def payload(self) -> bytes:
        """The record's payload (its bytes after the record header)."""
        return self.raw[REC_HDR_LEN:]

    @property
    def txid(self):
        """The transaction id of PUT/DELETE/COMMIT/ROLLBACK records (0 = none), else None."""
        if self.type in (PUT, DELETE, COMMIT, ROLLBACK):
            return _q.unpack_from(self.raw, REC_HDR_LEN)[0]
        return None

    @property
    def key(self):
        """The key of a PUT or DELETE, else None."""
        if self.type == PUT:
            return self.raw[33:33 + _put.unpack_from(self.raw, REC_HDR_LEN)[1]]
        if self.type == DELETE:
            return self.raw[29:]
        return None

    @property
    def value(self):
        """The value of a PUT, else None."""
        if self.type == PUT:
            return self.raw[33 + _put.unpack_from(self.raw, REC_HDR_LEN)[1]:]
        return None

    @property
    def nops(self):
        """The operation count of a COMMIT, else None."""
        return _del.unpack_from(self.raw, REC_HDR_LEN)[1] if self.type == COMMIT else None

    @property
    def checkpoint_id(self):
        """The checkpoint id of a CHECKPOINT, else None."""
        return _q.unpack_from(self.raw, REC_HDR_LEN)[0] if self.type == CHECKPOINT else None

    def __repr__(self) -> str:
        return f"Record({TYPE_NAMES.get(self.type, self.type)}, lsn={self.lsn}, end_lsn={self.end_lsn})"


class RecordRun:
    """Consecutive valid PUT/DELETE records with txid 0, found by a bulk scanner.

    `raw` is their contiguous bytes (block headers removed), `count` how many,
    `lsn` the first one's LSN and `end_lsn` the end of the last. `scan` yields
    these only to a consumer that sent it a scanner (see `scan`).
    """

    __slots__ = ("lsn", "end_lsn", "raw", "count")
    type = RUN

    def __init__(self, lsn: int, end_lsn: int, raw, count: int):
        self.lsn = lsn
        self.end_lsn = end_lsn
        self.raw = raw
        self.count = count

    def __repr__(self) -> str:
        return f"RecordRun({self.count} records, lsn={self.lsn}, end_lsn={self.end_lsn})"


# -- reading one record ----------------------------------------------------------
def _block_ok(buf, base: int, b: int, good: set) -> bool:
    if b in good:
        return True
    h = decode_block_header(buf, b)
    if h is None or h[1] != base + b:
        return False
    good.add(b)
    return True


def _gather(buf, base: int, o: int, n: int, good) -> bytes | None:
    """n record bytes from offset o, skipping block headers (checked unless good is None)."""
    out = bytearray()
    while n > 0:
        b = o - o % BLOCK
        if o == b:
            if good is not None and not _block_ok(buf, base, b, good):
                return None
            o += BLOCK_HDR_LEN
        take = min(n, b + BLOCK - o)
        out += buf[o:o + take]
        o += take
        n -= take
    return bytes(out)


def read_record(buf, base: int, o: int, size: int, good: set, opener=None):
    """The valid Record at segment offset o, or a string saying why there is none.
    A valid END trailer comes back as a Record of type END (the log ends at its lsn).

    `opener` (wal/recseal.py) opens the records of a record-sealed segment:
    the Record holds the plaintext form, its end_lsn the stored length."""
    b = o - o % BLOCK
    if b not in good and not _block_ok(buf, base, b, good):
        return "bad block header"
    if o + REC_HDR_LEN <= b + BLOCK:
        crc, length, lsn, rtype = _rec.unpack_from(buf, o)
    else:
        if physical_end(o, REC_HDR_LEN) > size:
            return "no room for a record"
        head = _gather(buf, base, o, REC_HDR_LEN, good)
        if head is None:
            return "bad block header in the record's span"
        crc, length, lsn, rtype = _rec.unpack(head)
    x = base + o
    if lsn != x:
        return f"lsn field {lsn} is not the record's lsn {x}"
    if length < REC_HDR_LEN:
        return f"bad length {length}"
    end = o + length
    if end <= b + BLOCK:                      # the common case: inside one block
        raw = bytes(buf[o:end])
        body = raw[4:]
    else:
        end = physical_end(o, length)
        if end > size:
            return f"length {length} does not fit in the segment"
        raw = _gather(buf, base, o, length, good)
        if raw is None:
            return "bad block header in the record's span"
        body = memoryview(raw)[4:]
    if crc32c(body) != crc:
        return "crc mismatch"
    if rtype == END:
        # the end trailer is never sealed and takes no log space
        return Record(x, base + end, END, raw) if length == REC_HDR_LEN else f"malformed payload for type {END}"
    if opener is not None:
        raw = opener(o, raw)
        if raw is None:
            return "sealed record does not authenticate (a changed byte, or not this store's key)"
        length = len(raw)
    if rtype == PUT:
        if length < 33 or 33 + sum(_kv.unpack_from(raw, 25)) != length:
            return "malformed PUT payload"
    elif not payload_well_formed(rtype, raw):
        return f"malformed payload for type {rtype}"
    return Record(x, base + end, rtype, raw)


def record_offset(p: int, base: int, size: int) -> int | None:
    """Offset in its segment of the record that begins at LSN `p` (a block
    header at a block's start is stepped over), or None when no record can
    begin there: the segment's end, or inside a block header."""
    o = p - base
    if o < FIRST_RECORD:
        o = FIRST_RECORD
    elif o % BLOCK == 0:
        o += BLOCK_HDR_LEN
    if o >= size or o % BLOCK < BLOCK_HDR_LEN:
        return None
    return o


def segment_records(buf, base: int, size: int, opener=None):
    """The valid records of one segment buffer, from its first record to the first
    invalid one or the END trailer (no lookahead: for tools and the archive, not for
    recovery)."""
    good: set = set()
    o = record_offset(base, base, size)
    while o is not None:
        rec = read_record(buf, base, o, size, good, opener)
        if type(rec) is str or rec.type == END:
            return
        yield rec
        o = record_offset(rec.end_lsn, base, size)
