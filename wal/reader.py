"""The WAL reader and recovery scan: records from a pointer to the end of the log.

Replay follows the validity rule of wal/format.py: from the pointer, read
records one after the other; when the record at the position is invalid, try
the next segment (its header's prev_end_lsn must equal the position); when
that fails too, the log ends at the position (the *stop*).

Telling a clean end from damage. At a stop the bytes at the position are one
of: never written (zeros, or stale bytes of the slot's older incarnation,
whose LSN fields name older LSNs), or a record of this incarnation that did
not survive (its lsn field equals the position, or is a few bits off it, or
its block header is garbage). Then the reader looks ahead: the rest of the
stop's block byte by byte for record headers carrying their own LSN, and up
to WINDOW later blocks through their block headers (first_record). Anything
found means the writer got further than the stop: a valid record there is a
*true gap* (reported, never replayed), other written data is damage. Damage
and gaps raise a `WalRecoveryWarning` naming file and offset and are listed
in the `RecoveryReport`; the caller (wal/log.py) then cuts the tail aside.

Encrypted segments (record-sealed, wal/recseal.py) are read as they are
stored and each record is opened after its crc checks (`segs.cipher`); one
that does not authenticate is damage. The tail kept aside is copied as
stored, so it stays sealed. The bulk scanner reads them only if it says so
(`reads_sealed`), with the segment's key and salt. A segment of the retired
block-sealed encoding raises BlockSealedSegment naming its file.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Generator
from dataclasses import dataclass, field

from .format import (BLOCK, BLOCK_HDR_LEN, CHECKPOINT, COMMIT, CONTINUED, DELETE, FIRST_RECORD,
                     PUT, REC_HDR, REC_HDR_LEN, ROLLBACK, TYPE_NAMES, WINDOW, crc32c,
                     decode_block_header, payload_well_formed, physical_end)
from .recseal import record_opener, refuse_block_sealed

__all__ = ["RUN", "Record", "RecordRun", "RecoveryReport", "ScanEnd", "WalRecoveryWarning",
           "record_offset", "segment_records",
           "committed_raw", "committed_records", "scan"]

RUN = 0   # the `type` of a RecordRun: not a record type of the format

_rec = struct.Struct(REC_HDR)
_q = struct.Struct("<Q")
_put = struct.Struct("<QII")
_del = struct.Struct("<QI")
_kv = struct.Struct("<II")


class WalRecoveryWarning(UserWarning):
    """The WAL ended at damage, or valid records were found after a gap."""


class SegmentMissing(Exception):
    """No segment file with a valid header holds the replay pointer: the log that
    the last checkpoint points into is gone, so replay cannot start. `path` names
    the WAL directory."""

    def __init__(self, path: str, seq: int, lsn: int):
        super().__init__(f"{path}: no segment with a valid header holds lsn {lsn} (seq {seq}), "
                         "where the last completed checkpoint says replay starts")
        self.path, self.seq, self.lsn = path, seq, lsn


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


def committed_raw(records, scanner=None):
    """The committed PUT/DELETE records of `records`, as raw bytes for replay.

    Yields (raw, count) in log order, grouped as `committed_records` groups
    them: a txid-0 record (or a RecordRun of them) at its place, a
    transaction's records at its COMMIT, nothing of a transaction ended by
    ROLLBACK or by the end of the log. When `records` is a `scan` generator
    (or one that delegates to it, like `Wal.recover`) and `scanner` is given,
    the scanner is sent in after every item, so the scan reads runs of simple
    records in bulk (see `scan`).
    """
    it = iter(records)
    send = it.send if scanner is not None and isinstance(it, Generator) else None
    pending: dict[int, list] = {}
    try:
        rec = next(it)
        while True:
            rtype = rec.type
            if rtype == RUN:
                yield rec.raw, rec.count
            elif rtype == PUT or rtype == DELETE:
                txid = _q.unpack_from(rec.raw, REC_HDR_LEN)[0]
                if txid == 0:
                    yield rec.raw, 1
                else:
                    pending.setdefault(txid, []).append(rec.raw)
            elif rtype == COMMIT:
                ops = pending.pop(_q.unpack_from(rec.raw, REC_HDR_LEN)[0], None)
                if ops:
                    yield b"".join(ops), len(ops)
            elif rtype == ROLLBACK:
                pending.pop(_q.unpack_from(rec.raw, REC_HDR_LEN)[0], None)
            rec = send(scanner) if send is not None else next(it)
    except StopIteration:
        return


def committed_records(records):
    """Group records into replayable units, in log order.

    Yields lists of records: `[rec]` for a PUT/DELETE with txid 0 and for
    CHECKPOINT / PAGE_* records; the PUT/DELETE records of transaction t, in
    order, at the position of t's COMMIT (the COMMIT itself not included).
    Records of a transaction ended by ROLLBACK, or by the end of the log, are
    dropped.
    """
    pending: dict[int, list] = {}
    for rec in records:
        rtype = rec.type
        if rtype == PUT or rtype == DELETE:
            txid = rec.txid
            if txid == 0:
                yield [rec]
            else:
                pending.setdefault(txid, []).append(rec)
        elif rtype == COMMIT:
            ops = pending.pop(rec.txid, None)
            if ops:
                yield ops
        elif rtype == ROLLBACK:
            pending.pop(rec.txid, None)
        else:
            yield [rec]


@dataclass
class RecoveryReport:
    """What one recovery scan found; `Wal.recovery_report` holds the latest."""

    from_lsn: int
    stop_lsn: int | None = None
    records: int = 0
    damage: list = field(default_factory=list)     # dicts: file, offset, lsn, reason
    gaps: list = field(default_factory=list)       # dicts: file, offset, lsn (records not replayed)
    tail_file: str | None = None
    set_aside: list = field(default_factory=list)  # paths of segments renamed aside
    fresh_seq: int | None = None

    @property
    def clean(self) -> bool:
        """True when the read found no damage, no gap and set nothing aside."""
        return not (self.damage or self.gaps or self.set_aside)

    def warn(self, kind: str, file: str, offset: int, lsn, reason: str) -> None:
        """Record a gap or damage at `file`/`offset` and issue a `WalRecoveryWarning`."""
        entry = {"file": file, "offset": offset, "lsn": lsn, "reason": reason}
        (self.gaps if kind == "gap" else self.damage).append(entry)
        warnings.warn(WalRecoveryWarning(f"WAL {kind} in {file} at offset {offset} (lsn {lsn}): {reason}"),
                      stacklevel=3)


@dataclass
class ScanEnd:
    stop_lsn: int
    chain: list                # slots read, in order
    off_chain: list            # slots with a valid header at or past the pointer's segment, not read
    fresh_seq: int             # where the writer continues
    tail: tuple | None = None  # (slot, offset, bytes) to keep in a side file


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


# -- the scan --------------------------------------------------------------------
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
    invalid one (no lookahead: for tools and the archive, not for recovery)."""
    good: set = set()
    o = record_offset(base, base, size)
    while o is not None:
        rec = read_record(buf, base, o, size, good, opener)
        if type(rec) is str:
            return
        yield rec
        o = record_offset(rec.end_lsn, base, size)


