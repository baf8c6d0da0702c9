"""Where the log stops: a clean end, a torn tail, or damage.

`scan` (wal/reader.py) ends at the first invalid record, at LSN x. What
follows is judged here. In a marked segment (wal/format.py, "Torn tail or
damage") it is damage only if the log proves that a record at or after x
was complete: a block header of this incarnation after x whose written mark
passes x (in the stop's segment or a later one off the chain), a whole
record or END trailer after x (in x's block, or the first to begin in a
later block; an END follows every record, so this covers the log's last
record too), or the record at x whole by its crc (with every
block header inside it written by this incarnation). Otherwise it is the torn tail of a writer that
was killed, or whose last blocks a power loss took before they were synced
(with the log's acknowledged records before x, the contract of the WAL
mode): it is cut aside all the same, its size reported, with no warning.
Segments of older stores (unmarked) keep the older rule of
`examine_stop`, which takes a record header carrying its own lsn, or data
written after x, for damage.
"""

from __future__ import annotations

from .format import BLOCK, BLOCK_HDR_LEN, CONTINUED, END, REC_HDR_LEN, TYPE_NAMES, WINDOW, block_mark, crc32c
from .format import BLOCK_MAGIC as _MAGIC
from .format import decode_block_header, physical_end
from .record import _gather, _q, _rec, read_record

__all__ = ["examine_stop", "judge_marked"]


# -- marked segments: torn tail or damage ------------------------------------------
def _mark_here(buf, base: int, nb: int):
    """The written mark of the block header at nb if it is a valid one of this incarnation."""
    h = decode_block_header(buf, nb)
    if h is None or h[1] != base + nb:
        return None
    return block_mark(buf, nb)


def _proof_in(buf, base: int, first_block: int, end: int, x: int):
    """Offset of the first block header in [first_block, end) of this incarnation whose
    written mark passes x (a record at or after x was complete), or None."""
    for nb in range(first_block, end, BLOCK):
        w = _mark_here(buf, base, nb)
        if w is not None and w > x:
            return nb
    return None


def _proof_later(segs, slot, x: int, size: int):
    """(offset, first mark) if `slot`, a segment after the stop's and off the chain, holds
    a block header whose mark passes x: the records there were complete. `first mark` is
    the mark of its first valid block header (where the log left the segments before it),
    None if unknown. A later segment of an unmarked kind is proof (the older rule)."""
    if slot.header is not None and not slot.header.marked:
        return 0, None
    buf = segs.read_buffer(slot)
    first = None
    for nb in range(BLOCK, min(slot.size, size), BLOCK):
        h = decode_block_header(buf, nb)
        if h is None or h[1] % size != nb or h[1] <= x:
            continue
        if slot.header is not None and h[1] // size != slot.seq:
            continue
        w = block_mark(buf, nb)
        if nb == BLOCK:
            first = w
        if w is not None and w > x:
            return nb, first
    return None


def judge_marked(end, fail, size: int, report, segs) -> None:
    """A stop in a marked segment: damage (reported as the older rule reports it) if the
    log proves a record at or after the stop was complete, else a torn tail. Damage that
    is all in later segments (the stop was where the log left its segment, but the next
    one's header is gone) leaves the stop alone: `Wal` reports those segments."""
    x = end.stop_lsn
    proof = later_proof = None
    if fail is not None:
        slot, buf, base, o, reason, opener = fail
        b = o - o % BLOCK
        head = _gather(buf, base, o, REC_HDR_LEN, None) if physical_end(o, REC_HDR_LEN) <= size else None
        later = _record_after(buf, base, o, size, opener)
        if head is not None and _ours_but_lsn(buf, o, head, x, size) \
                and _span_headers_written(buf, base, o, head, size):
            proof = f"{reason}; the record there is whole (its crc checks), so it was written"
        elif later is not None:
            proof = (f"{reason}; a whole record follows at offset {later}, so the one "
                     f"at lsn {x} was written")
        else:
            nb = _proof_in(buf, base, b + BLOCK, size, x)
            if nb is not None:
                proof = (f"{reason}; the block header at offset {nb} says every record "
                         f"up to lsn {_mark_here(buf, base, nb)} was written")
    if proof is None:
        for later in end.off_chain:
            found = _proof_later(segs, later, x, size)
            if found is None:
                continue
            nb, first = found
            later_proof = f"{later.path} offset {nb} holds records written after lsn {x}"
            if fail is not None and (first is None or first > x):
                proof = f"{fail[4]}; {later_proof}"
            break
    if proof is not None:
        if fail is not None:
            end.tail = examine_stop(fail, size, report, segs, proof)
        return
    if later_proof is not None:
        return
    end.torn = True
    if fail is not None:
        end.tail = _torn_tail(fail, size)
    report.tail_bytes = (len(end.tail[2]) if end.tail else 0) + sum(
        _written_extent(segs, s, size) for s in end.off_chain)


