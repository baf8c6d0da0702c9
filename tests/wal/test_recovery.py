"""Recovery cuts: torn tails to side files, fresh segments, reuse after trim, transactions."""

import os
import sys

import pytest

from pagestore.diskio import SimFS
from pagestore.wal import CHECKPOINT, WalRecoveryWarning, committed_records
from pagestore.wal.format import decode_segment_header

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import SMALL, Harness, kv, open_fresh, reopen, unmark  # noqa: E402


def header_of(fs, path):
    f = fs.open(path)
    h = decode_segment_header(f.pread(44, 0))
    f.close()
    return h


def wal_files(fs):
    return [n for n in fs.listdir("/db/wal") if n != "NEWEST"]   # the slot files


def _log_with_torn_last_record(fs):
    """30 records, then one crossing a block boundary whose last 500 bytes never landed:
    what a writer killed while copying that record leaves. Returns (written, torn lsn)."""
    h = open_fresh(fs)
    first = [(b"a%03d" % i, b"x" * 200) for i in range(30)]
    for k, v in first:
        h.put(k, v)
    torn_lsn, _ = h.writer.put(b"torn", b"y" * 3000)   # crosses a block boundary
    h.wal.flush()
    h.wal.close()
    f = fs.open("/db/wal/seg-00000000.wal")
    f.pwrite(bytes(500), torn_lsn % SMALL + 2800)
    f.fsync()
    f.close()
    return first, torn_lsn


def test_torn_tail_is_cut_to_a_side_file_without_a_warning_and_later_writes_go_to_a_fresh_segment(recwarn):
    fs = SimFS()
    first, torn_lsn = _log_with_torn_last_record(fs)

    h2 = Harness(fs)
    recs = h2.recover(0, quiet=False)
    report = h2.wal.recovery_report
    assert not [w for w in recwarn.list if issubclass(w.category, WalRecoveryWarning)]
    assert kv(recs) == first and report.stop_lsn == torn_lsn and report.clean
    assert report.tail_file == f"/db/wal/seg-00000000.wal.tail-{torn_lsn}"
    side = fs.open(report.tail_file).pread(SMALL, 0)
    assert report.tail_bytes == len(side) > 3000   # the record and the rest of the block it entered
    assert side[8:16] == torn_lsn.to_bytes(8, "little")  # the torn record's own header, kept for inspection
    h2.start()
    assert h2.writer.seq == 1 and h2.writer.end_lsn == torn_lsn
    hdr = header_of(fs, "/db/wal/seg-00000001.wal")
    assert (hdr.seq, hdr.prev_end_lsn) == (1, torn_lsn) and hdr.marked
    second = [(b"b%03d" % i, b"z" * 100) for i in range(20)]
    for k, v in second:
        h2.put(k, v)
    h2.wal.close()

    h3, recs3 = reopen(fs)
    assert kv(recs3) == first + second
    assert h3.wal.recovery_report.clean and h3.wal.recovery_report.tail_bytes == 0


def test_a_torn_tail_of_an_unmarked_segment_is_still_reported_as_damage():
    # Stores written before the written mark keep the older, conservative rule.
    fs = SimFS()
    first, torn_lsn = _log_with_torn_last_record(fs)
    unmark(fs, "/db/wal/seg-00000000.wal")
    h2 = Harness(fs)
    with pytest.warns(WalRecoveryWarning, match=f"seg-00000000.wal at offset {torn_lsn % SMALL} "):
        recs = h2.recover(0, quiet=False)
    report = h2.wal.recovery_report
    assert kv(recs) == first and report.stop_lsn == torn_lsn and not report.clean
    assert report.tail_file == f"/db/wal/seg-00000000.wal.tail-{torn_lsn}"


