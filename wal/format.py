"""WAL on-disk format, version 1: the single source shared by writer and reader.

docs/wal-format.md is the prose version of this table; the C encoder
(pagestore/csrc/walenc.c) follows the same document, and a test checks that
it produces exactly the bytes `StreamWriter` produces. All integers are
little-endian.

Logical addresses
  segment_size S (a multiple of BLOCK) and BLOCK = 4096 are fixed for a store.
  LSN of a byte = seq * S + offset in segment; seq is the absolute segment
  number. Block 0 of a segment is the segment header block; every later block
  starts with a 24-byte block header, and record bytes fill the rest of the
  block, continuing after the next block header. A record never spans two
  segments. The first record of a segment starts at offset 4096 + 24.

Segment header (offset 0 of block 0; the rest of block 0 is zero)
   0  8  magic b"PSWALSEG"
   8  2  format version = 1
  10  2  flags, bits: 2 = record-sealed (encrypted: each record's payload
         sealed, header fields 44..69 added, wal/recseal.py); 4 = marked:
         block headers carry the written mark (below); 1 = block-sealed, an
         encoding of earlier versions, refused. Segments written by this
         version have bit 4; older ones (0 or 2) are read as before.
  12  4  block size = 4096
  16  8  segment_size
  24  8  seq
  32  8  prev_end_lsn: end LSN of the last valid record before this segment
  40  4  crc32c of bytes 0..40

Block header (offset 0 of every block >= 1)
   0  4  magic 0x4C575350 (b"PSWL")
   4  2  format version = 1
   6  2  first_record: offset in this block of the first record that begins
         in it; 0xFFFF if a record's continuation fills the block
   8  8  block_lsn: LSN of byte 0 of this block
  16  4  mark: block_lsn - W, where W is the written mark when the writer
         wrote this header: every record ending at or below W was complete
         then (W <= block_lsn always). 0xFFFFFFFF: W unknown (too far back).
         0 in segments without flag bit 4 (reserved there, not read).
  20  4  crc32c of bytes 0..20

Record (block headers are skipped, not counted)
   0  4  crc32c of record bytes 4..length
   4  4  length of the whole record, header included (>= 17)
   8  8  lsn of the record's first byte
  16  1  type
  17  .  payload (PUT: txid u64, klen u32, vlen u32, key, value;
         DELETE: txid u64, klen u32, key; COMMIT: txid u64, nops u32;
         CHECKPOINT: checkpoint_id u64, opaque bytes; PAGE_SNAPSHOT: page_id
         u64, codec u8, len u32, image; PAGE_DELTA: page_id u64, nranges u16,
         then off u16, len u16, bytes per range; ROLLBACK: txid u64;
         END: no payload, see below)

End trailer (END, type 8: a record header alone, length 17, never sealed)
  After every record the writer writes an END at the record's end E, where
  the next record will begin (after the block header, written then with its
  mark, if E starts a block; across the next block header, as records run,
  if fewer than 17 bytes are left in E's block); the next record overwrites
  it. The END is written after the record is complete, so a whole END (crc,
  length 17, lsn field equal to its LSN) proves every record before it was
  complete. A record is placed in a segment only if an END still fits after
  it; otherwise it goes to the next segment, so the last record of every
  segment is followed by its END. Replay ends the segment at a valid END
  (it is not replayed and is no tail) and goes on to the next segment as
  at any stop. The END takes no log space: the log's end LSN stays E.
  Logs written before the END read as before (no flag: a valid END cannot
  appear in them by chance, its crc and its own LSN are checked).

Validity rule
  A record at LSN x is valid iff its block and every block it crosses has a
  valid block header (magic, version, crc, block_lsn equal to the block's
  LSN), 17 <= length and it fits in the segment, its lsn field equals x, its
  crc32c matches, and its type is known with a payload of the right shape.
  Replay stops at the first invalid record or at an END. Moving from segment seq to seq+1
  is valid only if seq+1 has a valid header whose prev_end_lsn equals the
  end LSN of the last valid record read.

Torn tail or damage (marked segments)
  The writer appends records one after the other and writes a block header
  when it first enters a block, so a process killed mid-append leaves at
  most the record it was writing incomplete, and no header written after
  that record began carries a mark beyond its start. So at a stop at LSN x
  the rest of the log is a torn tail (cut aside, no damage) unless the log
  says a record at or after x was complete: a valid block header of this
  incarnation at or after x (later blocks of the stop's segment, blocks of
  later segments) whose mark W > x, a whole record or END after x (in x's
  block, or the first to begin in a later block), or the record at x
  passing its crc (its lsn field taken as x), so complete yet invalid. Any
  of these is damage. Since an END follows every record, damage to any
  record whose END reached the disk is reported, the log's last record
  included. An END at x itself proves nothing about x (a writer killed
  while overwriting it with the next record leaves it partly old).
  Unmarked segments keep the older rule (wal/stop.py, examine_stop).
"""

