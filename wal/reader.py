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

A valid END trailer (wal/format.py) is where the writer left the segment:
a clean end, not replayed and no tail; replay goes on to the next segment
as at any stop. Damage before an END is proved by it (wal/stop.py).

Marked segments (flag bit 4, all this version writes) judge a stop by the
written mark of their block headers instead (wal/format.py, "Torn tail or
damage"): unless the log proves that a record at or after the stop was
complete, what follows the stop is the torn tail a killed writer leaves:
cut aside like damage, but reported only as the tail's size
(`RecoveryReport.tail_bytes`), with no warning. Unmarked segments of older
stores keep the rule above.

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

from .format import COMMIT, DELETE, END, FIRST_RECORD, PUT, REC_HDR_LEN, ROLLBACK
from .recseal import record_opener, refuse_block_sealed
from .record import (RUN, Record, RecordRun, read_record, record_offset,
                     segment_records)
from .stop import examine_stop, judge_marked

__all__ = ["RUN", "Record", "RecordRun", "RecoveryReport", "ScanEnd", "WalRecoveryWarning",
           "read_record", "record_offset", "segment_records",
           "committed_raw", "committed_records", "scan"]

_q = struct.Struct("<Q")


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
    tail_bytes: int = 0        # written bytes after the stop cut aside as a torn tail (no damage)

    @property
    def clean(self) -> bool:
        """True when the read found no damage and no gap (a torn tail cut aside is no damage)."""
        return not (self.damage or self.gaps)

    def warn(self, kind: str, file: str, offset: int, lsn, reason: str) -> None:
        """Record a gap or damage at `file`/`offset` and issue a `WalRecoveryWarning`."""
        entry = {"file": file, "offset": offset, "lsn": lsn, "reason": reason}
        (self.gaps if kind == "gap" else self.damage).append(entry)
        warnings.warn(WalRecoveryWarning(f"WAL {kind} in {file} at offset {offset} (lsn {lsn}): {reason}"),
                      stacklevel=3)


@dataclass
class ScanEnd:
    """Where a scan stopped, and what `Wal` sets aside after it."""

    stop_lsn: int
    chain: list                # slots read, in order
    off_chain: list            # slots with a valid header at or past the pointer's segment, not read
    fresh_seq: int             # where the writer continues
    tail: tuple | None = None  # (slot, offset, bytes) to keep in a side file
    torn: bool = False         # what follows the stop (tail, off_chain) is a torn tail, not damage


# -- the scan --------------------------------------------------------------------
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
                if rec.type == END:
                    fail = None        # the writer's clean end of this segment
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
    if chain and chain[-1].header.marked:
        judge_marked(end, fail, S, report, segs)
    elif fail is not None:
        end.tail = examine_stop(fail, S, report, segs)
    for slot in sorted(segs.slots.values(), key=lambda s: s.number):
        if slot.size < S:
            report.warn("damage", slot.path, slot.size, None,
                        f"segment file is {slot.size} bytes, shorter than segment_size {S} "
                        "(truncated, or its preallocation was lost)")
    return end