def _span_headers_written(buf, base: int, o: int, head: bytes, size: int) -> bool:
    """False if a block header inside the record at o is one the writer had not written
    yet: zeros, or a valid header of an earlier incarnation of the file. Then a crc that
    checks proves nothing: the record's bytes past it may be that incarnation's, equal
    by chance (repetitive values at the same place)."""
    _crc, length, _lsn, _t = _rec.unpack(head)
    end = physical_end(o, length)
    for nb in range(o - o % BLOCK + BLOCK, min(end, size), BLOCK):
        raw = bytes(buf[nb:nb + BLOCK_HDR_LEN])
        if raw == bytes(BLOCK_HDR_LEN):
            return False
        h = decode_block_header(buf, nb)
        if h is not None and h[1] != base + nb:
            return False
    return True


def _own_lsn(buf, base: int, pos: int, size: int, block_end: int) -> bool:
    """True if a record header at pos (gathered across a block header) carries lsn base + pos."""
    if pos + REC_HDR_LEN <= block_end:
        return _q.unpack_from(buf, pos + 8)[0] == base + pos
    if physical_end(pos, REC_HDR_LEN) > size:
        return False
    return _rec.unpack(_gather(buf, base, pos, REC_HDR_LEN, None))[2] == base + pos


def _record_after(buf, base: int, o: int, size: int, opener=None):
    """Offset of a whole record or END trailer (its own lsn, its crc) that begins after o
    in o's block, or in the first later block where one begins, or None. The encoder
    appends one record at a time and an END after each, so either proves the record at
    the stop was complete: damage, not a torn tail."""
    b = o - o % BLOCK
    top = min(b + BLOCK, size)
    for pos in range(o + REC_HDR_LEN, top):
        if not _own_lsn(buf, base, pos, size, top):
            continue
        if type(read_record(buf, base, pos, size, set(), opener)) is not str:
            return pos
    # the record at o may run into later blocks: the first record that begins in one.
    # No look-ahead bound: a value may fill many blocks, and the walk ends at the
    # first block header this incarnation of the file did not write.
    for nb in range(b + BLOCK, size, BLOCK):
        h = decode_block_header(buf, nb)
        if h is None or h[1] != base + nb:
            break
        if h[0] != CONTINUED and BLOCK_HDR_LEN <= h[0] < BLOCK:
            pos = nb + h[0]
            if type(read_record(buf, base, pos, size, set(), opener)) is not str:
                return pos
            break
    return None


def _torn_tail(fail, size: int):
    """The torn tail after a stop in a marked segment: from the stop to the end of the last
    block of this incarnation the writer entered, or None if it wrote nothing there."""
    slot, buf, base, o, _reason, _opener = fail
    b = o - o % BLOCK
    tail_end = None
    for nb in range(b + BLOCK, size, BLOCK):
        h = decode_block_header(buf, nb)
        if h is not None and h[1] == base + nb:
            tail_end = nb + BLOCK
    if tail_end is None:
        # only this block: the writer got into it if a record header there carries its own lsn
        if not any(_q.unpack_from(buf, pos + 8)[0] == base + pos
                   for pos in range(o, b + BLOCK - REC_HDR_LEN + 1)):
            return None
        tail_end = b + BLOCK
    if tail_end + BLOCK_HDR_LEN <= size and _q.unpack_from(buf, tail_end)[0] & 0xFFFFFFFF == _MAGIC \
            and decode_block_header(buf, tail_end) is None:
        tail_end += BLOCK          # the writer was killed writing that block's header
    return slot, o, bytes(buf[o:min(tail_end, size)])


def _written_extent(segs, slot, size: int) -> int:
    """Bytes of an off-chain slot up to the end of its last valid block (its header block at least)."""
    if slot.header is None:
        return 0
    buf, base, last = segs.read_buffer(slot), slot.seq * size, BLOCK
    for nb in range(BLOCK, min(slot.size, size), BLOCK):
        h = decode_block_header(buf, nb)
        if h is not None and h[1] == base + nb:
            last = nb + BLOCK
    return last


# -- the older rule (unmarked segments), and the report of damage -------------------------
def examine_stop(fail, size: int, report, segs=None, proof: str | None = None):
    """Classify the stop and look ahead; returns the tail to keep aside, or None if clean.
    `proof`: the stop is damage, for that reason (marked segments)."""
    slot, buf, base, o, reason, opener = fail
    x = base + o
    b = o - o % BLOCK
    damaged = False
    head_raw = bytes(buf[b:b + BLOCK_HDR_LEN])
    h = decode_block_header(buf, b)
    if proof is not None:
        damaged, reason = True, proof
    elif any(head_raw) and h is None:
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
    if rec.type == END:
        return True        # where the writer's log ended: nothing after it, and no gap
    report.warn("gap", slot.path, pos, rec.lsn,
                f"valid {TYPE_NAMES.get(rec.type)} record after the end of the log at lsn "
                f"{report.stop_lsn}; not replayed")
    return True