from __future__ import annotations

import struct

from crc32c import crc32c

__all__ = [
    "BLOCK", "BLOCK_HDR", "BLOCK_HDR_LEN", "BLOCK_MAGIC", "CONTINUED", "FIRST_RECORD",
    "MIN_SEGMENT", "REC_HDR", "REC_HDR_LEN", "SEG_HDR", "SEG_HDR_LEN", "SEG_MAGIC",
    "VERSION", "WINDOW", "PUT", "DELETE", "COMMIT", "CHECKPOINT", "PAGE_SNAPSHOT",
    "PAGE_DELTA", "ROLLBACK", "END", "TYPE_NAMES", "SegmentHeader", "StreamWriter", "MARKED", "NO_MARK",
    "encode_segment_header", "decode_segment_header", "encode_block_header",
    "decode_block_header", "block_mark", "encode_record", "payload_put", "payload_delete",
    "payload_commit", "payload_checkpoint", "payload_rollback", "payload_well_formed",
    "physical_end", "end_after", "encode_end", "end_image", "crc32c",
]

# DO NOT CHANGE THESE VALUES: they are embedded in the on-disk data.
VERSION = 1
BLOCK = 4096
SEG_MAGIC = b"PSWALSEG"
BLOCK_MAGIC = 0x4C575350
CONTINUED = 0xFFFF                  # first_record when no record begins in the block
WINDOW = 64                         # blocks the reader looks ahead after a stop (256 KiB)
MIN_SEGMENT = 16 * BLOCK            # the format's floor; stores use >= 1 MiB
MARKED = 4                          # segment flag: block headers carry the written mark
NO_MARK = 0xFFFFFFFF                # block header mark field: the mark is unknown

SEG_HDR = "<8sHHIQQQI"              # magic, version, flags, block, segment_size, seq, prev_end_lsn, crc
SEG_HDR_LEN = 44
assert struct.calcsize(SEG_HDR) == SEG_HDR_LEN
BLOCK_HDR = "<IHHQII"               # magic, version, first_record, block_lsn, mark, crc
BLOCK_HDR_LEN = 24
assert struct.calcsize(BLOCK_HDR) == BLOCK_HDR_LEN
REC_HDR = "<IIQB"                   # crc, length, lsn, type
REC_HDR_LEN = 17
assert struct.calcsize(REC_HDR) == REC_HDR_LEN
FIRST_RECORD = BLOCK + BLOCK_HDR_LEN  # offset of a segment's first record

PUT, DELETE, COMMIT, CHECKPOINT, PAGE_SNAPSHOT, PAGE_DELTA, ROLLBACK = 1, 2, 3, 4, 5, 6, 7
END = 8                             # the end trailer: a record header alone, at the log's end
TYPE_NAMES = {PUT: "PUT", DELETE: "DELETE", COMMIT: "COMMIT", CHECKPOINT: "CHECKPOINT",
              PAGE_SNAPSHOT: "PAGE_SNAPSHOT", PAGE_DELTA: "PAGE_DELTA", ROLLBACK: "ROLLBACK",
              END: "END"}

_seg = struct.Struct(SEG_HDR)
_blk = struct.Struct(BLOCK_HDR)
_rec = struct.Struct(REC_HDR)
_put = struct.Struct("<QII")
_del = struct.Struct("<QI")
_q = struct.Struct("<Q")
_snap = struct.Struct("<QBI")
_delta = struct.Struct("<QH")
_range = struct.Struct("<HH")


