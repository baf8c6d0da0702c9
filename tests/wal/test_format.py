"""wal/format.py: headers, records and the StreamWriter's byte layout."""

import os
import struct
import sys

import pytest
from crc32c import crc32c

from pagestore.diskio import SimFS
from pagestore.wal import format as F
from pagestore.wal.reader import read_record
sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, kv, open_fresh, reopen


def test_header_sizes_match_the_offset_tables():
    assert struct.calcsize(F.SEG_HDR) == 44
    assert struct.calcsize(F.BLOCK_HDR) == 24
    assert struct.calcsize(F.REC_HDR) == 17
    assert F.FIRST_RECORD == 4096 + 24
    assert struct.pack("<I", F.BLOCK_MAGIC) == b"PSWL"


def test_segment_header_round_trips_and_fills_block_zero():
    raw = F.encode_segment_header(1 << 20, 7, 123456)
    assert len(raw) == F.BLOCK and not any(raw[44:])
    h = F.decode_segment_header(raw)
    assert (h.segment_size, h.seq, h.prev_end_lsn) == (1 << 20, 7, 123456)
    assert raw[:8] == b"PSWALSEG" and struct.unpack_from("<I", raw, 40)[0] == crc32c(raw[:40])


@pytest.mark.parametrize("at", [0, 8, 10, 12, 16, 24, 32, 40, 43])
def test_segment_header_with_any_flipped_byte_is_rejected(at):
    raw = bytearray(F.encode_segment_header(1 << 20, 7, 99))
    raw[at] ^= 0x40
    assert F.decode_segment_header(raw) is None


def test_block_header_round_trips_and_rejects_damage():
    raw = F.encode_block_header(100, 8192)
    assert len(raw) == 24 and F.decode_block_header(raw, 0) == (100, 8192)
    for at in range(24):
        bad = bytearray(raw)
        bad[at] ^= 1
        assert F.decode_block_header(bad, 0) is None


def test_record_encoding_matches_the_table():
    rec = F.encode_record(F.PUT, 5000, F.payload_put(b"key", b"value", txid=9))
    crc, length, lsn, rtype = struct.unpack_from("<IIQB", rec)
    assert (length, lsn, rtype) == (len(rec), 5000, F.PUT) and length == 17 + 16 + 3 + 5
    assert crc == crc32c(rec[4:])
    assert struct.unpack_from("<QII", rec, 17) == (9, 3, 5) and rec[33:] == b"keyvalue"
    assert F.payload_well_formed(F.PUT, rec)
    assert not F.payload_well_formed(F.PUT, rec[:-1])
    assert not F.payload_well_formed(99, rec)


def test_physical_end_counts_a_block_header_per_boundary_crossed():
    assert F.physical_end(4120, 100) == 4220
    assert F.physical_end(8000, 192) == 8192                       # ends exactly at the boundary
    assert F.physical_end(8000, 193) == 8192 + 24 + 1              # one byte into the next block
    assert F.physical_end(4120, 4072 + 4072 + 10) == 12288 + 24 + 10


def test_writer_puts_block_headers_and_first_record_like_the_doc():
    buf = bytearray(SMALL)
    w = F.StreamWriter(SMALL, buf, 0, F.BLOCK, 0)
    lsn1, end1 = w.put(b"a", b"x" * 5000)   # spans blocks 1 and 2
    assert lsn1 == 4120
    assert F.decode_block_header(buf, 4096) == (24, 4096)
    rest = (17 + 16 + 1 + 5000) - (4096 - 24)
    assert F.decode_block_header(buf, 8192) == (24 + rest, 8192)
    lsn2, _ = w.put(b"b", b"y")
    assert lsn2 == end1 == 8192 + 24 + rest
    w.put(b"c", b"z" * 9000)                # fills block 3 completely with a continuation
    assert F.decode_block_header(buf, 12288)[0] == F.CONTINUED


def test_writer_moves_to_the_next_segment_when_a_record_does_not_fit():
    bufs = {0: bytearray(SMALL)}
    w = F.StreamWriter(SMALL, bufs[0], 0, F.BLOCK, 0, lambda seq: bufs.setdefault(seq, bytearray(SMALL)))
    ends = [w.put(b"k%d" % i, b"v" * 3000)[1] for i in range(50)]
    assert set(bufs) == {0, 1, 2}
    h1 = F.decode_segment_header(bufs[1])
    assert h1.seq == 1 and h1.prev_end_lsn in ends and h1.prev_end_lsn < SMALL
    first_in_1 = ends[ends.index(h1.prev_end_lsn) + 1]
    assert first_in_1 == SMALL + F.FIRST_RECORD + 17 + 16 + 3 + 3000


def test_records_spanning_blocks_and_segments_read_back_exactly():
    fs = SimFS()
    h = open_fresh(fs)
    written = [(b"key-%d" % i, bytes([i % 251]) * (i * 37 % 6000)) for i in range(120)]
    for k, v in written:
        h.put(k, v)
    h.wal.close()
    h2, recs = reopen(fs)
    assert kv(recs) == written
    assert len({r.lsn // SMALL for r in recs}) > 3
    assert all(a.end_lsn <= b.lsn for a, b in zip(recs, recs[1:]))
    assert h2.wal.recovery_report.clean


def test_reader_rejects_a_record_whose_lsn_field_is_not_its_position():
    buf = bytearray(SMALL)
    buf[4096:4120] = F.encode_block_header(24, 4096)
    rec = F.encode_record(F.PUT, 999, F.payload_put(b"k", b"v"))  # claims another LSN
    buf[4120:4120 + len(rec)] = rec
    assert isinstance(read_record(buf, 0, 4120, SMALL, set()), str)
    rec = F.encode_record(F.PUT, 4120, F.payload_put(b"k", b"v"))
    buf[4120:4120 + len(rec)] = rec
    assert read_record(buf, 0, 4120, SMALL, set()).key == b"k"
