"""`iter_archive`: LSN order across plain and compacted files, start positions, gaps, damage."""

from __future__ import annotations

import os
import sys

from pagestore.diskio import SimFS
from pagestore.wal import iter_archive, wal_end
from pagestore.wal.compact import compact, list_archive, read_file
from pagestore.diskio import layout

sys.path.insert(0, os.path.dirname(__file__))
from test_archive_kit import SEG, as_tuples, make_archive, write_file  # noqa: E402

A = "/arch"


def read(fs, from_lsn=0, **kw):
    report = {}
    return as_tuples(iter_archive(fs, A, from_lsn, report=report, **kw)), report


def test_every_start_position_gives_the_suffix():
    fs = SimFS()
    log = make_archive(fs, A, 6)
    compact(A, SEG, fs=fs)                        # several compacted files
    logical = log.logical(hi=6 * SEG)
    for k in range(0, len(logical), 37):
        lsn = logical[k][0]
        assert read(fs, lsn)[0] == logical[k:]
        assert read(fs, logical[k - 1][1] if k else 0)[0] == logical[k:]   # a record's end


def test_a_start_before_the_archive_is_missing_and_after_it_is_the_end():
    fs = SimFS()
    make_archive(fs, A, 6, skip={0, 1})
    recs, rep = read(fs, 100)
    assert recs == [] and rep["stop"] == "missing"
    recs, rep = read(fs, 50 * SEG)
    assert recs == [] and rep["stop"] == "end"


def test_a_damaged_chunk_stops_the_walk_at_the_records_before_it():
    fs = SimFS()
    log = make_archive(fs, A, 4)
    st = compact(A, 1 << 20, fs=fs, chunk_size=16 << 10)
    path = st["files"][0]
    data = bytearray(read_file(fs, path))
    from pagestore.wal.compact import CompactedFile
    cf = CompactedFile(bytes(data))
    off, clen, _raw, first_lsn, _n, _crc = cf.table[2]
    data[off + clen // 2] ^= 0x40
    write_file(fs, path, data)
    recs, rep = read(fs)
    assert recs == [r for r in log.logical() if r[0] < first_lsn]
    assert rep["stop"] == "damage" and "chunk 2" in rep["damage"]["reason"]


def test_plain_copies_are_preferred_where_both_exist():
    fs = SimFS()
    log = make_archive(fs, A, 4)
    st = compact(A, 1 << 20, fs=fs, chunk_size=16 << 10)
    path = st["files"][0]
    data = bytearray(read_file(fs, path))
    data[200] ^= 1                                # the compacted file is damaged...
    write_file(fs, path, data)
    for seq in range(4):                          # ...but its sources are still there
        write_file(fs, f"{A}/{layout.archive_name(seq)}", log.segs[seq])
    recs, rep = read(fs)
    assert recs == log.logical(hi=4 * SEG) and rep["stop"] == "end"
    st = compact(A, 1 << 20, fs=fs)               # a damaged file does not cover its sources: kept
    assert read(fs)[0] == log.logical(hi=4 * SEG)


def test_a_partial_source_removal_resumes_inside_the_compacted_file():
    fs = SimFS()
    log = make_archive(fs, A, 6)
    compact(A, 1 << 20, fs=fs)
    for seq in (0, 2, 4):                         # a crash removed only some of the sources
        write_file(fs, f"{A}/{layout.archive_name(seq)}", log.segs[seq])
    assert [p[2] for p in list_archive(fs, A)] == ["wal", "walc", "wal", "wal"]
    assert read(fs)[0] == log.logical(hi=6 * SEG)


def test_a_damaged_plain_segment_is_a_gap():
    fs = SimFS()
    log = make_archive(fs, A, 5)
    seg = bytearray(log.segs[2])
    seg[3 * 4096 + 100] ^= 0xFF                   # inside a record of segment 2
    write_file(fs, f"{A}/{layout.archive_name(2)}", seg)
    recs, rep = read(fs)
    assert rep["stop"] == "gap"
    assert recs == log.logical()[:len(recs)] and 2 * SEG < recs[-1][0] < 3 * SEG


def test_the_live_wal_continues_the_archive_and_wal_end_finds_a_logs_end():
    fs = SimFS()
    log = make_archive(fs, A, 7, skip={5, 6})
    compact(A, SEG, fs=fs)
    fs.makedirs("/db/wal")
    for slot, seq in enumerate((5, 6, 7, 3)):        # live slots; slot 2 holds a stale older segment
        write_file(fs, f"/db/wal/{layout.slot_name(slot)}", log.segs[seq])
    recs, rep = read(fs, 0, wal_dir="/db/wal")
    assert recs == log.logical() and rep["end_lsn"] == log.records[-1][1]
    assert wal_end(fs, "/db/wal") == log.records[-1][1]
    assert wal_end(fs, "/nothing") == 0