# -- headers -------------------------------------------------------------
class SegmentHeader:
    """A decoded, valid segment header. `flags` is the encoding of the records
    (0 plain, 2 record-sealed, 1 retired); `marked` says its block headers
    carry the written mark (flag bit 4)."""

    __slots__ = ("segment_size", "seq", "prev_end_lsn", "flags", "marked")

    def __init__(self, segment_size: int, seq: int, prev_end_lsn: int, flags: int = 0,
                 marked: bool = False):
        self.segment_size = segment_size
        self.seq = seq
        self.prev_end_lsn = prev_end_lsn
        self.flags = flags
        self.marked = marked

    def __repr__(self) -> str:
        return f"SegmentHeader(seq={self.seq}, prev_end_lsn={self.prev_end_lsn}, segment_size={self.segment_size})"


def encode_segment_header(segment_size: int, seq: int, prev_end_lsn: int, marked: bool = True) -> bytes:
    """The whole 4096-byte block 0 of a segment (`marked=False`: as versions
    before the written mark wrote it)."""
    head = _seg.pack(SEG_MAGIC, VERSION, MARKED if marked else 0, BLOCK, segment_size, seq,
                     prev_end_lsn, 0)[:40]
    return head + struct.pack("<I", crc32c(head)) + bytes(BLOCK - SEG_HDR_LEN)


def decode_segment_header(buf, offset: int = 0) -> SegmentHeader | None:
    """The header at `offset` of `buf`, or None unless magic, version, block size and crc check."""
    if len(buf) - offset < SEG_HDR_LEN:
        return None
    magic, version, flags, block, size, seq, prev, crc = _seg.unpack_from(buf, offset)
    if magic != SEG_MAGIC or version != VERSION or block != BLOCK:
        return None
    if crc32c(bytes(buf[offset:offset + 40])) != crc:
        return None
    return SegmentHeader(size, seq, prev, flags & ~MARKED, bool(flags & MARKED))


def encode_block_header(first_record: int, block_lsn: int, mark: int | None = None) -> bytes:
    """A block header (the table above) for a block at `block_lsn` whose first record starts at
    offset `first_record`, crc included; `mark` is the written mark W (None: an
    unmarked segment's header, field 0)."""
    field = 0 if mark is None else min(block_lsn - mark, NO_MARK)
    if field < 0:
        raise ValueError(f"written mark {mark} is past the block at {block_lsn}")
    head = _blk.pack(BLOCK_MAGIC, VERSION, first_record, block_lsn, field, 0)[:20]
    return head + struct.pack("<I", crc32c(head))


def decode_block_header(buf, offset: int):
    """(first_record, block_lsn) of the block header at `offset`, or None if magic/version/crc fail."""
    magic, version, first, block_lsn, _r, crc = _blk.unpack_from(buf, offset)
    if magic != BLOCK_MAGIC or version != VERSION:
        return None
    if crc32c(bytes(buf[offset:offset + 20])) != crc:
        return None
    return first, block_lsn


def block_mark(buf, offset: int) -> int | None:
    """The written mark W of the valid block header at `offset` of a marked
    segment, or None (no valid header, or the mark unknown)."""
    magic, version, _first, block_lsn, field, crc = _blk.unpack_from(buf, offset)
    if magic != BLOCK_MAGIC or version != VERSION or field == NO_MARK:
        return None
    if crc32c(bytes(buf[offset:offset + 20])) != crc:
        return None
    return block_lsn - field


# -- records ---------------------------------------------------------------
def encode_record(rtype: int, lsn: int, payload: bytes) -> bytes:
    """The contiguous bytes of one record (as the reader's Record.raw gives them)."""
    body = _rec.pack(0, REC_HDR_LEN + len(payload), lsn, rtype)[4:] + payload
    return struct.pack("<I", crc32c(body)) + body


def encode_end(lsn: int) -> bytes:
    """The 17 bytes of the END trailer whose first byte is at `lsn`."""
    return encode_record(END, lsn, b"")


def payload_put(key: bytes, value: bytes, txid: int = 0) -> bytes:
    """The payload of a PUT record (txid 0: an atomic operation of its own)."""
    return _put.pack(txid, len(key), len(value)) + key + value


def payload_delete(key: bytes, txid: int = 0) -> bytes:
    """The payload of a DELETE record."""
    return _del.pack(txid, len(key)) + key


def payload_commit(txid: int, nops: int) -> bytes:
    """The payload of a COMMIT record: transaction `txid` of `nops` operations."""
    return _del.pack(txid, nops)