def scan(segs, from_lsn: int, report: RecoveryReport):
    """Yield valid records from `from_lsn`; returns a ScanEnd (use `yield from`).

    Bulk mode: a consumer may `send` a scanner into the generator (after any
    item; `committed_raw` does). From then on, before each record the scan
    calls `scanner(buf, base_lsn, offset, segment_size)`, which returns
    (count, raw, end_offset) for the valid simple records (PUT/DELETE, txid 0)
    from `offset` on; count > 0 yields them as one RecordRun and reading goes
    on at end_offset. At a record the scanner does not take (count 0: not
    simple, or invalid) this reader reads it as always, so where the log stops
    and everything reported about the stop is this reader's decision. The C
    scanner is `pagestore._native.wal_scan`; a scanner must accept only
    records `read_record` accepts. On a record-sealed segment it is called
    only if it has `reads_sealed` set, with the opener's `scan_args` (key,
    salt) as keyword arguments, and returns the records in plaintext form.
    """
    S = segs.segment_size
    by_seq: dict[int, list] = {}
    for slot in sorted(segs.slots.values(), key=lambda s: s.number):
        if slot.header is not None:
            by_seq.setdefault(slot.seq, []).append(slot)
    p = from_lsn
    seq = first_seq = p // S
    cur = by_seq.get(seq, [None])[0]
    chain, fail = [], None
    bulk = None
    while True:
        if cur is not None:
            refuse_block_sealed(cur.header, cur.path)
            chain.append(cur)
            buf, base, good = segs.read_buffer(cur), seq * S, set()
            opener = record_opener(cur.header, buf, segs.cipher, cur.path)
            while True:
                o = record_offset(p, base, S)
                if o is None:
                    fail = None
                    break
                if bulk is not None and (opener is None or bulk.reads_sealed):
                    n, raw, end = bulk(buf, base, o, S) if opener is None else \
                        bulk(buf, base, o, S, **opener.scan_args)
                    if n:
                        report.records += n
                        p = base + end
                        sent = yield RecordRun(base + o, p, raw, n)
                        if sent is not None:
                            bulk = sent
                        continue
                rec = read_record(buf, base, o, S, good, opener)
                if type(rec) is str:
                    fail = (cur, buf, base, o, rec, opener)
                    break
                report.records += 1
                p = rec.end_lsn
                sent = yield rec
                if sent is not None:
                    bulk = sent
        nxt = [s for s in by_seq.get(seq + 1, ()) if s.header.prev_end_lsn == p]
        if not nxt:
            break
        seq, cur, fail = seq + 1, nxt[0], None
    report.stop_lsn = p
    in_chain = {id(s) for s in chain}
    off_chain = [s for s in segs.slots.values() if id(s) not in in_chain and
                 (s.seq >= first_seq if s.header is not None else not s.blank)]
    if chain:
        fresh = chain[-1].seq + 1
    else:
        fresh = first_seq if from_lsn % S < FIRST_RECORD else first_seq + 1
    end = ScanEnd(p, chain, sorted(off_chain, key=lambda s: s.number), fresh)
    if fail is not None:
        end.tail = _examine_stop(fail, S, report, segs)
    for slot in sorted(segs.slots.values(), key=lambda s: s.number):
        if slot.size < S:
            report.warn("damage", slot.path, slot.size, None,
                        f"segment file is {slot.size} bytes, shorter than segment_size {S} "
                        "(truncated, or its preallocation was lost)")
    return end


