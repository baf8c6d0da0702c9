"""Compaction of the WAL archive: what it keeps, what it drops, rounds, size, the bound."""

from __future__ import annotations

import os
import sys

import pytest

from pagestore.diskio import SimFS
from pagestore.wal import Archive, CompactedFile, iter_archive
from pagestore.wal.compact import compact, list_archive, read_file
from pagestore.wal.format import CHECKPOINT, PAGE_DELTA, PAGE_SNAPSHOT
from pagestore.diskio import layout

sys.path.insert(0, os.path.dirname(__file__))
from test_archive_kit import SEG, as_tuples, kinds, make_archive, write_file  # noqa: E402
from wal_testkit import open_fresh  # noqa: E402

A = "/arch"


def read_all(fs, from_lsn=0, **kw):
    report = {}
    return as_tuples(iter_archive(fs, A, from_lsn, report=report, **kw)), report


def test_compaction_drops_physical_records_and_keeps_every_logical_one_in_order():
    fs = SimFS()
    log = make_archive(fs, A, 10)
    expected = log.logical(hi=10 * SEG)
    assert {r[2] for r in log.records} >= {PAGE_DELTA, PAGE_SNAPSHOT, CHECKPOINT}
    before, rep = read_all(fs)
    assert before == expected and rep["stop"] == "end" and rep["pieces"] == 10
    st = compact(A, 1 << 20, fs=fs)
    assert st["rounds"] == 1 and st["segments"] == 10 and kinds(fs, A) == ["walc"]
    assert st["records_kept"] == len(expected) < st["records_in"]
    after, rep = read_all(fs)
    assert after == expected and rep["stop"] == "end"
    cf = CompactedFile(read_file(fs, st["files"][0]), 0)
    types = {r.type for r in cf.records()}
    assert cf.complete and not types & {PAGE_DELTA, PAGE_SNAPSHOT, CHECKPOINT}
    assert (cf.first_seq, cf.last_seq) == (0, 9)
    # the end of the file is the end of segment 9's last record, physical ones included
    assert cf.end_lsn == max(r[1] for r in log.records if r[0] < 10 * SEG)


def test_records_keep_their_fields():
    fs = SimFS()
    make_archive(fs, A, 3)
    plain = list(iter_archive(fs, A, 0))
    compact(A, fs=fs)
    for a, b in zip(plain, iter_archive(fs, A, 0), strict=True):
        assert (a.lsn, a.end_lsn, a.type, a.txid, a.key, a.value) == (b.lsn, b.end_lsn, b.type, b.txid, b.key,
                                                                        b.value)


def test_compressed_size_is_smaller_than_the_source():
    fs = SimFS()
    log = make_archive(fs, A, 8, value_size=200)
    source = sum(fs.size(p) for *_x, p in list_archive(fs, A))
    logical = sum(len(r[3]) for r in log.logical(hi=8 * SEG))
    st = compact(A, 1 << 20, fs=fs)
    out = sum(fs.size(p) for *_x, p in list_archive(fs, A))
    assert st["bytes_in"] == source and st["bytes_out"] == out
    assert out < logical < source
    assert out * 4 < source


@pytest.mark.parametrize("per_round", [1, 2, 3, 5])
def test_memory_budget_bounds_every_round(per_round):
    fs = SimFS()
    log = make_archive(fs, A, 12, seed=per_round)
    sizes = [sum(len(r[3]) for r in log.logical(s * SEG, (s + 1) * SEG)) for s in range(12)]
    budget = per_round * max(sizes)
    st = compact(A, budget, fs=fs)
    files = [CompactedFile(read_file(fs, p)) for p in st["files"]]
    for cf in files:
        assert sum(e[2] for e in cf.table) <= budget        # raw record bytes the round held
    assert st["peak_held"] <= budget
    # greedy rounds over the segments' logical sizes
    rounds, held = 1, 0
    for size in sizes:
        if held and held + size > budget:
            rounds, held = rounds + 1, 0
        held += size
    assert st["rounds"] == len(files) == rounds >= 12 // per_round // 2
    assert [cf.first_seq for cf in files] == sorted(cf.first_seq for cf in files)
    assert read_all(fs)[0] == log.logical(hi=12 * SEG)


def test_a_segment_larger_than_the_budget_is_a_round_by_itself_and_streamed():
    fs = SimFS()
    log = make_archive(fs, A, 4)
    st = compact(A, 4096, fs=fs, chunk_size=2048)
    assert st["rounds"] == 4 and st["peak_held"] <= 2048
    for p in st["files"]:
        cf = CompactedFile(read_file(fs, p))
        assert cf.first_seq == cf.last_seq and len(cf.table) > 1
        assert all(e[2] <= 2048 + 300 for e in cf.table)      # a chunk exceeds its size by < 1 record
    assert read_all(fs)[0] == log.logical(hi=4 * SEG)