def payload_checkpoint(checkpoint_id: int, data: bytes = b"") -> bytes:
    """The payload of a CHECKPOINT record, `data` appended."""
    return _q.pack(checkpoint_id) + data


def payload_rollback(txid: int) -> bytes:
    """The payload of a ROLLBACK record of transaction `txid`."""
    return _q.pack(txid)


def payload_well_formed(rtype: int, raw) -> bool:
    """True if `raw` (a whole record) has a known type and a payload of its shape."""
    n = len(raw)
    if rtype == PUT:
        if n < 33:
            return False
        _txid, klen, vlen = _put.unpack_from(raw, 17)
        return 33 + klen + vlen == n
    if rtype == DELETE:
        return n >= 29 and 29 + _del.unpack_from(raw, 17)[1] == n
    if rtype == COMMIT:
        return n == 29
    if rtype == ROLLBACK:
        return n == 25
    if rtype == CHECKPOINT:
        return n >= 25
    if rtype == PAGE_SNAPSHOT:
        return n >= 30 and 30 + _snap.unpack_from(raw, 17)[2] == n
    if rtype == PAGE_DELTA:
        if n < 27:
            return False
        pos, count = 27, _delta.unpack_from(raw, 17)[1]
        for _ in range(count):
            if pos + 4 > n:
                return False
            pos += 4 + _range.unpack_from(raw, pos)[1]
        return pos == n
    return False


