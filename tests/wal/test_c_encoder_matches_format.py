"""The C encoder (pagestore/csrc/walenc.c) writes exactly the bytes wal/format.py writes."""

import os
import sys

import pytest

from pagestore.diskio import SimFS
from pagestore.wal import format as F

sys.path.insert(0, os.path.dirname(__file__))
from wal_testkit import Harness  # noqa: E402

from pagestore import _native as native  # noqa: E402
from pagestore.diskio import layout

S = 1 << 20  # the C core's smallest segment


def c_written_log():
    """Drive the C core through puts, deletes, a batch and a Python-made record."""
    bufs = {0: bytearray(S)}
    core = native.Core(4096, 32 << 20, 8 << 20, wal_segment=lambda seq: bufs.setdefault(seq, bytearray(S)))
    core.format_new()
    core.wal_attach(bufs[0], S, 0, F.BLOCK, 0, True)
    expect, ends = [], []
    for i in range(700):   # values of many sizes: records inside blocks, across them, across segments
        key, value = b"key-%05d" % (i * 7919 % 700), bytes([i % 251]) * (i * 613 % 5200)
        ends.append(core.put(key, value))
        expect.append((F.PUT, key, value, 0))
    for i in range(0, 700, 50):
        key = b"key-%05d" % i
        ends.append(core.delete(key))
        expect.append((F.DELETE, key, None, 0))
    ops = [(1, b"batch-a", b"A" * 10), (2, b"key-00001", b""), (1, b"batch-b", b"B" * 3000)]
    ends.append(core.apply_batch(native.pack_ops(ops), 77))
    expect += [(F.PUT, b"batch-a", b"A" * 10, 77), (F.DELETE, b"key-00001", None, 77),
               (F.PUT, b"batch-b", b"B" * 3000, 77), (F.COMMIT, None, None, 77)]
    ends.append(core.log_record(F.ROLLBACK, F.payload_rollback(91)))
    expect.append((F.ROLLBACK, None, None, 91))
    core.close()
    return bufs, expect, ends


def read_back(bufs):
    fs = SimFS()
    fs.makedirs("/db/wal")
    for seq, buf in bufs.items():
        f = fs.open("/db/wal/" + layout.slot_name(seq), create=True)
        f.pwrite(bytes(buf), 0)
        f.fsync()
        f.close()
    h = Harness(fs, segment_size=S)
    return h.recover(0), h.wal.recovery_report


def test_c_records_decode_to_the_operations_that_made_them():
    bufs, expect, ends = c_written_log()
    assert len(bufs) >= 2
    recs, report = read_back(bufs)
    assert report.clean and not report.damage
    assert [(r.type, r.key, r.value, r.txid) for r in recs] == expect
    by_end = {r.end_lsn for r in recs}
    assert all(e in by_end for e in ends)


def test_c_encoder_and_stream_writer_produce_identical_segments():
    bufs, _expect, _ends = c_written_log()
    recs, _report = read_back(bufs)
    mine = {0: bytearray(S)}
    w = F.StreamWriter(S, mine[0], 0, F.BLOCK, 0, lambda seq: mine.setdefault(seq, bytearray(S)))
    for r in recs:
        assert w.append(r.type, r.payload) == (r.lsn, r.end_lsn)
    assert sorted(mine) == sorted(bufs)
    for seq in bufs:
        if mine[seq] != bufs[seq]:
            at = next(i for i, (a, b) in enumerate(zip(mine[seq], bufs[seq])) if a != b)
            pytest.fail(f"segment {seq} differs first at offset {at}")