def test_rounds_do_not_span_a_gap():
    fs = SimFS()
    log = make_archive(fs, A, 8, skip={4})
    st = compact(A, 1 << 20, fs=fs)
    assert [(c.first_seq, c.last_seq) for c in (CompactedFile(read_file(fs, p)) for p in st["files"])] == \
        [(0, 3), (5, 7)]
    recs, rep = read_all(fs)
    assert recs == log.logical(hi=4 * SEG) and rep["stop"] == "gap"
    recs, rep = read_all(fs, 5 * SEG)
    assert recs == log.logical(5 * SEG, 8 * SEG) and rep["stop"] == "end"


def test_compacting_again_adds_files_and_the_chain_crosses_them():
    fs = SimFS()
    log = make_archive(fs, A, 10, skip=range(5, 10))
    compact(A, 1 << 20, fs=fs)
    for seq in range(5, 8):
        write_file(fs, f"{A}/{layout.archive_name(seq)}", log.segs[seq])
    fs.fsync_dir(A)
    assert kinds(fs, A) == ["walc", "wal", "wal", "wal"]
    assert read_all(fs)[0] == log.logical(hi=8 * SEG)       # compacted, then plain
    compact(A, 1 << 20, fs=fs)
    assert kinds(fs, A) == ["walc", "walc"]
    mid = log.logical(2 * SEG + 100)[0][0]
    assert read_all(fs, mid)[0] == log.logical(mid, 8 * SEG)  # from inside a compacted file
    assert read_all(fs, 6 * SEG)[0] == log.logical(6 * SEG, 8 * SEG)


def test_archive_bound_counts_compacted_files_oldest_first():
    fs = SimFS()
    log = make_archive(fs, A + "-src", 16)

    def src(seq):
        return f"{A}-src/{layout.archive_name(seq)}"

    arch = Archive(fs, A, 6 * SEG, compact_after=0)
    for seq in range(8):
        arch.add(seq, src(seq))
    assert [p[0] for p in list_archive(fs, A)] == list(range(2, 8))   # 6 plain copies fit
    arch.compact_now()
    (walc,) = list_archive(fs, A)
    assert walc[:3] == (2, 7, "walc")
    arch.max_bytes = 6 * SEG + fs.size(walc[3])                       # room for it and 6 copies
    for seq in range(8, 14):
        arch.add(seq, src(seq))
    assert kinds(fs, A) == ["walc"] + ["wal"] * 6
    recs, rep = read_all(fs, 2 * SEG)
    assert recs == log.logical(2 * SEG, 14 * SEG) and rep["stop"] == "end"
    arch.add(14, src(14))                                             # over: the oldest goes first
    pieces = list_archive(fs, A)
    assert [p[0] for p in pieces] == list(range(9, 15)) and kinds(fs, A) == ["wal"] * 6
    for seq in range(15, 16):
        arch.add(seq, src(seq))
        pieces = list_archive(fs, A)
        assert sum(fs.size(p) for *_x, p in pieces) <= arch.max_bytes and pieces[-1][0] == seq
    tiny = Archive(fs, A, 1, compact_after=0)                         # the newest is always kept
    tiny.add(15, src(15))
    assert [p[0] for p in list_archive(fs, A)] == [15]


def test_a_round_whose_source_the_bound_removed_is_abandoned(monkeypatch):
    import pagestore.wal.compact as wc

    fs = SimFS()
    log = make_archive(fs, A, 6)
    finish = wc._Writer.finish

    def racing_finish(self, *args):                      # the bound runs while the round is written
        out = finish(self, *args)
        fs.remove(f"{A}/{layout.archive_name(0)}")
        return out

    monkeypatch.setattr(wc._Writer, "finish", racing_finish)
    st = compact(A, 1 << 20, fs=fs)
    assert st["aborted"] == 1 and st["rounds"] == 0
    assert sorted(fs.listdir(A)) == [f"seg-{s:016d}.wal" for s in range(1, 6)]
    monkeypatch.undo()
    assert compact(A, 1 << 20, fs=fs)["rounds"] == 1
    assert read_all(fs, SEG)[0] == log.logical(SEG, 6 * SEG)


def test_compaction_with_a_bound_applies_it_after_each_round():
    fs = SimFS()
    make_archive(fs, A, 12)
    st = compact(A, 1 << 20, fs=fs, max_bytes=1)
    assert st["rounds"] == 1 and len(list_archive(fs, A)) == 1   # only the newest piece stays


def test_background_compaction_from_wal_trim():
    fs = SimFS()
    h = open_fresh(fs, archive=A, archive_size=1 << 30)
    written = []
    for i in range(3000):
        end = h.put(b"k%05d" % i, b"v" * 50)
        written.append(end)
    h.wal.trim(h.writer.end_lsn)
    arch = h.wal._archive
    arch.join()
    assert arch.compact_error is None and arch.compactions >= 1
    assert "walc" in kinds(fs, A)
    recs = list(iter_archive(fs, A, 0))
    assert [r.key for r in recs] == [b"k%05d" % i for i in range(len(recs))]
    assert len(recs) > 2000
    h.wal.close()