def physical_end(start: int, length: int) -> int:
    """Segment offset just past a record of `length` bytes starting at offset `start`.

    `start` lies inside a block's record area (start % BLOCK >= 24); every
    block boundary crossed costs a block header.
    """
    room = BLOCK - start % BLOCK
    if length <= room:
        return start + length
    rest = length - room
    per = BLOCK - BLOCK_HDR_LEN
    blocks = (rest + per - 1) // per
    return (start // BLOCK + blocks) * BLOCK + BLOCK_HDR_LEN + rest - (blocks - 1) * per


def end_image(end_lsn: int) -> bytes:
    """The END trailer the writer puts after a record ending at `end_lsn`, as
    the bytes of LSNs [end_lsn, end_after): a block header first if
    `end_lsn` starts a block, the next block's header in the middle if fewer
    than 17 bytes are left in its block, both with written mark `end_lsn`.
    The C encoder's twin is ps_wal_end_image (walenc.c)."""
    out, lsn = b"", end_lsn
    if lsn % BLOCK == 0:
        out, lsn = encode_block_header(BLOCK_HDR_LEN, lsn, end_lsn), lsn + BLOCK_HDR_LEN
    end = encode_end(lsn)
    n = min(BLOCK - lsn % BLOCK, REC_HDR_LEN)
    if n == REC_HDR_LEN:
        return out + end
    head = encode_block_header(BLOCK_HDR_LEN + REC_HDR_LEN - n, lsn + n, end_lsn)
    return out + end[:n] + head + end[n:]


def end_after(pos: int) -> int:
    """Segment offset just past the END written at segment offset `pos` (a
    record's end): a block header first if `pos` starts a block."""
    return physical_end(pos + BLOCK_HDR_LEN if pos % BLOCK == 0 else pos, REC_HDR_LEN)


# -- the writer ----------------------------------------------------------------
class StreamWriter:
    """Appends records into mapped segments exactly as the C encoder does.

    `buffer` is the writable segment `seq`, and the write position is
    `offset` in it (4096 for a fresh segment). When a record does not fit in
    the rest of the segment, `segment_for(seq + 1)` supplies the next buffer
    and the writer puts a segment header (prev_end_lsn = end of the last
    record) in it. A block header is written when the write position first
    enters a block. `end_lsn` is the LSN just past the last record written;
    an END trailer (see the table above) is written there after each record.
    With `reserve_tags` it lays each record out as a sealed one (16 zero bytes
    after the payload, counted in its length), as the C encoder does for the
    Python sealer (wal/recseal.py), which seals them before they are written.

    The written mark of its block headers is `mark`: the end of the last
    record written, or, before the first, the start position (as the C
    encoder counts from `wal_attach`). `marked=False` writes segments as
    versions before the mark did (flag bit 4 off, mark fields 0, no END).
    """

    def __init__(self, segment_size: int, buffer, seq: int, offset: int, prev_end_lsn: int,
                 segment_for=None, *, write_header: bool = True, reserve_tags: bool = False,
                 marked: bool = True):
        if segment_size % BLOCK or segment_size < MIN_SEGMENT:
            raise ValueError(f"segment_size must be a multiple of {BLOCK} and >= {MIN_SEGMENT}")
        if offset < BLOCK or offset > segment_size:
            raise ValueError(f"offset {offset} outside the record area")
        self.segment_size = segment_size
        self.buffer = buffer
        self.seq = seq
        self.pos = offset
        self.end_lsn = prev_end_lsn
        self.mark = seq * segment_size + offset
        self.marked = marked
        self.segment_for = segment_for
        self.tag_room = bytes(16) if reserve_tags else b""
        if write_header:
            buffer[0:BLOCK] = encode_segment_header(segment_size, seq, prev_end_lsn, marked)

    def append(self, rtype: int, payload: bytes) -> tuple[int, int]:
        """Append one record; returns (lsn, end_lsn)."""
        size = self.segment_size
        payload = payload + self.tag_room
        length = REC_HDR_LEN + len(payload)
        start = self.pos + BLOCK_HDR_LEN if self.pos % BLOCK == 0 else self.pos
        room = end_after if self.marked else (lambda e: e)
        if self.pos >= size or room(physical_end(start, length)) > size:
            if room(physical_end(FIRST_RECORD, length)) > size:
                raise ValueError(f"a record of {length} bytes does not fit in a segment of {size}")
            if self.segment_for is None:
                raise ValueError("segment full and no segment_for callback")
            self.seq += 1
            self.buffer = self.segment_for(self.seq)
            self.buffer[0:BLOCK] = encode_segment_header(size, self.seq, self.end_lsn, self.marked)
            self.pos, start = BLOCK, FIRST_RECORD
        base = self.seq * size
        lsn = base + start
        rec = encode_record(rtype, lsn, payload)
        buf, o, i = self.buffer, self.pos, 0
        mark = self.mark if self.marked else None
        if o % BLOCK == 0:
            buf[o:o + BLOCK_HDR_LEN] = encode_block_header(BLOCK_HDR_LEN, base + o, mark)
            o += BLOCK_HDR_LEN
        while True:
            n = min(BLOCK - o % BLOCK, length - i)
            buf[o:o + n] = rec[i:i + n]
            i += n
            o += n
            if i == length:
                break
            rest = length - i
            first = BLOCK_HDR_LEN + rest if rest < BLOCK - BLOCK_HDR_LEN else CONTINUED
            buf[o:o + BLOCK_HDR_LEN] = encode_block_header(first, base + o, mark)
            o += BLOCK_HDR_LEN
        self.pos = o
        self.end_lsn = self.mark = base + o
        if self.marked:
            self._write_end(base, o)
        return lsn, self.end_lsn

    def _write_end(self, base: int, o: int) -> None:
        """The END trailer at offset o (the new end), laid out as a record of 17 bytes; the
        next record overwrites it (block header included, rewritten with its own first)."""
        img = end_image(base + o)
        self.buffer[o:o + len(img)] = img

    def put(self, key: bytes, value: bytes, txid: int = 0) -> tuple[int, int]:
        """Append a PUT record; returns (lsn, end_lsn)."""
        return self.append(PUT, payload_put(key, value, txid))

    def delete(self, key: bytes, txid: int = 0) -> tuple[int, int]:
        """Append a DELETE record; returns (lsn, end_lsn)."""
        return self.append(DELETE, payload_delete(key, txid))

    def commit(self, txid: int, nops: int) -> tuple[int, int]:
        """Append a COMMIT record; returns (lsn, end_lsn)."""
        return self.append(COMMIT, payload_commit(txid, nops))

    def rollback(self, txid: int) -> tuple[int, int]:
        """Append a ROLLBACK record; returns (lsn, end_lsn)."""
        return self.append(ROLLBACK, payload_rollback(txid))

    def checkpoint(self, checkpoint_id: int, data: bytes = b"") -> tuple[int, int]:
        """Append a CHECKPOINT record; returns (lsn, end_lsn)."""
        return self.append(CHECKPOINT, payload_checkpoint(checkpoint_id, data))