def test_segments_past_the_stop_are_renamed_aside_and_never_read():
    fs = SimFS()
    h = open_fresh(fs)
    written = [(b"k%04d" % i, b"v" * 2500) for i in range(80)]
    for k, v in written:
        h.put(k, v)
    h.wal.close()
    recs = Harness(fs).recover(0)
    victim = next(i for i, r in enumerate(recs) if r.lsn // SMALL == 1)
    f = fs.open("/db/wal/seg-00000001.wal")
    f.pwrite(b"\xff", recs[victim].lsn % SMALL + 30)
    f.fsync()
    f.close()
    h2 = Harness(fs)
    got = h2.recover(0)
    report = h2.wal.recovery_report
    assert kv(got) == written[:victim]
    later = {n for n in wal_files(fs) if ".tail-" in n}
    assert f"seg-00000002.wal.tail-{report.stop_lsn}" in later
    assert f"seg-00000001.wal.tail-{report.stop_lsn}" in later  # the torn tail itself
    assert len(report.set_aside) == len([n for n in later if not n.startswith("seg-00000001")])
    h2.start()
    h2.put(b"new", b"value")
    h2.wal.close()
    _h3, again = reopen(fs)
    assert kv(again) == written[:victim] + [(b"new", b"value")]


def test_reused_slots_after_trim_never_yield_stale_records_of_an_older_incarnation():
    fs = SimFS()
    h = open_fresh(fs)
    ends = []
    for i in range(6 * 20):                       # about 6 segments of 20 records
        ends.append((h.writer.end_lsn, h.put(b"old%04d" % i, b"o" * 3000)))
    trim_at = next(start for start, _e in ends if start // SMALL == 4 and start % SMALL > 4200)
    h.wal.trim(trim_at)
    created = h.wal.stats()["wal_segments_created"]
    newer = [(b"new%04d" % i, b"n" * 1000) for i in range(50)]  # shorter records than the old ones
    for k, v in newer:
        h.put(k, v)
    assert h.wal.stats()["wal_segments_created"] == created   # slots 0.. were reused
    assert h.writer.seq >= 6
    h.wal.close()
    h2 = Harness(fs)
    recs = h2.recover(trim_at)
    tail_old = [(b"old%04d" % i, b"o" * 3000) for i, (s, _e) in enumerate(ends) if s >= trim_at]
    assert kv(recs) == tail_old + newer
    assert h2.wal.recovery_report.clean
    reused = {header_of(fs, f"/db/wal/{n}").seq for n in wal_files(fs)}
    assert max(reused) == recs[-1].lsn // SMALL and len(wal_files(fs)) == created


def test_an_empty_fresh_segment_chains_to_the_next_one():
    fs = SimFS()
    h = open_fresh(fs)
    h.wal.close()                                   # seq 0: header only
    h2, recs = reopen(fs)                           # writer continues in seq 1
    assert recs == [] and h2.writer.seq == 1
    h2.put(b"k", b"v")
    h2.wal.close()
    _h3, recs = reopen(fs)
    assert kv(recs) == [(b"k", b"v")]


def test_recover_from_a_pointer_starts_at_that_record():
    fs = SimFS()
    h = open_fresh(fs)
    lsns = [h.writer.put(b"k%d" % i, b"v" * 700)[0] for i in range(60)]
    h.wal.close()
    recs = Harness(fs).recover(lsns[37])
    assert [r.lsn for r in recs] == lsns[37:]


def test_start_refuses_to_write_over_an_unrecovered_log():
    fs = SimFS()
    h = open_fresh(fs)
    h.put(b"k", b"v")
    h.wal.close()
    with pytest.raises(RuntimeError):
        Harness(fs).wal.start(0)


def test_transaction_records_count_only_with_their_commit():
    fs = SimFS()
    h = open_fresh(fs)
    w = h.writer
    w.put(b"a", b"1", txid=5)
    w.put(b"c", b"3", txid=6)
    w.put(b"b", b"2", txid=5)
    w.put(b"plain", b"0")                           # txid 0: its own commit
    w.commit(5, 2)
    w.rollback(6)
    w.delete(b"gone", txid=8)
    w.put(b"late", b"9", txid=8)
    w.checkpoint(3, b"meta")
    w.commit(8, 2)
    w.put(b"open", b"never committed", txid=9)
    h.wal.flush()
    h.wal.close()
    recs = Harness(fs).recover(0)
    units = list(committed_records(recs))
    shape = [[(r.type, r.key, r.value, r.txid) for r in u] for u in units]
    assert shape[0] == [(1, b"plain", b"0", 0)]
    assert shape[1] == [(1, b"a", b"1", 5), (1, b"b", b"2", 5)]
    assert units[2][0].type == CHECKPOINT and units[2][0].checkpoint_id == 3 and units[2][0].payload[8:] == b"meta"
    assert shape[3] == [(2, b"gone", None, 8), (1, b"late", b"9", 8)]
    assert len(units) == 4
    assert b"".join(r.raw for r in units[1])[8:16] == units[1][0].lsn.to_bytes(8, "little")


def test_trimmed_segments_go_to_the_archive_which_stays_bounded():
    fs = SimFS()
    h = open_fresh(fs, archive="/db/wal-archive", archive_size=3 * SMALL)
    for i in range(6 * 20):
        h.put(b"k%04d" % i, b"a" * 3000)
    seq_now = h.writer.seq
    h.wal.trim(seq_now * SMALL)                     # every finished segment
    names = fs.listdir("/db/wal-archive")
    assert names == [f"seg-{s:016d}.wal" for s in range(seq_now - 3, seq_now)]  # oldest dropped
    f = fs.open(f"/db/wal-archive/{names[-1]}")
    assert header_of(fs, f"/db/wal-archive/{names[-1]}").seq == seq_now - 1 and f.size() == SMALL
    f.close()
    assert h.wal.stats()["wal_segments_archived"] == seq_now
    h.put(b"after", b"trim")
    h.wal.close()
    recs = Harness(fs).recover(seq_now * SMALL)
    assert kv(recs)[-1] == (b"after", b"trim") and all(r.lsn >= seq_now * SMALL for r in recs)