def _examine_stop(fail, size: int, report: RecoveryReport, segs=None):
    """Classify the stop and look ahead; returns the tail to keep aside, or None if clean."""
    slot, buf, base, o, reason, opener = fail
    x = base + o
    b = o - o % BLOCK
    damaged = False
    head_raw = bytes(buf[b:b + BLOCK_HDR_LEN])
    h = decode_block_header(buf, b)
    if any(head_raw) and h is None:
        damaged, reason = True, "block header damaged"
    elif physical_end(o, REC_HDR_LEN) <= size:
        head = _gather(buf, base, o, REC_HDR_LEN, None)
        lsn = _rec.unpack(head)[2]
        if lsn == x or (lsn != 0 and _ours_but_lsn(buf, o, head, x, size)):
            damaged = True
    if damaged:
        report.warn("damage", slot.path, o, x, reason)
    # Look ahead: the rest of this block byte by byte, then WINDOW blocks.
    good: set = set()
    seen = False
    for pos in range(o + 1, b + BLOCK - REC_HDR_LEN + 1):
        if _q.unpack_from(buf, pos + 8)[0] == base + pos:
            seen = True
            if _gap_record(buf, base, pos, size, good, slot, report, opener):
                break
    for k in range(1, WINDOW + 1):
        nb = b + k * BLOCK
        if nb >= size:
            break
        hb = decode_block_header(buf, nb)
        if hb is None or hb[1] != base + nb:
            continue
        seen = True
        if hb[0] != CONTINUED and BLOCK_HDR_LEN <= hb[0] < BLOCK:
            if _gap_record(buf, base, nb + hb[0], size, good, slot, report, opener):
                break
    if seen and not damaged and not report.gaps:
        report.warn("damage", slot.path, o, x, "written data follows the end of the log")
    if not (damaged or seen):
        return None
    tail_end = b + BLOCK
    for nb in range(b + BLOCK, size, BLOCK):
        hb = decode_block_header(buf, nb)
        if hb is not None and hb[1] == base + nb:
            tail_end = nb + BLOCK
    return slot, o, bytes(buf[o:min(tail_end, size)])


def _ours_but_lsn(buf, o: int, head: bytes, x: int, size: int) -> bool:
    """True if the record at o checks out once its lsn field is set to x (only that field is damaged).

    Stale bytes of an older incarnation are full of LSN-like values (lsn and
    txid fields) close to x, so closeness is no evidence; a matching crc is.
    """
    crc, length, _lsn, _t = _rec.unpack(head)
    if length < REC_HDR_LEN or physical_end(o, length) > size:
        return False
    raw = _gather(buf, 0, o, length, None)
    return crc32c(raw[4:8] + _q.pack(x) + raw[16:]) == crc


def _gap_record(buf, base, pos, size, good, slot, report, opener=None) -> bool:
    rec = read_record(buf, base, pos, size, good, opener)
    if type(rec) is str:
        return False
    report.warn("gap", slot.path, pos, rec.lsn,
                f"valid {TYPE_NAMES.get(rec.type)} record after the end of the log at lsn "
                f"{report.stop_lsn}; not replayed")
    return True
